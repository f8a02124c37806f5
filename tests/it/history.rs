//! Random operator histories with faults, checked against Kickoff's promises: the fixed seeds of
//! the test command (the long run is `kickoff chaos-history --minutes 60`). Each history runs
//! two `kickoff serve` nodes on an embedded PostgreSQL of its own, drives them through the REST
//! API with an admin's, an operator's and a viewer's tokens, kills, restarts and cuts them,
//! crashes the database (and, in one, fails over to its standby), then checks every promise of `kickoff::chaos::history::promises` on what
//! it recorded and what the database holds. A failure prints the command that replays it.

use kickoff::chaos::history::{self, HistoryConfig};

async fn history_of(seed: u64, steps: usize, faults: bool) {
    history_with(seed, steps, faults, false).await;
}

async fn history_with(seed: u64, steps: usize, faults: bool, failover: bool) {
    let dir =
        std::env::temp_dir().join(format!("kickoff-history-test-{seed}-{}", fastrand::u64(..)));
    let mut config = HistoryConfig::new(env!("CARGO_BIN_EXE_kickoff").into(), dir.clone(), seed);
    config.steps = steps;
    config.faults = faults;
    config.failover = failover;
    let (report, history, _) = history::run(&config)
        .await
        .expect("the history could be run");
    eprintln!("{}", report.text());
    assert!(
        report.ok(),
        "{}(the record and the logs: {})",
        report.text(),
        dir.display()
    );
    // The history did something: most requests were answered, and some were acted on.
    let answered = history.events.iter().filter(|e| e.ok()).count();
    assert!(answered * 2 > history.events.len(), "{}", report.text());
    // Each node answered, the second one under a path of a site (`/kickoff`, as behind a proxy).
    for node in 0..config.nodes {
        assert!(
            history
                .events
                .iter()
                .any(|e| e.node == node && e.method != "SQL" && e.ok()),
            "node {node} answered nothing: {}",
            report.text()
        );
    }
    assert_eq!(
        history
            .faults
            .iter()
            .any(|f| f.fault == history::plan::Fault::Failover),
        failover
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The primary killed at the plan's middle, its synchronous standby promoted and the database's
/// address moved to it: the nodes reconnect, and every promise holds across it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_3_with_a_failover_keeps_every_promise() {
    history_with(3, 200, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_1_with_faults_keeps_every_promise() {
    history_of(1, 200, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_2_with_faults_keeps_every_promise() {
    history_of(2, 200, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_6_without_faults_keeps_every_promise() {
    history_of(6, 200, false).await;
}
