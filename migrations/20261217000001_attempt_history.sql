-- Every attempt's record (when it was due, when it started, how late, how long, its outcome, what
-- its handler recorded and logged), per-minute rollups of the attempts that outlive the jobs, and
-- the count of predictions a question refused after its lock.
-- Migrations are immutable once landed: change the schema in a new file.

-- One row per attempt that ended (completed, failed, discarded, cancelled, snoozed, or lost when
-- its node's lease expired), written by the statement that writes the attempt's outcome, so a
-- record exists exactly when the outcome does. Queue, kind and schedule are copied from the job:
-- the rollups group by them without reading `jobs`. Deleted with their job (a trigger on `jobs`
-- below); no foreign key: its check would cost every completion a lookup.
CREATE TABLE job_attempts (
    job_id       bigint           NOT NULL,
    id           bigint           GENERATED ALWAYS AS IDENTITY,
    attempt      integer          NOT NULL,
    queue        text             NOT NULL,
    kind         text             NOT NULL,
    schedule_id  bigint,
    node         text             NOT NULL,
    -- The job's scheduled_at when it was claimed: the instant the attempt was due.
    due_at       timestamptz      NOT NULL,
    -- When the handler started, by the database's clock (the node's estimate of it).
    started_at   timestamptz      NOT NULL,
    finished_at  timestamptz      NOT NULL DEFAULT now(),
    late_ms      double precision GENERATED ALWAYS AS (
                     extract(epoch FROM started_at - due_at) * 1000) STORED,
    duration_ms  double precision NOT NULL,
    outcome      text             NOT NULL,
    error        text,
    -- What the handler recorded (`JobContext::record`), at most 64 KB of JSON.
    output       jsonb,
    -- The attempt's log lines: [{"at", "level", "target", "message"}], bounded per attempt.
    logs         jsonb,
    -- Lines left out past the bound.
    logs_dropped integer          NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, id),
    CONSTRAINT attempt_outcome CHECK (
        outcome IN ('completed', 'failed', 'discarded', 'cancelled', 'snoozed', 'lost')),
    CONSTRAINT attempt_duration CHECK (duration_ms >= 0),
    CONSTRAINT attempt_logs_dropped CHECK (logs_dropped >= 0),
    CONSTRAINT attempt_output_size CHECK (output IS NULL OR pg_column_size(output) <= 131072),
    CONSTRAINT attempt_logs_array CHECK (logs IS NULL OR jsonb_typeof(logs) = 'array')
);
-- The jobs list's "late by more than N ms" filter, from a second: an entry for every attempt cost
-- the completions 3 % of their throughput (an index write each, measured A/B), where one for the
-- late attempts alone costs nothing while the system keeps time. A filter under a second reads
-- the records instead (about 0.1 s a million).
CREATE INDEX job_attempts_late_idx ON job_attempts (late_ms, job_id) WHERE late_ms >= 1000;

-- The lateness histogram's bucket bounds in ms: bucket 0 holds attempts under 1 ms late (or
-- early), bucket k those from the k-th bound up to the next, bucket 15 those a minute late or more.
-- The engine's `LATE_BOUNDS_MS` is the same list (a test compares them). Each bucket is a column
-- (late_0 to late_15), not an array element: the charts sum tens of thousands of rows, and a sum
-- of columns is a native aggregate where an element-wise sum of arrays was a function call a row
-- (measured at 30 days of 70 series: 450 ms a chart page).
CREATE FUNCTION kickoff_late_bounds() RETURNS double precision[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000]::float8[]
$$;

