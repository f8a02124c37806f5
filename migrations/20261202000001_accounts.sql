-- Dashboard accounts: the operators who sign in, and the counters that slow down and lock out
-- password guessing. The counters live here, not in each process, because several server processes
-- share one database and an attacker may reach any of them.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE users (
    id            bigserial   PRIMARY KEY,
    -- The application lowercases names before they get here; the CHECK keeps anything else
    -- (a hand-written INSERT) from making a name no login could ever type.
    name          text        NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9_.-]{1,64}$'),
    -- Text rather than a Postgres enum: a new role is then a CHECK change, not an ALTER TYPE.
    role          text        NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    -- A PHC string (`$argon2id$v=19$m=...`): it carries its own parameters and salt, so hashes made
    -- with older parameters keep verifying after the defaults change.
    password_hash text        NOT NULL,
    disabled      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- Failed logins, counted twice: per login name and per client address. A row holds the failures of
-- the current window for one key rather than one row per attempt, so a guessing run cannot grow the
-- table faster than it finds new names or addresses.
-- - scope 'name': the lowercased login name, not the user id: names that do not exist are counted
--   the same way, or a lock that only real accounts get would tell which names exist.
-- - scope 'address': an IPv4 address, or an IPv6 /64 network (one IPv6 client usually holds a
--   whole /64, so counting single IPv6 addresses would count next to nothing).
-- `failures` also counts attempts still being checked: an attempt takes its place in the count
-- before its password is verified, so a burst of parallel guesses cannot all slip in under the
-- limit; a success gives its place back.
CREATE TABLE login_failures (
    scope             text        NOT NULL CHECK (scope IN ('name', 'address')),
    key               text        NOT NULL,
    failures          integer     NOT NULL CHECK (failures >= 0),
    window_started_at timestamptz NOT NULL,
    locked_until      timestamptz,
    PRIMARY KEY (scope, key)
);
