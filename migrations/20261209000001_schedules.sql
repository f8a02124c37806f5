-- Schedules: recurring jobs by a cron expression or an interval, in an IANA time zone.
-- The runs of a schedule are ordinary jobs (meta.schedule_id, meta.slot_ms; unique key
-- `schedule:<id>:<slot ms>`), inserted ahead by the leader, so they fire with the engine's precision.
-- Migrations are immutable once landed: change the schema in a new file.
CREATE TABLE schedules (
    id            bigserial PRIMARY KEY,
    name          text        NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.:-]{1,100}$'),
    -- Exactly one of the two rules.
    cron          text        CHECK (char_length(cron) BETWEEN 1 AND 200),
    every_ms      bigint      CHECK (every_ms BETWEEN 1000 AND 34560000000),
    time_zone     text        NOT NULL DEFAULT 'UTC' CHECK (char_length(time_zone) BETWEEN 1 AND 64),
    -- The job template.
    kind          text        NOT NULL CHECK (char_length(kind) BETWEEN 1 AND 128),
    args          jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(args) = 'object'),
    queue         text        NOT NULL DEFAULT 'default' CHECK (queue ~ '^[a-z0-9_-]{1,64}$'),
    priority      smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN 0 AND 9),
    max_attempts  integer     NOT NULL DEFAULT 20 CHECK (max_attempts BETWEEN 1 AND 1000),
    tags          text[]      NOT NULL DEFAULT '{}',
    meta          jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(meta) = 'object'),
    paused        boolean     NOT NULL DEFAULT false,
    starts_at     timestamptz,
    ends_at       timestamptz,
    -- While the previous run is not final: run anyway, skip this one, or cancel the previous one.
    overlap       text        NOT NULL DEFAULT 'allow'
                  CHECK (overlap IN ('allow', 'skip', 'cancel_previous')),
    -- Slots that passed while no node ran (downtime): none, the latest once, or each (up to
    -- missed_limit, the latest ones).
    missed        text        NOT NULL DEFAULT 'run_once'
                  CHECK (missed IN ('skip', 'run_once', 'run_all')),
    missed_limit  integer     NOT NULL DEFAULT 10 CHECK (missed_limit BETWEEN 1 AND 1000),
    -- Declared in a service's code (upserted by name at start) or through the API/dashboard/CLI.
    source        text        NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'code')),
    -- Bumped by every change of the rule, zone or template: runs inserted ahead under an older
    -- version are cancelled and the slots start again from the change.
    version       integer     NOT NULL DEFAULT 1,
    -- The latest slot given a run or passed over (skipped, paused, missed): the next run is the
    -- first slot after it. Written in the transaction that inserts the run.
    last_slot     timestamptz,
    runs_enqueued bigint      NOT NULL DEFAULT 0,
    -- The latest run that started (its first attempt), and how late it started after its due
    -- time by its node's reading of the database clock (a run claimed ahead records its due time
    -- as attempted_at, so the job row cannot say).
    last_run_id      bigint,
    last_run_late_ms double precision,
    runs_skipped  bigint      NOT NULL DEFAULT 0,
    created_by    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT one_rule CHECK ((cron IS NULL) <> (every_ms IS NULL)),
    CONSTRAINT ends_after_start CHECK (starts_at IS NULL OR ends_at IS NULL OR ends_at > starts_at)
);

-- A schedule's runs, newest first (history, the overlap check). Only jobs of schedules have an entry.
CREATE INDEX jobs_schedule_idx ON jobs ((meta ->> 'schedule_id'), id) WHERE meta ? 'schedule_id';
-- Its live runs (the runs ahead, the one running): small, read at every start of a run whose
-- schedule has an overlap policy and by every change of a schedule.
CREATE INDEX jobs_schedule_live_idx ON jobs ((meta ->> 'schedule_id'), id)
    WHERE meta ? 'schedule_id' AND finalized_at IS NULL;
