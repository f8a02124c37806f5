//! SQL of the `webhook_endpoints` table. Rows read for display never carry a secret.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

/// An endpoint as shown: never its secrets.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct EndpointRow {
    pub id: i64,
    /// Calls whose URL starts with this are signed with the endpoint's secret (the longest
    /// matching prefix wins).
    pub url_prefix: String,
    pub created_at: DateTime<Utc>,
    pub created_by: Option<String>,
    /// The latest rotation.
    pub rotated_at: Option<DateTime<Utc>>,
    /// Until when the previous secret signs too (after a rotation).
    pub previous_until: Option<DateTime<Utc>>,
    /// The names of the headers sent with every call under the endpoint (their values are
    /// sealed, and never shown).
    pub header_names: Vec<String>,
    /// Webhook jobs may call URLs under the prefix (the allowlist, beside
    /// `KICKOFF_WEBHOOK_ALLOWED_HOSTS`).
    pub allow_calls: bool,
    /// A host name under the prefix may resolve to a private, loopback or link-local address.
    pub private_network: bool,
    /// The methods the default headers go with: a webhook job under the prefix with another
    /// method is refused while the endpoint has default headers.
    pub header_methods: Vec<String>,
    /// The workflows whose live runs the partner may send signals to, signed with the
    /// endpoint's secret (`POST /api/v1/inbound/{endpoint}/signals`); empty: none.
    pub signal_workflows: Vec<String>,
}

const COLUMNS: &str = "id, url_prefix, created_at, created_by, rotated_at, previous_until, \
                       header_names, allow_calls, private_network, header_methods, \
                       signal_workflows";

/// The endpoints whose prefix `$1` (a call's URL, as parsed) starts with at a boundary: the whole
/// URL, a prefix ending in `/`, or one followed by `/`, `?` or `#`. So `https://partner.example`
/// does not match `https://partner.example.evil.test/`, nor `http://127.0.0.1:8080` the port
/// 80800. And the path after the prefix must not hold what a receiver's server may read as a way
/// out of it, which the URL parser leaves alone: `;` (`/hooks/..;/admin` on Tomcat and Spring),
/// an encoded `/`, `\` or `.` (`%2F`, `%5C`, `%2E`, decoded by some proxies before routing).
const MATCHING: &str = "SELECT * FROM webhook_endpoints
     WHERE starts_with($1, url_prefix)
       AND (char_length($1) = char_length(url_prefix)
            OR right(url_prefix, 1) = '/'
            OR substr($1, char_length(url_prefix) + 1, 1) IN ('/', '?', '#'))
       AND split_part(split_part(substr($1, char_length(url_prefix) + 1), '?', 1), '#', 1)
           !~* '(;|%2f|%5c|%2e)'";

/// Default headers, sealed, with their names to show.
#[derive(Debug, Clone)]
pub struct SealedHeaders {
    pub sealed: Vec<u8>,
    pub key_id: String,
    pub names: Vec<String>,
}

/// What an endpoint allows: calls under its prefix, and to private addresses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Allowance {
    pub allow_calls: bool,
    pub private_network: bool,
}

/// The methods an endpoint's default headers go with (checked by the service).
pub const HEADER_METHODS_DEFAULT: &[&str] = &["POST"];

/// What signs the calls under one endpoint: its sealed secrets.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SealedSecrets {
    pub id: i64,
    pub url_prefix: String,
    pub key_id: String,
    pub secret: Vec<u8>,
    /// The previous secret while its overlap lasts (by the database clock).
    pub previous_secret: Option<Vec<u8>>,
    /// The default headers, sealed (a JSON object of names and values), and the key that sealed
    /// them.
    pub headers: Option<Vec<u8>>,
    pub headers_key_id: Option<String>,
    /// Its values are sealed bound to it (see migration `20261214000002`).
    pub bound: bool,
    /// The methods its default headers go with.
    pub header_methods: Vec<String>,
    /// Some endpoint matching the URL allows calls under it (not only this, the longest one).
    pub allowed: bool,
    /// ... and lets its host resolve to a private address.
    pub private_ok: bool,
}

/// The id the next endpoint gets (its sealed values are bound to it before the row exists).
pub async fn endpoint_next_id<'e>(db: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT nextval(pg_get_serial_sequence('webhook_endpoints', 'id'))")
        .fetch_one(db)
        .await
}

