-- An attempt interrupted at a graceful stop and handed back (issue 46): it has a record of its
-- own now (outcome `interrupted`, with what it logged and recorded), where it had none. It does not
-- count as an attempt (its number goes back and it runs again), so the rollups leave it out: their
-- outcomes and their lateness histogram count the attempts that ended.
-- Migrations are immutable once landed: change the schema in a new file.

-- NOT VALID: the rows already stored hold one of the earlier outcomes, all still allowed, and a
-- check of them would hold every completion back for a scan of the whole table.
ALTER TABLE job_attempts DROP CONSTRAINT attempt_outcome;
ALTER TABLE job_attempts ADD CONSTRAINT attempt_outcome CHECK (
    outcome IN ('completed', 'failed', 'discarded', 'cancelled', 'snoozed', 'lost', 'interrupted'))
    NOT VALID;

CREATE OR REPLACE FUNCTION kickoff_history_deltas() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_history_deltas
    SELECT date_trunc('minute', finished_at), queue, kind, s,
           CASE WHEN outcome = 'completed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'failed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'discarded' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'cancelled' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'snoozed' THEN count(*) ELSE 0 END,
           CASE WHEN outcome = 'lost' THEN count(*) ELSE 0 END,
           CASE WHEN b = 0 THEN count(*) ELSE 0 END,
           CASE WHEN b = 1 THEN count(*) ELSE 0 END,
           CASE WHEN b = 2 THEN count(*) ELSE 0 END,
           CASE WHEN b = 3 THEN count(*) ELSE 0 END,
           CASE WHEN b = 4 THEN count(*) ELSE 0 END,
           CASE WHEN b = 5 THEN count(*) ELSE 0 END,
           CASE WHEN b = 6 THEN count(*) ELSE 0 END,
           CASE WHEN b = 7 THEN count(*) ELSE 0 END,
           CASE WHEN b = 8 THEN count(*) ELSE 0 END,
           CASE WHEN b = 9 THEN count(*) ELSE 0 END,
           CASE WHEN b = 10 THEN count(*) ELSE 0 END,
           CASE WHEN b = 11 THEN count(*) ELSE 0 END,
           CASE WHEN b = 12 THEN count(*) ELSE 0 END,
           CASE WHEN b = 13 THEN count(*) ELSE 0 END,
           CASE WHEN b = 14 THEN count(*) ELSE 0 END,
           CASE WHEN b = 15 THEN count(*) ELSE 0 END,
           sum(duration_ms), max(duration_ms)
    FROM (SELECT finished_at, queue, kind, 0::bigint AS s, outcome, duration_ms, late_ms
          FROM new_rows WHERE outcome <> 'interrupted'
          UNION ALL
          SELECT finished_at, queue, kind, schedule_id, outcome, duration_ms, late_ms
          FROM new_rows WHERE schedule_id IS NOT NULL AND outcome <> 'interrupted') r,
         LATERAL (SELECT width_bucket(r.late_ms, kickoff_late_bounds()) AS b) w
    GROUP BY date_trunc('minute', finished_at), queue, kind, s, outcome, b;
    RETURN NULL;
END $$;
