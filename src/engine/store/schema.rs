//! The schema's own bookkeeping, for rolling upgrades (`engine::schema`): the floor in
//! `kickoff_schema` and the versions sqlx recorded in `_sqlx_migrations`. Either table may be
//! missing (a new database, or one from before the floor): read as none.

use crate::db::Db;

/// `Ok(None)` for a missing table (SQLSTATE 42P01), the error otherwise.
fn missing_as_none<T>(read: Result<T, sqlx::Error>) -> Result<Option<T>, sqlx::Error> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => Ok(None),
        Err(e) => Err(e),
    }
}

/// The newest migration a release must know to run on this schema (`kickoff_schema`).
pub async fn schema_floor(pool: &Db) -> Result<Option<i64>, sqlx::Error> {
    let read = sqlx::query_scalar("SELECT oldest_migration FROM kickoff_schema")
        .fetch_optional(pool)
        .await;
    Ok(missing_as_none(read)?.flatten())
}

/// Every migration version applied to this database, in order.
pub async fn schema_applied(pool: &Db) -> Result<Vec<i64>, sqlx::Error> {
    let read = sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
        .fetch_all(pool)
        .await;
    Ok(missing_as_none(read)?.unwrap_or_default())
}
