-- Who may spend an endpoint's credentials (issue 30, point 13). An endpoint's default headers
-- often carry a credential (`Authorization`) that any operator's webhook job under its prefix
-- sends. `header_methods` lists the methods its default headers go with (default POST: a partner's
-- delivery endpoint is called, not read or deleted); a job with another method under the prefix
-- is refused at insert, and discarded without a call if the endpoint changed since.
-- `credentialed` marks the calls that carried an endpoint's default headers: their response
-- (headers and body) is shown only to admins and to the job's creator, and a failed one's error
-- leaves the body out.
ALTER TABLE webhook_endpoints
    ADD COLUMN header_methods text[] NOT NULL DEFAULT '{POST}',
    ADD CONSTRAINT webhook_endpoints_header_methods
        CHECK (cardinality(header_methods) BETWEEN 1 AND 5
               AND header_methods <@ ARRAY['GET', 'POST', 'PUT', 'PATCH', 'DELETE']);
ALTER TABLE webhook_deliveries ADD COLUMN credentialed boolean NOT NULL DEFAULT false;
