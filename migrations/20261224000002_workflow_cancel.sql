-- A workflow run's cancel (issue 49): nothing of the run starts once the cancel commits.
--
-- Under the run's lock (every settle of its steps takes it first, so none runs meanwhile), its
-- blocked steps are cancelled, and the jobs of its ready steps are returned for the caller to
-- cancel through the jobs' own cancel (which stops their running attempts on their nodes and
-- settles each step with its job; the steps after them are cancelled already, so nothing
-- starts). `kickoff_run_cancelled` then ends the run `cancelled`. NULL: the run is not running.
CREATE FUNCTION kickoff_run_cancel_steps(run bigint) RETURNS bigint[] LANGUAGE plpgsql AS $$
DECLARE
    n int;
    ready_jobs bigint[];
BEGIN
    PERFORM 1 FROM workflow_runs WHERE id = run AND state = 'running' FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    WITH c AS (
        UPDATE workflow_steps SET state = 'cancelled', finished_at = clock_timestamp()
        WHERE id IN (SELECT id FROM workflow_steps WHERE run_id = run AND state = 'blocked'
                     ORDER BY id FOR UPDATE)
        RETURNING 1)
    SELECT count(*) INTO n FROM c;
    UPDATE workflow_runs SET blocked = blocked - n, cancelled = cancelled + n WHERE id = run;
    SELECT coalesce(array_agg(job_id ORDER BY job_id), '{}') INTO ready_jobs
    FROM workflow_steps WHERE run_id = run AND state = 'ready';
    RETURN ready_jobs;
END $$;

-- Ends a cancelled run once none of its steps is blocked or ready (its last step's settle may
-- have ended it `failed` a moment before, in the same transaction).
CREATE FUNCTION kickoff_run_cancelled(run bigint) RETURNS void LANGUAGE sql AS $$
    UPDATE workflow_runs
       SET state = 'cancelled', finished_at = coalesce(finished_at, clock_timestamp())
     WHERE id = run AND blocked + ready = 0
$$;
