-- The leader's schedule tick reads only the schedules whose next slot enters its horizon, instead
-- of locking every schedule's row each second (3,000 idle daily schedules made 2,646 commits a
-- second). `next_slot_at` is the first slot not yet given a run (after `last_slot`), written by
-- every fill; NULL until the first fill after this migration (read as "due").
ALTER TABLE schedules ADD COLUMN next_slot_at timestamptz;
CREATE INDEX schedules_next_slot_idx ON schedules (next_slot_at) WHERE NOT paused;
