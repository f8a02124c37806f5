//! The schema a node runs on, for rolling upgrades (docs/deployment.md): the node applies the
//! migrations it knows ([`super::MIGRATOR`]) and runs on a database that a newer release migrated
//! further, as long as those newer migrations only expanded the schema. A contract migration
//! (one that drops or changes what an older release uses) raises the floor in `kickoff_schema`
//! (`oldest_migration`: the newest migration a release must know to run here) to its own
//! version; a node that does not know that migration refuses to start, saying so, instead of
//! failing mid-way on a column that is gone.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::PgPool;

use super::MIGRATOR;

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "this database's schema was changed by a newer release of Kickoff in a way this one \
         cannot run on: it needs a release that knows migration {needs}, and this one knows \
         migrations up to {knows}; run the newer release (docs/deployment.md, rolling upgrades)"
    )]
    TooNew { needs: i64, knows: i64 },
    #[error(
        "this database holds migration {0}, which this release of Kickoff does not know and which \
         is older than its own newest ({1}): it is another application's database, or one a \
         different build of Kickoff migrated"
    )]
    Foreign(i64, i64),
    #[error("migrations failed: {0}")]
    Migrate(#[from] MigrateError),
    #[error("reading the schema's floor: {0}")]
    Database(#[from] sqlx::Error),
}

/// What [`migrate`] found.
#[derive(Debug, Default)]
pub struct SchemaReport {
    /// Migrations applied by a newer release, unknown to this one.
    pub ahead: Vec<i64>,
}

/// The newest migration this release knows.
pub fn newest_known() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// Applies the migrations this release knows and returns the ones a newer release applied,
/// unless the schema's floor says this release may not run on it.
pub async fn migrate(pool: &PgPool) -> Result<SchemaReport, SchemaError> {
    let knows = newest_known();
    // Before the migrations (on a contracted schema, this release's own would be wrong to
    // apply) and again after them: a newer node's contract may have committed while this one
    // waited for the migrations' lock.
    check_floor(pool, knows).await?;
    check_unknown(pool, knows).await?;
    let migrator = Migrator {
        migrations: MIGRATOR.migrations.clone(),
        // Migrations of a newer release (expand-only, by the floor above) are left as they are.
        ignore_missing: true,
        locking: MIGRATOR.locking,
        no_tx: MIGRATOR.no_tx,
    };
    migrator.run(pool).await?;
    check_floor(pool, knows).await?;
    let ahead: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE version > $1 ORDER BY 1")
            .bind(knows)
            .fetch_all(pool)
            .await?;
    if !ahead.is_empty() {
        tracing::warn!(
            newer = ?ahead,
            knows,
            "the database was migrated by a newer release of Kickoff; running on its expanded schema"
        );
    }
    Ok(SchemaReport { ahead })
}

/// Refuses a schema whose floor is past `knows`, the newest migration this release knows.
async fn check_floor(pool: &PgPool, knows: i64) -> Result<(), SchemaError> {
    let floor: Option<i64> = match sqlx::query_scalar("SELECT oldest_migration FROM kickoff_schema")
        .fetch_optional(pool)
        .await
    {
        Ok(floor) => floor,
        // A database from before the floor (or an empty one): no newer release has been there.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
        Err(e) => return Err(e.into()),
    };
    match floor {
        Some(needs) if needs > knows => Err(SchemaError::TooNew { needs, knows }),
        _ => Ok(()),
    }
}

/// Refuses a database holding a migration this release does not know that is older than its
/// newest: a newer release's migrations come after this one's, so such a migration is another
/// application's or another build's (the check `ignore_missing` did before it was set).
async fn check_unknown(pool: &PgPool, knows: i64) -> Result<(), SchemaError> {
    let applied: Vec<i64> = match sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(pool)
        .await
    {
        Ok(v) => v,
        // No migrations yet: a new database.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    match applied
        .into_iter()
        .filter(|v| *v < knows && !MIGRATOR.version_exists(*v))
        .min()
    {
        Some(v) => Err(SchemaError::Foreign(v, knows)),
        None => Ok(()),
    }
}
