-- Workflows (issue 49), first slice: a run of steps with dependencies. Each step becomes an
-- ordinary job once its dependencies allow it, and is unblocked in the transaction that settles
-- the job of its last dependency (not by a background pass): docs/workflows.md.
--
-- A run stores its shape when it is inserted (a row per step, with the job it becomes, and a row
-- per dependency), so it finishes with the shape it started with across an upgrade. A step that
-- waits for its dependencies has no job row: it never weighs on the claim's index.

CREATE TABLE workflow_runs (
    id bigserial PRIMARY KEY,
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    -- Unique among the live runs (`game:8812`), like a job's unique key.
    key text CHECK (key IS NULL OR char_length(key) BETWEEN 1 AND 255),
    state text NOT NULL DEFAULT 'running'
        CHECK (state IN ('running', 'completed', 'failed', 'cancelled')),
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    created_by text CHECK (created_by IS NULL OR char_length(created_by) BETWEEN 1 AND 200),
    -- The steps by state, kept by every write of a step's state (never a count over the steps).
    steps int NOT NULL CHECK (steps BETWEEN 1 AND 200),
    blocked int NOT NULL CHECK (blocked >= 0),
    ready int NOT NULL DEFAULT 0 CHECK (ready >= 0),
    completed int NOT NULL DEFAULT 0 CHECK (completed >= 0),
    failed int NOT NULL DEFAULT 0 CHECK (failed >= 0),
    skipped int NOT NULL DEFAULT 0 CHECK (skipped >= 0),
    cancelled int NOT NULL DEFAULT 0 CHECK (cancelled >= 0),
    CONSTRAINT steps_counted CHECK (blocked + ready + completed + failed + skipped + cancelled = steps),
    CONSTRAINT finished_iff_final CHECK ((state = 'running') = (finished_at IS NULL)),
    CONSTRAINT final_when_settled CHECK (state = 'running' OR blocked + ready = 0)
);
CREATE UNIQUE INDEX workflow_runs_live_key_idx ON workflow_runs (key)
    WHERE key IS NOT NULL AND finished_at IS NULL;
CREATE INDEX workflow_runs_state_id_idx ON workflow_runs (state, id);

-- A step: `blocked` (dependencies outstanding), `ready` (its job exists and has not settled),
-- then `completed`, `failed`, `skipped` or `cancelled`. What its job will be is kept from the
-- insert (checked then like any new job); `job_id` is its job once it was made.
CREATE TABLE workflow_steps (
    id bigserial PRIMARY KEY,
    run_id bigint NOT NULL REFERENCES workflow_runs ON DELETE CASCADE,
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    state text NOT NULL
        CHECK (state IN ('blocked', 'ready', 'completed', 'failed', 'skipped', 'cancelled')),
    deps_left int NOT NULL CHECK (deps_left >= 0),
    queue text NOT NULL,
    kind text NOT NULL,
    args jsonb NOT NULL,
    priority smallint NOT NULL,
    max_attempts int NOT NULL,
    tags text[] NOT NULL,
    meta jsonb NOT NULL,
    created_by text,
    call_host text,
    job_id bigint,
    -- What the completing attempt recorded (`JobContext::record`), for the steps after it.
    output jsonb,
    -- Skipped along with a dependency under `skip_following`: its own dependents skip too.
    skip_following boolean NOT NULL DEFAULT false,
    finished_at timestamptz,
    UNIQUE (run_id, name),
    CONSTRAINT job_once_ready CHECK (
        CASE state WHEN 'blocked' THEN job_id IS NULL
                   WHEN 'ready' THEN job_id IS NOT NULL
                   WHEN 'completed' THEN job_id IS NOT NULL
                   ELSE true END),
    CONSTRAINT finished_iff_final CHECK ((state IN ('blocked', 'ready')) = (finished_at IS NULL))
);

