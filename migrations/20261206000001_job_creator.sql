-- Who inserted a job through the dashboard or the REST API (the audit log's actor: a user's name,
-- a token owner's name, `api-token` for the bootstrap token); NULL for jobs the engine, a worker or
-- a library caller inserted. Webhook header values and secret-named args are shown whole only to
-- their creator and to admins. A copy (clone) keeps its original's creator: copying a job must not
-- reveal its secrets. Adding a nullable column without a default rewrites nothing.
-- Migrations are immutable once landed: change the schema in a new file.
ALTER TABLE jobs ADD COLUMN created_by text CHECK (char_length(created_by) BETWEEN 1 AND 200);
