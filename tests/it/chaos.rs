//! The short chaos run (the long one is `kickoff chaos --kills 100`): three server processes on an
//! embedded PostgreSQL of their own under a mixed load; four SIGKILLs with restarts, one crash and
//! restart of PostgreSQL, one cut of a node's connections. Nothing may be lost, no database effect
//! may happen twice or go missing, every duplicate webhook call must be explained by an attempt
//! cut mid-flight, every question must lock.

use std::time::Duration;

use kickoff::chaos::{self, ChaosConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_lost_or_done_twice_when_nodes_and_the_database_crash() {
    let dir = std::env::temp_dir().join(format!("kickoff-chaos-test-{}", fastrand::u64(..)));
    let mut config = ChaosConfig::new(env!("CARGO_BIN_EXE_kickoff").into(), dir.clone());
    config.kills = 4;
    config.interval = Duration::from_millis(2500);
    config.rate = 150;
    let report = chaos::run(config)
        .await
        .expect("the chaos run could be made");
    eprintln!("{}", report.text());
    assert!(report.ok(), "{}", report.text());
    assert_eq!(report.kills, 4);
    assert_eq!(report.postgres_restarts, 1);
    assert_eq!(report.connection_cuts, 1);
    assert!(report.completed > 500, "{}", report.text());
    let _ = std::fs::remove_dir_all(dir);
}

/// The failover scenario (`kickoff chaos --failover`): the nodes and the load reach a primary
/// with a synchronous standby through an address the suite owns; halfway the primary is killed
/// with SIGKILL, the standby promoted and the address moved. Every acknowledged job must be
/// there and final, no database effect twice or missing, every question locked; the outage (the
/// kill until a job inserted after it ran) is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_synchronous_standby_loses_nothing_acknowledged() {
    let dir = std::env::temp_dir().join(format!("kickoff-failover-test-{}", fastrand::u64(..)));
    let mut config = ChaosConfig::new(env!("CARGO_BIN_EXE_kickoff").into(), dir.clone());
    config.nodes = 2;
    config.kills = 2;
    config.interval = Duration::from_millis(2500);
    config.rate = 150;
    config.restart_postgres = false;
    config.cut_connections = false;
    config.failover = true;
    let report = chaos::run(config)
        .await
        .expect("the failover run could be made");
    eprintln!("{}", report.text());
    assert!(report.ok(), "{}", report.text());
    assert_eq!(report.failovers, 1);
    assert!(report.failover_confirmed, "{}", report.text());
    assert!(report.failover_outage_ms.is_some(), "{}", report.text());
    assert!(report.completed > 300, "{}", report.text());
    let _ = std::fs::remove_dir_all(dir);
}
