-- Request limits shared by every node (issue 16): the calls of one API token
-- (KICKOFF_API_RATE_LIMIT) and the sign-in attempts from one client address
-- (KICKOFF_SIGN_IN_RATE_LIMIT), counted in fixed windows aligned to the period by the database
-- clock, one row per key (a row of an older window counts as empty).
-- UNLOGGED: a count is worth nothing after its window, so it writes no WAL and a call's count
-- costs no flush at commit; a crash empties the table, which forgives at most one window.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE UNLOGGED TABLE request_windows (
    scope        text        NOT NULL CHECK (scope IN ('token', 'address')),
    key          text        NOT NULL CHECK (char_length(key) BETWEEN 1 AND 128),
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    used         integer     NOT NULL,
    PRIMARY KEY (scope, key)
);
