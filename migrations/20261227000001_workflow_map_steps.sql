-- Map steps (issue 49): a step of a workflow run that is many tasks, each an ordinary job of the
-- step's kind, for a fan-out too large for steps (a million players are a thousand tasks of a
-- thousand). Each task is retried alone (its job's attempts), resumes from the cursor its
-- handler last checkpointed (`JobContext::checkpoint_with`, in the handler's own transaction,
-- fenced by its claim), and counts the items it did (the step's progress). The step settles once
-- every task settled, in the transaction of the last: `completed` when all completed (its output
-- says how many tasks and items), else `failed` (a task discarded) or `cancelled`; a retry of
-- the failed runs only the tasks that did not complete, each from its cursor: docs/workflows.md.
-- Migrations are immutable once landed: change the schema in a new file.

-- A map step's number of tasks (NULL for a step that is one job), and its tasks by outcome of
-- their current jobs (kept by each task's settle; done + failed + cancelled + pending = tasks).
ALTER TABLE workflow_steps
    ADD COLUMN tasks int CHECK (tasks IS NULL OR tasks BETWEEN 1 AND 10000),
    ADD COLUMN tasks_done int NOT NULL DEFAULT 0 CHECK (tasks_done >= 0),
    ADD COLUMN tasks_failed int NOT NULL DEFAULT 0 CHECK (tasks_failed >= 0),
    ADD COLUMN tasks_cancelled int NOT NULL DEFAULT 0 CHECK (tasks_cancelled >= 0);
-- A map step has no job of its own: its tasks have theirs.
ALTER TABLE workflow_steps DROP CONSTRAINT job_once_ready;
ALTER TABLE workflow_steps ADD CONSTRAINT job_once_ready CHECK (
    CASE state WHEN 'blocked' THEN job_id IS NULL
               WHEN 'ready' THEN job_id IS NOT NULL OR tasks IS NOT NULL
               WHEN 'completed' THEN job_id IS NOT NULL OR tasks IS NOT NULL
               ELSE true END);

-- A task of a map step: its index (0 to tasks - 1), its current job (a retry of the step makes
-- a new one for a task that did not complete), how that job settled, the cursor its handler
-- checkpointed last and the items it did (both kept across its attempts and the step's retry).
CREATE TABLE workflow_tasks (
    step_id bigint NOT NULL REFERENCES workflow_steps ON DELETE CASCADE,
    task int NOT NULL CHECK (task >= 0),
    job_id bigint NOT NULL,
    state text NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'completed', 'failed', 'cancelled')),
    cursor jsonb,
    items bigint NOT NULL DEFAULT 0 CHECK (items >= 0),
    checkpointed_at timestamptz,
    PRIMARY KEY (step_id, task)
);
CREATE UNIQUE INDEX workflow_tasks_job_idx ON workflow_tasks (job_id);

-- The jobs of run `run`'s ready steps that have not settled: a step's own, a map step's tasks'.
CREATE FUNCTION kickoff_run_live_jobs(run bigint) RETURNS TABLE (job bigint, step bigint)
LANGUAGE sql STABLE AS $$
    SELECT s.job_id, s.id FROM workflow_steps s
     WHERE s.run_id = run AND s.state = 'ready' AND s.job_id IS NOT NULL
    UNION ALL
    SELECT t.job_id, s.id FROM workflow_steps s
      JOIN workflow_tasks t ON t.step_id = s.id AND t.state = 'pending'
     WHERE s.run_id = run AND s.state = 'ready' AND s.tasks IS NOT NULL
$$;

-- Counts `n_done`, `n_failed`, `n_cancelled` more tasks of map step `step` settled (their rows
-- marked already, the run's lock held), and settles the step once every task settled:
-- completed when every task completed, with `{"tasks", "completed", "failed", "cancelled",
-- "items"}` as its output. Once per step and statement, however many of its tasks it settled.
CREATE FUNCTION kickoff_tasks_settled(step bigint, n_done int, n_failed int, n_cancelled int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    st workflow_steps;
BEGIN
    UPDATE workflow_steps
       SET tasks_done = tasks_done + n_done,
           tasks_failed = tasks_failed + n_failed,
           tasks_cancelled = tasks_cancelled + n_cancelled
     WHERE id = step
    RETURNING * INTO st;
    -- A task's end is the run's progress ("waiting longer than").
    UPDATE workflow_runs SET progressed_at = clock_timestamp() WHERE id = st.run_id;
    IF st.state = 'ready' AND st.tasks_done + st.tasks_failed + st.tasks_cancelled >= st.tasks THEN
        PERFORM kickoff_step_settle(
            step,
            CASE WHEN st.tasks_done >= st.tasks THEN 'completed'
                 WHEN st.tasks_failed > 0 THEN 'failed'
                 ELSE 'cancelled' END,
            jsonb_build_object(
                'tasks', st.tasks, 'completed', st.tasks_done, 'failed', st.tasks_failed,
                'cancelled', st.tasks_cancelled,
                'items', (SELECT coalesce(sum(items), 0) FROM workflow_tasks WHERE step_id = step)));
    END IF;
END $$;

-- Settles task job `job` of map step `step` with `outcome` (`completed`, `failed`,
-- `cancelled`), under the run's lock (the order of every write of a run's steps); an earlier
-- job of the task (before a retry of the step) changes nothing.
CREATE FUNCTION kickoff_task_settle(step bigint, job bigint, outcome text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    run bigint;
BEGIN
    SELECT run_id INTO run FROM workflow_steps WHERE id = step;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM workflow_runs WHERE id = run FOR UPDATE;
    UPDATE workflow_tasks SET state = outcome WHERE job_id = job AND state = 'pending';
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM kickoff_tasks_settled(step, (outcome = 'completed')::int, (outcome = 'failed')::int,
                                  (outcome = 'cancelled')::int);
END $$;

-- The one place a step becomes a job, now with a map step's tasks.
CREATE OR REPLACE FUNCTION kickoff_step_start(step bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    s workflow_steps;
    run_times jsonb;
    now_at timestamptz := clock_timestamp();
    due timestamptz;
    job bigint;
    key text;
    made int;
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
    IF s.tasks IS NOT NULL THEN
        -- A job for each task that has not completed (all of them at first; after a retry of
        -- the step, those that did not complete, each resuming from its cursor), with its id
        -- drawn first so that the task's row names it.
        WITH todo AS MATERIALIZED (
            SELECT nextval('jobs_id_seq') AS id, g AS task
              FROM generate_series(0, s.tasks - 1) g
             WHERE NOT EXISTS (SELECT 1 FROM workflow_tasks t
                               WHERE t.step_id = s.id AND t.task = g AND t.state = 'completed')
             ORDER BY g),
        jobs_made AS (
            INSERT INTO jobs (id, queue, kind, args, state, priority, max_attempts, scheduled_at,
                              tags, meta, created_by, call_host, rate_key, step_id)
            SELECT todo.id, s.queue, s.kind, s.args,
                   CASE WHEN due > now_at THEN 'scheduled'::job_state
                        ELSE 'available'::job_state END,
                   s.priority, s.max_attempts, due, s.tags, s.meta, s.created_by, s.call_host,
                   key, s.id
              FROM todo ORDER BY todo.id)
        INSERT INTO workflow_tasks AS t (step_id, task, job_id)
        SELECT s.id, todo.task, todo.id FROM todo
        ON CONFLICT (step_id, task) DO UPDATE SET job_id = excluded.job_id, state = 'pending';
        GET DIAGNOSTICS made = ROW_COUNT;
        UPDATE workflow_steps
           SET state = 'ready', job_id = NULL, deadline_at = NULL, tasks_failed = 0,
               tasks_cancelled = 0
         WHERE id = step;
        PERFORM kickoff_run_recount(s.run_id, 'blocked', 'ready');
        IF made = 0 THEN
            -- Every task completed before: the step completes with them.
            PERFORM kickoff_tasks_settled(step, 0, 0, 0);
        END IF;
        RETURN NULL;
    END IF;
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

-- The steps whose jobs a statement settled settle with them; a map step's task settles its task
-- (and the step with the last one).
CREATE OR REPLACE FUNCTION kickoff_steps_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s record;
    map_steps bigint[];
    map_done int[];
    map_failed int[];
    map_cancelled int[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM old_rows WHERE step_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        FOR s IN SELECT o.step_id, o.id, st.tasks FROM old_rows o
                 JOIN workflow_steps st ON st.id = o.step_id
                 WHERE o.step_id IS NOT NULL AND o.finalized_at IS NULL
                 ORDER BY st.run_id, o.step_id, o.id LOOP
            IF s.tasks IS NULL THEN
                PERFORM kickoff_step_settle(s.step_id, 'cancelled', NULL);
            ELSE
                PERFORM kickoff_task_settle(s.step_id, s.id, 'cancelled');
            END IF;
        END LOOP;
    ELSE
        IF NOT EXISTS (SELECT 1 FROM new_rows WHERE step_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        -- Every run whose steps or tasks the statement settles, locked first, in id order (what
        -- each settle takes next is then held already: two statements never wait in a circle).
        PERFORM 1 FROM workflow_runs WHERE id IN (
            SELECT st.run_id FROM new_rows n
            JOIN old_rows o ON o.id = n.id
            JOIN workflow_steps st ON st.id = n.step_id
            WHERE n.step_id IS NOT NULL AND o.state <> n.state
              AND n.state IN ('completed', 'discarded', 'cancelled'))
        ORDER BY id FOR UPDATE;
        -- Map steps' tasks, all of the statement's at once: their rows marked, then each step's
        -- counters once (and its settle, with its last task). A batch completing 500 tasks
        -- costs one pass, not 500 settles.
        WITH marked AS (
            UPDATE workflow_tasks t
               SET state = CASE n.state WHEN 'completed' THEN 'completed'
                                        WHEN 'discarded' THEN 'failed'
                                        ELSE 'cancelled' END
              FROM new_rows n JOIN old_rows o ON o.id = n.id
             WHERE t.job_id = n.id AND t.state = 'pending' AND n.step_id IS NOT NULL
               AND o.state <> n.state AND n.state IN ('completed', 'discarded', 'cancelled')
            RETURNING t.step_id, t.state),
        per_step AS (
            SELECT m.step_id, st.run_id,
                   count(*) FILTER (WHERE m.state = 'completed')::int AS done,
                   count(*) FILTER (WHERE m.state = 'failed')::int AS failed,
                   count(*) FILTER (WHERE m.state = 'cancelled')::int AS cancelled
            FROM marked m JOIN workflow_steps st ON st.id = m.step_id
            GROUP BY m.step_id, st.run_id)
        SELECT array_agg(step_id ORDER BY run_id, step_id), array_agg(done ORDER BY run_id, step_id),
               array_agg(failed ORDER BY run_id, step_id),
               array_agg(cancelled ORDER BY run_id, step_id)
          INTO map_steps, map_done, map_failed, map_cancelled
          FROM per_step;
        FOR i IN 1 .. coalesce(cardinality(map_steps), 0) LOOP
            PERFORM kickoff_tasks_settled(map_steps[i], map_done[i], map_failed[i],
                                          map_cancelled[i]);
        END LOOP;
        -- Steps of one job each.
        FOR s IN SELECT n.step_id, n.id, n.state FROM new_rows n
                 JOIN old_rows o ON o.id = n.id
                 JOIN workflow_steps st ON st.id = n.step_id
                 WHERE n.step_id IS NOT NULL AND o.state <> n.state AND st.tasks IS NULL
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

-- A run's cancel cancels its map steps' tasks' jobs too.
CREATE OR REPLACE FUNCTION kickoff_run_cancel_steps(run bigint) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    n int;
    ready_jobs bigint[];
BEGIN
    PERFORM 1 FROM workflow_runs WHERE id = run AND state = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH c AS (
        UPDATE workflow_steps SET state = 'cancelled', finished_at = clock_timestamp()
        WHERE id IN (SELECT id FROM workflow_steps WHERE run_id = run AND state = 'blocked'
                     ORDER BY id FOR UPDATE)
        RETURNING 1)
    SELECT count(*) INTO n FROM c;
    UPDATE workflow_runs SET blocked = blocked - n, cancelled = cancelled + n WHERE id = run;
    SELECT coalesce(array_agg(job ORDER BY job), '{}') INTO ready_jobs
    FROM kickoff_run_live_jobs(run);
    RETURN ready_jobs;
END $$;

-- Moving a time moves a map step's tasks' jobs that have not started too.
CREATE OR REPLACE FUNCTION kickoff_run_move_times(run bigint, moved jsonb) RETURNS text
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
      FROM kickoff_run_live_jobs(run) l JOIN workflow_steps st ON st.id = l.step
     WHERE moved ? st.at_time
       AND j.id = l.job AND j.state IN ('scheduled', 'available') AND j.attempt = 0;
    UPDATE workflow_steps
       SET deadline_at = kickoff_run_time(r.times, deadline_time, deadline_ms)
     WHERE run_id = run AND state = 'blocked' AND waiting_since IS NOT NULL
       AND moved ? deadline_time;
    RETURN 'moved';
END $$;

-- A retry of a map step runs only its tasks that did not complete (when it failed or was
-- cancelled), each from its cursor.
CREATE OR REPLACE FUNCTION kickoff_run_retry(run bigint, mode text) RETURNS text LANGUAGE plpgsql AS $$
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
    -- A map step's tasks: one that completed or runs again whole (`all`) starts afresh; a failed
    -- or cancelled one keeps its completed tasks, and its others resume from their cursors when
    -- it starts (its counters always count its tasks' rows).
    DELETE FROM workflow_tasks t USING workflow_steps st
     WHERE t.step_id = st.id AND st.id = ANY(again) AND st.tasks IS NOT NULL
       AND (mode = 'all' OR st.state = 'completed');
    UPDATE workflow_steps st
       SET tasks_done = c.done, tasks_failed = c.failed, tasks_cancelled = c.cancelled
      FROM (SELECT s2.id,
                   count(t.*) FILTER (WHERE t.state = 'completed') AS done,
                   count(t.*) FILTER (WHERE t.state = 'failed') AS failed,
                   count(t.*) FILTER (WHERE t.state = 'cancelled') AS cancelled
              FROM workflow_steps s2 LEFT JOIN workflow_tasks t ON t.step_id = s2.id
             WHERE s2.id = ANY(again) AND s2.tasks IS NOT NULL GROUP BY s2.id) c
     WHERE st.id = c.id;
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

-- A rerun keeps a map step as any other (its tasks, for one that runs again, start afresh).
CREATE OR REPLACE FUNCTION kickoff_run_rerun(source bigint, from_name text, by_whom text,
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
                                deadline_ms, tasks, tasks_done)
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
           st.at_time, st.at_ms, st.signal, st.deadline_time, st.deadline_ms, st.tasks,
           CASE WHEN st.id = ANY(again) THEN 0 ELSE st.tasks_done END
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
