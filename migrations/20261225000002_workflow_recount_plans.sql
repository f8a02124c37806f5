-- A run's recount as PL/pgSQL (issue 49): as a SQL function called from PL/pgSQL its statement
-- was parsed and planned anew at every call (0.19 ms each, two calls a step's settle); PL/pgSQL
-- keeps the plan for the session (`kickoff bench workflows`, docs/BENCHMARKS.md).
CREATE OR REPLACE FUNCTION kickoff_run_recount(run bigint, was text, now_in text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE workflow_runs
       SET blocked = blocked - (was = 'blocked')::int + (now_in = 'blocked')::int,
           ready = ready - (was = 'ready')::int + (now_in = 'ready')::int,
           completed = completed - (was = 'completed')::int + (now_in = 'completed')::int,
           failed = failed - (was = 'failed')::int + (now_in = 'failed')::int,
           skipped = skipped - (was = 'skipped')::int + (now_in = 'skipped')::int,
           cancelled = cancelled - (was = 'cancelled')::int + (now_in = 'cancelled')::int
     WHERE id = run;
END $$;