-- schedule_id 0: every attempt of the queue and kind (a schedule's runs included); another: that
-- schedule's runs alone. The minute is the one the attempts ended in.
-- The folded rollups: per minute, kept for a day, and per hour, kept for the retention (30 days by
-- default); the fold adds each delta to both, so a chart in hours reads hours alone (a 30-day
-- chart reading the last day's minutes read 30,000 rows where it needs 500). They outlive the
-- jobs and their attempts.
CREATE TABLE job_history_minute (
    minute          timestamptz      NOT NULL,
    queue           text             NOT NULL,
    kind            text             NOT NULL,
    schedule_id     bigint           NOT NULL,
    completed       bigint           NOT NULL,
    failed          bigint           NOT NULL,
    discarded       bigint           NOT NULL,
    cancelled       bigint           NOT NULL,
    snoozed         bigint           NOT NULL,
    lost            bigint           NOT NULL,
    -- The lateness histogram: attempts per bucket of kickoff_late_bounds().
    late_0          bigint           NOT NULL,
    late_1          bigint           NOT NULL,
    late_2          bigint           NOT NULL,
    late_3          bigint           NOT NULL,
    late_4          bigint           NOT NULL,
    late_5          bigint           NOT NULL,
    late_6          bigint           NOT NULL,
    late_7          bigint           NOT NULL,
    late_8          bigint           NOT NULL,
    late_9          bigint           NOT NULL,
    late_10         bigint           NOT NULL,
    late_11         bigint           NOT NULL,
    late_12         bigint           NOT NULL,
    late_13         bigint           NOT NULL,
    late_14         bigint           NOT NULL,
    late_15         bigint           NOT NULL,
    duration_sum_ms double precision NOT NULL,
    duration_max_ms double precision NOT NULL,
    PRIMARY KEY (minute, queue, kind, schedule_id)
);
CREATE TABLE job_history_hour (LIKE job_history_minute INCLUDING ALL);
-- A schedule's history reads its own rows, not the whole range's.
CREATE INDEX job_history_minute_schedule_idx ON job_history_minute (schedule_id, minute)
    WHERE schedule_id <> 0;
CREATE INDEX job_history_hour_schedule_idx ON job_history_hour (schedule_id, minute)
    WHERE schedule_id <> 0;

-- Rollup deltas, appended by the trigger below (one row per statement, minute, queue, kind and
-- schedule) and folded into job_history_minute and job_history_hour by the leader's count folder,
-- like job_count_deltas: writers only append, so completers on every node never wait on one row.
-- The columns are the rollups' own (LIKE without INCLUDING: no key, no index).
CREATE TABLE job_history_deltas (LIKE job_history_minute) WITH (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000
);

-- One delta row per statement and group: a batch of a thousand completions writes one row.
CREATE FUNCTION kickoff_history_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_history_deltas
    SELECT date_trunc('minute', finished_at), queue, kind, s.schedule_id,
           count(*) FILTER (WHERE outcome = 'completed'),
           count(*) FILTER (WHERE outcome = 'failed'),
           count(*) FILTER (WHERE outcome = 'discarded'),
           count(*) FILTER (WHERE outcome = 'cancelled'),
           count(*) FILTER (WHERE outcome = 'snoozed'),
           count(*) FILTER (WHERE outcome = 'lost'),
           count(*) FILTER (WHERE b = 0), count(*) FILTER (WHERE b = 1),
           count(*) FILTER (WHERE b = 2), count(*) FILTER (WHERE b = 3),
           count(*) FILTER (WHERE b = 4), count(*) FILTER (WHERE b = 5),
           count(*) FILTER (WHERE b = 6), count(*) FILTER (WHERE b = 7),
           count(*) FILTER (WHERE b = 8), count(*) FILTER (WHERE b = 9),
           count(*) FILTER (WHERE b = 10), count(*) FILTER (WHERE b = 11),
           count(*) FILTER (WHERE b = 12), count(*) FILTER (WHERE b = 13),
           count(*) FILTER (WHERE b = 14), count(*) FILTER (WHERE b = 15),
           sum(duration_ms), max(duration_ms)
    FROM (SELECT *, width_bucket(late_ms, kickoff_late_bounds()) AS b FROM new_rows) r
         -- Every attempt counts in its queue and kind's row (schedule 0), and a schedule's run
         -- in its schedule's row too: the charts by queue or kind read the first alone.
         CROSS JOIN LATERAL (VALUES (0::bigint), (r.schedule_id)) AS s(schedule_id)
    WHERE s.schedule_id IS NOT NULL
    GROUP BY 1, 2, 3, 4;
    RETURN NULL;
END $$;

CREATE TRIGGER job_attempts_history AFTER INSERT ON job_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_history_deltas();

-- A job's attempts go with it, whichever statement deletes it.
CREATE FUNCTION kickoff_attempts_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_attempts a USING old_rows o WHERE a.job_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_attempts_after_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION kickoff_attempts_delete();

CREATE FUNCTION kickoff_attempts_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE job_attempts;
    RETURN NULL;
END $$;
CREATE TRIGGER jobs_attempts_after_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_attempts_truncate();

-- Predictions refused because the question had locked (or its game time had passed), counted on
-- the question: part of its lock's proof. One short update a refusal, on a row nothing else
-- writes once it is locked.
ALTER TABLE questions ADD COLUMN refused_predictions bigint NOT NULL DEFAULT 0;
