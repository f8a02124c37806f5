//! CPU time a workload costs, per job: the bench process's own (the engine and the bench's
//! client), and that of the database's backends serving the bench's database. Steadier than a
//! rate on a shared machine, where the same build's throughput moved by a third within minutes
//! (docs/BENCHMARKS.md, "Issue 48, second slice"). Read from `/proc` (Linux); the database's share
//! only where its backends run on this machine and can be read, left out otherwise.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::db::Db;

/// Clock ticks a second in `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux architecture that
/// counts).
const TICKS_PER_S: u64 = 100;

/// User plus system time of process `pid` (`self`: this one), from `/proc/<pid>/stat`.
fn cpu_of(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: the
    // state first (field 3), so utime and stime (fields 14 and 15) are the 12th and 13th.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / TICKS_PER_S))
}

/// The backends connected to `pool`'s database now, and their CPU time so far (those readable).
async fn backends(pool: &Db) -> Result<HashMap<i32, Duration>, String> {
    let pids: Vec<i32> =
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
            .fetch_all(pool)
            .await
            .map_err(|e| e.to_string())?;
    Ok(pids
        .into_iter()
        .filter_map(|pid| Some((pid, cpu_of(&pid.to_string())?)))
        .collect())
}

/// CPU time from a start: the bench process's, and its database's backends'.
pub struct CpuMeter {
    own: Option<Duration>,
    backends: HashMap<i32, Duration>,
}

impl CpuMeter {
    pub async fn start(pool: &Db) -> Result<Self, String> {
        Ok(CpuMeter {
            own: cpu_of("self"),
            backends: backends(pool).await?,
        })
    }

    /// Microseconds of CPU per job since the start, for `jobs` jobs: `engine` (this process) and
    /// `database` (the backends connected now; one that began since counts from zero, one that
    /// ended since is missed), each left out where it could not be read.
    pub async fn per_job(&self, pool: &Db, jobs: usize) -> Result<Value, String> {
        let us = |d: Duration| (d.as_secs_f64() * 1e6 / jobs.max(1) as f64).round();
        let mut out = json!({});
        if let (Some(before), Some(now)) = (self.own, cpu_of("self")) {
            out["engine"] = us(now.saturating_sub(before)).into();
        }
        let now = backends(pool).await?;
        if !now.is_empty() {
            let spent = now.iter().map(|(pid, cpu)| {
                cpu.saturating_sub(self.backends.get(pid).copied().unwrap_or_default())
            });
            out["database"] = us(spent.sum()).into();
        }
        Ok(out)
    }
}