-- `step_id` waits for `dep_id`; `on_failure` says what a dependency that failed or was cancelled
-- does to it: `fail` (it fails without running), `skip` (it is skipped; the steps after it go
-- on), `skip_following` (it and every step after it are skipped), `run` (it runs anyway).
CREATE TABLE workflow_edges (
    dep_id bigint NOT NULL REFERENCES workflow_steps ON DELETE CASCADE,
    step_id bigint NOT NULL REFERENCES workflow_steps ON DELETE CASCADE,
    on_failure text NOT NULL CHECK (on_failure IN ('fail', 'skip', 'skip_following', 'run')),
    PRIMARY KEY (dep_id, step_id)
);
CREATE INDEX workflow_edges_step_idx ON workflow_edges (step_id);

-- The step a job is the run of (NULL for every other job). No foreign key: a deleted run leaves
-- its jobs alone, and the hot path's inserts check nothing more.
ALTER TABLE jobs ADD COLUMN step_id bigint;

-- Moves one step of `run` from the count of state `was` to that of `now_in`.
CREATE FUNCTION kickoff_run_recount(run bigint, was text, now_in text) RETURNS void
LANGUAGE sql AS $$
    UPDATE workflow_runs
       SET blocked = blocked - (was = 'blocked')::int + (now_in = 'blocked')::int,
           ready = ready - (was = 'ready')::int + (now_in = 'ready')::int,
           completed = completed - (was = 'completed')::int + (now_in = 'completed')::int,
           failed = failed - (was = 'failed')::int + (now_in = 'failed')::int,
           skipped = skipped - (was = 'skipped')::int + (now_in = 'skipped')::int,
           cancelled = cancelled - (was = 'cancelled')::int + (now_in = 'cancelled')::int
     WHERE id = run
$$;

-- Makes a ready step's job (due at once) and counts the step as ready. The one place a step
-- becomes a job: a run's insert for its first steps, and `kickoff_step_settle` for the others.
CREATE FUNCTION kickoff_step_start(step bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    s workflow_steps;
    job bigint;
BEGIN
    SELECT * INTO s FROM workflow_steps WHERE id = step AND state = 'blocked' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at, tags, meta,
                      created_by, call_host, rate_key, step_id)
    VALUES (s.queue, s.kind, s.args, 'available', s.priority, s.max_attempts, clock_timestamp(),
            s.tags, s.meta, s.created_by, s.call_host,
            kickoff_rate_key(s.queue, s.kind, s.args, s.call_host), s.id)
    RETURNING id INTO job;
    UPDATE workflow_steps SET state = 'ready', job_id = job WHERE id = step;
    PERFORM kickoff_run_recount(s.run_id, 'blocked', 'ready');
    RETURN job;
END $$;

