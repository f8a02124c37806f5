-- The application's own table in these examples: a game of the prediction app, saved with the
-- Kickoff job that locks its questions at kick-off, in one transaction.
CREATE TABLE IF NOT EXISTS games (
    id        bigint      PRIMARY KEY,
    name      text        NOT NULL,
    starts_at timestamptz NOT NULL
);
