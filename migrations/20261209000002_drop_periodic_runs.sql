-- The library's interval-only periodic jobs gave way to schedules (20261209000001_schedules.sql),
-- which cover intervals, cron rules and time zones with the same guarantees, and show in the
-- dashboard, the API and the command line. Their bookkeeping table goes.
-- Migrations are immutable once landed: change the schema in a new file.
DROP TABLE IF EXISTS periodic_runs;
