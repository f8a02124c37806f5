//! Dashboard accounts against real PostgreSQL: the name and password rules, one answer for every
//! kind of wrong login, the slowdown and the locks per name and per address (with real failed
//! logins, at the production limits), and the first administrator made once by racing nodes.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kickoff::engine::Db;

use crate::common::test_db;
use kickoff::accounts::store::{self, LoginScope};
use kickoff::accounts::{
    AccountError, Accounts, LoginError, Role, SetupError, SetupLink, User, FAILURE_WINDOW,
    LOCK_AFTER_FAILURES, LOCK_DURATION, SLOWDOWN, SLOW_AFTER_FAILURES,
};

const PASSWORD: &str = "correct horse battery";
const WRONG: &str = "wrong horse battery!";

fn ip(last: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, last])
}

async fn user(accounts: &Accounts, name: &str) -> User {
    accounts
        .create(name, PASSWORD, Role::Operator)
        .await
        .unwrap()
}

async fn counter(pool: &Db, scope: LoginScope, key: &str) -> i32 {
    store::login_failure_get(pool, scope, key, None)
        .await
        .unwrap()
        .map_or(0, |c| c.failures)
}

fn assert_bad_credentials(r: Result<User, LoginError>) {
    assert!(
        matches!(r, Err(LoginError::BadCredentials)),
        "expected BadCredentials, got {r:?}"
    );
}

/// The lock's remaining seconds; panics unless `r` is `Locked`.
fn locked_for(r: Result<User, LoginError>) -> u64 {
    match r {
        Err(LoginError::Locked {
            retry_after_secs, ..
        }) => {
            assert!(
                retry_after_secs > 0 && retry_after_secs <= LOCK_DURATION.as_secs(),
                "retry after {retry_after_secs} s"
            );
            retry_after_secs
        }
        other => panic!("expected Locked, got {other:?}"),
    }
}

fn invalid_field<T: std::fmt::Debug>(r: Result<T, AccountError>) -> &'static str {
    match r {
        Err(AccountError::Invalid { field, .. }) => field,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn roles_are_ordered_and_named() {
    assert!(Role::Viewer < Role::Operator && Role::Operator < Role::Admin);
    for role in [Role::Viewer, Role::Operator, Role::Admin] {
        assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        assert_eq!(
            serde_json::to_value(role).unwrap(),
            serde_json::json!(role.as_str())
        );
    }
    assert!("root".parse::<Role>().is_err());
}

#[tokio::test]
async fn creates_users_with_their_name_lowered() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let created = accounts
        .create("Ada.Lovelace-1_x", PASSWORD, Role::Admin)
        .await
        .unwrap();
    assert_eq!(created.name, "ada.lovelace-1_x");
    assert_eq!(created.role, Role::Admin);
    assert!(!created.disabled);
    assert_eq!(
        accounts.get(created.id).await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(accounts.get(created.id + 1).await.unwrap(), None);
    user(&accounts, "bob").await;
    let names: Vec<String> = accounts
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(names, ["ada.lovelace-1_x", "bob"]);
    assert_eq!(accounts.count().await.unwrap(), 2);
    // The hash is an argon2id PHC string, never the password.
    let hash: String = sqlx::query_scalar("SELECT password_hash FROM users WHERE name = 'bob'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    assert!(!hash.contains(PASSWORD));
}

#[tokio::test]
async fn refuses_names_that_break_the_rules() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let too_long = "a".repeat(65);
    // The Kelvin sign lowers to `k` in Unicode: it must not become a second spelling of "kim".
    for name in [
        "",
        too_long.as_str(),
        "ada lovelace",
        "ada/1",
        "zoë",
        "\u{212A}im",
    ] {
        let r = accounts.create(name, PASSWORD, Role::Viewer).await;
        assert_eq!(invalid_field(r), "name", "{name:?}");
    }
    let longest = "a".repeat(64);
    assert_eq!(user(&accounts, &longest).await.name, longest);
    assert_eq!(accounts.count().await.unwrap(), 1);
}

#[tokio::test]
async fn refuses_passwords_outside_12_to_1024_characters() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    for password in ["", "eleven char", &"x".repeat(1025)] {
        let r = accounts.create("ada", password, Role::Viewer).await;
        assert_eq!(invalid_field(r), "password", "{} chars", password.len());
    }
    // Characters are counted, not bytes: twelve two-byte letters are enough, 1024 four-byte
    // ones are not too many.
    accounts
        .create("ada", &"é".repeat(12), Role::Viewer)
        .await
        .unwrap();
    accounts
        .create("bob", &"🔑".repeat(1024), Role::Viewer)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_taken_name_is_refused_in_any_case() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    match accounts.create("BOB", PASSWORD, Role::Admin).await {
        Err(AccountError::NameTaken(name)) => assert_eq!(name, "bob"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert_eq!(accounts.count().await.unwrap(), 1);
}

#[tokio::test]
async fn the_right_password_signs_in_and_the_name_in_any_case() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let bob = user(&accounts, "bob").await;
    assert_eq!(
        accounts.authenticate("bob", PASSWORD, ip(1)).await.unwrap(),
        bob
    );
    assert_eq!(
        accounts.authenticate("Bob", PASSWORD, ip(1)).await.unwrap(),
        bob
    );
    // Successes leave no failure behind.
    assert_eq!(counter(&db.pool, LoginScope::Name, "bob").await, 0);
    assert_eq!(counter(&db.pool, LoginScope::Address, "10.0.0.1").await, 0);
}

#[tokio::test]
async fn wrong_password_and_unknown_name_get_the_same_answer() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    let wrong_password = accounts.authenticate("bob", WRONG, ip(1)).await;
    let unknown_name = accounts.authenticate("nobody", PASSWORD, ip(2)).await;
    let impossible_name = accounts.authenticate("no body!", PASSWORD, ip(3)).await;
    let messages: Vec<String> = [&wrong_password, &unknown_name, &impossible_name]
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert_bad_credentials(wrong_password);
    assert_bad_credentials(unknown_name);
    assert_bad_credentials(impossible_name);
    assert!(messages.iter().all(|m| m == &messages[0]), "{messages:?}");
    // An unknown name is counted like a real one, so that its lock cannot tell them apart.
    assert_eq!(counter(&db.pool, LoginScope::Name, "nobody").await, 1);
    assert_eq!(counter(&db.pool, LoginScope::Name, "bob").await, 1);
}

