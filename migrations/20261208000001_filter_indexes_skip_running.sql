-- The job list's filter indexes (kind, queue, args, due time) no longer index the two states the
-- engine moves every job through at full speed: `available` (due, waiting for a slot) and
-- `executing` (claimed). A state change is never a HOT update, so each claim wrote a new entry
-- into each of these four indexes, and each of those entries died at the completion right after:
-- a claim and a completion of 100 jobs cost 44 µs of the database's time per job with them, 37
-- µs with them partial (pgbench on a copy of the schema; see docs/BENCHMARKS.md). Inserting a due
-- job and staging a scheduled one skip them too.
--
-- Those two states are few at any moment (the slots of the running nodes, and a backlog), and a
-- list that asks for them reads them from `jobs_state_id_idx`, filtered (see
-- `engine/store/jobs/filters.rs`: a filter on these columns lists each state in a branch of its
-- own).
--
-- On a large table this rebuilds four indexes while it holds writers off (about 2 s per million
-- jobs on two cores).
-- Migrations are immutable once landed: change the schema in a new file.

DROP INDEX jobs_kind_id_idx;
CREATE INDEX jobs_kind_id_idx ON jobs (kind, id) WHERE state NOT IN ('available', 'executing');
DROP INDEX jobs_queue_id_idx;
CREATE INDEX jobs_queue_id_idx ON jobs (queue, id) WHERE state NOT IN ('available', 'executing');
DROP INDEX jobs_args_idx;
CREATE INDEX jobs_args_idx ON jobs USING gin (args jsonb_path_ops)
    WHERE state NOT IN ('available', 'executing');
DROP INDEX jobs_scheduled_at_idx;
CREATE INDEX jobs_scheduled_at_idx ON jobs (scheduled_at) WHERE state NOT IN ('available', 'executing');
