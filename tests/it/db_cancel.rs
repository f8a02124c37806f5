//! A transaction begun and given up on before the database answered its `BEGIN` (a client that
//! disconnects, a timeout) leaves no pooled connection inside it. sqlx 0.8's `Pool::begin` does
//! (transact-rs/sqlx#4393): the next borrower's statements ran inside the stale transaction and
//! kept its row locks; seen in a full test run as every sign-in from one address stalling for the
//! statement timeout ("there is already a transaction in progress" in the server's log).

use kickoff::db::{Db, PoolMode};
use sqlx::postgres::PgPoolOptions;

use crate::common::test_db;

/// Whether the connection this pool hands out next is inside a transaction block (a savepoint
/// can be made only there).
async fn next_connection_in_a_transaction(db: &Db) -> bool {
    let mut conn = db.pool().acquire().await.unwrap();
    let inside = sqlx::query("SAVEPOINT probe")
        .execute(&mut *conn)
        .await
        .is_ok();
    if inside {
        sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    }
    inside
}

#[tokio::test]
async fn a_begin_given_up_on_leaves_no_connection_inside_a_transaction() {
    let test = test_db().await;
    if test.mode != PoolMode::Direct {
        // Behind the pooler each statement is a transaction of its own: the direct case is the one.
        return;
    }
    // One connection, always the same one, handed out without a check first.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&test.direct_url)
        .await
        .unwrap();
    let db = Db::new(pool, PoolMode::Direct);
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(db.pool())
        .await
        .unwrap();
    // Each begin is polled until the server shows its BEGIN done (the answer not yet read by
    // the client), then dropped: a caller that went away at the worst moment.
    let mut cut = 0;
    for _ in 0..20 {
        assert!(
            !next_connection_in_a_transaction(&db).await,
            "a stale transaction after {cut} cut begins"
        );
        let mut begin = Box::pin(db.begin());
        loop {
            if futures_util::poll!(&mut begin).is_ready() {
                break;
            }
            let state: Option<String> =
                sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
                    .bind(pid)
                    .fetch_optional(&test.pool)
                    .await
                    .unwrap();
            if state.as_deref() == Some("idle in transaction") {
                cut += 1;
                break;
            }
            tokio::task::yield_now().await;
        }
        drop(begin);
    }
    assert!(cut > 0, "no begin was cut: the test proved nothing");
    assert!(
        !next_connection_in_a_transaction(&db).await,
        "a stale transaction after {cut} cut begins"
    );
}