#[tokio::test]
async fn a_disabled_user_cannot_sign_in() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let bob = user(&accounts, "bob").await;
    assert!(accounts.set_disabled(bob.id, true).await.unwrap().disabled);
    assert_bad_credentials(accounts.authenticate("bob", PASSWORD, ip(1)).await);
    assert!(!accounts.set_disabled(bob.id, false).await.unwrap().disabled);
    accounts.authenticate("bob", PASSWORD, ip(1)).await.unwrap();
}

/// Fails `LOCK_AFTER_FAILURES` logins of `name`, each from an address of its own (so that no
/// address lock is involved), and checks the answers: slowed from the sixth, locked at the tenth.
async fn fail_until_locked(accounts: &Accounts, name: &str) {
    for attempt in 1..=LOCK_AFTER_FAILURES {
        let started = Instant::now();
        let r = accounts
            .authenticate(name, WRONG, ip(100 + attempt as u8))
            .await;
        if attempt < LOCK_AFTER_FAILURES {
            assert_bad_credentials(r);
        } else {
            locked_for(r);
        }
        if attempt > SLOW_AFTER_FAILURES && attempt < LOCK_AFTER_FAILURES {
            assert!(
                started.elapsed() >= SLOWDOWN,
                "failure {attempt} answered after {:?}",
                started.elapsed()
            );
        }
    }
}

#[tokio::test]
async fn ten_failures_lock_the_account_from_every_address_even_for_the_right_password() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let bob = user(&accounts, "bob").await;
    fail_until_locked(&accounts, "bob").await;
    // A fresh address, the right password: still locked, and the attempt is not counted.
    let retry = locked_for(accounts.authenticate("bob", PASSWORD, ip(1)).await);
    assert!(retry > LOCK_DURATION.as_secs() - 60, "{retry}");
    assert_eq!(
        counter(&db.pool, LoginScope::Name, "bob").await,
        LOCK_AFTER_FAILURES
    );
    assert_eq!(counter(&db.pool, LoginScope::Address, "10.0.0.1").await, 0);
    // Other accounts are not affected, from the same address.
    user(&accounts, "carol").await;
    accounts
        .authenticate("carol", PASSWORD, ip(1))
        .await
        .unwrap();
    // An administrator's new password does not lift the lock either.
    accounts
        .set_password(bob.id, "a brand new password")
        .await
        .unwrap();
    locked_for(
        accounts
            .authenticate("bob", "a brand new password", ip(2))
            .await,
    );
}

