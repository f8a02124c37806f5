-- Fencing that a lost commit cannot repeat, and the last run of each periodic job.
-- Migrations are immutable once landed: change the schema in a new file.

-- Every claim draws a fresh random token; every write of that attempt (complete, fail, snooze,
-- renew, hand back) is guarded by it. The attempt number alone is not enough: claims commit with
-- synchronous_commit = off, so a database crash can lose a claim whose handler already runs, and
-- the next claim then issues the same attempt number again. The token is cleared whenever the job
-- leaves `executing`, so no stale token can ever match a later attempt.
ALTER TABLE jobs ADD COLUMN claim_token bigint;
-- Attempts that an older node runs while this migration runs get token 0, which no claim draws;
-- that node's own writes (guarded by the attempt number) still finish them. Its new claims are
-- refused by the constraint below (they set no token), so an older node left running claims
-- nothing more: upgrade every node, not a rolling mix.
UPDATE jobs SET claim_token = 0 WHERE state = 'executing';
ALTER TABLE jobs ADD CONSTRAINT executing_has_claim_token CHECK (
    state <> 'executing' OR claim_token IS NOT NULL);

-- The latest run inserted for each periodic job, by its name. A run is inserted only if it is
-- later than this and not already past by the database clock, in the same transaction that moves
-- this forward: a leader that stalled, or two leaders overlapping, never insert a run twice (the
-- jobs' unique index covers live jobs only, so a completed run would not stop it). The
-- fingerprint is that of the entry's interval and job: when the configuration changes, the runs
-- inserted ahead under the old one are cancelled and the schedule starts again.
CREATE TABLE periodic_runs (
    name        text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 100),
    last_at     timestamptz NOT NULL,
    fingerprint text NOT NULL
);
