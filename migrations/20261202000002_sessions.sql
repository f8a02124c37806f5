-- Dashboard sessions (tower-sessions' PostgreSQL store reads and writes this table; it is made
-- here rather than by the store at startup, so that every database is complete after migrating).
-- Migrations are immutable once landed: change the schema in a new file.

CREATE SCHEMA IF NOT EXISTS tower_sessions;

CREATE TABLE tower_sessions.session (
    id          text        PRIMARY KEY NOT NULL,
    data        bytea       NOT NULL,
    expiry_date timestamptz NOT NULL
);

-- The sweeper deletes expired sessions by this column.
CREATE INDEX session_expiry_idx ON tower_sessions.session (expiry_date);
