-- An endpoint's sealed secret and default headers are bound to it: sealed (AES-256-GCM) with
-- "kickoff webhook endpoint <id> secret|headers" as associated data, so a sealed value copied into
-- another row or field does not open (a database writer without the key cannot move a partner's
-- Authorization header to an endpoint of their own). Rows sealed before have `bound = false`
-- until a node holding their key starts and seals them again; an unbound row signs nothing.
ALTER TABLE webhook_endpoints ADD COLUMN bound boolean NOT NULL DEFAULT false;
