-- Limits shared by every node, enforced by the database in the claim (issue 16):
--   a rate: at most `rate_limit` attempts started per `rate_period_ms`, in fixed windows aligned
--   to the period by the database clock (a 1 s window runs from one whole second to the next);
--   optionally partitioned (`rate_per`): each key taken from the job gets its own `rate_limit`;
--   a global concurrency: at most `global_concurrency` attempts of the queue executing across all
--   nodes (the per-node `concurrency` still caps each node).
-- `limits_by` says who set them: `config` (a node's KICKOFF_QUEUES, written at its start) or
-- `operator` (the API or the dashboard; a node's configuration does not overwrite it).
-- Migrations are immutable once landed: change the schema in a new file.

ALTER TABLE queues
    ADD COLUMN rate_limit integer CHECK (rate_limit IS NULL OR rate_limit BETWEEN 1 AND 1000000),
    ADD COLUMN rate_period_ms integer CHECK (rate_period_ms IS NULL OR rate_period_ms BETWEEN 1 AND 86400000),
    ADD COLUMN rate_per text CHECK (rate_per IS NULL OR rate_per IN ('kind', 'host')
                                    OR rate_per ~ '^args\.[A-Za-z0-9_-]{1,64}$'),
    ADD COLUMN global_concurrency integer CHECK (global_concurrency IS NULL OR global_concurrency BETWEEN 1 AND 100000),
    ADD COLUMN limits_by text NOT NULL DEFAULT 'config' CHECK (limits_by IN ('config', 'operator')),
    ADD CONSTRAINT queues_rate_whole CHECK ((rate_limit IS NULL) = (rate_period_ms IS NULL)),
    ADD CONSTRAINT queues_rate_per_needs_rate CHECK (rate_per IS NULL OR rate_limit IS NOT NULL);

-- The attempts started in each queue's current window, per partition key ('' when the limit is
-- not partitioned). A row of an older window counts as empty.
CREATE TABLE queue_rate_windows (
    queue        text        NOT NULL REFERENCES queues (name) ON DELETE CASCADE,
    key          text        NOT NULL,
    window_start timestamptz NOT NULL,
    used         integer     NOT NULL,
    PRIMARY KEY (queue, key)
);

-- The partition key of a job under `per`: its kind, the host of its `url` argument (lower case,
-- without user info or port), or a top-level argument (`args.<field>`, as text). Never NULL.
CREATE FUNCTION kickoff_partition_key(per text, kind text, args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(CASE
        WHEN per = 'kind' THEN kind
        WHEN per = 'host' THEN lower(substring(args ->> 'url'
                FROM '^[A-Za-z][A-Za-z0-9+.-]*://(?:[^@/?#]*@)?(\[[^]]*\]|[^:/?#]*)'))
        WHEN per LIKE 'args.%' THEN args ->> substr(per, 6)
    END, '')
$$;

-- The start of the window of `period_ms` that holds instant `at`.
CREATE FUNCTION kickoff_window_start(at timestamptz, period_ms integer) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_timestamp(floor(extract(epoch FROM at) * 1000 / period_ms) * period_ms / 1000.0)
$$;

-- Claims up to `want` available jobs of a limited queue for `node`, within its limits. Claims of
-- one limited queue take turns on its row's lock (held until the claim commits); claims of
-- unlimited queues never come here. A partitioned rate looks at the first `scan` available jobs
-- (in claim order) for keys with room left. Jobs of the `p_paused` kinds stay where they are.
CREATE FUNCTION kickoff_claim_limited(p_queue text, p_want integer, p_node text,
                                      p_lease double precision, p_token bigint, p_scan integer,
                                      p_paused text[])
RETURNS SETOF jobs LANGUAGE plpgsql AS $$
DECLARE
    q queues%ROWTYPE;
    room integer := p_want;
    t timestamptz;
    win timestamptz;
    used_now integer;
    ids bigint[];
BEGIN
    SELECT * INTO q FROM queues WHERE name = p_queue FOR NO KEY UPDATE;
    IF NOT FOUND OR q.paused THEN
        RETURN;
    END IF;
    -- After the lock: a claim that waited for it counts in the window it runs in, and its
    -- attempts start at that instant (so each lies in the window it was counted in).
    t := clock_timestamp();
    IF q.global_concurrency IS NOT NULL THEN
        room := least(room, q.global_concurrency
            - (SELECT count(*) FROM jobs WHERE state = 'executing' AND queue = p_queue)::integer);
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
        WITH picked AS (
            SELECT id FROM jobs
            WHERE state = 'available' AND queue = p_queue AND kind <> ALL (p_paused)
            ORDER BY priority, scheduled_at, id
            LIMIT room
            FOR UPDATE SKIP LOCKED),
        claimed AS (
            UPDATE jobs SET state = 'executing', attempt = jobs.attempt + 1,
                   attempted_at = t, attempted_by = p_node,
                   lease_expires_at = t + make_interval(secs => p_lease),
                   claim_token = p_token
            FROM picked WHERE jobs.id = picked.id
            RETURNING jobs.id)
        SELECT array_agg(id) INTO ids FROM claimed;
        IF q.rate_limit IS NOT NULL AND ids IS NOT NULL THEN
            INSERT INTO queue_rate_windows AS w (queue, key, window_start, used)
            VALUES (p_queue, '', win, cardinality(ids))
            ON CONFLICT (queue, key) DO UPDATE
               SET used = CASE WHEN w.window_start = excluded.window_start
                               THEN w.used + excluded.used ELSE excluded.used END,
                   window_start = excluded.window_start;
        END IF;
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

-- How long a limited queue's claim should wait before it tries again, in milliseconds, when
-- available jobs remain: until its rate window ends, or at most 50 ms with a global concurrency
-- (an attempt ending on another node frees room, and no notification says so). NULL when nothing
-- is available (but jobs of the `p_paused` kinds).
CREATE FUNCTION kickoff_limit_wait(p_queue text, p_paused text[]) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT (CASE
        WHEN NOT EXISTS (SELECT 1 FROM jobs WHERE state = 'available' AND queue = p_queue
                                              AND kind <> ALL (p_paused)) THEN NULL
        WHEN q.rate_limit IS NULL THEN 50
        ELSE least(CASE WHEN q.global_concurrency IS NOT NULL THEN 50 END,
                   extract(epoch FROM kickoff_window_start(clock_timestamp(), q.rate_period_ms)
                                      + make_interval(secs => q.rate_period_ms / 1000.0)
                                      - clock_timestamp()) * 1000)
    END)::double precision
    FROM queues q WHERE q.name = p_queue
$$;

-- Kinds paused on every node: no node claims their jobs (they stay where they are) until resumed.
CREATE TABLE kind_pauses (
    kind      text        PRIMARY KEY CHECK (char_length(kind) BETWEEN 1 AND 128),
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text
);
