-- What an application does from SQL in its own transaction besides inserting a job (issue 50,
-- docs/embedding.md): cancel a job, create a question with its lock job, signal a workflow run.
-- Each is written once, here, and the engine's own code calls it: the API's, the dashboard's and
-- the command line's cancels (`Client::cancel_one_with`, every cancellation of many jobs), a
-- question's creation (`QuestionService::create_with`) and a run's signal
-- (`Client::signal_workflow_with`). Refusals are raised as `kickoff_check_job`'s are (SQLSTATE
-- class `KO`, the field in the error's COLUMN, the message `field: why`), with one more code:
--   KO005  not found (a job, a run)

-- Cancels the listed jobs that have not finished, their rows locked in id order (the lock order
-- of every write of many jobs, so two never deadlock); records the attempts that were running
-- (what the node last showed of them goes into the record; an attempt claimed ahead of its due
-- time had not started and has none); and tells the nodes running them to stop those attempts,
-- at commit: `engine::control`'s message `{"cancel": [ids], "claims": [[id, token]]}`, 100 claims
-- a message (a notification carries at most 8000 bytes). Each job cancelled, with its state
-- before and the claim of its running attempt.
--
-- The record's INSERT is `record_attempts_from!("ran")` of `engine/store/jobs/attempts.rs` (a
-- test holds the two equal).
CREATE FUNCTION kickoff_cancel_jobs(ids bigint[])
RETURNS TABLE (id bigint, before job_state, claim_token bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    cancelled_ids bigint[];
    befores job_state[];
    tokens bigint[];
BEGIN
    WITH target AS (
             SELECT j.id, j.state AS before, j.claim_token, j.scheduled_at AS due_at FROM jobs j
             WHERE j.id = ANY (ids) AND j.finalized_at IS NULL
             ORDER BY j.id
             FOR UPDATE),
         cancelled AS (
             UPDATE jobs SET state = 'cancelled', finalized_at = now(),
                    lease_expires_at = NULL, claim_token = NULL
             FROM target WHERE jobs.id = target.id
             RETURNING jobs.id, target.before, target.claim_token, jobs.attempt, jobs.queue,
                       jobs.kind, jobs.meta, jobs.attempted_by, jobs.attempted_at,
                       target.due_at),
         ran AS (
             SELECT c.id, c.attempt, c.queue, c.kind, c.meta, c.attempted_by, c.attempted_at,
                    c.due_at, NULL::timestamptz AS started_at, NULL::float8 AS duration_ms,
                    l.output::text AS output, l.logs::text AS logs,
                    coalesce(l.logs_dropped, 0) AS dropped,
                    'cancelled' AS outcome, 'cancelled while it ran' AS error
             FROM cancelled c
             LEFT JOIN job_attempt_live l
                    ON l.job_id = c.id AND l.claim_token = c.claim_token
             WHERE c.before = 'executing' AND c.attempted_at <= now()),
         recorded AS (
INSERT INTO job_attempts (job_id, attempt, queue, kind, schedule_id, node, due_at,
                                       started_at, finished_at, duration_ms, outcome, error,
                                       output, logs, logs_dropped)
             SELECT id, attempt, queue, kind,
                    CASE WHEN (meta->>'schedule_id') ~ '^[0-9]+$'
                              AND char_length(meta->>'schedule_id') <= 18
                         THEN (meta->>'schedule_id')::bigint END,
                    coalesce(attempted_by, ''), due_at, s.at,
                    s.at + make_interval(secs => s.ms / 1000), s.ms,
                    outcome, error, output::jsonb, logs::jsonb, coalesce(dropped, 0)
             FROM (SELECT *, coalesce(started_at, attempted_at, now()) AS at FROM ran) r,
             LATERAL (SELECT r.at AS at,
                             coalesce(r.duration_ms, greatest(0, 1000 * extract(epoch FROM
                                 clock_timestamp() - r.at)))::float8 AS ms) s)
    SELECT coalesce(array_agg(c.id ORDER BY c.id), '{}'),
           coalesce(array_agg(c.before ORDER BY c.id), '{}'),
           coalesce(array_agg(c.claim_token ORDER BY c.id), '{}')
      INTO cancelled_ids, befores, tokens
      FROM cancelled c;
    PERFORM pg_notify('kickoff_control',
                      json_build_object('cancel', json_agg(t.id ORDER BY t.id),
                                        'claims', json_agg(json_build_array(t.id, t.token)
                                                           ORDER BY t.id))::text)
       FROM (SELECT u.id, u.token, (row_number() OVER (ORDER BY u.id) - 1) / 100 AS chunk
               FROM unnest(cancelled_ids, tokens) AS u(id, token)
              WHERE u.token IS NOT NULL) t
      GROUP BY t.chunk;
    RETURN QUERY SELECT * FROM unnest(cancelled_ids, befores, tokens);
END $$;

-- Cancels job `id`, which has not finished; an executing attempt is stopped on whichever node
-- runs it, at commit. The job as it is now. Refused: a job that belongs to something else while
-- it lives (a question's lock job, `meta.owner`: its owner moves and ends it) and a finished
-- one (KO003), an unknown one (KO005).
CREATE FUNCTION kickoff_cancel_job(id bigint) RETURNS jobs
LANGUAGE plpgsql AS $$
DECLARE
    job jobs;
BEGIN
    SELECT * INTO job FROM jobs j WHERE j.id = $1 FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM kickoff_refuse('KO005', 'id', format('job %s not found', $1));
    END IF;
    IF job.finalized_at IS NULL AND job.meta ? 'owner' THEN
        PERFORM kickoff_refuse('KO003', 'id', format(
            'job %s belongs to %s, which moves, runs and ends it: cannot cancel it by itself '
            '(change %s instead)', $1, job.meta ->> 'owner', job.meta ->> 'owner'));
    END IF;
    IF job.finalized_at IS NOT NULL AND job.step_id IS NOT NULL THEN
        PERFORM kickoff_refuse('KO003', 'id', format(
            'cannot cancel job %s: it is the job of a workflow step that settled with it '
            '(a step runs again through its run)', $1));
    END IF;
    IF job.finalized_at IS NOT NULL THEN
        PERFORM kickoff_refuse('KO003', 'id', format(
            'cannot cancel job %s while it is %s: it is already finished', $1, job.state));
    END IF;
    PERFORM kickoff_cancel_jobs(ARRAY[$1]);
    SELECT * INTO job FROM jobs j WHERE j.id = $1;
    RETURN job;
END $$;

-- Unicode's White_Space characters (Rust's `char::is_whitespace`) as a bracket expression.
CREATE FUNCTION kickoff_white_space() RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT '[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
$$;

-- `value` without its outer white space, as Rust's `str::trim` takes it off (Unicode's
-- White_Space, whatever the database's locale).
CREATE FUNCTION kickoff_trim(value text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT regexp_replace(value, '^' || kickoff_white_space() || '+|' || kickoff_white_space()
                                 || '+$', '', 'g')
$$;

-- Every rule of a question's fields, those given (NULL: not changed): true, or a refusal raised.
-- `game` and `prompt` are counted without their outer white space (they are stored so); a choice is
-- stored as given, so it may have none. A game time in the future, at most 730 days of 24 hours
-- ahead (`questions::service::MAX_GAME_AHEAD_DAYS`), by the database's clock.
CREATE FUNCTION kickoff_check_question(game text, prompt text, choices text[],
                                       game_time timestamptz)
RETURNS boolean LANGUAGE sql AS $$
SELECT CASE
    WHEN char_length(kickoff_trim(game)) NOT BETWEEN 1 AND 200
    THEN kickoff_refuse('KO001', 'game', 'must be 1 to 200 characters')
    WHEN char_length(kickoff_trim(prompt)) NOT BETWEEN 1 AND 500
    THEN kickoff_refuse('KO001', 'prompt', 'must be 1 to 500 characters')
    WHEN coalesce(array_ndims(choices), 1) <> 1 OR cardinality(choices) NOT BETWEEN 2 AND 20
    THEN kickoff_refuse('KO001', 'choices', 'give 2 to 20 choices')
    WHEN EXISTS (SELECT FROM unnest(choices) c
                 WHERE c IS NULL OR char_length(c) NOT BETWEEN 1 AND 100
                    OR c ~ ('^' || kickoff_white_space() || '|' || kickoff_white_space() || '$'))
    THEN kickoff_refuse('KO001', 'choices',
                        'each choice is 1 to 100 characters without outer spaces')
    WHEN EXISTS (SELECT FROM unnest(choices) c GROUP BY c HAVING count(*) > 1)
    -- The first choice that repeats one before it.
    THEN kickoff_refuse('KO001', 'choices', format('`%s` is listed twice',
         (SELECT c FROM (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS n
                         FROM unnest(choices) WITH ORDINALITY AS t(c, i)) r
          WHERE n = 2 ORDER BY i LIMIT 1)))
    WHEN game_time <= statement_timestamp()
    THEN kickoff_refuse('KO004', 'game_time', 'must be in the future')
    WHEN game_time > statement_timestamp() + interval '17520 hours'
    THEN kickoff_refuse('KO004', 'game_time', 'more than 730 days ahead')
    ELSE true
END
$$;

-- Whether game run `run` locked its game: its `lock` step is past waiting and ready.
CREATE FUNCTION kickoff_game_kicked_off(run bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT FROM workflow_steps s WHERE s.run_id = $1 AND s.name = 'lock'
                   AND s.state NOT IN ('blocked', 'ready'))
$$;

-- The live run of `game`'s workflow (`questions::game_workflow`: the run `game` keyed
-- `game:<game>`) follows the earliest game time of the game's open questions: its `kickoff_at`
-- moves there, and the timers and deadlines anchored to it with it, while it is ahead and the
-- run has not locked the game (its `lock` step still blocked or ready). One change of a game's
-- times at a time (the game's lock, taken after the questions' rows, as a move of the run
-- takes it), each reading what the one before committed. Whether the run moved.
CREATE FUNCTION kickoff_game_follow(game text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    r workflow_runs;
    earliest timestamptz;
    kickoff timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(
        hashtextextended('kickoff:game:' || kickoff_game_follow.game, 0));
    SELECT * INTO r FROM workflow_runs w
     WHERE w.key = 'game:' || kickoff_game_follow.game AND w.finished_at IS NULL AND w.name = 'game';
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT min(q.game_time) INTO earliest FROM questions q
     WHERE q.status = 'open' AND q.game = kickoff_game_follow.game;
    kickoff := (r.times ->> 'kickoff_at')::timestamptz;
    IF earliest IS NULL OR kickoff IS NULL OR kickoff = earliest OR kickoff <= now()
       OR kickoff_game_kicked_off(r.id) THEN
        RETURN false;
    END IF;
    -- The jobs it may move first, then the run: the order of a completion and of a cancel.
    PERFORM FROM jobs j WHERE j.id IN (SELECT l.job FROM kickoff_run_live_jobs(r.id) l)
      ORDER BY j.id FOR UPDATE OF j;
    -- A run that ended since it was read (a cancel) has nothing left to follow.
    RETURN kickoff_run_move_times(r.id, jsonb_build_object('kickoff_at', earliest)) = 'moved';
END $$;

-- Creates a question of `game` that takes predictions until `game_time`, with the job that
-- locks it then (`lock_question`, owned by the question: no operator cancels or moves it by
-- itself), in the caller's transaction; the live run of the game's workflow follows it
-- (`kickoff_game_follow`). The question. The lock job is checked as every job is
-- (`kickoff_check_job`), its kind among `kinds` (the kinds the caller's node runs; NULL: a kind
-- Kickoff's nodes said they run); it continues the W3C trace `traceparent` when given (a traced
-- API call's: `meta.traceparent`).
CREATE FUNCTION kickoff_add_question(game text, prompt text, choices text[],
                                     game_time timestamptz, kinds text[] DEFAULT NULL,
                                     traceparent text DEFAULT NULL)
RETURNS questions LANGUAGE plpgsql AS $$
DECLARE
    q questions;
    args jsonb;
    meta jsonb;
    job_id bigint;
BEGIN
    IF $1 IS NULL OR $2 IS NULL OR $3 IS NULL OR $4 IS NULL THEN
        PERFORM kickoff_refuse('KO001', CASE WHEN $1 IS NULL THEN 'game'
                                             WHEN $2 IS NULL THEN 'prompt'
                                             WHEN $3 IS NULL THEN 'choices'
                                             ELSE 'game_time' END, 'is required');
    END IF;
    PERFORM kickoff_check_question($1, $2, $3, $4);
    INSERT INTO questions (game, prompt, choices, game_time)
    VALUES (kickoff_trim($1), kickoff_trim($2), $3, $4) RETURNING * INTO q;
    -- `questions::jobs::lock_job`: its queue, args, owner and unique key.
    args := jsonb_build_object('question_id', q.id);
    meta := jsonb_strip_nulls(jsonb_build_object('owner', 'question ' || q.id,
                                                 'traceparent', $6));
    PERFORM kickoff_check_job('lock_question', args, 'questions', 0, 20, q.game_time, 0,
                              'lock_question:' || q.id, '{}', meta, NULL, $5, NULL, true);
    INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at, unique_key,
                      meta, rate_key)
    VALUES ('questions', 'lock_question', args, 'scheduled', 0, 20, q.game_time,
            'lock_question:' || q.id, meta,
            kickoff_rate_key('questions', 'lock_question', args, NULL))
    RETURNING id INTO job_id;
    UPDATE questions SET lock_job_id = job_id WHERE id = q.id RETURNING * INTO q;
    PERFORM kickoff_game_follow(q.game);
    RETURN q;
END $$;

-- Sends signal `signal_name` (1 to 128 characters) with `signal_payload` (JSON, at most 256 KiB
-- as PostgreSQL writes it, numbers at most 1e300) to running workflow run `run`, from
-- `signal_source` (who sent it, 1 to 200 characters: `sql:<the database user>` unless told):
-- the steps waiting for it start. The first signal of a name stands: a second answers the first
-- (`stored` false). Refused: an unknown run (KO005), a run that is not running (KO003).
CREATE FUNCTION kickoff_signal(run bigint, signal_name text, signal_payload jsonb DEFAULT 'null',
                               signal_source text DEFAULT 'sql:' || current_user)
RETURNS TABLE (run_id bigint, name text, payload jsonb, source text,
               received_at timestamptz, stored boolean)
LANGUAGE plpgsql AS $$
DECLARE
    answer text;
BEGIN
    IF signal_name IS NULL OR char_length(signal_name) NOT BETWEEN 1 AND 128 THEN
        PERFORM kickoff_refuse('KO001', 'name', '1 to 128 characters, without NUL');
    END IF;
    IF signal_payload IS NOT NULL AND octet_length(signal_payload::text) > 300 THEN
        PERFORM kickoff_json_refused('payload', signal_payload, 262144);
    END IF;
    IF signal_source IS NULL OR char_length(signal_source) NOT BETWEEN 1 AND 200 THEN
        PERFORM kickoff_refuse('KO001', 'source', 'must be 1 to 200 characters');
    END IF;
    answer := kickoff_run_signal(run, signal_name, signal_payload, signal_source);
    IF answer = 'not_found' THEN
        PERFORM kickoff_refuse('KO005', 'run', format('workflow run %s not found', run));
    ELSIF answer NOT IN ('stored', 'existing') THEN
        PERFORM kickoff_refuse('KO003', 'run', format('cannot signal workflow run %s: it is %s',
                                                      run, substr(answer, 5)));
    END IF;
    RETURN QUERY SELECT s.run_id, s.name, s.payload, s.source, s.received_at,
                        answer = 'stored'
                   FROM workflow_signals s
                  WHERE s.run_id = kickoff_signal.run AND s.name = signal_name;
END $$;