/// Inserts endpoint `id` (from [`endpoint_next_id`]), its values sealed bound to it.
#[allow(clippy::too_many_arguments)]
pub async fn endpoint_insert<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    url_prefix: &str,
    sealed: &[u8],
    key_id: &str,
    headers: Option<&SealedHeaders>,
    allowance: Allowance,
    header_methods: &[String],
    signal_workflows: &[String],
    created_by: Option<&str>,
) -> Result<EndpointRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO webhook_endpoints (id, url_prefix, secret, key_id, created_by,
                                        headers, headers_key_id, header_names,
                                        allow_calls, private_network, bound, header_methods,
                                        signal_workflows)
         VALUES ($10, $1, $2, $3, $4, $5, $6, coalesce($7, '{{}}'), $8, $9, true, $11, $12)
         RETURNING {COLUMNS}"
    ))
    .bind(url_prefix)
    .bind(sealed)
    .bind(key_id)
    .bind(created_by)
    .bind(headers.map(|h| &h.sealed))
    .bind(headers.map(|h| &h.key_id))
    .bind(headers.map(|h| &h.names))
    .bind(allowance.allow_calls)
    .bind(allowance.private_network)
    .bind(id)
    .bind(header_methods)
    .bind(signal_workflows)
    .fetch_one(db)
    .await
}

/// Changes an endpoint's default headers (`Some(None)`: none any more) and what it allows; what is
/// `None` stays. `None` for no such endpoint.
pub async fn endpoint_update<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    headers: Option<Option<&SealedHeaders>>,
    allow_calls: Option<bool>,
    private_network: Option<bool>,
    header_methods: Option<&[String]>,
    signal_workflows: Option<&[String]>,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    let (set_headers, sealed) = match headers {
        None => (false, None),
        Some(h) => (true, h),
    };
    sqlx::query_as(&format!(
        "UPDATE webhook_endpoints SET
             headers = CASE WHEN $2 THEN $3 ELSE headers END,
             headers_key_id = CASE WHEN $2 THEN $4 ELSE headers_key_id END,
             header_names = CASE WHEN $2 THEN coalesce($5, '{{}}') ELSE header_names END,
             allow_calls = coalesce($6, allow_calls),
             -- No calls allowed, none to private addresses: switching calls off needs no second
             -- field.
             private_network = CASE WHEN $6 IS FALSE AND $7 IS NULL THEN false
                                    ELSE coalesce($7, private_network) END,
             header_methods = coalesce($8, header_methods),
             signal_workflows = coalesce($9, signal_workflows)
         WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(set_headers)
    .bind(sealed.map(|h| &h.sealed))
    .bind(sealed.map(|h| &h.key_id))
    .bind(sealed.map(|h| &h.names))
    .bind(allow_calls)
    .bind(private_network)
    .bind(header_methods)
    .bind(signal_workflows)
    .fetch_optional(db)
    .await
}

/// What verifies the signed calls endpoint `id` makes to us: its sealed secrets (the previous
/// one while its overlap lasts) and the workflows it may signal. `None` for no such endpoint.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InboundSecrets {
    pub id: i64,
    pub key_id: String,
    pub secret: Vec<u8>,
    pub previous_secret: Option<Vec<u8>>,
    pub bound: bool,
    pub signal_workflows: Vec<String>,
    /// The database's clock, in seconds since 1970: what a call's timestamp is checked against
    /// (as every time here, whatever a node's clock says).
    pub now_secs: i64,
}

pub async fn endpoint_inbound<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<InboundSecrets>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, key_id, secret,
                CASE WHEN previous_until > now() THEN previous_secret END AS previous_secret,
                bound, signal_workflows, extract(epoch FROM now())::bigint AS now_secs
         FROM webhook_endpoints WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(db)
    .await
}

pub async fn endpoint_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<EndpointRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM webhook_endpoints ORDER BY url_prefix"
    ))
    .fetch_all(db)
    .await
}

/// Replaces an endpoint's secret; the current one signs too until `overlap_secs` from now (0: it
/// stops at once), unless it was sealed before binding (it would not open as a bound value: it
/// stops at once, and the row is bound from now). `None` for no such endpoint.
pub async fn endpoint_rotate<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    sealed: &[u8],
    key_id: &str,
    overlap_secs: f64,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE webhook_endpoints SET
             previous_secret = CASE WHEN $4 > 0 AND bound THEN secret END,
             previous_until = CASE WHEN $4 > 0 AND bound THEN now() + make_interval(secs => $4) END,
             secret = $2, key_id = $3, rotated_at = now(), bound = true
         WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(sealed)
    .bind(key_id)
    .bind(overlap_secs)
    .fetch_optional(db)
    .await
}

