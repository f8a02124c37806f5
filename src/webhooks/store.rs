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
}

const COLUMNS: &str = "id, url_prefix, created_at, created_by, rotated_at, previous_until";

/// What signs the calls under one endpoint: its sealed secrets.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SealedSecrets {
    pub id: i64,
    pub url_prefix: String,
    pub key_id: String,
    pub secret: Vec<u8>,
    /// The previous secret while its overlap lasts (by the database clock).
    pub previous_secret: Option<Vec<u8>>,
}

pub async fn endpoint_insert<'e>(
    db: impl PgExecutor<'e>,
    url_prefix: &str,
    sealed: &[u8],
    key_id: &str,
    created_by: Option<&str>,
) -> Result<EndpointRow, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO webhook_endpoints (url_prefix, secret, key_id, created_by)
         VALUES ($1, $2, $3, $4) RETURNING {COLUMNS}"
    ))
    .bind(url_prefix)
    .bind(sealed)
    .bind(key_id)
    .bind(created_by)
    .fetch_one(db)
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
/// stops at once). `None` for no such endpoint.
pub async fn endpoint_rotate<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    sealed: &[u8],
    key_id: &str,
    overlap_secs: f64,
) -> Result<Option<EndpointRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE webhook_endpoints SET
             previous_secret = CASE WHEN $4 > 0 THEN secret END,
             previous_until = CASE WHEN $4 > 0 THEN now() + make_interval(secs => $4) END,
             secret = $2, key_id = $3, rotated_at = now()
         WHERE id = $1 RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(sealed)
    .bind(key_id)
    .bind(overlap_secs)
    .fetch_optional(db)
    .await
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

/// The sealed secrets of the endpoint with the longest prefix of `url`, if any.
pub async fn endpoint_secrets_for<'e>(
    db: impl PgExecutor<'e>,
    url: &str,
) -> Result<Option<SealedSecrets>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, url_prefix, key_id, secret,
                CASE WHEN previous_until > now() THEN previous_secret END AS previous_secret
         FROM webhook_endpoints
         WHERE starts_with($1, url_prefix)
         ORDER BY char_length(url_prefix) DESC LIMIT 1",
    )
    .bind(url)
    .fetch_optional(db)
    .await
}
