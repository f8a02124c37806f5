-- Versions of the settings every node applies (issue 30, point 6).
--
-- A node applies a queue's row, or the set of paused kinds, only when it is at least as new as the
-- one it applied last: the backstop poll's read and a notification's read race, and the slower
-- one must not undo the newer one. `updated_at = now()` could not say which is newer: now() is the
-- start of the writing transaction, so a transaction that began first and committed last wrote an
-- older stamp, and every node skipped the newest settings until the next change.
--
-- A version drawn while the row is locked orders the writes as they commit: a second writer of the
-- row waits for the first to commit before its trigger runs, so it draws a larger version, and a
-- snapshot that sees the second write sees the first. The triggers draw it, so that any writer
-- (this engine, an operator's SQL) gets one.

CREATE SEQUENCE queue_settings_versions;

ALTER TABLE queues
    ADD COLUMN version bigint NOT NULL DEFAULT nextval('queue_settings_versions');

-- A BEFORE ROW trigger runs with the row locked (the latest version of it, after any concurrent
-- writer committed): the version it draws is larger than that of every write committed before.
CREATE FUNCTION kickoff_queue_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := nextval('queue_settings_versions');
    RETURN NEW;
END $$;

CREATE TRIGGER queues_version BEFORE UPDATE ON queues
    FOR EACH ROW EXECUTE FUNCTION kickoff_queue_version();

-- The paused kinds are a set of rows, read whole: one version for the whole set, in a row of its
-- own that every change of `kind_pauses` updates first (a statement trigger, before the statement
-- touches a row: two transactions pausing kinds wait for each other there, never in a cycle).
-- Its row lock orders the changes as they commit.
CREATE TABLE kind_pauses_version (
    single  boolean PRIMARY KEY DEFAULT true CHECK (single),
    version bigint  NOT NULL DEFAULT 0
);
INSERT INTO kind_pauses_version DEFAULT VALUES;

CREATE FUNCTION kickoff_kind_pauses_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE kind_pauses_version SET version = version + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER kind_pauses_version BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON kind_pauses
    FOR EACH STATEMENT EXECUTE FUNCTION kickoff_kind_pauses_version();
