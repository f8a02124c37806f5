-- Jobs by tag (the tags filter of `GET /api/v1/jobs`, its export, bulk actions and the
-- dashboard's list): `tags @> $x` reads this index. Like the other filter indexes it leaves out the
-- `available` and `executing` jobs, whose rows change at every claim and completion (a listing
-- reads those two states from `jobs_state_id_idx`, see `engine/store/jobs/filters.rs`), so
-- the hot path's inserts and claims never touch it.
CREATE INDEX jobs_tags_idx ON jobs USING gin (tags)
    WHERE state NOT IN ('available', 'executing');