#[tokio::test]
async fn an_unknown_name_is_locked_like_a_real_one() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    fail_until_locked(&accounts, "ghost").await;
    locked_for(accounts.authenticate("ghost", PASSWORD, ip(1)).await);
}

#[tokio::test]
async fn ten_failures_from_one_address_lock_it_for_every_account() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    // A different name each time: no name gets more than one failure.
    for attempt in 1..=LOCK_AFTER_FAILURES {
        let r = accounts
            .authenticate(&format!("guess{attempt}"), WRONG, ip(7))
            .await;
        if attempt < LOCK_AFTER_FAILURES {
            assert_bad_credentials(r);
        } else {
            locked_for(r);
        }
    }
    locked_for(accounts.authenticate("bob", PASSWORD, ip(7)).await);
    // The same account from elsewhere is fine: the lock is the address's.
    accounts.authenticate("bob", PASSWORD, ip(8)).await.unwrap();
    // IPv4 clients reaching an IPv6 socket come IPv4-mapped: the same address, the same lock.
    let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
    locked_for(accounts.authenticate("bob", PASSWORD, mapped).await);
}

#[tokio::test]
async fn a_success_starts_the_account_count_over_but_not_the_address_count() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    let almost = LOCK_AFTER_FAILURES - 1;
    for _ in 0..almost {
        assert_bad_credentials(accounts.authenticate("bob", WRONG, ip(1)).await);
    }
    accounts.authenticate("bob", PASSWORD, ip(1)).await.unwrap();
    assert_eq!(counter(&db.pool, LoginScope::Name, "bob").await, 0);
    assert_eq!(
        counter(&db.pool, LoginScope::Address, "10.0.0.1").await,
        almost
    );
    // Without the reset this would be the account's tenth failure, and lock it.
    assert_bad_credentials(accounts.authenticate("bob", WRONG, ip(2)).await);
    assert_eq!(counter(&db.pool, LoginScope::Name, "bob").await, 1);
    // The address kept its count: its next failure is its tenth.
    locked_for(accounts.authenticate("bob", WRONG, ip(1)).await);
    locked_for(accounts.authenticate("bob", PASSWORD, ip(1)).await);
    accounts.authenticate("bob", PASSWORD, ip(3)).await.unwrap();
}

#[tokio::test]
async fn a_burst_of_parallel_guesses_is_cut_at_the_limit() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    let burst = 2 * LOCK_AFTER_FAILURES;
    let answers = futures_util::future::join_all((0..burst).map(|i| {
        let accounts = accounts.clone();
        async move { accounts.authenticate("bob", WRONG, ip(100 + i as u8)).await }
    }))
    .await;
    let bad = answers
        .iter()
        .filter(|r| matches!(r, Err(LoginError::BadCredentials)))
        .count();
    let locked = answers
        .iter()
        .filter(|r| matches!(r, Err(LoginError::Locked { .. })))
        .count();
    assert_eq!(bad + locked, burst as usize, "{answers:?}");
    // At most the limit's worth of passwords were checked; the tenth locks, the rest are refused.
    assert!(bad < LOCK_AFTER_FAILURES as usize, "{bad} wrong answers");
    locked_for(accounts.authenticate("bob", PASSWORD, ip(1)).await);
}

