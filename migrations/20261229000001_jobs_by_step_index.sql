-- no-transaction
-- A workflow step's jobs, every one of them (issue 49: a run's timeline shows the attempts of a
-- retried step's earlier jobs too, and a step's current job is only the last of them).
--
-- Partial: a plain job (no `step_id`) has no entry, so neither its insert nor its updates write
-- to it. Built concurrently, outside a transaction, like `jobs_tagged_idx`: on a large table
-- the engine goes on writing while it builds.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_step_idx ON jobs (step_id) WHERE step_id IS NOT NULL;
