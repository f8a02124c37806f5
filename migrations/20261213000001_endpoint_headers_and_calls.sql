-- Webhook endpoints, continued (issue 17):
-- - default headers: sent with every call under the endpoint, beneath the job's own headers (a
--   job's header of the same name wins). They often carry a credential (`Authorization`), so the
--   values are sealed like the signing secret (`headers`: the sealed JSON object, `headers_key_id`:
--   the key that sealed it); only the names are kept in the clear, to show.
-- - the allowlist as endpoints: `allow_calls` lets webhook jobs call URLs under the prefix (beside
--   KICKOFF_WEBHOOK_ALLOWED_HOSTS); `private_network` lets such a host name resolve to a private,
--   loopback or link-local address (as `private:` does in the variable).
-- Migrations are immutable once landed: change the schema in a new file.

ALTER TABLE webhook_endpoints
    ADD COLUMN headers         bytea,
    ADD COLUMN headers_key_id  text,
    ADD COLUMN header_names    text[]  NOT NULL DEFAULT '{}',
    ADD COLUMN allow_calls     boolean NOT NULL DEFAULT false,
    ADD COLUMN private_network boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT webhook_endpoints_headers_whole
        CHECK ((headers IS NULL) = (headers_key_id IS NULL)
               AND (headers IS NULL) = (cardinality(header_names) = 0)),
    ADD CONSTRAINT webhook_endpoints_private_needs_calls
        CHECK (NOT private_network OR allow_calls);
