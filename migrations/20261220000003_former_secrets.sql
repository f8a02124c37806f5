-- Secrets a job held before an edit took them out (issue 46): its earlier attempts' errors,
-- records and webhook answers may quote them, and they stay hidden there from whoever may not see
-- the job's secrets (`engine::sight`). Written by an edit alone; NULL (no storage) for every other
-- job. Never shown.
-- Migrations are immutable once landed: change the schema in a new file.
ALTER TABLE jobs ADD COLUMN former_secrets text[];
