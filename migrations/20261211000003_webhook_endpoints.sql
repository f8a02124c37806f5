-- Webhook endpoints (issue 17): a URL prefix and the secret every call to it is signed with
-- (Standard Webhooks, `webhook-signature`), sealed with the server's secret key (AES-256-GCM,
-- KICKOFF_SECRET_KEY or `secret.key` in the data directory): a dump of the database alone does
-- not reveal it. `key_id` names the key that sealed it (a server with another key says so instead
-- of signing with garbage). During a rotation the previous secret signs too, until
-- `previous_until`.
-- Migrations are immutable once landed: change the schema in a new file.

CREATE TABLE webhook_endpoints (
    id              bigserial   PRIMARY KEY,
    url_prefix      text        NOT NULL UNIQUE
                                CHECK (char_length(url_prefix) BETWEEN 8 AND 2048
                                       AND url_prefix ~ '^https?://'),
    secret          bytea       NOT NULL,
    key_id          text        NOT NULL,
    previous_secret bytea,
    previous_until  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text,
    rotated_at      timestamptz,
    CONSTRAINT webhook_endpoints_previous_whole
        CHECK ((previous_secret IS NULL) = (previous_until IS NULL))
);
