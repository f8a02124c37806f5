-- A game saved with its question in one transaction, from psql (docs/embedding.md): the
-- question takes predictions until the game starts, and Kickoff's job locks it then.
--   psql "$DATABASE_URL" -v game=31 -v starts_at=2026-12-24T18:00:00Z -v finish=COMMIT -f question.sql
-- `finish` is COMMIT or ROLLBACK: rolled back, neither the game nor its question nor its lock
-- job exists. It prints the question's id and its lock job's.
\set ON_ERROR_STOP on
BEGIN;
INSERT INTO games (id, name, starts_at) VALUES (:game, 'Ajax - PSV', :'starts_at');
SELECT id, lock_job_id
FROM kickoff_add_question(
    game      => 'game-' || :game,
    prompt    => 'Who scores first?',
    choices   => ARRAY['Ajax', 'PSV', 'Nobody'],
    game_time => (SELECT starts_at FROM games WHERE id = :game));
:finish;
