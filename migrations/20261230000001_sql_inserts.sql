-- A job inserted from SQL, in the application's own transaction (issue 50), with the rules every
-- insert applies written once, here: the engine's own inserts (the API, the dashboard, the
-- command line, a library caller, a schedule's runs, Kickoff's own jobs) call
-- `kickoff_check_job` in their insert statements, and an edit of a waiting job or a template's
-- check calls it alone. What stays in Rust is what SQL cannot do: a kind's worker's own check of
-- its args (`Worker::validate`: a webhook's URL against the allowlist) and a NUL character,
-- which jsonb and text cannot even hold (PostgreSQL refuses it before any function runs).
--
-- A refusal raises an error with a SQLSTATE of class `KO` and the field in the error's COLUMN:
--   KO001  a field refused                  KO002  a kind no Kickoff server runs
--   KO003  a conflict (a unique key that is another's)
--   KO004  a time outside the window (more than 3650 days ahead, 24 hours in the past)
-- The message reads `field: why`. docs/embedding.md lists them.

-- The kinds Kickoff's servers run, as their nodes said when they started (a node writes its
-- kinds, and whether only Kickoff's own code inserts them, at each start). A SQL insert of a kind
-- no node ever ran is refused, as the API refuses a kind its server does not know.
CREATE TABLE kickoff_kinds (
    kind         text        PRIMARY KEY,
    kickoffs_own boolean     NOT NULL DEFAULT false,
    seen_at      timestamptz NOT NULL DEFAULT now(),
    seen_by      text
);

-- Raises a refusal: `code` one of the KO codes above, `field` the input it names.
CREATE FUNCTION kickoff_refuse(code text, field text, message text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, COLUMN = field, MESSAGE = field || ': ' || message;
END $$;

-- The rules of JSON a job carries (its args, its meta) past 300 bytes, as PostgreSQL writes it:
-- at most `max_bytes`, and no number beyond 1e300 (such a number has at least 301 digits there,
-- so a run of 255, the longest repetition a regular expression counts, is looked for before the
-- path walks the document). False, or a refusal raised. Written once, so that the JSON is
-- written out once; smaller JSON holds neither rule and is not looked at again.
CREATE FUNCTION kickoff_json_refused(field text, value jsonb, max_bytes integer) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    written text := value::text;
BEGIN
    IF octet_length(written) > max_bytes THEN
        RETURN kickoff_refuse('KO001', field, format('larger than %s bytes', max_bytes));
    END IF;
    IF written ~ '[0-9]{255}' AND jsonb_path_exists(value,
            'strict $.** ? (@.type() == "number" && (@ > 1e300 || @ < -1e300))') THEN
        RETURN kickoff_refuse('KO001', field, 'numbers are at most 1e300 in magnitude');
    END IF;
    RETURN false;
END $$;

-- Whether only Kickoff's own code inserts jobs of `kind`: NULL when no node ran it.
CREATE FUNCTION kickoff_kind_own(kind text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT k.kickoffs_own FROM kickoff_kinds k WHERE k.kind = $1
$$;

-- The first of `keys` that `object` holds.
CREATE FUNCTION kickoff_first_key(object jsonb, keys text[]) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT k FROM unnest(keys) WITH ORDINALITY AS t(k, i) WHERE object ? k ORDER BY i LIMIT 1
$$;

-- Whether every tag is 1 to 100 characters.
CREATE FUNCTION kickoff_tags_fit(tags text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT NOT EXISTS (SELECT FROM unnest(tags) t WHERE t IS NULL OR char_length(t) NOT BETWEEN 1 AND 100)
$$;

-- Every rule of a new job's fields: true, or a refusal raised. `in_secs` is a delay after the
-- statement's start (`scheduled_at` NULL then); `kinds` the kinds the caller's server runs and
-- `own_kinds` those only Kickoff inserts (NULL: `kickoff_kinds` says); `as_kickoff` true for
-- Kickoff's own jobs, whose meta carries the keys only Kickoff writes.
--
-- One expression, so that PostgreSQL inlines it in the statement that calls it (a bulk insert
-- checks each row for the price of its comparisons, not a function call's); each branch is
-- reached only when the ones before it held (a branch that can only refuse says `THEN true`).
-- JSON is measured as PostgreSQL writes it (`kickoff_json_refused`).
CREATE FUNCTION kickoff_check_job(
    kind text, args jsonb, queue text, priority integer, max_attempts integer,
    scheduled_at timestamptz, in_secs double precision, unique_key text, tags text[], meta jsonb,
    created_by text, kinds text[] DEFAULT NULL, own_kinds text[] DEFAULT NULL,
    as_kickoff boolean DEFAULT false
) RETURNS boolean
LANGUAGE sql AS $$
SELECT CASE
    -- What only Kickoff writes: `engine::job::RESERVED_META` (a test holds the two lists equal).
    WHEN NOT coalesce(as_kickoff, false) AND jsonb_typeof(meta) = 'object'
         AND meta ?| ARRAY['schedule_id', 'schedule', 'slot', 'slot_ms', 'overlap', 'trigger',
                           'triggered_by', 'snoozes', 'owner', 'alert_incident', 'alert_rule',
                           'alert_event', 'alert_digest']
    THEN kickoff_refuse('KO001', 'meta', format('meta.%s is set by Kickoff (reserved: %s)',
         kickoff_first_key(meta, ARRAY['schedule_id', 'schedule', 'slot', 'slot_ms', 'overlap',
                 'trigger', 'triggered_by', 'snoozes', 'owner', 'alert_incident', 'alert_rule',
                 'alert_event', 'alert_digest']),
         'schedule_id, schedule, slot, slot_ms, overlap, trigger, triggered_by, snoozes, owner, '
         'alert_incident, alert_rule, alert_event, alert_digest'))
    WHEN NOT coalesce(as_kickoff, false) AND unique_key LIKE 'schedule:%'
    THEN kickoff_refuse('KO003', 'unique_key',
                        'unique keys `schedule:...` are the schedules'' runs'' own')
    WHEN NOT coalesce(as_kickoff, false) AND CASE WHEN kinds IS NULL
             THEN coalesce(kickoff_kind_own(kind), false)
             ELSE kind = ANY (coalesce(own_kinds, '{}')) END
    THEN kickoff_refuse('KO001', 'kind', format('`%s` jobs are inserted by Kickoff alone '
                        '(a question''s): create or change the question instead', kind))
    WHEN NOT CASE WHEN kinds IS NULL
             THEN kickoff_kind_own(kind) IS NOT NULL
             ELSE coalesce(kind = ANY (kinds), false) END
    THEN kickoff_refuse('KO002', 'kind', format('unknown job kind `%s`', kind))
    WHEN jsonb_typeof(args) IS DISTINCT FROM 'object'
    THEN kickoff_refuse('KO001', 'args', 'must be a JSON object')
    WHEN octet_length(args::text) > 300 AND kickoff_json_refused('args', args, 262144)
    THEN true
    WHEN jsonb_typeof(meta) IS DISTINCT FROM 'object'
    THEN kickoff_refuse('KO001', 'meta', 'must be a JSON object')
    WHEN meta <> '{}' AND octet_length(meta::text) > 300 AND kickoff_json_refused('meta', meta, 16384)
    THEN true
    -- `engine::late_start::LatePolicy`: exactly `after_ms` (a whole number of ms up to a day) and
    -- `then`.
    WHEN meta ? 'late' AND NOT coalesce(
             jsonb_typeof(meta -> 'late') = 'object'
             AND (meta -> 'late') - 'after_ms' - 'then' = '{}'
             AND jsonb_typeof(meta -> 'late' -> 'after_ms') = 'number'
             -- A whole number as written (`500.0` is not one: the policy reads an integer).
             AND meta -> 'late' ->> 'after_ms' ~ '^[0-9]{1,9}$'
             AND (meta -> 'late' ->> 'after_ms')::numeric <= 86400000
             AND meta -> 'late' ->> 'then' IN ('run', 'skip', 'discard'), false)
    THEN kickoff_refuse('KO001', 'meta', 'late: expected {"after_ms": 0 to 86400000 (a day), '
                        '"then": "run", "skip" or "discard"}')
    WHEN char_length(created_by) NOT BETWEEN 1 AND 200
    THEN kickoff_refuse('KO001', 'created_by', 'must be 1 to 200 characters')
    -- `queue_name`'s rule (migration 20261222000001), without a regular expression: one costs a
    -- bulk insert some 2 us a row.
    WHEN queue IS NULL OR octet_length(queue) NOT BETWEEN 1 AND 64
         OR ltrim(queue, 'abcdefghijklmnopqrstuvwxyz0123456789_-') <> ''
    THEN kickoff_refuse('KO001', 'queue', 'must be 1 to 64 characters of a-z, 0-9, `_` and `-`')
    WHEN priority IS NULL OR priority NOT BETWEEN 0 AND 9
    THEN kickoff_refuse('KO001', 'priority', 'must be a whole number from 0 (highest) to 9')
    WHEN max_attempts IS NULL OR max_attempts NOT BETWEEN 1 AND 1000
    THEN kickoff_refuse('KO001', 'max_attempts', 'must be a whole number from 1 to 1000')
    WHEN char_length(unique_key) NOT BETWEEN 1 AND 255
    THEN kickoff_refuse('KO001', 'unique_key', 'must be 1 to 255 characters')
    -- `kind:...` is that kind's namespace (a question's `lock_question:42`): another kind's job
    -- taking such a key would stand in for the job it names.
    WHEN position(':' IN unique_key) > 0 AND split_part(unique_key, ':', 1) <> kind
         AND CASE WHEN kinds IS NULL
             THEN kickoff_kind_own(split_part(unique_key, ':', 1)) IS NOT NULL
             ELSE split_part(unique_key, ':', 1) = ANY (kinds) END
    THEN kickoff_refuse('KO003', 'unique_key', format('unique keys `%s:...` are the %s jobs'' own',
                        split_part(unique_key, ':', 1), split_part(unique_key, ':', 1)))
    WHEN tags IS NULL OR (tags <> '{}' AND (cardinality(tags) > 20 OR NOT kickoff_tags_fit(tags)))
    THEN kickoff_refuse('KO001', 'tags', 'at most 20 tags of 1 to 100 characters')
    WHEN scheduled_at > statement_timestamp() + interval '3650 days'
    THEN kickoff_refuse('KO004', 'scheduled_at', 'more than 3650 days ahead')
    WHEN scheduled_at < statement_timestamp() - interval '24 hours'
    THEN kickoff_refuse('KO004', 'scheduled_at', 'more than 24 hours in the past')
    WHEN in_secs IS NULL OR in_secs < 0 OR in_secs > 3650 * 86400
    THEN kickoff_refuse('KO001', 'schedule_in_ms', 'more than 3650 days ahead')
    ELSE true
END
$$;

-- Inserts a job in the caller's transaction, checked as the API checks one, and returns it; a
-- node hears of it when that transaction commits (the insert's triggers notify, and PostgreSQL
-- delivers a notification at commit). A live job holding `unique_key` is returned instead (its
-- `inserted_at` tells it apart), unless Kickoff's own code owns it (a question's lock job):
-- that is refused (KO003). What a kind's worker checks of its args on top (a webhook's URL
-- against the allowlist) is checked when a node runs the job: refused args discard it.
CREATE FUNCTION kickoff_add_job(
    kind text, args jsonb DEFAULT '{}', queue text DEFAULT 'default',
    scheduled_at timestamptz DEFAULT NULL, priority integer DEFAULT 0,
    max_attempts integer DEFAULT 20, unique_key text DEFAULT NULL, tags text[] DEFAULT '{}',
    meta jsonb DEFAULT '{}', created_by text DEFAULT NULL
) RETURNS jobs
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    at timestamptz := coalesce($4, statement_timestamp());
    job jobs;
BEGIN
    PERFORM kickoff_check_job($1, $2, $3, $5, $6, $4, 0, $7, $8, $9, $10);
    FOR i IN 1..5 LOOP
        INSERT INTO jobs (queue, kind, args, state, priority, max_attempts, scheduled_at,
                          unique_key, tags, meta, created_by, rate_key)
        VALUES ($3, $1, $2,
                CASE WHEN at <= statement_timestamp() THEN 'available'::job_state
                     ELSE 'scheduled'::job_state END,
                $5, $6, at, $7, $8, $9, $10, kickoff_rate_key($3, $1, $2, NULL))
        ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND finalized_at IS NULL DO NOTHING
        RETURNING * INTO job;
        IF job.id IS NOT NULL THEN
            RETURN job;
        END IF;
        -- The key's holder, unless it finished since the conflict: then try again.
        SELECT * INTO job FROM jobs j WHERE j.unique_key = $7 AND j.finalized_at IS NULL;
        IF job.id IS NOT NULL THEN
            IF job.meta ? 'owner' THEN
                PERFORM kickoff_refuse('KO003', 'unique_key',
                    format('the unique key is held by job %s, which %s owns: choose another key',
                           job.id, job.meta ->> 'owner'));
            END IF;
            RETURN job;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'unique key kept changing hands during insert';
END $$;
