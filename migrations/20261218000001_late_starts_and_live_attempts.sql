-- Late starts and running attempts.
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
    node         text        NOT NULL,
    output       jsonb,
    logs         jsonb,
    logs_dropped integer     NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attempt_live_output_size CHECK (output IS NULL OR pg_column_size(output) <= 131072),
    CONSTRAINT attempt_live_logs_array CHECK (logs IS NULL OR jsonb_typeof(logs) = 'array')
);
