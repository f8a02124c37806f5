-- When a run's steps last changed (issue 49): "waiting longer than" on the Workflows list and
-- `GET /api/v1/workflows?waiting_ms=` find the running runs none of whose steps moved for that
-- long (a partner that has not answered, a step stuck behind a paused queue). Kept by the
-- recount every change of a step's state already makes to its run's row, in the same UPDATE; no
-- index (the column changes at every step's change, and an index on it would cost every one of
-- them): the list walks the running runs newest first (`workflow_runs_state_id_idx`).
-- Migrations are immutable once landed: change the schema in a new file.
ALTER TABLE workflow_runs ADD COLUMN progressed_at timestamptz;
UPDATE workflow_runs SET progressed_at = coalesce(finished_at, created_at);
ALTER TABLE workflow_runs ALTER COLUMN progressed_at SET DEFAULT clock_timestamp(),
                          ALTER COLUMN progressed_at SET NOT NULL;

CREATE OR REPLACE FUNCTION kickoff_run_recount(run bigint, was text, now_in text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_runs
       SET blocked = blocked - (was = 'blocked')::int + (now_in = 'blocked')::int,
           ready = ready - (was = 'ready')::int + (now_in = 'ready')::int,
           completed = completed - (was = 'completed')::int + (now_in = 'completed')::int,
           failed = failed - (was = 'failed')::int + (now_in = 'failed')::int,
           skipped = skipped - (was = 'skipped')::int + (now_in = 'skipped')::int,
           cancelled = cancelled - (was = 'cancelled')::int + (now_in = 'cancelled')::int,
           progressed_at = clock_timestamp()
     WHERE id = run;
END $$;
