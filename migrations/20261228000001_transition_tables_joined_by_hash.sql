-- The jobs triggers' joins of a statement's old and new rows, linear again (issue 49).
--
-- A statement trigger's transition tables (`old_rows`, `new_rows`) have no statistics: the
-- planner takes each for one row and joins the two with a nested loop, every new row against
-- every old one. For a statement of n rows that is n² comparisons, in each such join: the
-- completer's batch of 893 map tasks spent 906 ms in one statement, of which 14.6 ms in the
-- statement's own work and the rest in its triggers (auto_explain: "Rows Removed by Join Filter:
-- 179352" for 424 rows, 58 ms, in one join of four; `kickoff bench workflows`,
-- docs/BENCHMARKS.md). The step after a map step of 1,000 tasks waited for it (the issue's
-- target: 10 ms after the last task), and every large batch of completions paid it.
--
-- - `kickoff_jobs_changed` joins the transition tables with each other only: it plans without
--   nested loops (a hash join, linear).
-- - `kickoff_steps_settled` also reads `workflow_steps` and `workflow_tasks` (by their keys: a
--   nested loop is right there): it reads the old rows' states into a map first (jsonb, by job
--   id), picks the step jobs whose state the statement ended with one look-up each, and reads
--   their steps, runs and tasks by key, one look-up a row, whatever the tables' statistics say
--   (a fresh table not analyzed yet is taken for one row, and the first version of this, joining
--   an array's rows to `workflow_steps`, was planned as 1,921 x 891 comparisons, 164 ms). What
--   it settles, in which order and under which locks, is unchanged.

ALTER FUNCTION kickoff_jobs_changed() SET enable_nestloop = off;
COMMENT ON FUNCTION kickoff_jobs_changed() IS
    'Runs with enable_nestloop = off (20261228000001): a CREATE OR REPLACE must keep the setting, '
    'or the join of its transition tables turns quadratic again.';

CREATE OR REPLACE FUNCTION kickoff_steps_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    s record;
    olds jsonb;
    ended_ids bigint[];
    ended_steps bigint[];
    ends jsonb;
    runs bigint[];
    map_steps bigint[];
    map_done int[];
    map_failed int[];
    map_cancelled int[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT 1 FROM old_rows WHERE step_id IS NOT NULL) THEN
            RETURN NULL;
        END IF;
        FOR s IN SELECT o.step_id, o.id, x.tasks FROM old_rows o
                 CROSS JOIN LATERAL (SELECT st.run_id, st.tasks FROM workflow_steps st
                                     WHERE st.id = o.step_id OFFSET 0) x
                 WHERE o.step_id IS NOT NULL AND o.finalized_at IS NULL
                 ORDER BY x.run_id, o.step_id, o.id LOOP
            IF s.tasks IS NULL THEN
                PERFORM kickoff_step_settle(s.step_id, 'cancelled', NULL);
            ELSE
                PERFORM kickoff_task_settle(s.step_id, s.id, 'cancelled');
            END IF;
        END LOOP;
        RETURN NULL;
    END IF;
    -- The step jobs this statement moved into an end state: their old states by id, then one
    -- look-up per new row. (A job's `step_id` is set when it is inserted and never changes: its
    -- old and new rows agree on it.)
    SELECT jsonb_object_agg(id::text, state) INTO olds FROM old_rows WHERE step_id IS NOT NULL;
    IF olds IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT coalesce(array_agg(n.id ORDER BY n.id), '{}'),
           coalesce(array_agg(n.step_id ORDER BY n.id), '{}'),
           jsonb_object_agg(n.id::text, n.state)
      INTO ended_ids, ended_steps, ends
      FROM new_rows n
     WHERE n.step_id IS NOT NULL AND n.state IN ('completed', 'discarded', 'cancelled')
       AND (olds ->> n.id::text) IS DISTINCT FROM n.state::text;
    IF cardinality(ended_ids) = 0 THEN
        RETURN NULL;
    END IF;
    -- From here every table is read by its key, one look-up per row (`= ANY` of an array, or a
    -- subquery kept apart by `OFFSET 0`): statistics a fresh table has not gathered yet cannot
    -- turn a join of them quadratic either.
    -- Every run whose steps or tasks the statement settles, locked first, in id order (what
    -- each settle takes next is then held already: two statements never wait in a circle).
    SELECT array_agg(DISTINCT x.run_id ORDER BY x.run_id) INTO runs
      FROM unnest(ended_steps) e(step_id)
      CROSS JOIN LATERAL (SELECT st.run_id FROM workflow_steps st WHERE st.id = e.step_id
                          OFFSET 0) x;
    PERFORM 1 FROM workflow_runs WHERE id = ANY (runs) ORDER BY id FOR UPDATE;
    -- Map steps' tasks, all of the statement's at once: their rows marked, then each step's
    -- counters once (and its settle, with its last task).
    WITH marked AS (
        UPDATE workflow_tasks t
           SET state = CASE ends ->> t.job_id::text WHEN 'completed' THEN 'completed'
                                                    WHEN 'discarded' THEN 'failed'
                                                    ELSE 'cancelled' END
         WHERE t.job_id = ANY (ended_ids) AND t.state = 'pending'
        RETURNING t.step_id, t.state),
    counted AS (
        SELECT m.step_id,
               count(*) FILTER (WHERE m.state = 'completed')::int AS done,
               count(*) FILTER (WHERE m.state = 'failed')::int AS failed,
               count(*) FILTER (WHERE m.state = 'cancelled')::int AS cancelled
        FROM marked m GROUP BY m.step_id),
    per_step AS (
        SELECT c.*, x.run_id FROM counted c
        CROSS JOIN LATERAL (SELECT st.run_id FROM workflow_steps st WHERE st.id = c.step_id
                            OFFSET 0) x)
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
    FOR s IN SELECT e.step_id, e.id, ends ->> e.id::text AS state
             FROM unnest(ended_ids, ended_steps) e(id, step_id)
             CROSS JOIN LATERAL (SELECT st.run_id FROM workflow_steps st
                                 WHERE st.id = e.step_id AND st.tasks IS NULL OFFSET 0) x
             ORDER BY x.run_id, e.step_id LOOP
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
    RETURN NULL;
END $$;
