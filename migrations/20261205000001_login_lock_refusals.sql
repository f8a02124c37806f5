-- Sign-in attempts refused unchecked while their name or address is locked. Recording each in the
-- audit log would let anyone add rows of their own text at will; they are counted here instead,
-- one row per lock, and the session sweeper turns each lock that is over into one audit entry
-- with the count (in one statement: the row is deleted as its entry is written).
-- Migrations are immutable once landed: change the schema in a new file.
CREATE TABLE login_lock_refusals (
    scope        text        NOT NULL CHECK (scope IN ('name', 'address')),
    key          text        NOT NULL,
    locked_until timestamptz NOT NULL,
    refused      bigint      NOT NULL CHECK (refused > 0),
    first_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key, locked_until)
);
