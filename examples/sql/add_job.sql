-- A game saved with its Kickoff job in one transaction, from psql (docs/embedding.md).
--   psql "$DATABASE_URL" -v game=8812 -v url=https://partner.example/kickoff -v finish=COMMIT -f add_job.sql
-- `finish` is COMMIT or ROLLBACK: rolled back, neither the game nor its job exists.
\set ON_ERROR_STOP on
BEGIN;
INSERT INTO games (id, name, starts_at)
VALUES (:game, 'Flamengo - Palmeiras', now() + interval '1 second');
-- The job fires at the game's start: a webhook call telling the partner its questions lock.
SELECT id, state, scheduled_at
FROM kickoff_add_job(
    'webhook',
    jsonb_build_object('url', :'url', 'body', jsonb_build_object('game', :game, 'event', 'kickoff')),
    scheduled_at => (SELECT starts_at FROM games WHERE id = :game),
    unique_key   => 'game-kickoff:' || :game,
    tags         => ARRAY['game']);
:finish;
