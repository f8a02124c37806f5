-- The audit log: who did what from the dashboard or the API, from where, with what result.
-- Append-only from the application: a trigger refuses every UPDATE and DELETE (only a database
-- owner dropping the trigger could change history, and that leaves its own trace in the logs).
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE audit_log (
    id      bigserial   PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    -- The user's name (for a failed sign-in: the name typed, role `none`), or `api-token`.
    actor   text        NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 100),
    role    text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin', 'none')),
    -- What was done: `job.cancel`, `jobs.bulk_retry`, `queue.pause`, `session.sign_in`, ...
    action  text        NOT NULL CHECK (char_length(action) BETWEEN 1 AND 100),
    -- What it was done to: `job 42`, `queue default`, `question 7`, `12 jobs`; NULL when nothing.
    target  text        CHECK (char_length(target) <= 2000),
    -- A bulk action's filter, as the operator gave it.
    filter  jsonb,
    -- How many jobs a bulk action changed.
    count   bigint,
    address inet,
    ok      boolean     NOT NULL,
    -- `ok`, or why it was refused.
    result  text        NOT NULL CHECK (char_length(result) <= 2000)
);

CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);

CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END $$;

CREATE TRIGGER audit_log_no_update BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();
