-- One statement trigger per write of `jobs` instead of three (issue 48).
--
-- Each INSERT, UPDATE and DELETE of `jobs` fired three statement triggers: the count deltas
-- (`kickoff_count_deltas`), the due notification (`kickoff_notify_due`) and the live events
-- (`kickoff_notify_events`). Every claim and every completion is such an UPDATE: three PL/pgSQL
-- calls, and the old and new rows joined twice (once for the counts, once for the events). In
-- `kickoff bench throughput` the triggers took about a quarter of the database's time (`perf
-- record -a`: `AfterTriggerEndQuery` 16 % of both cores, PostgreSQL 66 %), and the run went from
-- about 13,200 to 17,500 jobs a second with them disabled.
--
-- `kickoff_jobs_changed` does the work of the three in one call and joins the rows once. What it
-- writes and sends is what they wrote and sent: the same deltas, the same notifications with the
-- same payloads in the same order (counts, then due, then events), the same handling of
-- `kickoff.notify = after_commit` (the due and event notifications are left to Kickoff's own
-- insert path, and the setting is cleared for the next statement).

CREATE OR REPLACE FUNCTION kickoff_jobs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    quiet boolean := coalesce(current_setting('kickoff.notify', true), '') = 'after_commit';
    payload text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (queue, state, n)
        SELECT queue, state, count(*) FROM new_rows GROUP BY queue, state;
        IF NOT quiet THEN
            PERFORM pg_notify('kickoff_due', json_build_object(
                        'queue', queue,
                        'state', state,
                        'at_ms', floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint)::text)
            FROM new_rows
            WHERE state IN ('scheduled', 'available', 'retryable')
            GROUP BY queue, state;
            SELECT json_build_object('op', 'insert', 'n', count(*),
                       'to', (SELECT json_object_agg(state, c) FROM (
                                 SELECT state, count(*) AS c FROM new_rows GROUP BY state) s),
                       'ids', (SELECT json_agg(id) FROM (SELECT id FROM new_rows LIMIT 100) i))::text
              INTO payload FROM new_rows HAVING count(*) > 0;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (queue, state, n)
        SELECT queue, state, -count(*) FROM old_rows GROUP BY queue, state;
        IF NOT quiet THEN
            SELECT json_build_object('op', 'delete', 'n', count(*),
                       'ids', (SELECT json_agg(id) FROM (SELECT id FROM old_rows LIMIT 100) i))::text
              INTO payload FROM old_rows HAVING count(*) > 0;
        END IF;
    ELSE
        -- The old and new rows joined once: a row counts when its state or queue changed, and
        -- is an event when its state or due time changed.
        WITH changed AS MATERIALIZED (
                 SELECT n.id, o.queue AS old_queue, o.state AS old_state,
                        n.queue AS new_queue, n.state AS new_state,
                        (o.state <> n.state OR o.queue <> n.queue) AS counted,
                        (o.state <> n.state OR o.scheduled_at <> n.scheduled_at) AS event
                 FROM old_rows o JOIN new_rows n ON n.id = o.id
                 WHERE o.state <> n.state OR o.queue <> n.queue
                    OR o.scheduled_at <> n.scheduled_at),
             deltas AS (
                 INSERT INTO job_count_deltas (queue, state, n)
                 SELECT new_queue, new_state, count(*) FROM changed WHERE counted
                 GROUP BY new_queue, new_state
                 UNION ALL
                 SELECT old_queue, old_state, -count(*) FROM changed WHERE counted
                 GROUP BY old_queue, old_state),
             events AS (
                 SELECT id, new_state AS state FROM changed WHERE event)
        SELECT json_build_object('op', 'update', 'n', count(*),
                   'to', (SELECT json_object_agg(state, c) FROM (
                             SELECT state, count(*) AS c FROM events GROUP BY state) s),
                   'ids', (SELECT json_agg(id) FROM (SELECT id FROM events LIMIT 100) i))::text
          INTO payload FROM events HAVING count(*) > 0 AND NOT quiet;
        IF NOT quiet THEN
            PERFORM pg_notify('kickoff_due', json_build_object(
                        'queue', queue,
                        'state', state,
                        'at_ms', floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint)::text)
            FROM new_rows
            WHERE state IN ('scheduled', 'available', 'retryable')
            GROUP BY queue, state;
        END IF;
    END IF;
    IF quiet THEN
        -- The setting covers one statement (see 20261207000001_notify_after_commit.sql).
        PERFORM set_config('kickoff.notify', '', true);
    ELSIF payload IS NOT NULL THEN
        PERFORM pg_notify('kickoff_events', payload);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_counts_after_insert ON jobs;
DROP TRIGGER jobs_counts_after_update ON jobs;
DROP TRIGGER jobs_counts_after_delete ON jobs;
DROP TRIGGER jobs_due_after_insert ON jobs;
DROP TRIGGER jobs_due_after_update ON jobs;
DROP TRIGGER jobs_events_after_insert ON jobs;
DROP TRIGGER jobs_events_after_update ON jobs;
DROP TRIGGER jobs_events_after_delete ON jobs;

CREATE TRIGGER jobs_changed_after_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_jobs_changed();
CREATE TRIGGER jobs_changed_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_jobs_changed();
CREATE TRIGGER jobs_changed_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_jobs_changed();

DROP FUNCTION kickoff_count_deltas();
DROP FUNCTION kickoff_notify_due();
DROP FUNCTION kickoff_notify_events();
