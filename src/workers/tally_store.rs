//! SQL of the `tallies` table: named counters that `noop` jobs with a `tally` argument raise in
//! the transaction that completes them.

use sqlx::PgExecutor;

/// Raises the counter `name` by one.
pub async fn tally_raise<'e>(db: impl PgExecutor<'e>, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO tallies (name, count) VALUES ($1, 1)
         ON CONFLICT (name) DO UPDATE SET count = tallies.count + 1",
    )
    .bind(name)
    .execute(db)
    .await?;
    Ok(())
}

/// The counter `name` (0 when never raised).
pub async fn tally_get<'e>(db: impl PgExecutor<'e>, name: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT coalesce((SELECT count FROM tallies WHERE name = $1), 0)")
        .bind(name)
        .fetch_one(db)
        .await
}
