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
-- `engine/store/jobs/filters.rs`: a filter on these columns that names no state reads three
-- branches: these indexes, with their predicate word for word, then each running state).
--
-- Upgrading: the new indexes are built before the old ones go, so readers are never held up;
-- writers wait while they build (about 2 s per million jobs on two cores), and the old ones are
-- dropped only at the end, which holds everyone off for a moment. Upgrade every node: an older
-- one filtering on these columns without a state would read the whole table.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE INDEX jobs_kind_id_settled_idx ON jobs (kind, id)
    WHERE state NOT IN ('available', 'executing');
CREATE INDEX jobs_queue_id_settled_idx ON jobs (queue, id)
    WHERE state NOT IN ('available', 'executing');
CREATE INDEX jobs_args_settled_idx ON jobs USING gin (args jsonb_path_ops)
    WHERE state NOT IN ('available', 'executing');
CREATE INDEX jobs_scheduled_at_settled_idx ON jobs (scheduled_at)
    WHERE state NOT IN ('available', 'executing');
DROP INDEX jobs_kind_id_idx, jobs_queue_id_idx, jobs_args_idx, jobs_scheduled_at_idx;
ALTER INDEX jobs_kind_id_settled_idx RENAME TO jobs_kind_id_idx;
ALTER INDEX jobs_queue_id_settled_idx RENAME TO jobs_queue_id_idx;
ALTER INDEX jobs_args_settled_idx RENAME TO jobs_args_idx;
ALTER INDEX jobs_scheduled_at_settled_idx RENAME TO jobs_scheduled_at_idx;