/// Forgets the previous secrets whose overlap ended; how many.
pub async fn endpoint_drop_ended_previous<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    sqlx::query(
        "UPDATE webhook_endpoints SET previous_secret = NULL, previous_until = NULL
         WHERE previous_until <= now()",
    )
    .execute(db)
    .await
    .map(|r| r.rows_affected())
}

pub async fn endpoint_delete<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "DELETE FROM webhook_endpoints WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// The sealed secrets and headers of the endpoint with the longest prefix of `url` (a call's URL
/// as parsed), if any, and whether any matching endpoint allows the call.
pub async fn endpoint_for_call<'e>(
    db: impl PgExecutor<'e>,
    url: &str,
) -> Result<Option<SealedSecrets>, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH matching AS ({MATCHING})
         SELECT id, url_prefix, key_id, secret,
                CASE WHEN previous_until > now() THEN previous_secret END AS previous_secret,
                headers, headers_key_id, bound, header_methods,
                (SELECT coalesce(bool_or(allow_calls), false) FROM matching) AS allowed,
                (SELECT coalesce(bool_or(allow_calls AND private_network), false) FROM matching)
                    AS private_ok
         FROM matching
         ORDER BY char_length(url_prefix) DESC LIMIT 1"
    ))
    .bind(url)
    .fetch_optional(db)
    .await
}

/// The methods the default headers of the endpoint with the longest prefix of `url` go with;
/// `None` when that endpoint has no default headers (or none matches).
pub async fn endpoint_header_methods<'e>(
    db: impl PgExecutor<'e>,
    url: &str,
) -> Result<Option<Vec<String>>, sqlx::Error> {
    let found: Option<Option<Vec<String>>> = sqlx::query_scalar(&format!(
        "SELECT CASE WHEN headers IS NOT NULL THEN header_methods END FROM ({MATCHING}) m
         ORDER BY char_length(url_prefix) DESC LIMIT 1"
    ))
    .bind(url)
    .fetch_optional(db)
    .await?;
    Ok(found.flatten())
}

/// Whether an endpoint allows calls to `url` (a call's URL as parsed): `None` for none, else
/// whether the host may resolve to a private address.
pub async fn endpoint_allows<'e>(
    db: impl PgExecutor<'e>,
    url: &str,
) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT bool_or(private_network) FROM ({MATCHING}) m WHERE allow_calls"
    ))
    .bind(url)
    .fetch_one(db)
    .await
}

/// An endpoint sealed before its values were bound to it, as stored (locked until the end of the
/// transaction).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct UnboundRow {
    pub id: i64,
    pub secret: Vec<u8>,
    pub previous_secret: Option<Vec<u8>>,
    pub headers: Option<Vec<u8>>,
    pub headers_key_id: Option<String>,
}

/// Whether the one binding of values sealed before binding was done; locks the mark until the
/// transaction ends (a node starting beside waits, then finds it done).
pub async fn binding_done_lock(conn: &mut sqlx::PgConnection) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT done_at IS NOT NULL FROM webhook_binding WHERE id = 1 FOR UPDATE")
        .fetch_one(conn)
        .await
}

/// Marks the one binding done: from now on no unbound value is opened.
pub async fn binding_mark_done(conn: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE webhook_binding SET done_at = now() WHERE id = 1")
        .execute(conn)
        .await
        .map(drop)
}

/// The endpoints not yet bound whose secret was sealed with `key_id`, locked (others skipped: a
/// node starting beside binds them).
pub async fn endpoint_unbound_lock(
    conn: &mut sqlx::PgConnection,
    key_id: &str,
) -> Result<Vec<UnboundRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, secret, previous_secret, headers, headers_key_id FROM webhook_endpoints
         WHERE NOT bound AND key_id = $1 ORDER BY id FOR UPDATE SKIP LOCKED",
    )
    .bind(key_id)
    .fetch_all(conn)
    .await
}

/// Stores an endpoint's values sealed again, bound to it.
pub async fn endpoint_set_bound(
    conn: &mut sqlx::PgConnection,
    id: i64,
    secret: &[u8],
    previous_secret: Option<&[u8]>,
    headers: Option<&[u8]>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE webhook_endpoints SET secret = $2, previous_secret = $3, headers = $4,
                bound = true
         WHERE id = $1",
    )
    .bind(id)
    .bind(secret)
    .bind(previous_secret)
    .bind(headers)
    .execute(conn)
    .await
    .map(drop)
}