/// The counters' clock rules, with the database's clock pinned (nobody waits 15 minutes).
#[tokio::test]
async fn a_lock_ends_after_its_duration_and_old_failures_stop_counting() {
    let db = test_db().await;
    let pool = &db.pool;
    let t0: DateTime<Utc> = "2026-12-02T10:00:00Z".parse().unwrap();
    let at = |d: Duration| Some(t0 + chrono::Duration::from_std(d).unwrap());
    let key = "10.9.9.9";
    let reserve =
        |now| store::login_failure_reserve(pool, LoginScope::Address, key, FAILURE_WINDOW, now);
    let confirm = |now| {
        store::login_failure_confirm(
            pool,
            LoginScope::Address,
            key,
            LOCK_AFTER_FAILURES,
            LOCK_DURATION,
            now,
        )
    };

    // Failures spread over more than the window: the count starts over with the window.
    for _ in 0..LOCK_AFTER_FAILURES - 1 {
        reserve(Some(t0)).await.unwrap();
        confirm(Some(t0)).await.unwrap();
    }
    let later = at(FAILURE_WINDOW + Duration::from_secs(1));
    let c = reserve(later).await.unwrap();
    assert_eq!((c.failures, c.window_started_at), (1, later.unwrap()));
    assert!(!confirm(later).await.unwrap().unwrap().locked());

    // Ten within the window lock for the lock's duration, counted from the tenth.
    for _ in 0..LOCK_AFTER_FAILURES - 1 {
        reserve(later).await.unwrap();
        confirm(later).await.unwrap();
    }
    let c = store::login_failure_get(pool, LoginScope::Address, key, later)
        .await
        .unwrap()
        .unwrap();
    assert!(c.locked());
    assert_eq!(c.lock_remaining_secs(), LOCK_DURATION.as_secs());
    // Attempts during the lock are not counted.
    let during = at(FAILURE_WINDOW + LOCK_DURATION);
    let c = reserve(during).await.unwrap();
    assert!(c.locked());
    assert_eq!(c.failures, LOCK_AFTER_FAILURES);
    // Pruning keeps a running lock, and drops what no longer counts.
    assert_eq!(
        store::login_failure_prune(pool, FAILURE_WINDOW, during)
            .await
            .unwrap(),
        0
    );
    let after = at(FAILURE_WINDOW + LOCK_DURATION + Duration::from_secs(1));
    let c = reserve(after).await.unwrap();
    assert!(!c.locked());
    assert_eq!(c.failures, 1, "the count starts over after a lock");
    let much_later = at(3 * FAILURE_WINDOW + LOCK_DURATION);
    assert_eq!(
        store::login_failure_prune(pool, FAILURE_WINDOW, much_later)
            .await
            .unwrap(),
        1
    );
}

