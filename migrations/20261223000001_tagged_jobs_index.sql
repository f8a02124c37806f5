-- no-transaction
-- Jobs by tag, indexing only the jobs that carry a tag (issue 48).
--
-- `jobs_tags_idx` held an entry for every settled job, tagless ones included: GIN stores a
-- placeholder for an empty array, so every completion of a job without tags wrote one. Most
-- jobs carry none, and a tags filter (`tags @> $x`, with 1 to 20 tags) never matches a job
-- without tags. This index leaves them out; the filter adds `tags <> '{}'` word for word, so the
-- planner proves the predicate (`engine/store/jobs/filters.rs`). Without that index's entry a
-- claim-and-complete loop of 30,000 tagless jobs took 8 % less time (docs/BENCHMARKS.md, "Issue
-- 48, second slice").
--
-- Built concurrently, outside a transaction, like `jobs_rate_key_idx`: on a large table the
-- engine goes on writing while it builds. `20261223000002` drops the old index. Upgrade every
-- node: an older one's tags filter (without `tags <> '{}'`) cannot read this index and would read
-- the not-running jobs in id order instead.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_tagged_idx ON jobs USING gin (tags)
    WHERE state NOT IN ('available', 'executing') AND tags <> '{}';
