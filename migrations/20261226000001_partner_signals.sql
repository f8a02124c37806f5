-- Partners' signed signals and the alert on a missed deadline (issue 49).
--
-- A webhook endpoint is a partner: calls to it are signed with its secret, and with
-- `signal_workflows` it may send signals, signed with the same secret (Standard Webhooks), to the
-- live runs of the workflows it names (`POST /api/v1/inbound/{endpoint}/signals`). Empty: it
-- sends none.
--
-- `workflow_deadline`: a step failed because its deadline passed without its signal (failed, no
-- job ever made, a deadline computed when it started waiting). Its read walks those steps alone,
-- by when they failed (partial: nothing is written for any other step). A rule may be scoped to
-- one workflow's runs (`workflow`).
-- Migrations are immutable once landed: change the schema in a new file.
ALTER TABLE webhook_endpoints ADD COLUMN signal_workflows text[] NOT NULL DEFAULT '{}'
    CHECK (cardinality(signal_workflows) <= 20);

CREATE INDEX workflow_steps_deadline_missed_idx ON workflow_steps (finished_at)
    WHERE state = 'failed' AND job_id IS NULL AND deadline_at IS NOT NULL;

ALTER TABLE alert_rules ADD COLUMN workflow text
    CHECK (workflow IS NULL OR char_length(workflow) BETWEEN 1 AND 128);
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_condition_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_condition_check CHECK (condition IN (
    'late_lock', 'question_open', 'job_discarded', 'queue_backlog', 'failure_rate', 'node_lost',
    'overdue', 'late_start', 'workflow_deadline'));
