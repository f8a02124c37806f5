-- A transaction that runs pg_notify takes a database-wide lock at commit and holds it through its
-- WAL flush, so durable commits that notify run one after another: inserting through the REST API
-- topped out at one job per fsync. Kickoff's own insert path now sets `kickoff.notify` to
-- `after_commit` for its transaction and sends the same notifications itself once the insert has
-- committed (`engine/announcer.rs`), from a connection whose commits do not wait for the disk.
-- Any other writer (SQL, other services) still notifies from the triggers, as before.

CREATE OR REPLACE FUNCTION kickoff_notify_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('kickoff.notify', true) = 'after_commit' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify('kickoff_due', json_build_object(
                'queue', queue,
                'state', state,
                'at_ms', floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint)::text)
    FROM new_rows
    WHERE state IN ('scheduled', 'available', 'retryable')
    GROUP BY queue, state;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION kickoff_notify_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    payload text;
BEGIN
    IF current_setting('kickoff.notify', true) = 'after_commit' THEN
        PERFORM set_config('kickoff.notify', '', true);
        RETURN NULL;
    END IF;
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
