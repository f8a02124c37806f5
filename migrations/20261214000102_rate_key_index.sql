-- no-transaction
-- The partitioned claim's walk over keys and its read of each key's next jobs (see migration
-- 20261214000101). Partial: only the available jobs of queues with a partitioned rate have
-- entries. Built concurrently, outside a transaction: on a large jobs table the engine goes on
-- inserting, claiming and completing while it builds.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_rate_key_idx
    ON jobs (queue, rate_key, priority, scheduled_at, id)
    WHERE state = 'available' AND rate_key IS NOT NULL;
