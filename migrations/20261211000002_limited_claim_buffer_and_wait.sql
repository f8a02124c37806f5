-- Two changes to the claims of queues with limits across every node (issue 16).
--
-- 1. Fetch-ahead under a global concurrency: the limited claim learns how many of the
-- jobs it is asked for would start at once (`p_free`, the node's free slots) and lets the rest,
-- jobs buffered ahead of the slots, take at most half of the global room those leave. Without it
-- a queue with a global concurrency claimed only into free slots, a round trip per freed slot:
-- about 72 % of the throughput lost at full speed even with the limit far above the pace.
-- Buffered jobs are `executing` (they count in the limit) and are handed back by their node when
-- no slot takes them soon (see `queue_state`).
--
-- Its unpartitioned branch also returns the rows its UPDATE claimed, instead of reading them
-- again by id (a second index probe per job).
--
-- 2. The wait after a claim that got fewer jobs than free slots says whether a limit holds the
-- jobs back, by the limits themselves: it used to assume so whenever jobs were available, so a
-- job inserted between a claim (that did not see it yet) and the wait waited for the next window
-- while the window had room. Now: NULL when nothing is available, 0 when a limit leaves room
-- (no hold: the insert's notification brings the next claim), else the milliseconds to the end of
-- the window (a rate used up: for every key with jobs, when partitioned) or 50 under a global
-- concurrency reached (an attempt ending on another node frees room without a notification).
--
-- Migrations are immutable once landed: change the schema in a new file.

DROP FUNCTION kickoff_claim_limited(text, integer, text, double precision, bigint, integer, text[]);

CREATE FUNCTION kickoff_claim_limited(p_queue text, p_want integer, p_free integer, p_node text,
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
    ELSE
        WITH candidates AS (
            SELECT id, priority, scheduled_at, k,
                   row_number() OVER (PARTITION BY k ORDER BY priority, scheduled_at, id) AS nth
            FROM (SELECT id, priority, scheduled_at, kickoff_partition_key(q.rate_per, kind, args) AS k
                  FROM jobs
                  WHERE state = 'available' AND queue = p_queue AND kind <> ALL (p_paused)
                  ORDER BY priority, scheduled_at, id
                  LIMIT p_scan) c),
        fitting AS (
            SELECT c.id, c.k FROM candidates c
            LEFT JOIN queue_rate_windows w
                   ON w.queue = p_queue AND w.key = c.k AND w.window_start = win
            WHERE c.nth <= q.rate_limit - coalesce(w.used, 0)
            ORDER BY c.priority, c.scheduled_at, c.id
            LIMIT room),
        picked AS (
            SELECT jobs.id, fitting.k FROM jobs JOIN fitting ON jobs.id = fitting.id
            WHERE jobs.state = 'available'
            FOR UPDATE OF jobs SKIP LOCKED),
        claimed AS (
            UPDATE jobs SET state = 'executing', attempt = jobs.attempt + 1,
                   attempted_at = t, attempted_by = p_node,
                   lease_expires_at = t + make_interval(secs => p_lease),
                   claim_token = p_token
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
    END IF;

    IF ids IS NOT NULL THEN
        RETURN QUERY SELECT * FROM jobs WHERE id = ANY (ids) ORDER BY priority, scheduled_at, id;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION kickoff_limit_wait(p_queue text, p_paused text[]) RETURNS double precision
LANGUAGE plpgsql STABLE AS $$
DECLARE
    q queues%ROWTYPE;
    t timestamptz := clock_timestamp();
    win timestamptz;
    rate_full boolean := false;
    global_full boolean := false;
BEGIN
    SELECT * INTO q FROM queues WHERE name = p_queue;
    IF NOT FOUND OR NOT EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND queue = p_queue
                                                     AND kind <> ALL (p_paused)) THEN
        RETURN NULL;
    END IF;
    IF q.global_concurrency IS NOT NULL THEN
        global_full := (SELECT count(*) FROM jobs WHERE state = 'executing' AND queue = p_queue)
                       >= q.global_concurrency;
    END IF;
    IF q.rate_limit IS NOT NULL THEN
        win := kickoff_window_start(t, q.rate_period_ms);
        IF q.rate_per IS NULL THEN
            rate_full := coalesce((SELECT w.used FROM queue_rate_windows w
                                   WHERE w.queue = p_queue AND w.key = '' AND w.window_start = win), 0)
                         >= q.rate_limit;
        ELSE
            -- The claim's own look: the first jobs in claim order, each key's next ones.
            rate_full := NOT EXISTS (
                SELECT 1
                FROM (SELECT k, row_number() OVER (PARTITION BY k ORDER BY priority, scheduled_at, id) AS nth
                      FROM (SELECT id, priority, scheduled_at,
                                   kickoff_partition_key(q.rate_per, kind, args) AS k
                            FROM jobs
                            WHERE state = 'available' AND queue = p_queue AND kind <> ALL (p_paused)
                            ORDER BY priority, scheduled_at, id
                            LIMIT 5000) c) r  -- limits::PARTITION_SCAN, as the claim
                LEFT JOIN queue_rate_windows w
                       ON w.queue = p_queue AND w.key = r.k AND w.window_start = win
                WHERE r.nth <= q.rate_limit - coalesce(w.used, 0));
        END IF;
    END IF;
    IF rate_full THEN
        -- Never 0 (room): a window that ended meanwhile is claimed in at once all the same.
        RETURN greatest(extract(epoch FROM win + make_interval(secs => q.rate_period_ms / 1000.0)
                                            - t) * 1000, 0.001);
    ELSIF global_full THEN
        RETURN 50;
    END IF;
    RETURN 0;
END
$$;
