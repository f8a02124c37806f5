-- Alerts (issue 17): rules that watch for a game-time promise at risk, and their incidents. The
-- leader evaluates the rules every few seconds in one transaction under an advisory lock (see
-- `alerts::evaluator`): an incident is inserted when its condition starts to hold and resolved when
-- it stops, and the notification (a webhook job) is inserted in the same transaction, so each
-- incident notifies once when it fires and once when it resolves, whichever node leads.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE alert_rules (
    id           bigserial   PRIMARY KEY,
    name         text        NOT NULL UNIQUE CHECK (char_length(name) BETWEEN 1 AND 100),
    condition    text        NOT NULL CHECK (condition IN ('late_lock', 'question_open',
                     'job_discarded', 'queue_backlog', 'failure_rate', 'node_lost', 'overdue')),
    -- Scope: which queue, job kind or game the rule watches (NULL: every one).
    queue        text        CHECK (char_length(queue) <= 100),
    kind         text        CHECK (char_length(kind) <= 100),
    game         text        CHECK (char_length(game) <= 200),
    -- Thresholds; which apply depends on the condition (see `alerts::rules`).
    threshold_ms bigint      CHECK (threshold_ms BETWEEN 0 AND 86400000),
    threshold_n  bigint      CHECK (threshold_n BETWEEN 1 AND 1000000000),
    for_secs     integer     NOT NULL DEFAULT 0 CHECK (for_secs BETWEEN 0 AND 86400),
    percent      double precision CHECK (percent > 0 AND percent <= 100),
    -- Where each firing and resolution is sent (a webhook call, signed when under an endpoint),
    -- and in which shape.
    notify_url   text        CHECK (char_length(notify_url) <= 2048),
    payload      text        NOT NULL DEFAULT 'standard' CHECK (payload IN ('standard', 'slack')),
    enabled      boolean     NOT NULL DEFAULT true,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text
);

CREATE TABLE alert_incidents (
    id              bigserial   PRIMARY KEY,
    rule_id         bigint      NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    -- What it is about: `question 7`, `job 42`, `queue default`, `node web-1`, `all queues`.
    subject         text        NOT NULL,
    summary         text        NOT NULL,
    fired_at        timestamptz NOT NULL DEFAULT now(),
    resolved_at     timestamptz,
    acknowledged_at timestamptz,
    acknowledged_by text
);

-- One open incident per rule and subject.
CREATE UNIQUE INDEX alert_incidents_open_idx ON alert_incidents (rule_id, subject)
    WHERE resolved_at IS NULL;
CREATE INDEX alert_incidents_rule_subject_idx ON alert_incidents (rule_id, subject, id);

-- A condition that must hold for `for_secs` before it fires: since when it has held.
CREATE TABLE alert_pending (
    rule_id bigint      NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    subject text        NOT NULL,
    since   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, subject)
);
