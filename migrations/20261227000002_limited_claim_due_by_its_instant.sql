-- A limited claim never records an attempt before its job was due (found by the history
-- checker, seed 713 of 400 steps: a workflow step's job "started" 0.9 ms before the settle that
-- made it). The claim reads its instant `t` after the queue's lock (each attempt lies in the
-- window it was counted in), and its rows after that, with a snapshot of its own: a job made
-- due and committed in between was claimed with `attempted_at = t`, before its `scheduled_at`
-- (a negative lateness, an attempt older than its job). Now a claim takes only the jobs due by
-- `t`; one due after it is the next claim's (its commit's notification wakes the node).
-- Migrations are immutable once landed: change the schema in a new file.

CREATE OR REPLACE FUNCTION kickoff_claim_limited(p_queue text, p_want integer, p_free integer, p_node text,
                                      p_lease double precision, p_token bigint, p_scan integer,
                                      p_paused text[])
RETURNS SETOF jobs LANGUAGE plpgsql AS $$
DECLARE
    q queues%ROWTYPE;
    room integer := p_want;
    g_room integer;
    t timestamptz;
    win timestamptz;
    used_now integer;
    ids bigint[];
    n integer;
    turn record;
BEGIN
    SELECT * INTO q FROM queues WHERE name = p_queue FOR NO KEY UPDATE;
    IF NOT FOUND OR q.paused THEN
        RETURN;
    END IF;
    -- After the lock: a claim that waited for it counts in the window it runs in, and its
    -- attempts start at that instant (so each lies in the window it was counted in).
    t := clock_timestamp();
    IF q.global_concurrency IS NOT NULL THEN
        g_room := q.global_concurrency
            - (SELECT count(*) FROM jobs WHERE state = 'executing' AND queue = p_queue)::integer;
        -- The free slots take what room there is; jobs claimed ahead of them (fetch-ahead) take
        -- at most half of the room the free slots leave, so that the free slots of other nodes
        -- always find some, and a tight limit is never held by a buffer.
        room := least(room, least(g_room, p_free) + greatest(0, (g_room - p_free) / 2));
    END IF;
    IF q.rate_limit IS NOT NULL THEN
        win := kickoff_window_start(t, q.rate_period_ms);
        IF q.rate_per IS NULL THEN
            SELECT w.used INTO used_now FROM queue_rate_windows w
            WHERE w.queue = p_queue AND w.key = '' AND w.window_start = win;
            room := least(room, q.rate_limit - coalesce(used_now, 0));
        END IF;
    END IF;
    IF room <= 0 THEN
        RETURN;
    END IF;

    IF q.rate_limit IS NULL OR q.rate_per IS NULL THEN
        -- The claimed rows go straight out (in no order, as the unlimited claim's), then the
        -- window counts them.
        RETURN QUERY
        WITH picked AS (
            SELECT id FROM jobs
            WHERE state = 'available' AND queue = p_queue AND kind <> ALL (p_paused)
              AND scheduled_at <= t
            ORDER BY priority, scheduled_at, id
            LIMIT room
            FOR UPDATE SKIP LOCKED)
        UPDATE jobs SET state = 'executing', attempt = jobs.attempt + 1,
               attempted_at = t, attempted_by = p_node,
               lease_expires_at = t + make_interval(secs => p_lease),
               claim_token = p_token
        FROM picked WHERE jobs.id = picked.id
        RETURNING jobs.*;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF q.rate_limit IS NOT NULL AND n > 0 THEN
            INSERT INTO queue_rate_windows AS w (queue, key, window_start, used)
            VALUES (p_queue, '', win, n)
            ON CONFLICT (queue, key) DO UPDATE
               SET used = CASE WHEN w.window_start = excluded.window_start
                               THEN w.used + excluded.used ELSE excluded.used END,
                   window_start = excluded.window_start;
        END IF;
        RETURN;
    END IF;

    -- Partitioned. A changed `per` first keys a batch of the waiting jobs anew (see the top).
    IF q.rate_rekey_after IS NOT NULL THEN
        UPDATE queues SET rate_rekey_after =
                   kickoff_rekey_batch(p_queue, q.rate_per, q.rate_rekey_after, 1000)
        WHERE name = p_queue;
    END IF;
    -- This claim's turn of keys, and where the next one starts.
    SELECT * INTO turn FROM kickoff_rate_turn(p_queue, p_scan);
    IF turn.cut THEN
        INSERT INTO queue_rate_cursors AS c (queue, after_key)
        VALUES (p_queue, turn.keys[cardinality(turn.keys)])
        ON CONFLICT (queue) DO UPDATE SET after_key = excluded.after_key;
    ELSIF turn.rotating THEN
        DELETE FROM queue_rate_cursors WHERE queue = p_queue;
    END IF;

    WITH keyed AS (
        SELECT w.k, q.rate_limit - coalesce(rw.used, 0) AS left_k
        FROM unnest(turn.keys) AS w(k)
        LEFT JOIN queue_rate_windows rw
               ON rw.queue = p_queue AND rw.key = w.k AND rw.window_start = win),
    share AS (
        -- What one key may give this claim: the room shared among the keys with room (at least
        -- one each), so that a claim reads about `room` rows, not `room` for each of 500 keys.
        SELECT greatest(1, ceil(room::numeric / greatest(count(*), 1)))::integer AS n
        FROM keyed WHERE keyed.left_k > 0),
    candidates AS (
        -- Each key with room: its next jobs, as many as it may start (and its share).
        SELECT c.id, c.priority, c.scheduled_at, keyed.k
        FROM keyed CROSS JOIN share CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at FROM jobs j
            WHERE j.state = 'available' AND j.queue = p_queue AND j.rate_key = keyed.k
              AND j.kind <> ALL (p_paused)
            ORDER BY j.priority, j.scheduled_at, j.id
            -- (A rate lowered within a window leaves `left_k` below zero: never a negative LIMIT.)
            LIMIT greatest(least(keyed.left_k, room, share.n), 0)) c
        WHERE keyed.left_k > 0
        UNION ALL
        -- Rows without a key (see the top of this file), keyed as they stand.
        SELECT h.id, h.priority, h.scheduled_at,
               kickoff_partition_key(q.rate_per, h.kind, h.args, h.call_host)
        FROM (SELECT j.id, j.priority, j.scheduled_at, j.kind, j.args, j.call_host, j.rate_key
              FROM jobs j
              WHERE j.state = 'available' AND j.queue = p_queue AND j.kind <> ALL (p_paused)
              ORDER BY j.priority, j.scheduled_at, j.id
              LIMIT 100) h
        WHERE h.rate_key IS NULL),
    ranked AS (
        SELECT c.*, row_number() OVER (PARTITION BY c.k
                                       ORDER BY c.priority, c.scheduled_at, c.id) AS nth
        FROM candidates c),
    fitting AS (
        -- Keys take turns, within a priority, by what each has started in this window: the
        -- key that used least goes first, across claims too (a claim with room for one starts
        -- the key behind a long backlog of another as soon as that one has used more).
        SELECT r.id, r.k FROM ranked r
        LEFT JOIN queue_rate_windows rw
               ON rw.queue = p_queue AND rw.key = r.k AND rw.window_start = win
        WHERE r.nth <= q.rate_limit - coalesce(rw.used, 0)
        ORDER BY r.priority, coalesce(rw.used, 0) + r.nth, r.scheduled_at, r.id
        LIMIT room),
    picked AS (
        SELECT jobs.id, fitting.k FROM jobs JOIN fitting ON jobs.id = fitting.id
        WHERE jobs.state = 'available' AND jobs.scheduled_at <= t
        FOR UPDATE OF jobs SKIP LOCKED),
    claimed AS (
        UPDATE jobs SET state = 'executing', attempt = jobs.attempt + 1,
               attempted_at = t, attempted_by = p_node,
               lease_expires_at = t + make_interval(secs => p_lease),
               claim_token = p_token,
               -- A row without a key gets the one it was counted under.
               rate_key = picked.k
        FROM picked WHERE jobs.id = picked.id
        RETURNING jobs.id, picked.k),
    counted AS (
        INSERT INTO queue_rate_windows AS w (queue, key, window_start, used)
        SELECT p_queue, k, win, count(*) FROM claimed GROUP BY k
        ON CONFLICT (queue, key) DO UPDATE
           SET used = CASE WHEN w.window_start = excluded.window_start
                           THEN w.used + excluded.used ELSE excluded.used END,
               window_start = excluded.window_start)
    SELECT array_agg(id) INTO ids FROM claimed;

    IF ids IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobs WHERE id = ANY (ids) ORDER BY priority, scheduled_at, id;
    END IF;
END
$$;
