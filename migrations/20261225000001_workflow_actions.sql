-- Workflows' operator actions (issue 49): retry a run's failed steps, skip a step, run a run again
-- from a step. Each holds the run's lock (every write of a run's steps takes it first), so none
-- interleaves with a step's settle: docs/workflows.md.

-- The run a rerun runs again (no foreign key: deleting a run leaves its reruns), and the step of
-- that run whose completion (its job and output) a step of the rerun keeps.
ALTER TABLE workflow_runs ADD COLUMN rerun_of bigint;
ALTER TABLE workflow_steps ADD COLUMN kept_from bigint;
-- Skipped by an operator (`kickoff_step_skip`), not by a dependency's policy: a retry of the
-- failed leaves it skipped (the operator's decision stands; a retry of all runs it).
ALTER TABLE workflow_steps ADD COLUMN skipped_by_hand boolean NOT NULL DEFAULT false;

-- Retries run `run`'s steps that did not complete: `failed` the failed, cancelled and skipped
-- ones (a completed step never runs again, nor one an operator skipped), `failed_and_following` those and every step after
-- them (completed ones included), `all` every step (none may be ready). The steps retried wait
-- again for their dependencies (each blocked step for those that are blocked or ready); those
-- whose dependencies completed get their job at once (a step a rerun kept runs in this run now);
-- the run is running again. Returns `ok`, or
-- why not: `not_found`, `cancelled`, `nothing_failed`, `steps_running` (for `all`), `key_taken`
-- (a settled run's key is held by a live run).
CREATE FUNCTION kickoff_run_retry(run bigint, mode text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    r workflow_runs;
    again bigint[];
    s record;
BEGIN
    SELECT * INTO r FROM workflow_runs WHERE id = run FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'not_found';
    END IF;
    IF r.state = 'cancelled' THEN
        RETURN 'cancelled';
    END IF;
    IF r.failed + r.cancelled + r.skipped = 0 THEN
        RETURN 'nothing_failed';
    END IF;
    IF mode = 'all' AND r.ready > 0 THEN
        RETURN 'steps_running';
    END IF;
    PERFORM 1 FROM workflow_steps WHERE run_id = run ORDER BY id FOR UPDATE;
    IF mode = 'all' THEN
        SELECT coalesce(array_agg(id), '{}') INTO again FROM workflow_steps WHERE run_id = run;
    ELSE
        WITH RECURSIVE down(id) AS (
            SELECT id FROM workflow_steps
            WHERE run_id = run AND (state IN ('failed', 'cancelled')
                                    OR (state = 'skipped' AND NOT skipped_by_hand))
            UNION
            SELECT e.step_id FROM workflow_edges e JOIN down d ON e.dep_id = d.id)
        SELECT coalesce(array_agg(st.id), '{}') INTO again FROM workflow_steps st
        WHERE st.run_id = run
          AND (st.state IN ('failed', 'cancelled')
               OR (st.state = 'skipped' AND NOT st.skipped_by_hand)
               OR (mode = 'failed_and_following' AND st.state = 'completed'
                   AND st.id IN (SELECT id FROM down)));
    END IF;
    IF cardinality(again) = 0 THEN
        RETURN 'nothing_failed';
    END IF;
    -- Live again first: a key a newer live run holds refuses the retry before anything changes.
    BEGIN
        UPDATE workflow_runs SET state = 'running', finished_at = NULL WHERE id = run;
    EXCEPTION WHEN unique_violation THEN
        RETURN 'key_taken';
    END;
    UPDATE workflow_steps
       SET state = 'blocked', job_id = NULL, output = NULL, skip_following = false,
           finished_at = NULL, kept_from = NULL, waiting_since = NULL, deadline_at = NULL,
           skipped_by_hand = false
     WHERE id = ANY(again);
    -- After the reset every step is blocked, ready, completed or skipped by hand: a blocked one
    -- waits for its dependencies that are blocked or ready (the count `kickoff_step_settle`
    -- keeps).
    UPDATE workflow_steps st
       SET deps_left = (SELECT count(*) FROM workflow_edges e
                        JOIN workflow_steps d ON d.id = e.dep_id
                        WHERE e.step_id = st.id AND d.state IN ('blocked', 'ready'))
     WHERE st.run_id = run AND st.state = 'blocked';
    UPDATE workflow_runs w
       SET blocked = c.blocked, ready = c.ready, completed = c.completed, failed = 0,
           skipped = c.skipped, cancelled = 0
      FROM (SELECT count(*) FILTER (WHERE state = 'blocked') AS blocked,
                   count(*) FILTER (WHERE state = 'ready') AS ready,
                   count(*) FILTER (WHERE state = 'completed') AS completed,
                   count(*) FILTER (WHERE state = 'skipped') AS skipped
            FROM workflow_steps WHERE run_id = run) c
     WHERE w.id = run;
    FOR s IN SELECT id FROM workflow_steps
             WHERE run_id = run AND state = 'blocked' AND deps_left = 0 ORDER BY id LOOP
        PERFORM kickoff_step_start(s.id);
    END LOOP;
    RETURN 'ok';
END $$;

-- Skips step `step_name` of running run `run`: it settles `skipped` (the steps after it go on as
-- after a completed one) and `job` is its job, if it had one, for the caller to cancel next in
-- the same transaction (a running attempt is stopped; the step stays skipped). `outcome`:
-- `skipped`, or why not: `not_found`, `unknown_step`, `run_<state>`, `step_<state>`.
CREATE FUNCTION kickoff_step_skip(run bigint, step_name text, OUT outcome text, OUT job bigint)
LANGUAGE plpgsql AS $$
DECLARE
    run_state text;
    st workflow_steps;
BEGIN
    SELECT state INTO run_state FROM workflow_runs WHERE id = run FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN;
    END IF;
    SELECT * INTO st FROM workflow_steps WHERE run_id = run AND name = step_name;
    IF NOT FOUND THEN
        outcome := 'unknown_step';
        RETURN;
    END IF;
    IF run_state <> 'running' THEN
        outcome := 'run_' || run_state;
        RETURN;
    END IF;
    IF st.state NOT IN ('blocked', 'ready') THEN
        outcome := 'step_' || st.state;
        RETURN;
    END IF;
    job := st.job_id;
    PERFORM kickoff_step_settle(st.id, 'skipped', NULL);
    UPDATE workflow_steps SET skipped_by_hand = true WHERE id = st.id AND state = 'skipped';
    outcome := 'skipped';
END $$;

-- Runs settled run `source` again from step `from_name`, as a new run (`rerun_of`) of the same
-- shape, times and key (not its signals: the steps that run again wait for new ones): the step,
-- every step that did not complete, and every step after either run again; every other step
-- completed and keeps its job and output (`kept_from`), so the steps that run again read the
-- outputs before them. `outcome`: `created` with `new_run`, or why not: `not_found`, `running`,
-- `unknown_step`, `key_taken`.
CREATE FUNCTION kickoff_run_rerun(source bigint, from_name text, by_whom text,
                                  OUT outcome text, OUT new_run bigint)
LANGUAGE plpgsql AS $$
DECLARE
    r workflow_runs;
    from_id bigint;
    again bigint[];
    s record;
BEGIN
    SELECT * INTO r FROM workflow_runs WHERE id = source FOR UPDATE;
    IF NOT FOUND THEN
        outcome := 'not_found';
        RETURN;
    END IF;
    IF r.state = 'running' THEN
        outcome := 'running';
        RETURN;
    END IF;
    SELECT id INTO from_id FROM workflow_steps WHERE run_id = source AND name = from_name;
    IF NOT FOUND THEN
        outcome := 'unknown_step';
        RETURN;
    END IF;
    WITH RECURSIVE down(id) AS (
        SELECT id FROM workflow_steps
        WHERE run_id = source AND (id = from_id OR state <> 'completed')
        UNION
        SELECT e.step_id FROM workflow_edges e JOIN down d ON e.dep_id = d.id)
    SELECT array_agg(id) INTO again FROM down;
    INSERT INTO workflow_runs (name, key, created_by, steps, blocked, completed, rerun_of, times)
    VALUES (r.name, r.key, coalesce(by_whom, r.created_by), r.steps, cardinality(again),
            r.steps - cardinality(again), source, r.times)
    ON CONFLICT (key) WHERE key IS NOT NULL AND finished_at IS NULL DO NOTHING
    RETURNING id INTO new_run;
    IF new_run IS NULL THEN
        outcome := 'key_taken';
        RETURN;
    END IF;
    INSERT INTO workflow_steps (run_id, name, state, deps_left, queue, kind, args, priority,
                                max_attempts, tags, meta, created_by, call_host, job_id, output,
                                finished_at, kept_from, at_time, at_ms, signal, deadline_time,
                                deadline_ms)
    SELECT new_run, st.name, CASE WHEN st.id = ANY(again) THEN 'blocked' ELSE 'completed' END,
           CASE WHEN st.id = ANY(again) THEN
               (SELECT count(*) FROM workflow_edges e
                WHERE e.step_id = st.id AND e.dep_id = ANY(again)) ELSE 0 END,
           st.queue, st.kind, st.args, st.priority, st.max_attempts, st.tags, st.meta,
           CASE WHEN st.id = ANY(again) THEN coalesce(by_whom, st.created_by)
                ELSE st.created_by END,
           st.call_host,
           CASE WHEN st.id = ANY(again) THEN NULL ELSE st.job_id END,
           CASE WHEN st.id = ANY(again) THEN NULL ELSE st.output END,
           CASE WHEN st.id = ANY(again) THEN NULL ELSE st.finished_at END,
           CASE WHEN st.id = ANY(again) THEN NULL ELSE st.id END,
           st.at_time, st.at_ms, st.signal, st.deadline_time, st.deadline_ms
    FROM workflow_steps st WHERE st.run_id = source ORDER BY st.id;
    INSERT INTO workflow_edges (dep_id, step_id, on_failure)
    SELECT nd.id, ns.id, e.on_failure
    FROM workflow_steps os
    JOIN workflow_edges e ON e.step_id = os.id
    JOIN workflow_steps od ON od.id = e.dep_id
    JOIN workflow_steps nd ON nd.run_id = new_run AND nd.name = od.name
    JOIN workflow_steps ns ON ns.run_id = new_run AND ns.name = os.name
    WHERE os.run_id = source;
    FOR s IN SELECT id FROM workflow_steps
             WHERE run_id = new_run AND state = 'blocked' AND deps_left = 0 ORDER BY id LOOP
        PERFORM kickoff_step_start(s.id);
    END LOOP;
    outcome := 'created';
END $$;
