-- Workflows' waits (issue 49): a run's named times, a step's timer anchored to one of them, a
-- step that waits for a signal until a deadline, and the signals themselves (docs/workflows.md).
--
-- A waiting step is still `blocked` (its counters do not change): its dependencies all allowed
-- it, and it waits for its signal (`waiting_since` set, `deadline_at` computed then). It has no
-- job, so it never weighs on the claim's index. A step with a timer gets its job when its
-- dependencies allow, due at its time: the job fires as any scheduled job does.

-- The run's named times (`{"kickoff_at": "2026-12-06T20:00:00Z"}`): the anchors of its steps'
-- timers and deadlines; moving one moves them.
ALTER TABLE workflow_runs ADD COLUMN times jsonb NOT NULL DEFAULT '{}'
    CHECK (jsonb_typeof(times) = 'object');

-- `at_time` + `at_ms`: the step's job is due then (not before); `signal`: the step waits for the
-- run's signal of that name (after its dependencies), failing at `deadline_time` +
-- `deadline_ms` if none came.
ALTER TABLE workflow_steps
    ADD COLUMN at_time text,
    ADD COLUMN at_ms bigint,
    ADD COLUMN signal text CHECK (signal IS NULL OR char_length(signal) BETWEEN 1 AND 128),
    ADD COLUMN deadline_time text,
    ADD COLUMN deadline_ms bigint,
    ADD COLUMN waiting_since timestamptz,
    ADD COLUMN deadline_at timestamptz,
    ADD CONSTRAINT at_whole CHECK ((at_time IS NULL) = (at_ms IS NULL)),
    ADD CONSTRAINT signal_with_deadline CHECK (
        (signal IS NULL) = (deadline_time IS NULL) AND (deadline_time IS NULL) = (deadline_ms IS NULL));
CREATE INDEX workflow_steps_deadline_idx ON workflow_steps (deadline_at)
    WHERE state = 'blocked' AND deadline_at IS NOT NULL;

-- A signal of a run: the first of a name stands (a second is answered with the first), and is
-- kept whether or not a step waits for it yet.
CREATE TABLE workflow_signals (
    run_id bigint NOT NULL REFERENCES workflow_runs ON DELETE CASCADE,
    name text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 128),
    payload jsonb NOT NULL DEFAULT 'null',
    -- Who sent it: `api:<account or token name>`, `cli:…`, `console:…`.
    source text NOT NULL CHECK (char_length(source) BETWEEN 1 AND 200),
    received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, name)
);

-- The run's time `name` plus `ms` milliseconds (NULL when the run has no such time).
CREATE FUNCTION kickoff_run_time(times jsonb, name text, ms bigint) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT (times ->> name)::timestamptz + ms * interval '1 millisecond'
$$;

