-- Numbers in a job's args and meta are at most 1e300 in magnitude (issue 46): jsonb keeps a
-- larger one exactly (`1e400`), no float reads it back, and such a row failed every list and every
-- claim of its queue. Kickoff's client refuses them; these triggers hold every other writer (plain
-- SQL, a script) to the same bound, naming where the number is.
--
-- Triggers, not a CHECK: a CHECK is evaluated again on every UPDATE of a row, whichever columns
-- change, so a row stored before the bound would fail its claim and every state change after it
-- (the engine ends such a row instead, see `engine::row_reading`), and every state change would pay
-- for a walk of its args. `UPDATE OF args, meta` fires only when a statement writes those columns.
-- Migrations are immutable once landed: change the schema in a new file.

-- Whether every number in `j` is at most 1e300 in magnitude (the WHEN of the triggers: cheap).
CREATE FUNCTION kickoff_json_numbers_bounded(j jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT NOT jsonb_path_exists(j, 'strict $.**?(@.type() == "number" && (@ > 1e300 || @ < -1e300))')
$$;

-- Where in `j` (named from `path`) the first number beyond the bound is; NULL where none is.
CREATE FUNCTION kickoff_json_number_beyond_bound(j jsonb, path text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    k text;
    v jsonb;
    i integer;
    found text;
BEGIN
    CASE jsonb_typeof(j)
        WHEN 'number' THEN
            IF abs(j::text::numeric) > 1e300 THEN
                RETURN path;
            END IF;
        WHEN 'object' THEN
            FOR k, v IN SELECT * FROM jsonb_each(j) LOOP
                found := kickoff_json_number_beyond_bound(v, path || '.' || k);
                IF found IS NOT NULL THEN
                    RETURN found;
                END IF;
            END LOOP;
        WHEN 'array' THEN
            FOR i IN 0 .. jsonb_array_length(j) - 1 LOOP
                found := kickoff_json_number_beyond_bound(j -> i, path || '[' || i || ']');
                IF found IS NOT NULL THEN
                    RETURN found;
                END IF;
            END LOOP;
        ELSE
            NULL;
    END CASE;
    RETURN NULL;
END
$$;

CREATE FUNCTION kickoff_refuse_json_number() RETURNS trigger
    LANGUAGE plpgsql AS $$
DECLARE
    at text := coalesce(kickoff_json_number_beyond_bound(NEW.args, 'args'),
                        kickoff_json_number_beyond_bound(NEW.meta, 'meta'));
BEGIN
    IF at IS NOT NULL THEN
        RAISE EXCEPTION '%: a number out of range (at most 1e300 in magnitude)', at
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_json_numbers_on_insert BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NOT kickoff_json_numbers_bounded(NEW.args) OR NOT kickoff_json_numbers_bounded(NEW.meta))
    EXECUTE FUNCTION kickoff_refuse_json_number();

CREATE TRIGGER jobs_json_numbers_on_update BEFORE UPDATE OF args, meta ON jobs FOR EACH ROW
    WHEN (NOT kickoff_json_numbers_bounded(NEW.args) OR NOT kickoff_json_numbers_bounded(NEW.meta))
    EXECUTE FUNCTION kickoff_refuse_json_number();
