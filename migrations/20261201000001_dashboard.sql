-- What the dashboard reads at a million jobs without scanning them: job counts per queue and state
-- kept by the database itself, completed and failed attempts per minute, and the indexes of the
-- job list's filters and of the timers page.
-- Migrations are immutable once landed: change the schema in a new file.

-- Writers must not change jobs between the backfill below and the triggers that keep the counts
-- from then on: a job inserted in between would be counted twice or never. SHARE ROW EXCLUSIVE
-- (what CREATE TRIGGER takes anyway) waits for running writers and holds new ones until commit.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

-- Changes of the counts, appended by the triggers on jobs and folded into job_counts by the
-- leader's CountFolder (about every second). Appending instead of updating job_counts in place
-- means concurrent completers never queue behind one hot counter row. A transition writes its
-- positive and its negative delta as separate rows, so that positive rows count the moves *into* a
-- state (completions and failures per minute).
CREATE TABLE job_count_deltas (
    id    bigserial   PRIMARY KEY,
    queue text        NOT NULL,
    state job_state   NOT NULL,
    n     bigint      NOT NULL,
    at    timestamptz NOT NULL DEFAULT now()
) WITH (
    -- Every row is deleted within seconds of its insert: vacuum after a fixed number of dead rows
    -- rather than a fraction of a table that is always nearly empty, so readers' scans stay short.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000
);

-- Folded counts. Exact counts are job_counts plus the deltas not folded yet (readers sum both in
-- one statement, so a fold committing meanwhile is seen entirely or not at all). Rows that reach
-- zero are kept: a queue going back and forth between 0 and 1 does not insert and delete a row.
CREATE TABLE job_counts (
    queue text      NOT NULL,
    state job_state NOT NULL,
    n     bigint    NOT NULL,
    PRIMARY KEY (queue, state)
);

-- Attempts that completed or failed (into retryable or discarded), per minute and queue, for the
-- throughput chart. Kept for two hours (the folder deletes older minutes).
CREATE TABLE job_stats_minute (
    minute    timestamptz NOT NULL,
    queue     text        NOT NULL,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue)
);

-- One delta row per statement, queue and state (a claim of 200 jobs writes two rows, not 400).
-- UPDATE: only rows whose state or queue changed; lease renewals and reschedules write nothing.
CREATE FUNCTION kickoff_count_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO job_count_deltas (queue, state, n)
        SELECT queue, state, count(*) FROM new_rows GROUP BY queue, state;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO job_count_deltas (queue, state, n)
        SELECT queue, state, -count(*) FROM old_rows GROUP BY queue, state;
    ELSE
        WITH changed AS (
            SELECT o.queue AS old_queue, o.state AS old_state, n.queue AS new_queue, n.state AS new_state
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE o.state <> n.state OR o.queue <> n.queue)
        INSERT INTO job_count_deltas (queue, state, n)
        SELECT new_queue, new_state, count(*) FROM changed GROUP BY new_queue, new_state
        UNION ALL
        SELECT old_queue, old_state, -count(*) FROM changed GROUP BY old_queue, old_state;
    END IF;
    RETURN NULL;
END $$;

-- TRUNCATE skips row triggers and transition tables: start the counts over instead.
CREATE FUNCTION kickoff_count_reset() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_count_deltas;
    DELETE FROM job_counts;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_counts_after_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_count_deltas();
CREATE TRIGGER jobs_counts_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_count_deltas();
CREATE TRIGGER jobs_counts_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_count_deltas();
CREATE TRIGGER jobs_counts_after_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_count_reset();

INSERT INTO job_counts (queue, state, n)
SELECT queue, state, count(*) FROM jobs GROUP BY queue, state;

-- The job list's args filter (`args @> '{"user_id": 42}'`). jsonb_path_ops: smaller and faster than
-- the default operator class, and containment is the only operator the filter uses.
CREATE INDEX jobs_args_idx ON jobs USING gin (args jsonb_path_ops);
-- The timers page (jobs waiting to run, oldest scheduled_at first) and the list's scheduled_at
-- window over waiting jobs. Partial: inserts and staging add entries, while the updates of
-- executing and finished jobs (most of the writes) add none. jobs_due_idx stays: the stager must not
-- walk past a backlog of available jobs to find the due scheduled ones.
CREATE INDEX jobs_waiting_idx ON jobs (scheduled_at, id)
    WHERE state IN ('scheduled', 'available', 'retryable');
-- The list's scheduled_at window over any state ("what was due between 18:00 and 18:05 yesterday"):
-- without it a window a day back walks the primary key past most of the table (0.3 s at a million
-- jobs). The waiting index cannot serve it, and it cannot serve the timers: finished jobs sit
-- between the waiting ones in scheduled_at order.
CREATE INDEX jobs_scheduled_at_idx ON jobs (scheduled_at);
