-- Per-user API tokens, and the mark that ends a user's sessions when their password changes.
-- Migrations are immutable once landed: change the schema in a new file.

-- A token is shown once, at creation, and stored only as the SHA-256 of its text. It is 32 bytes
-- from the OS generator (256 bits), so a fast hash is enough: a slow password hash protects
-- guessable secrets, and these are not guessable. A fast hash also keeps each API request one
-- index lookup.
CREATE TABLE api_tokens (
    id           bigserial   PRIMARY KEY,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- What the token is for, as its owner named it ("deploy script").
    name         text        NOT NULL CHECK (char_length(name) BETWEEN 1 AND 100),
    -- `read`: GET requests only. `write`: everything the owner's role allows.
    scope        text        NOT NULL CHECK (scope IN ('read', 'write')),
    -- The token's first characters, to tell tokens apart in lists and logs without the secret.
    prefix       text        NOT NULL,
    secret_hash  bytea       NOT NULL UNIQUE CHECK (octet_length(secret_hash) = 32),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- Updated at most once a minute, so a busy token does not write on every request.
    last_used_at timestamptz,
    -- Revoked tokens stay listed (who had what, when) but never authenticate again.
    revoked_at   timestamptz
);

CREATE INDEX api_tokens_user_idx ON api_tokens (user_id, id);

-- Raised when the user's password is changed or reset. A session remembers the value it signed in
-- with and ends when it no longer matches: a stolen session does not outlive the password it was
-- opened with. A counter rather than a time, so no clock has to agree with another.
ALTER TABLE users ADD COLUMN session_epoch integer NOT NULL DEFAULT 0;
