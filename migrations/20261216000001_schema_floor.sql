-- Rolling upgrades (docs/deployment.md): the oldest release of Kickoff that may run on this
-- schema, named by the newest migration it must know. A node applies the migrations it knows at
-- start, and runs on a database that a newer release migrated further (an expand migration adds
-- and never removes), unless a contract migration (one that removes or changes what an older
-- release uses) raised this floor past what the node knows: then it refuses to start and says so
-- (`engine::schema`).
CREATE TABLE kickoff_schema (
    one              boolean PRIMARY KEY DEFAULT true CHECK (one),
    oldest_migration bigint  NOT NULL
);
INSERT INTO kickoff_schema (oldest_migration) VALUES (0);
