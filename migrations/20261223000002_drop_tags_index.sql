-- no-transaction
-- The index every settled job had an entry in, tagless ones included; `jobs_tagged_idx`
-- (20261223000001) serves the tags filter now. Dropped concurrently: readers and writers go on.
DROP INDEX CONCURRENTLY IF EXISTS jobs_tags_idx;
