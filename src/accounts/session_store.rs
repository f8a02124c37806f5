//! Where dashboard sessions are kept: the `tower_sessions.session` table (made by the migrations),
//! one row a session, its record MessagePack-encoded (the encoding tower-sessions' own PostgreSQL
//! store used, so sessions signed in before this store keep working).
//!
//! Kickoff's own rather than `tower-sessions-sqlx-store`'s: every statement goes through a [`Db`],
//! so sessions work behind a transaction pooler too (see `db`).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, ExpiredDeletion, SessionStore};

use crate::db::Db;

#[derive(Clone, Debug)]
pub struct PgSessionStore {
    pool: Db,
}

impl PgSessionStore {
    pub fn new(pool: Db) -> Self {
        PgSessionStore { pool }
    }
}

fn backend(e: sqlx::Error) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

fn expiry(record: &Record) -> DateTime<Utc> {
    DateTime::from_timestamp(
        record.expiry_date.unix_timestamp(),
        record.expiry_date.nanosecond(),
    )
    .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

fn encode(record: &Record) -> session_store::Result<Vec<u8>> {
    rmp_serde::to_vec(record).map_err(|e| session_store::Error::Encode(e.to_string()))
}

impl PgSessionStore {
    /// Writes `record`: `replace` overwrites a session with its id, otherwise nothing is written
    /// then. Whether a row was written.
    async fn write(&self, record: &Record, replace: bool) -> session_store::Result<bool> {
        let sql = if replace {
            "INSERT INTO tower_sessions.session (id, data, expiry_date) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET data = excluded.data, expiry_date = excluded.expiry_date"
        } else {
            "INSERT INTO tower_sessions.session (id, data, expiry_date) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO NOTHING"
        };
        let written = sqlx::query(sql)
            .bind(record.id.to_string())
            .bind(encode(record)?)
            .bind(expiry(record))
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(written.rows_affected() == 1)
    }
}

#[async_trait]
impl SessionStore for PgSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        // A fresh id is drawn until one is free (a collision of 128 random bits is theoretical).
        while !self.write(record, false).await? {
            record.id = Id::default();
        }
        Ok(())
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        self.write(record, true).await.map(drop)
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let data: Option<Vec<u8>> = sqlx::query_scalar(
            "SELECT data FROM tower_sessions.session WHERE id = $1 AND expiry_date > now()",
        )
        .bind(id.to_string())
        .fetch_optional(&self.pool)
        .await
        .map_err(backend)?;
        data.map(|data| {
            rmp_serde::from_slice(&data).map_err(|e| session_store::Error::Decode(e.to_string()))
        })
        .transpose()
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sqlx::query("DELETE FROM tower_sessions.session WHERE id = $1")
            .bind(id.to_string())
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}

#[async_trait]
impl ExpiredDeletion for PgSessionStore {
    async fn delete_expired(&self) -> session_store::Result<()> {
        sqlx::query("DELETE FROM tower_sessions.session WHERE expiry_date < now()")
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(())
    }
}
