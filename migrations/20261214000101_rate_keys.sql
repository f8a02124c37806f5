-- Partitioned rates (issue 30, points 4 and 5).
--
-- 1. The host a job calls is read once, at insert, by the job's worker with the parse its call
-- uses (`Worker::call_host`: for `webhook`, the `url` crate's, which reqwest connects with) and
-- kept in `jobs.call_host`. The regex of `kickoff_partition_key` read another host than the call
-- for `http://127.0.0.1:8080\@k1.test/`, `http://u@k1.test@127.0.0.1:8080/`, `%2E` in a host or
-- `0x7f.1`: a rate `per: host` could be passed by spelling one host several ways. The regex
-- stays only for rows without `call_host` (inserted before this migration, or by SQL outside the
-- engine, or of a kind that names no host).
--
-- 2. A job's key under its queue's partition (`per`) is kept in `jobs.rate_key` (NULL when the
-- queue has no partitioned rate), and `jobs_rate_key_idx` lists the available jobs by queue and
-- key. The partitioned claim used to look at the first 5,000 available jobs in claim order for
-- keys with room: a key behind 5,000 jobs of another waited until that backlog drained below
-- 5,000 (about 1,000 s at 1/s), and every claim and wait read 5,000 rows under the queue row's
-- lock. Now it walks the keys that have available jobs (a loose index scan: one index probe per
-- key, however long a key's backlog), at most `p_scan` keys per claim, taking turns from where
-- the last claim stopped when there are more (`queue_rate_cursors`), and reads of each key with
-- room only as many jobs as it may start. The keys take turns in a claim too: each key's first
-- job before any key's second (within a priority).
--
-- The key is written at insert (from the queue's row as the insert reads it) and when a job is
-- run again (retry, rerun). When a queue's `per` changes, its waiting jobs are keyed anew in
-- batches by its claims (`queues.rate_rekey_after`: the id the re-keying has reached; NULL when
-- done): at most 1,000 rows a claim, under the queue row's lock the claim holds anyway, never in
-- the transaction that changes the setting (a backlog of 500,000 would hold it for seconds) and
-- never an executing row (its lease is renewed meanwhile). Until its turn a waiting job counts
-- under the key of the old `per`. A row without a key in a partitioned queue (written by SQL
-- outside the engine, or inserted while `per` changed) is still claimed: each claim also looks at
-- the first 100 available jobs in claim order and keys those that have none as they stand.
--
-- The index `jobs_rate_key_idx` is built by the next migration, concurrently (writes go on while
-- it builds on a large table).
--
-- Migrations are immutable once landed: change the schema in a new file.

ALTER TABLE jobs
    ADD COLUMN call_host text,
    ADD COLUMN rate_key text;

-- A job's key under `per`, with the host its worker read at insert when it has one.
CREATE FUNCTION kickoff_partition_key(per text, kind text, args jsonb, call_host text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN per = 'host' AND call_host IS NOT NULL THEN call_host
                ELSE kickoff_partition_key(per, kind, args) END
$$;

-- A job's key under its queue's partition now; NULL when the queue has no partitioned rate.
CREATE FUNCTION kickoff_rate_key(p_queue text, kind text, args jsonb, call_host text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT kickoff_partition_key(q.rate_per, kind, args, call_host)
    FROM queues q WHERE q.name = p_queue AND q.rate_per IS NOT NULL
$$;

-- The waiting jobs of partitioned queues are keyed by their queue's claims, in batches (below).
ALTER TABLE queues ADD COLUMN rate_rekey_after bigint;
UPDATE queues SET rate_rekey_after = 0 WHERE rate_per IS NOT NULL;

-- Where the next partitioned claim of a queue starts its walk over keys, when the last one
-- stopped at its bound before the last key (no row: at the first key).
CREATE TABLE queue_rate_cursors (
    queue     text PRIMARY KEY REFERENCES queues (name) ON DELETE CASCADE,
    after_key text NOT NULL
);

-- A queue whose partition changed has its waiting jobs keyed anew, from the first, by its claims
-- (see the top of this file); its walk over keys starts again.
CREATE FUNCTION kickoff_queue_rekey() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.rate_per IS DISTINCT FROM NEW.rate_per THEN
        NEW.rate_rekey_after := CASE WHEN NEW.rate_per IS NOT NULL THEN 0 END;
        DELETE FROM queue_rate_cursors WHERE queue = NEW.name;
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER queues_rekey_before_insert BEFORE INSERT ON queues
    FOR EACH ROW EXECUTE FUNCTION kickoff_queue_rekey();
CREATE TRIGGER queues_rekey_before_update BEFORE UPDATE OF rate_per ON queues
    FOR EACH ROW EXECUTE FUNCTION kickoff_queue_rekey();

-- Keys anew up to `p_max` waiting jobs of `p_queue` (not final, not executing) after id
-- `p_after`, under `p_per`, skipping rows another transaction holds; returns the last id looked
-- at, NULL when none was left (the re-keying is done). Called by the claim, under the queue row's
-- lock.
CREATE FUNCTION kickoff_rekey_batch(p_queue text, p_per text, p_after bigint, p_max integer)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    last_id bigint;
BEGIN
    WITH batch AS (
        SELECT id FROM jobs
        WHERE id > p_after AND queue = p_queue AND finalized_at IS NULL AND state <> 'executing'
        ORDER BY id LIMIT p_max
        FOR NO KEY UPDATE SKIP LOCKED),
    keyed AS (
        UPDATE jobs j SET rate_key = kickoff_partition_key(p_per, j.kind, j.args, j.call_host)
        FROM batch
        WHERE j.id = batch.id
          AND j.rate_key IS DISTINCT FROM kickoff_partition_key(p_per, j.kind, j.args, j.call_host))
    SELECT max(id) INTO last_id FROM batch;
    RETURN last_id;
END $$;

-- The keys of a queue's available jobs in key order, after `p_after` (from the first when NULL)
-- and up to `p_upto` (to the last when NULL), at most `p_max`: a loose index scan of
-- jobs_rate_key_idx, one probe per key whatever each key's backlog.
CREATE FUNCTION kickoff_rate_keys(p_queue text, p_after text, p_upto text, p_max integer)
RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    head_key text;
BEGIN
    IF p_max <= 0 THEN
        RETURN '{}';
    END IF;
    -- Two statements, not `p_after IS NULL OR rate_key > p_after`: that one is no index bound.
    IF p_after IS NULL THEN
        SELECT rate_key INTO head_key FROM jobs
        WHERE state = 'available' AND queue = p_queue AND rate_key IS NOT NULL
        ORDER BY rate_key LIMIT 1;
    ELSE
        SELECT rate_key INTO head_key FROM jobs
        WHERE state = 'available' AND queue = p_queue AND rate_key > p_after
        ORDER BY rate_key LIMIT 1;
    END IF;
    IF head_key IS NULL OR head_key > p_upto THEN
        RETURN '{}';
    END IF;
    RETURN ARRAY(
        WITH RECURSIVE walk(k, n) AS (
            SELECT head_key, 1
            UNION ALL
            SELECT (SELECT j.rate_key FROM jobs j
                    WHERE j.state = 'available' AND j.queue = p_queue AND j.rate_key > w.k
                    ORDER BY j.rate_key LIMIT 1), w.n + 1
            FROM walk w
            WHERE w.k IS NOT NULL AND w.n < p_max AND (p_upto IS NULL OR w.k < p_upto))
        SELECT w.k FROM walk w
        WHERE w.k IS NOT NULL AND (p_upto IS NULL OR w.k <= p_upto)
        ORDER BY w.n);
END $$;

-- The keys a partitioned claim of `p_queue` looks at now: from the queue's cursor on, wrapping
-- to the first key, at most `p_max`; and whether there were more (the walk stopped at its bound).
CREATE FUNCTION kickoff_rate_turn(p_queue text, p_max integer, OUT keys text[], OUT cut boolean,
                                  OUT rotating boolean)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    cursor_key text;
BEGIN
    SELECT c.after_key INTO cursor_key FROM queue_rate_cursors c WHERE c.queue = p_queue;
    rotating := cursor_key IS NOT NULL;
    -- One key more than it takes: a walk cut at its bound only when more keys are left.
    keys := kickoff_rate_keys(p_queue, cursor_key, NULL, p_max + 1);
    IF cursor_key IS NOT NULL AND cardinality(keys) <= p_max THEN
        keys := keys || kickoff_rate_keys(p_queue, NULL, cursor_key, p_max + 1 - cardinality(keys));
    END IF;
    cut := cardinality(keys) > p_max;
    keys := keys[1:p_max];
END $$;

DROP FUNCTION kickoff_claim_limited(text, integer, integer, text, double precision, bigint, integer,
                                    text[]);

-- Claims up to `p_want` available jobs of a limited queue for `p_node`, within its limits (see
-- migrations 20261210000001 and 20261211000002 for the rest). A partitioned rate walks at most
-- `p_scan` keys with available jobs (see the top of this file).
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
        WHERE jobs.state = 'available'
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

DROP FUNCTION kickoff_limit_wait(text, text[]);

-- How long a limited queue's claim should wait before it tries again (see migration
-- 20261211000002): NULL when nothing is available, 0 when a limit leaves room, else the
-- milliseconds to the end of the window (a rate used up: for every key with jobs, when
-- partitioned) or 50 under a global concurrency reached. A partitioned rate looks at the keys the
-- next claim walks (`p_scan` of them, from the queue's cursor): when the walk stopped at its bound
-- with every key it saw full, the next claim walks on in 50 ms; when keys take turns and one has
-- room, at once (1 µs).
CREATE FUNCTION kickoff_limit_wait(p_queue text, p_paused text[], p_scan integer)
RETURNS double precision LANGUAGE plpgsql STABLE AS $$
DECLARE
    q queues%ROWTYPE;
    t timestamptz := clock_timestamp();
    win timestamptz;
    rate_full boolean := false;
    global_full boolean := false;
    turn record;
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
            -- The next claim's look: its turn of keys, and the rows without a key at the head.
            SELECT * INTO turn FROM kickoff_rate_turn(p_queue, p_scan);
            rate_full := NOT EXISTS (
                    SELECT 1 FROM unnest(turn.keys) AS w(k)
                    LEFT JOIN queue_rate_windows rw
                           ON rw.queue = p_queue AND rw.key = w.k AND rw.window_start = win
                    WHERE coalesce(rw.used, 0) < q.rate_limit
                      AND EXISTS (SELECT 1 FROM jobs j
                                  WHERE j.state = 'available' AND j.queue = p_queue
                                    AND j.rate_key = w.k AND j.kind <> ALL (p_paused)))
                AND NOT EXISTS (
                    SELECT 1
                    FROM (SELECT j.kind, j.args, j.call_host, j.rate_key FROM jobs j
                          WHERE j.state = 'available' AND j.queue = p_queue
                            AND j.kind <> ALL (p_paused)
                          ORDER BY j.priority, j.scheduled_at, j.id
                          LIMIT 100) h  -- as the claim
                    LEFT JOIN queue_rate_windows rw
                           ON rw.queue = p_queue
                          AND rw.key = kickoff_partition_key(q.rate_per, h.kind, h.args, h.call_host)
                          AND rw.window_start = win
                    WHERE h.rate_key IS NULL AND coalesce(rw.used, 0) < q.rate_limit);
            IF rate_full AND turn.cut THEN
                -- Every key of this turn is full and more are left: the next claim walks on, but
                -- not more than once a second (thousands of full keys must not mean a walk of 500
                -- keys every 50 ms on every node), and at the window's end at the latest.
                RETURN least(1000, greatest(extract(epoch FROM win
                    + make_interval(secs => q.rate_period_ms / 1000.0) - t) * 1000, 0.001));
            ELSIF NOT rate_full AND turn.rotating AND NOT global_full THEN
                RETURN 0.001;
            END IF;
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
