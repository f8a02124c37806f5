//! The failover scenario (`kickoff chaos --failover`): the suite's cluster becomes the primary of
//! a synchronous streaming standby (`pg_basebackup -R`), and everything reaches the database
//! through an address of the suite's own (a [`Switch`]). Halfway, the primary is killed with
//! SIGKILL, the standby promoted, and the address moved to it: the nodes' and the load's
//! connections fail, they connect again, to the new primary. With synchronous replication every
//! commit acknowledged to a client is on the standby; what a commit that did not wait for it
//! (the claims', `synchronous_commit = off`) wrote may be lost, which the claim tokens make safe.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;

use super::switch::Switch;
use crate::engine::{Client, JobState, NewJob};
use crate::postgres::{EmbeddedPostgres, DATABASE};

/// The standby, and the address both it and the primary are reached by.
pub struct Standby {
    cluster: EmbeddedPostgres,
    switch: Switch,
    primary_url: String,
}

impl Standby {
    /// Makes a synchronous standby of `primary` under `dir` and an address in front of the
    /// primary; returns once the standby confirms commits.
    pub async fn make(
        primary: &EmbeddedPostgres,
        dir: &std::path::Path,
    ) -> Result<Standby, String> {
        // Blocking (a base backup of a fresh cluster: a second or two), once, before the run.
        let cluster = primary
            .replica_of(dir)
            .map_err(|e| format!("making the standby: {e}"))?;
        let admin = primary.admin_url();
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .map_err(|e| format!("connect to the primary: {e}"))?;
        sqlx::query("ALTER SYSTEM SET synchronous_standby_names = '*'")
            .execute(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let sync: Option<String> = sqlx::query_scalar(
                "SELECT sync_state FROM pg_stat_replication WHERE sync_state = 'sync' LIMIT 1",
            )
            .fetch_optional(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
            if sync.is_some() {
                break;
            }
            if Instant::now() > deadline {
                return Err("the standby did not become synchronous within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let switch = Switch::start(loopback(primary.port()))
            .await
            .map_err(|e| format!("the address's proxy: {e}"))?;
        Ok(Standby {
            cluster,
            switch,
            primary_url: primary.url_for(DATABASE),
        })
    }

    /// The standby's cluster (the primary once promoted).
    pub fn cluster(&self) -> &EmbeddedPostgres {
        &self.cluster
    }

    /// The database's URL through the address.
    pub fn url(&self) -> String {
        let mut url = reqwest::Url::parse(&self.primary_url).expect("a cluster URL parses");
        let _ = url.set_port(Some(self.switch.addr().port()));
        url.to_string()
    }

    /// Kills `primary`, promotes the standby and moves the address to it.
    pub fn fail_over(&self, primary: &EmbeddedPostgres) -> Result<(), String> {
        primary
            .kill()
            .map_err(|e| format!("kill the primary: {e}"))?;
        self.cluster
            .promote()
            .map_err(|e| format!("promote the standby: {e}"))?;
        self.switch.point_at(loopback(self.cluster.port()));
        Ok(())
    }

    /// Whether `pool` (through the address) reaches the standby, promoted: a primary on the
    /// standby's port.
    pub async fn serves(&self, pool: &crate::db::Db) -> bool {
        let found: Result<(i32, bool), _> =
            sqlx::query_as("SELECT inet_server_port(), pg_is_in_recovery()")
                .fetch_one(pool)
                .await;
        matches!(found, Ok((port, false)) if port == i32::from(self.cluster.port()))
    }

    pub fn stop(self) {
        let _ = self.cluster.stop();
    }
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// From `since` (the kill) until a job inserted after it ran: the insert is tried every 20 ms
/// until it goes through, then the job is awaited. `None` after 60 s.
pub async fn time_to_recover(client: Client, since: Instant) -> Option<f64> {
    let deadline = since + Duration::from_secs(60);
    let id = loop {
        match client.insert(&NewJob::new("noop", json!({}))).await {
            Ok(inserted) => break inserted.job.id,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(_) => return None,
        }
    };
    while Instant::now() < deadline {
        if client
            .get(id)
            .await
            .is_ok_and(|job| job.state == JobState::Completed)
        {
            return Some(since.elapsed().as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}