-- Starts a blocked step whose dependencies allow it: a step waiting for a signal that has not
-- come starts waiting (its deadline computed from the run's times); any other gets its job, due
-- at once or at its time. The one place a step becomes a job (a run's insert for its first
-- steps, `kickoff_step_settle` for the others, a signal, an operator's retry or rerun).
CREATE OR REPLACE FUNCTION kickoff_step_start(step bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    s workflow_steps;
    run_times jsonb;
    now_at timestamptz := clock_timestamp();
    due timestamptz;
    job bigint;
    key text;
BEGIN
    SELECT * INTO s FROM workflow_steps WHERE id = step AND state = 'blocked' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT times INTO run_times FROM workflow_runs WHERE id = s.run_id;
    IF s.signal IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM workflow_signals WHERE run_id = s.run_id AND name = s.signal) THEN
        IF s.waiting_since IS NULL THEN
            UPDATE workflow_steps
               SET waiting_since = now_at,
                   deadline_at = kickoff_run_time(run_times, s.deadline_time, s.deadline_ms)
             WHERE id = step;
        END IF;
        RETURN NULL;
    END IF;
    -- The time and the rate key inline (as SQL functions they would be planned at every call).
    due := greatest(now_at, (run_times ->> s.at_time)::timestamptz
                            + s.at_ms * interval '1 millisecond');
    SELECT kickoff_partition_key(q.rate_per, s.kind, s.args, s.call_host) INTO key
    FROM queues q WHERE q.name = s.queue AND q.rate_per IS NOT NULL;
    INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at, tags, meta,
                      created_by, call_host, rate_key, step_id)
    VALUES (s.queue, s.kind, s.args,
            CASE WHEN due > now_at THEN 'scheduled'::job_state ELSE 'available'::job_state END,
            s.priority, s.max_attempts, due, s.tags, s.meta, s.created_by, s.call_host, key, s.id)
    RETURNING id INTO job;
    UPDATE workflow_steps SET state = 'ready', job_id = job, deadline_at = NULL WHERE id = step;
    PERFORM kickoff_run_recount(s.run_id, 'blocked', 'ready');
    RETURN job;
END $$;

-- Stores signal `name` of running run `run` (the first of a name stands) and starts the steps
-- waiting for it. `stored`, `existing` (one came first: nothing changed), or why not:
-- `not_found`, `run_<state>`.
CREATE FUNCTION kickoff_run_signal(run bigint, signal_name text, signal_payload jsonb,
                                   signal_source text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    run_state text;
    s record;
BEGIN
    SELECT state INTO run_state FROM workflow_runs WHERE id = run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF run_state <> 'running' THEN
        RETURN 'run_' || run_state;
    END IF;
    INSERT INTO workflow_signals (run_id, name, payload, source)
    VALUES (run, signal_name, coalesce(signal_payload, 'null'), signal_source)
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'existing';
    END IF;
    FOR s IN SELECT id FROM workflow_steps
             WHERE run_id = run AND state = 'blocked' AND deps_left = 0 AND signal = signal_name
             ORDER BY id LOOP
        PERFORM kickoff_step_start(s.id);
    END LOOP;
    RETURN 'stored';
END $$;

-- Fails step `step` if it still waits for its signal and its deadline passed (under the run's
-- lock: a signal that came first has started it). Whether it did.
CREATE FUNCTION kickoff_step_deadline(step bigint) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    run bigint;
BEGIN
    SELECT run_id INTO run FROM workflow_steps WHERE id = step;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM 1 FROM workflow_runs WHERE id = run FOR UPDATE;
    PERFORM 1 FROM workflow_steps st
     WHERE st.id = step AND st.state = 'blocked' AND st.deadline_at <= clock_timestamp()
       AND NOT EXISTS (SELECT 1 FROM workflow_signals g
                       WHERE g.run_id = st.run_id AND g.name = st.signal);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM kickoff_step_settle(step, 'failed', NULL);
    RETURN true;
END $$;

-- Moves run `run`'s named times to those of `moved` (each a time the run has): the timers of
-- its steps anchored to them move with them (a ready step's job that has not started is due
-- anew; a blocked one reads the times when it starts), and so do the deadlines of the steps
-- waiting. `moved`, or why not: `not_found`, `run_<state>`, `unknown_time:<name>`.
CREATE FUNCTION kickoff_run_move_times(run bigint, moved jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r workflow_runs;
    name text;
BEGIN
    SELECT * INTO r FROM workflow_runs WHERE id = run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF r.state <> 'running' THEN
        RETURN 'run_' || r.state;
    END IF;
    FOR name IN SELECT jsonb_object_keys(moved) LOOP
        IF NOT r.times ? name THEN
            RETURN 'unknown_time:' || name;
        END IF;
    END LOOP;
    UPDATE workflow_runs SET times = times || moved WHERE id = run RETURNING * INTO r;
    UPDATE jobs j
       SET scheduled_at = greatest(clock_timestamp(), kickoff_run_time(r.times, st.at_time, st.at_ms)),
           state = CASE WHEN kickoff_run_time(r.times, st.at_time, st.at_ms) > clock_timestamp()
                        THEN 'scheduled'::job_state ELSE 'available'::job_state END
      FROM workflow_steps st
     WHERE st.run_id = run AND st.state = 'ready' AND moved ? st.at_time
       AND j.id = st.job_id AND j.state IN ('scheduled', 'available') AND j.attempt = 0;
    UPDATE workflow_steps
       SET deadline_at = kickoff_run_time(r.times, deadline_time, deadline_ms)
     WHERE run_id = run AND state = 'blocked' AND waiting_since IS NOT NULL
       AND moved ? deadline_time;
    RETURN 'moved';
END $$;
