-- The engine's tables: jobs, queues, nodes and the leader lease.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TYPE job_state AS ENUM (
    'scheduled',   -- waiting for scheduled_at
    'available',   -- due, waiting for a free slot on some node
    'executing',   -- claimed by a node, under a lease
    'retryable',   -- failed an attempt, waiting for its backoff to pass
    'completed',   -- final
    'discarded',   -- final: out of attempts or failed fatally
    'cancelled'    -- final: cancelled by an operator or the handler
);

CREATE TABLE jobs (
    id               bigserial PRIMARY KEY,
    queue            text        NOT NULL DEFAULT 'default',
    kind             text        NOT NULL,
    args             jsonb       NOT NULL DEFAULT '{}',
    state            job_state   NOT NULL,
    priority         smallint    NOT NULL DEFAULT 0,
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 20,
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    attempted_by     text,
    lease_expires_at timestamptz,
    finalized_at     timestamptz,
    errors           jsonb       NOT NULL DEFAULT '[]',
    unique_key       text,
    tags             text[]      NOT NULL DEFAULT '{}',
    meta             jsonb       NOT NULL DEFAULT '{}',
    inserted_at      timestamptz NOT NULL DEFAULT now(),

    -- finalized_at is set exactly when the state is final.
    CONSTRAINT finalized_iff_final CHECK (
        (state IN ('completed', 'discarded', 'cancelled')) = (finalized_at IS NOT NULL)),
    -- An executing job always belongs to a node, under a lease.
    CONSTRAINT executing_has_lease CHECK (
        state <> 'executing'
        OR (attempted_at IS NOT NULL AND attempted_by IS NOT NULL AND lease_expires_at IS NOT NULL)),
    CONSTRAINT lease_only_while_executing CHECK (state = 'executing' OR lease_expires_at IS NULL),
    CONSTRAINT executing_has_attempt CHECK (state <> 'executing' OR attempt > 0),
    CONSTRAINT attempt_bounds CHECK (attempt >= 0 AND max_attempts BETWEEN 1 AND 1000),
    CONSTRAINT priority_range CHECK (priority BETWEEN 0 AND 9),
    CONSTRAINT queue_name CHECK (queue ~ '^[a-z0-9_-]{1,64}$'),
    CONSTRAINT kind_name CHECK (char_length(kind) BETWEEN 1 AND 128),
    CONSTRAINT args_is_object CHECK (jsonb_typeof(args) = 'object'),
    CONSTRAINT meta_is_object CHECK (jsonb_typeof(meta) = 'object'),
    CONSTRAINT errors_is_array CHECK (jsonb_typeof(errors) = 'array'),
    CONSTRAINT unique_key_length CHECK (unique_key IS NULL OR char_length(unique_key) BETWEEN 1 AND 255)
);

-- Claiming: the due jobs of one queue in priority order.
CREATE INDEX jobs_claim_idx ON jobs (queue, priority, scheduled_at, id) WHERE state = 'available';
-- Staging and the timer: the next scheduled or retryable job.
CREATE INDEX jobs_due_idx ON jobs (scheduled_at) WHERE state IN ('scheduled', 'retryable');
-- Rescue: leases that expired.
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE state = 'executing';
-- Pruning: finished jobs by age.
CREATE INDEX jobs_prune_idx ON jobs (finalized_at) WHERE finalized_at IS NOT NULL;
-- Listing by state, newest first (keyset pagination on id).
CREATE INDEX jobs_state_id_idx ON jobs (state, id);
CREATE INDEX jobs_queue_id_idx ON jobs (queue, id);
CREATE INDEX jobs_kind_id_idx ON jobs (kind, id);
-- At most one live (not final) job per unique key.
CREATE UNIQUE INDEX jobs_unique_key_idx ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND finalized_at IS NULL;

-- Queue settings shared by every node.
CREATE TABLE queues (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z0-9_-]{1,64}$'),
    paused      boolean     NOT NULL DEFAULT false,
    -- Per-node concurrency set by an operator; NULL keeps each node's configured limit.
    concurrency integer     CHECK (concurrency IS NULL OR concurrency BETWEEN 1 AND 10000),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Every running node, with its heartbeat.
CREATE TABLE nodes (
    id           text PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       jsonb       NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- The leader lease: one row per name, held by one node until it expires.
CREATE TABLE leader (
    name       text PRIMARY KEY,
    node_id    text        NOT NULL,
    elected_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- Notifications, made by the database itself so that every writer (this engine, an operator's SQL,
-- another service inserting rows) wakes the nodes and feeds the live dashboard.
--
-- kickoff_due: per statement, queue and state, the earliest scheduled_at among rows that are now
-- scheduled, available or retryable. Producers wake for available rows; timers learn of earlier
-- scheduled ones.
CREATE FUNCTION kickoff_notify_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kickoff_due', json_build_object(
                'queue', queue,
                'state', state,
                'at_ms', floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint)::text)
    FROM new_rows
    WHERE state IN ('scheduled', 'available', 'retryable')
    GROUP BY queue, state;
    RETURN NULL;
END $$;

-- kickoff_events: one coalesced message per statement that changed states: how many jobs moved
-- into each state, and the first 100 ids (a listener that needs the rest refreshes).
CREATE FUNCTION kickoff_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT json_build_object('op', 'insert', 'n', count(*),
                   'to', (SELECT json_object_agg(state, c) FROM (
                             SELECT state, count(*) AS c FROM new_rows GROUP BY state) s),
                   'ids', (SELECT json_agg(id) FROM (SELECT id FROM new_rows LIMIT 100) i))::text
          INTO payload FROM new_rows HAVING count(*) > 0;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT json_build_object('op', 'delete', 'n', count(*),
                   'ids', (SELECT json_agg(id) FROM (SELECT id FROM old_rows LIMIT 100) i))::text
          INTO payload FROM old_rows HAVING count(*) > 0;
    ELSE
        WITH changed AS (
            SELECT n.id, n.state FROM new_rows n JOIN old_rows o ON o.id = n.id
            WHERE o.state <> n.state OR o.scheduled_at <> n.scheduled_at)
        SELECT json_build_object('op', 'update', 'n', count(*),
                   'to', (SELECT json_object_agg(state, c) FROM (
                             SELECT state, count(*) AS c FROM changed GROUP BY state) s),
                   'ids', (SELECT json_agg(id) FROM (SELECT id FROM changed LIMIT 100) i))::text
          INTO payload FROM changed HAVING count(*) > 0;
    END IF;
    IF payload IS NOT NULL THEN
        PERFORM pg_notify('kickoff_events', payload);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_due_after_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_due();
CREATE TRIGGER jobs_due_after_update AFTER UPDATE ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_due();
CREATE TRIGGER jobs_events_after_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_events();
CREATE TRIGGER jobs_events_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_events();
CREATE TRIGGER jobs_events_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_notify_events();
