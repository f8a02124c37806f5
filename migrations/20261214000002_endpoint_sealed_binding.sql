-- An endpoint's sealed secret and default headers are bound to it: sealed (AES-256-GCM) with
-- "kickoff webhook endpoint <id> secret|headers" as associated data, so a sealed value copied into
-- another row or field does not open (a database writer without the key cannot move a partner's
-- Authorization header to an endpoint of their own). Rows sealed before have `bound = false`: the
-- first node of this version to start seals them again, bound, once (`webhook_binding.done_at`);
-- after that no unbound value is ever opened, so a value from an old dump pasted into a row marked
-- unbound opens nowhere. An unbound row signs nothing.
ALTER TABLE webhook_endpoints ADD COLUMN bound boolean NOT NULL DEFAULT false;
CREATE TABLE webhook_binding (
    id      integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    done_at timestamptz
);
INSERT INTO webhook_binding (id) VALUES (1);
