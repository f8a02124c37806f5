-- The delivery record of webhook calls (issue 17): one row per call made (an attempt snoozed by a
-- receiver's Retry-After and made again has a row per call). Kept with its job: deleted with it.
-- Never a request header (they may carry a job's credentials or the signature); the response's
-- headers and the first characters of its body, capped by the worker.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE webhook_deliveries (
    id               bigserial   PRIMARY KEY,
    job_id           bigint      NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    -- By the database clock: when the call started, and how long after the attempt's due time.
    started_at       timestamptz NOT NULL,
    late_ms          bigint      NOT NULL,
    duration_ms      integer     NOT NULL CHECK (duration_ms >= 0),
    -- Where the call connected (`ip:port`), or the addresses it would have tried.
    address          text        CHECK (char_length(address) <= 1000),
    -- The HTTP status; NULL when no answer came (a time-out, a refused connection, a refusal).
    status           smallint    CHECK (status BETWEEN 100 AND 999),
    response_headers jsonb,
    response_body    text        CHECK (char_length(response_body) <= 2000),
    error            text        CHECK (char_length(error) <= 4000)
);

CREATE INDEX webhook_deliveries_job_idx ON webhook_deliveries (job_id, id);
-- Searching by status code (newest first), and the calls that got no answer.
CREATE INDEX webhook_deliveries_status_idx ON webhook_deliveries (status, id DESC);
