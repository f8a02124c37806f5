//! The schema a node runs on, for rolling upgrades (docs/deployment.md): the node applies the
//! migrations it knows ([`MIGRATOR`]) and runs on a database that a newer release migrated
//! further, as long as those newer migrations only expanded the schema. A contract migration
//! (one that drops or changes what an older release uses) raises the floor in `kickoff_schema`
//! (`oldest_migration`: the newest migration a release must know to run here) to its own
//! version; a node that does not know that migration refuses to start, saying so, instead of
//! failing mid-way on a column that is gone.

use sqlx::migrate::{MigrateError, Migrator};

use crate::db::{Db, PoolMode};

use super::store::schema as store;

/// The database migrations of the engine (and of the whole server).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

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
    #[error(
        "{0} migration(s) of this release are not applied, and the migrations cannot run through \
         a transaction pooler (their lock is a session's): set KICKOFF_LISTEN_DATABASE_URL to a \
         direct connection, or run `kickoff migrate` with DATABASE_URL pointing at PostgreSQL \
         itself (docs/deployment.md, behind PgBouncer)"
    )]
    NeedsDirect(usize),
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
/// unless the schema's floor says this release may not run on it. Through a transaction pooler
/// nothing is applied: the schema must hold every migration of this release already.
pub async fn migrate(pool: &Db) -> Result<SchemaReport, SchemaError> {
    let knows = newest_known();
    if pool.mode() == PoolMode::Transaction {
        return check_migrated(pool, knows).await;
    }
    // Before the migrations (on a contracted schema, this release's own would be wrong to
    // apply) and again after them: a newer node's contract may have committed while this one
    // waited for the migrations' lock.
    check_floor(pool, knows).await?;
    // A migration unknown here and older than this release's newest is no newer release's: it is
    // another application's or another build's (the check `ignore_missing` did before it was set).
    let foreign = store::schema_applied(pool)
        .await?
        .into_iter()
        .find(|v| *v < knows && !MIGRATOR.version_exists(*v));
    if let Some(v) = foreign {
        return Err(SchemaError::Foreign(v, knows));
    }
    let migrator = Migrator {
        migrations: MIGRATOR.migrations.clone(),
        // Migrations of a newer release (expand-only, by the floor above) are left as they are.
        ignore_missing: true,
        locking: MIGRATOR.locking,
        no_tx: MIGRATOR.no_tx,
    };
    migrator.run(pool.pool()).await?;
    check_floor(pool, knows).await?;
    report(pool, knows).await
}

/// Behind a transaction pooler: the schema holds every migration of this release (and it may
/// run on it), or the node refuses to start.
async fn check_migrated(pool: &Db, knows: i64) -> Result<SchemaReport, SchemaError> {
    check_floor(pool, knows).await?;
    let applied = store::schema_applied(pool).await?;
    let missing = MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .count();
    if missing > 0 {
        return Err(SchemaError::NeedsDirect(missing));
    }
    report(pool, knows).await
}

/// The migrations of a newer release found applied.
async fn report(pool: &Db, knows: i64) -> Result<SchemaReport, SchemaError> {
    let ahead: Vec<i64> = store::schema_applied(pool)
        .await?
        .into_iter()
        .filter(|v| *v > knows)
        .collect();
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
async fn check_floor(pool: &Db, knows: i64) -> Result<(), SchemaError> {
    match store::schema_floor(pool).await? {
        Some(needs) if needs > knows => Err(SchemaError::TooNew { needs, knows }),
        _ => Ok(()),
    }
}
