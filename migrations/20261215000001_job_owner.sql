-- A job that belongs to something else carries it in `meta.owner` (a question's lock job:
-- "question 34"); operators' cancels, reschedules and deletes refuse it while it lives, and bulk
-- actions skip it. The lock jobs of questions still open get their owner.
UPDATE jobs j SET meta = j.meta || jsonb_build_object('owner', 'question ' || q.id)
FROM questions q
WHERE j.id = q.lock_job_id AND j.finalized_at IS NULL AND NOT j.meta ? 'owner';
