//! SQL of the `api_tokens` table.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;

use super::api_token::TokenScope;
use super::role::Role;

/// A token as lists show it: never its secret (which is not stored) nor its hash.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ApiToken {
    pub id: i64,
    pub user_id: i64,
    /// The owner's name.
    pub user_name: String,
    pub name: String,
    pub scope: TokenScope,
    /// The token's first characters (`ko_1a2b3c4d`).
    pub prefix: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A live token found by its hash, with what its owner may do now.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct TokenOwner {
    pub token_id: i64,
    pub prefix: String,
    pub scope: TokenScope,
    pub user_id: i64,
    pub user_name: String,
    pub role: Role,
}

const TOKEN_COLUMNS: &str = "t.id, t.user_id, u.name AS user_name, t.name, t.scope, t.prefix, \
                             t.created_at, t.last_used_at, t.revoked_at";

pub async fn api_token_insert<'e>(
    db: impl PgExecutor<'e>,
    user_id: i64,
    name: &str,
    scope: TokenScope,
    prefix: &str,
    secret_hash: &[u8],
) -> Result<ApiToken, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH t AS (
             INSERT INTO api_tokens (user_id, name, scope, prefix, secret_hash)
             VALUES ($1, $2, $3, $4, $5) RETURNING *)
         SELECT {TOKEN_COLUMNS} FROM t JOIN users u ON u.id = t.user_id"
    ))
    .bind(user_id)
    .bind(name)
    .bind(scope)
    .bind(prefix)
    .bind(secret_hash)
    .fetch_one(db)
    .await
}

/// Tokens of one user, or of everyone (`None`), newest first.
pub async fn api_token_list<'e>(
    db: impl PgExecutor<'e>,
    user_id: Option<i64>,
) -> Result<Vec<ApiToken>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id
         WHERE $1::bigint IS NULL OR t.user_id = $1
         ORDER BY t.id DESC"
    ))
    .bind(user_id)
    .fetch_all(db)
    .await
}

pub async fn api_token_get<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<ApiToken>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id
         WHERE t.id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// Revokes a live token; `None` when there is no such token or it was revoked already.
pub async fn api_token_revoke<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
) -> Result<Option<ApiToken>, sqlx::Error> {
    sqlx::query_as(&format!(
        "WITH t AS (
             UPDATE api_tokens SET revoked_at = now()
             WHERE id = $1 AND revoked_at IS NULL RETURNING *)
         SELECT {TOKEN_COLUMNS} FROM t JOIN users u ON u.id = t.user_id"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

/// The live token whose hash is `secret_hash`, if its owner is enabled; marks it used (at most
/// once a minute, so a busy token costs a write a minute, not one per request).
pub async fn api_token_authenticate<'e>(
    db: impl PgExecutor<'e>,
    secret_hash: &[u8],
) -> Result<Option<TokenOwner>, sqlx::Error> {
    // The UPDATE touches the row only when the mark is stale; the SELECT part answers either way.
    sqlx::query_as(
        "WITH live AS (
             SELECT t.id AS token_id, t.prefix, t.scope, u.id AS user_id, u.name AS user_name,
                    u.role, t.last_used_at
             FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.secret_hash = $1 AND t.revoked_at IS NULL AND NOT u.disabled),
         mark AS (
             UPDATE api_tokens SET last_used_at = now()
             WHERE id = (SELECT token_id FROM live)
               AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute'))
         SELECT token_id, prefix, scope, user_id, user_name, role FROM live",
    )
    .bind(secret_hash)
    .fetch_optional(db)
    .await
}
