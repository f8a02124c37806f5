-- Named counters that `noop` jobs with a `tally` argument raise by one, in the same transaction as
-- their completion: a handler whose effect must happen exactly once, for trying the engine out and
-- for the chaos suite, which compares each counter with the jobs that completed.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE tallies (
    name  text   PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 100),
    count bigint NOT NULL CHECK (count >= 0)
);