#[tokio::test]
async fn first_start_creates_the_admin_only_on_an_empty_database() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    assert_eq!(accounts.ensure_first_admin(None).await.unwrap(), None);
    assert_eq!(accounts.count().await.unwrap(), 0);
    let r = accounts.ensure_first_admin(Some("short")).await;
    assert_eq!(invalid_field(r), "password");

    let admin = accounts
        .ensure_first_admin(Some(PASSWORD))
        .await
        .unwrap()
        .expect("the first admin");
    assert_eq!((admin.name.as_str(), admin.role), ("admin", Role::Admin));
    accounts
        .authenticate("admin", PASSWORD, ip(1))
        .await
        .unwrap();
    assert_eq!(
        accounts
            .ensure_first_admin(Some("another password"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(accounts.count().await.unwrap(), 1);
    // Its password was not replaced by the second call.
    accounts
        .authenticate("admin", PASSWORD, ip(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn first_start_creates_no_admin_when_users_exist() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    user(&accounts, "bob").await;
    assert_eq!(
        accounts.ensure_first_admin(Some(PASSWORD)).await.unwrap(),
        None
    );
    assert_eq!(accounts.count().await.unwrap(), 1);
}

#[tokio::test]
async fn two_nodes_starting_at_once_make_one_admin() {
    let db = test_db().await;
    // Two services, as two nodes have, each on its own connections to the same database.
    let node_a = Accounts::new(db.pool.clone());
    let node_b = Accounts::new(db.other_pool(10).await);
    for round in 0..3 {
        let (a, b) = tokio::join!(
            node_a.ensure_first_admin(Some(PASSWORD)),
            node_b.ensure_first_admin(Some(PASSWORD))
        );
        let made = [a.unwrap(), b.unwrap()].into_iter().flatten().count();
        assert_eq!(made, 1, "round {round}");
        assert_eq!(node_a.count().await.unwrap(), 1, "round {round}");
        sqlx::query("DELETE FROM users")
            .execute(&db.pool)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn role_disabled_flag_and_password_can_be_changed() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let bob = user(&accounts, "bob").await;

    let promoted = accounts.set_role(bob.id, Role::Admin).await.unwrap();
    assert_eq!(promoted.role, Role::Admin);
    assert_eq!(accounts.get(bob.id).await.unwrap(), Some(promoted));

    // Another admin, so that disabling bob leaves one.
    accounts
        .create("carol", PASSWORD, Role::Admin)
        .await
        .unwrap();
    assert!(accounts.set_disabled(bob.id, true).await.unwrap().disabled);
    assert!(accounts.get(bob.id).await.unwrap().unwrap().disabled);

    assert!(!accounts.set_disabled(bob.id, false).await.unwrap().disabled);
    let r = accounts.set_password(bob.id, "too short").await;
    assert_eq!(invalid_field(r), "password");
    accounts
        .set_password(bob.id, "a brand new password")
        .await
        .unwrap();
    assert_bad_credentials(accounts.authenticate("bob", PASSWORD, ip(1)).await);
    accounts
        .authenticate("bob", "a brand new password", ip(1))
        .await
        .unwrap();

    let missing = bob.id + 1000;
    for r in [
        accounts.set_role(missing, Role::Viewer).await,
        accounts.set_disabled(missing, true).await,
        accounts.set_password(missing, PASSWORD).await,
    ] {
        match r {
            Err(AccountError::NotFound(what)) => assert_eq!(what, format!("user {missing}")),
            other => panic!("expected NotFound, got {other:?}"),
        }
    }
}

/// Runs `decide` while the user `bob` is being inserted on another connection (`kickoff user
/// add`, or another node's first admin, not committed yet: a check for an empty table does not see
/// it), commits that insert once `decide` waits for it, and returns what `decide` answered. Fails
/// if `decide` answers without waiting.
async fn decided_beside_a_user_being_added<T>(
    pool: &Db,
    decide: impl std::future::Future<Output = T> + Send + 'static,
) -> T
where
    T: std::fmt::Debug + Send + 'static,
{
    let mut adding = pool.begin().await.unwrap();
    store::user_insert(&mut *adding, "bob", Role::Viewer, password_hash_of_nobody())
        .await
        .unwrap();
    let mut decided = tokio::spawn(decide);
    let waits = crate::common::wait_for(
        "a statement waiting for a lock on users",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_locks WHERE relation = 'users'::regclass AND NOT granted",
            )
            .fetch_one(pool)
            .await
            .unwrap()
                > 0
        },
    );
    tokio::select! {
        answer = &mut decided => panic!("decided beside a user being added: {answer:?}"),
        () = waits => {}
    }
    adding.commit().await.unwrap();
    decided.await.unwrap()
}

async fn names(accounts: &Accounts) -> Vec<String> {
    accounts
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .collect()
}

#[tokio::test]
async fn the_first_admin_is_not_made_beside_a_user_being_added() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone());
    let first = decided_beside_a_user_being_added(&db.pool, {
        let accounts = accounts.clone();
        async move { accounts.ensure_first_admin(Some(PASSWORD)).await }
    })
    .await;
    assert_eq!(first.unwrap(), None);
    assert_eq!(names(&accounts).await, ["bob"]);
}

#[tokio::test]
async fn the_setup_link_makes_no_admin_beside_a_user_being_added() {
    let db = test_db().await;
    let accounts = Accounts::new(db.pool.clone()).with_setup_link(SetupLink::with_code("the-code"));
    let pass = accounts
        .check_setup_code("the-code", ip(1))
        .await
        .expect("the live code");
    let refused = decided_beside_a_user_being_added(&db.pool, {
        let accounts = accounts.clone();
        async move { accounts.set_up_first_admin(pass, "alice", PASSWORD).await }
    })
    .await;
    assert!(matches!(refused, Err(SetupError::NotFound)), "{refused:?}");
    assert_eq!(names(&accounts).await, ["bob"]);
    // The link is spent.
    assert!(matches!(
        accounts.check_setup_code("the-code", ip(1)).await,
        Err(SetupError::NotFound)
    ));
}

/// A PHC string no password matches (the test's user never signs in).
fn password_hash_of_nobody() -> &'static str {
    "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
}