-- Settles a step with `outcome` (`completed`, `failed`, `cancelled`, `skipped`, or
-- `skipped_following`: skipped along with a dependency, its own dependents skip too), then each
-- step waiting for it by its edge's policy, transitively, and the run once every step settled.
-- A step already settled is left as it is (a run's cancel settles its steps before their jobs).
CREATE FUNCTION kickoff_step_settle(step bigint, outcome text, step_output jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    todo_steps bigint[] := ARRAY[step];
    todo_outcomes text[] := ARRAY[outcome];
    cur bigint;
    how text;
    was text;
    left_now int;
    run bigint;
    new_state text;
    e record;
    r workflow_runs;
BEGIN
    SELECT run_id INTO run FROM workflow_steps WHERE id = step;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    -- The run first: every write of a run's steps holds its row, so two transactions settling
    -- steps of one run take turns, and a statement settling steps of several runs takes them in
    -- id order (`kickoff_steps_settled`).
    PERFORM 1 FROM workflow_runs WHERE id = run FOR UPDATE;
    WHILE cardinality(todo_steps) > 0 LOOP
        cur := todo_steps[1];
        how := todo_outcomes[1];
        todo_steps := todo_steps[2:];
        todo_outcomes := todo_outcomes[2:];
        new_state := CASE WHEN how = 'skipped_following' THEN 'skipped' ELSE how END;
        SELECT state INTO was FROM workflow_steps WHERE id = cur FOR UPDATE;
        IF NOT FOUND OR was NOT IN ('blocked', 'ready') THEN
            CONTINUE;
        END IF;
        UPDATE workflow_steps
           SET state = new_state, finished_at = clock_timestamp(),
               skip_following = (how = 'skipped_following'),
               output = CASE WHEN cur = step THEN step_output END
         WHERE id = cur;
        PERFORM kickoff_run_recount(run, was, new_state);
        -- The steps waiting for it, in id order (the lock order of every write of steps).
        FOR e IN SELECT w.id, w.on_failure FROM (
                     SELECT s.id, ed.on_failure FROM workflow_edges ed
                     JOIN workflow_steps s ON s.id = ed.step_id
                     WHERE ed.dep_id = cur AND s.state = 'blocked'
                     ORDER BY s.id) w LOOP
            IF how = 'skipped_following' THEN
                todo_steps := todo_steps || e.id;
                todo_outcomes := todo_outcomes || 'skipped_following'::text;
            ELSIF how IN ('completed', 'skipped') OR e.on_failure = 'run' THEN
                UPDATE workflow_steps SET deps_left = deps_left - 1 WHERE id = e.id
                RETURNING deps_left INTO left_now;
                IF left_now = 0 THEN
                    PERFORM kickoff_step_start(e.id);
                END IF;
            ELSE
                todo_steps := todo_steps || e.id;
                todo_outcomes := todo_outcomes || (CASE e.on_failure
                    WHEN 'fail' THEN 'failed'
                    WHEN 'skip' THEN 'skipped'
                    ELSE 'skipped_following' END)::text;
            END IF;
        END LOOP;
    END LOOP;
    -- The run, once none of its steps waits or runs: failed if a step failed or was cancelled.
    UPDATE workflow_runs
       SET state = CASE WHEN failed + cancelled > 0 THEN 'failed' ELSE 'completed' END,
           finished_at = clock_timestamp()
     WHERE id = run AND state = 'running' AND blocked + ready = 0;
END $$;

-- The steps whose jobs a statement settled settle with them, in the same transaction: a job
-- that completed, was discarded (the step fails) or cancelled, or was deleted before it settled
-- (cancelled). In run and step order, whatever order the statement wrote its rows in (a batch
-- of completions in job id order, a rescue in lease order): two statements settling steps of
-- the same runs lock them in the same order. A statement of ordinary jobs only reads its rows'
-- `step_id` (the transition tables are the ones `kickoff_jobs_changed` has captured already).
CREATE FUNCTION kickoff_steps_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM old_rows WHERE step_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        FOR s IN SELECT o.step_id FROM old_rows o JOIN workflow_steps st ON st.id = o.step_id
                 WHERE o.step_id IS NOT NULL AND o.finalized_at IS NULL
                 ORDER BY st.run_id, o.step_id LOOP
            PERFORM kickoff_step_settle(s.step_id, 'cancelled', NULL);
        END LOOP;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM new_rows WHERE step_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        FOR s IN SELECT n.step_id, n.id, n.state FROM new_rows n
                 JOIN old_rows o ON o.id = n.id
                 JOIN workflow_steps st ON st.id = n.step_id
                 WHERE n.step_id IS NOT NULL AND o.state <> n.state
                   AND n.state IN ('completed', 'discarded', 'cancelled')
                 ORDER BY st.run_id, n.step_id LOOP
            PERFORM kickoff_step_settle(
                s.step_id,
                CASE s.state WHEN 'completed' THEN 'completed'
                             WHEN 'discarded' THEN 'failed'
                             ELSE 'cancelled' END,
                CASE WHEN s.state = 'completed' THEN
                    (SELECT a.output FROM job_attempts a
                     WHERE a.job_id = s.id AND a.outcome = 'completed'
                     ORDER BY a.id DESC LIMIT 1) END);
        END LOOP;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_steps_settled_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_steps_settled();
CREATE TRIGGER jobs_steps_settled_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_steps_settled();
