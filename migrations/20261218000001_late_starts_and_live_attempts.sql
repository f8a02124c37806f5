-- Late starts, running attempts, and cheaper rollup deltas.
--
-- An alert rule on late starts (`late_start`, see `alerts::rules`): attempts of a queue or kind
-- that started more than its threshold (a second or more) after their due time within the last
-- 5 minutes, those its late-start policy skipped or discarded among them. Its read walks the late
-- attempts of the window alone: an index of the attempts a second late or more, by when they
-- ended (partial, like job_attempts_late_idx: nothing is written for an attempt on time).
-- Migrations are immutable once landed: change the schema in a new file.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_condition_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_condition_check CHECK (condition IN (
    'late_lock', 'question_open', 'job_discarded', 'queue_backlog', 'failure_rate', 'node_lost',
    'overdue', 'late_start'));

CREATE INDEX job_attempts_late_ended_idx ON job_attempts (finished_at) WHERE late_ms >= 1000;

-- What a running attempt has logged and recorded so far, for its job's page while it runs:
-- written by its node's heartbeat (every second, only for attempts that ran a beat or longer and
-- logged or recorded something new since), deleted by that node once the attempt ended (its
-- record in job_attempts then holds the lines), and by the leader for attempts that ended
-- elsewhere (a node that died). Short attempts never write here.
CREATE TABLE job_attempt_live (
    job_id       bigint      PRIMARY KEY,
    attempt      integer     NOT NULL,
    -- The claim it runs under: an attempt number comes again after a hand-back or a snooze, a
    -- claim never does, so lines left by an earlier run are never shown as this one's.
    claim_token  bigint      NOT NULL,
    node         text        NOT NULL,
    output       jsonb,
    logs         jsonb,
    logs_dropped integer     NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attempt_live_output_size CHECK (output IS NULL OR pg_column_size(output) <= 131072),
    CONSTRAINT attempt_live_logs_array CHECK (logs IS NULL OR jsonb_typeof(logs) = 'array')
);

-- The rollups' deltas, cheaper per attempt (same counts, see migration 20261217000001): each
-- record adds to its group's row by grouping on its outcome and lateness bucket too, so a row
-- sums what it counts once per group, not 22 filtered counts per record (measured: the
-- trigger's share of a completion statement halved); and a schedule's runs are read apart
-- (a UNION ALL of the few with a schedule), not every record twice through a lateral join.
-- A batch of mixed lateness writes a row per bucket it touches; the fold and the readers sum
-- them all the same.
CREATE OR REPLACE FUNCTION kickoff_history_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_history_deltas
    SELECT date_trunc('minute', finished_at), queue, kind, s,
           CASE WHEN outcome = 'completed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'failed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'discarded' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'cancelled' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'snoozed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'lost' THEN count(*) ELSE 0 END,
           CASE WHEN b = 0 THEN count(*) ELSE 0 END,
           CASE WHEN b = 1 THEN count(*) ELSE 0 END,
           CASE WHEN b = 2 THEN count(*) ELSE 0 END,
           CASE WHEN b = 3 THEN count(*) ELSE 0 END,
           CASE WHEN b = 4 THEN count(*) ELSE 0 END,
           CASE WHEN b = 5 THEN count(*) ELSE 0 END,
           CASE WHEN b = 6 THEN count(*) ELSE 0 END,
           CASE WHEN b = 7 THEN count(*) ELSE 0 END,
           CASE WHEN b = 8 THEN count(*) ELSE 0 END,
           CASE WHEN b = 9 THEN count(*) ELSE 0 END,
           CASE WHEN b = 10 THEN count(*) ELSE 0 END,
           CASE WHEN b = 11 THEN count(*) ELSE 0 END,
           CASE WHEN b = 12 THEN count(*) ELSE 0 END,
           CASE WHEN b = 13 THEN count(*) ELSE 0 END,
           CASE WHEN b = 14 THEN count(*) ELSE 0 END,
           CASE WHEN b = 15 THEN count(*) ELSE 0 END,
           sum(duration_ms), max(duration_ms)
    FROM (SELECT finished_at, queue, kind, 0::bigint AS s, outcome, duration_ms, late_ms
          FROM new_rows
          UNION ALL
          SELECT finished_at, queue, kind, schedule_id, outcome, duration_ms, late_ms
          FROM new_rows WHERE schedule_id IS NOT NULL) r,
         LATERAL (SELECT width_bucket(r.late_ms, kickoff_late_bounds()) AS b) w
    GROUP BY date_trunc('minute', finished_at), queue, kind, s, outcome, b;
    RETURN NULL;
END $$;
