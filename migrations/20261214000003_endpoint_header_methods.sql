-- Who may spend an endpoint's credentials (issue 30, point 13). An endpoint's default headers
-- often carry a credential (`Authorization`) that any operator's webhook job under its prefix
-- sends. `header_methods` lists the methods its default headers go with (a new endpoint: POST
-- only; a partner's delivery endpoint is called, not read or deleted); a job with another method
-- under the prefix is refused at insert, and discarded without a call if the endpoint changed
-- since. The endpoints made before keep every method (their jobs and schedules go on as they
-- were): an admin narrows them.
-- `credentialed` marks the calls that carried an endpoint's default headers: their response
-- (headers and body) is shown only to admins and to the job's creator, and a failed one's error
-- leaves the body out. The calls recorded before are marked when their job called under an
-- endpoint that has default headers now, or when their job is gone (nothing tells any more).
ALTER TABLE webhook_endpoints
    ADD COLUMN header_methods text[] NOT NULL DEFAULT '{GET,POST,PUT,PATCH,DELETE}',
    ADD CONSTRAINT webhook_endpoints_header_methods
        CHECK (cardinality(header_methods) BETWEEN 1 AND 5
               AND header_methods <@ ARRAY['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
ALTER TABLE webhook_endpoints ALTER COLUMN header_methods SET DEFAULT '{POST}';

ALTER TABLE webhook_deliveries ADD COLUMN credentialed boolean NOT NULL DEFAULT false;
UPDATE webhook_deliveries d SET credentialed = true
WHERE EXISTS (SELECT 1 FROM webhook_endpoints e WHERE e.headers IS NOT NULL)
  AND (NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = d.job_id)
       OR EXISTS (SELECT 1 FROM jobs j JOIN webhook_endpoints e
                    ON e.headers IS NOT NULL AND starts_with(j.args ->> 'url', e.url_prefix)
                  WHERE j.id = d.job_id));
