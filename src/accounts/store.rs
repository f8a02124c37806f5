//! SQL of the `users` and `login_failures` tables.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgExecutor;

use super::role::Role;

/// The columns a [`User`] is read from.
const USER_COLUMNS: &str = "id, name, role, disabled, created_at, session_epoch";

/// An account, without its password hash (which never leaves this module but for verifying).
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub role: Role,
    pub disabled: bool,
    pub created_at: DateTime<Utc>,
    /// Raised by every password change: sessions signed in with an older value end.
    pub session_epoch: i32,
}

/// A user with the hash to verify a login against.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Credentials {
    #[sqlx(flatten)]
    pub user: User,
    pub password_hash: String,
}

pub async fn user_insert<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    role: Role,
    password_hash: &str,
) -> Result<User, sqlx::Error> {
    sqlx::query_as(&format!(
        "INSERT INTO users (name, role, password_hash) VALUES ($1, $2, $3)
         RETURNING {USER_COLUMNS}"
    ))
    .bind(name)
    .bind(role)
    .bind(password_hash)
    .fetch_one(db)
    .await
}

/// Inserts the first user (an admin) if the table holds no user at all, neither committed nor
/// being inserted; `None` otherwise. Runs in the caller's transaction, which it locks the table
/// for.
///
/// A check for an empty table alone would let two transactions each see it empty and both insert
/// (two nodes starting together, two setup links, `kickoff user add` beside either: with
/// different names, no unique index stops the second). `SHARE ROW EXCLUSIVE` conflicts with
/// itself and with the lock every insert, update and delete takes, but not with reads: an insert
/// in flight elsewhere commits first and is then seen by the check, and any later one waits
/// until this transaction ends. The check and the insert are one step.
pub async fn user_insert_first(
    tx: &mut sqlx::PgConnection,
    name: &str,
    role: Role,
    password_hash: &str,
) -> Result<Option<User>, sqlx::Error> {
    sqlx::query("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    sqlx::query_as(&format!(
        "INSERT INTO users (name, role, password_hash)
         SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM users)
         RETURNING {USER_COLUMNS}"
    ))
    .bind(name)
    .bind(role)
    .bind(password_hash)
    .fetch_optional(&mut *tx)
    .await
}

pub async fn user_get<'e>(db: impl PgExecutor<'e>, id: i64) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
        .bind(id)
        .fetch_optional(db)
        .await
}

/// The user named `name` (already normalized) and its password hash.
pub async fn user_get_credentials<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
) -> Result<Option<Credentials>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {USER_COLUMNS}, password_hash FROM users WHERE name = $1"
    ))
    .bind(name)
    .fetch_optional(db)
    .await
}

/// All users, by name.
pub async fn user_list<'e>(db: impl PgExecutor<'e>) -> Result<Vec<User>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {USER_COLUMNS} FROM users ORDER BY name"))
        .fetch_all(db)
        .await
}

pub async fn user_count<'e>(db: impl PgExecutor<'e>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT count(*) FROM users")
        .fetch_one(db)
        .await
}

/// The password hash of an account an application's own sign-in vouches for (see
/// [`user_mirror`]): no PHC string, so no password verifies against it.
pub const APPLICATION_SIGNED: &str = "!signed in by the application";

/// The account of `name`, as the application's sign-in says (`role`): made if there is none
/// (with no password: [`APPLICATION_SIGNED`]), given `role` if it has another (written only
/// then). Its `disabled` flag stays: an admin may still disable it here. `None` when the name is
/// an account with a password of its own here: the application's user of that name is not it.
pub async fn user_mirror<'e>(
    db: impl PgExecutor<'e>,
    name: &str,
    role: Role,
) -> Result<Option<User>, sqlx::Error> {
    // The main query reads the table as it was before the insert: an account of the application
    // left as it was is the second branch's.
    sqlx::query_as(&format!(
        "WITH up AS (
             INSERT INTO users (name, role, password_hash) VALUES ($1, $2, '{APPLICATION_SIGNED}')
             ON CONFLICT (name) DO UPDATE SET role = EXCLUDED.role, updated_at = now()
                 WHERE users.password_hash = '{APPLICATION_SIGNED}' AND users.role <> EXCLUDED.role
             RETURNING {USER_COLUMNS})
         SELECT {USER_COLUMNS} FROM up
         UNION ALL
         SELECT {USER_COLUMNS} FROM users
          WHERE name = $1 AND password_hash = '{APPLICATION_SIGNED}' AND NOT EXISTS (SELECT 1 FROM up)"
    ))
    .bind(name)
    .bind(role)
    .fetch_optional(db)
    .await
}

pub async fn user_set_role<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    role: Role,
) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE users SET role = $2, updated_at = now() WHERE id = $1
         RETURNING {USER_COLUMNS}"
    ))
    .bind(id)
    .bind(role)
    .fetch_optional(db)
    .await
}

pub async fn user_set_disabled<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    disabled: bool,
) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE users SET disabled = $2, updated_at = now() WHERE id = $1
         RETURNING {USER_COLUMNS}"
    ))
    .bind(id)
    .bind(disabled)
    .fetch_optional(db)
    .await
}

/// Locks the rows of the enabled admins (until the transaction ends) and returns their ids: a
/// change that could leave no admin takes this first, so two admins demoting each other at once
/// cannot both pass the "another admin remains" check.
pub async fn user_lock_enabled_admins<'e>(
    db: impl PgExecutor<'e>,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM users WHERE role = 'admin' AND NOT disabled ORDER BY id FOR UPDATE",
    )
    .fetch_all(db)
    .await
}

/// Sets the password of account `id`; `None` when there is no such account, or it is one the
/// application's sign-in vouches for (it has no password here: see [`user_mirror`]).
pub async fn user_set_password_hash<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    password_hash: &str,
) -> Result<Option<User>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE users SET password_hash = $2, session_epoch = session_epoch + 1, updated_at = now()
         WHERE id = $1 AND password_hash <> '{APPLICATION_SIGNED}'
         RETURNING {USER_COLUMNS}"
    ))
    .bind(id)
    .bind(password_hash)
    .fetch_optional(db)
    .await
}

/// What a failure counter is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginScope {
    /// The lowercased login name, existing or not.
    Name,
    /// An IPv4 address or an IPv6 /64 network.
    Address,
}

impl LoginScope {
    pub fn as_str(self) -> &'static str {
        match self {
            LoginScope::Name => "name",
            LoginScope::Address => "address",
        }
    }
}

/// One failure counter, as a statement left it, with the database's clock of that statement.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct LoginCounter {
    /// Failed attempts in the window, and attempts still being checked.
    pub failures: i32,
    pub window_started_at: DateTime<Utc>,
    pub locked_until: Option<DateTime<Utc>>,
    pub now: DateTime<Utc>,
}

impl LoginCounter {
    /// Whether the key is locked out now.
    pub fn locked(&self) -> bool {
        self.locked_until.is_some_and(|until| until > self.now)
    }

    /// Whole seconds until the lock ends (at least 1 while locked).
    pub fn lock_remaining_secs(&self) -> u64 {
        match self.locked_until {
            Some(until) if until > self.now => {
                let ms = (until - self.now).num_milliseconds().max(0) as u64;
                ms.div_ceil(1000).max(1)
            }
            _ => 0,
        }
    }
}

/// Takes a place in the key's count for an attempt about to be checked, and returns the counter.
///
/// A locked key is left as it is (an attempt against a lock is not checked, so it is not counted).
/// A window older than `window`, or one that ended in a lock that is over, starts again at this
/// attempt. The row lock of the upsert orders concurrent attempts: each gets its own count.
/// `now`: the database clock unless given (tests pin it).
pub async fn login_failure_reserve<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    window: Duration,
    now: Option<DateTime<Utc>>,
) -> Result<LoginCounter, sqlx::Error> {
    // In DO UPDATE, `excluded.window_started_at` is this attempt's clock (the value the insert
    // would have written).
    sqlx::query_as(
        "INSERT INTO login_failures AS f (scope, key, failures, window_started_at)
         VALUES ($1, $2, 1, coalesce($3, now()))
         ON CONFLICT (scope, key) DO UPDATE SET
             failures = CASE
                 WHEN f.locked_until > excluded.window_started_at THEN f.failures
                 WHEN f.locked_until IS NOT NULL
                   OR f.window_started_at <= excluded.window_started_at - $4 * interval '1 second'
                 THEN 1
                 ELSE f.failures + 1 END,
             window_started_at = CASE
                 WHEN f.locked_until > excluded.window_started_at THEN f.window_started_at
                 WHEN f.locked_until IS NOT NULL
                   OR f.window_started_at <= excluded.window_started_at - $4 * interval '1 second'
                 THEN excluded.window_started_at
                 ELSE f.window_started_at END,
             locked_until = CASE
                 WHEN f.locked_until > excluded.window_started_at THEN f.locked_until END
         RETURNING failures, window_started_at, locked_until, coalesce($3, now()) AS now",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(now)
    .bind(window.as_secs_f64())
    .fetch_one(db)
    .await
}

/// The attempt failed: its place stays counted, and the key is locked for `lock` when the count
/// has reached `lock_after`. `None` when the row is gone (a success cleared it meanwhile).
pub async fn login_failure_confirm<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    lock_after: i32,
    lock: Duration,
    now: Option<DateTime<Utc>>,
) -> Result<Option<LoginCounter>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE login_failures SET locked_until = CASE
             WHEN failures >= $3 AND NOT coalesce(locked_until > coalesce($5, now()), false)
             THEN coalesce($5, now()) + $4 * interval '1 second'
             ELSE locked_until END
         WHERE scope = $1 AND key = $2
         RETURNING failures, window_started_at, locked_until, coalesce($5, now()) AS now",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(lock_after)
    .bind(lock.as_secs_f64())
    .bind(now)
    .fetch_optional(db)
    .await
}

/// Counts an attempt refused unchecked because `key` is locked until `locked_until`.
pub async fn login_lock_refused<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    locked_until: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO login_lock_refusals AS r (scope, key, locked_until, refused)
         VALUES ($1, $2, $3, 1)
         ON CONFLICT (scope, key, locked_until) DO UPDATE SET refused = r.refused + 1",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(locked_until)
    .execute(db)
    .await?;
    Ok(())
}

/// Writes one audit entry for each lock that is over (at `now`, the database clock unless given)
/// with how many attempts it refused unchecked, and forgets those counts, in one statement. A
/// name lock's name is written only when it names an account (a name nobody has may be a
/// password typed into the wrong field).
/// Returns the entries written.
pub async fn login_lock_refusals_flush<'e>(
    db: impl PgExecutor<'e>,
    now: Option<DateTime<Utc>>,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "WITH over AS (
             DELETE FROM login_lock_refusals WHERE locked_until <= coalesce($1, now())
             RETURNING scope, key, locked_until, refused, first_at)
         INSERT INTO audit_log (at, actor, role, action, target, count, address, ok, result)
         SELECT locked_until,
                CASE WHEN scope <> 'name' THEN '?' WHEN known THEN left(key, 100)
                     ELSE '(unknown name)' END,
                'none', 'session.sign_in',
                left(scope || ' ' || CASE WHEN scope <> 'name' OR known THEN key
                                          ELSE '(unknown name)' END
                     || ' locked from before '
                     || to_char(first_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                     || ' to ' || to_char(locked_until AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')
                     || ' UTC', 2000),
                refused,
                CASE WHEN scope = 'address' THEN key::inet END,
                false,
                'refused unchecked while locked: ' || refused || ' attempts'
         FROM (SELECT over.*, EXISTS (SELECT 1 FROM users WHERE users.name = over.key) AS known
               FROM over) over",
    )
    .bind(now)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// The attempt succeeded or was not checked: gives its place back, if the window it was counted
/// in (`window_started_at`, from the reservation) is still the current one.
pub async fn login_failure_release<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    window_started_at: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE login_failures SET failures = greatest(failures - 1, 0)
         WHERE scope = $1 AND key = $2 AND window_started_at = $3",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(window_started_at)
    .execute(db)
    .await?;
    Ok(())
}

/// Starts the key's count over (a successful login), unless it is locked: a lock set by a
/// concurrent failed attempt stays.
pub async fn login_failure_clear<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    now: Option<DateTime<Utc>>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM login_failures
         WHERE scope = $1 AND key = $2 AND NOT coalesce(locked_until > coalesce($3, now()), false)",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(now)
    .execute(db)
    .await?;
    Ok(())
}

/// The counter of one key, if it has one (for tests and the dashboard).
pub async fn login_failure_get<'e>(
    db: impl PgExecutor<'e>,
    scope: LoginScope,
    key: &str,
    now: Option<DateTime<Utc>>,
) -> Result<Option<LoginCounter>, sqlx::Error> {
    sqlx::query_as(
        "SELECT failures, window_started_at, locked_until, coalesce($3, now()) AS now
         FROM login_failures WHERE scope = $1 AND key = $2",
    )
    .bind(scope.as_str())
    .bind(key)
    .bind(now)
    .fetch_optional(db)
    .await
}

/// Deletes counters that no longer count: their window is over and they hold no running lock.
/// Returns how many.
pub async fn login_failure_prune<'e>(
    db: impl PgExecutor<'e>,
    window: Duration,
    now: Option<DateTime<Utc>>,
) -> Result<u64, sqlx::Error> {
    let r = sqlx::query(
        "DELETE FROM login_failures
         WHERE window_started_at <= coalesce($2, now()) - $1 * interval '1 second'
           AND NOT coalesce(locked_until > coalesce($2, now()), false)",
    )
    .bind(window.as_secs_f64())
    .bind(now)
    .execute(db)
    .await?;
    Ok(r.rows_affected())
}

/// Counts one request of `key` in its `scope` (`token` or `address`) in the current window of
/// `period_ms` (aligned to the period by the database clock; see `kickoff_window_start`), and
/// returns the window's count with this request and the seconds left in the window.
///
/// The upsert's row lock orders concurrent requests of one key: each gets its own count. A row
/// of an older window starts again at this request; a request whose clock fell in a window
/// already superseded by a later one counts in that later one.
pub async fn request_window_take<'e>(
    db: impl PgExecutor<'e>,
    scope: &str,
    key: &str,
    period_ms: i32,
) -> Result<(i32, f64), sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO request_windows AS w (scope, key, window_start, window_end, used)
         SELECT $1, $2, s, s + make_interval(secs => $3 / 1000.0), 1
         FROM kickoff_window_start(clock_timestamp(), $3) AS s
         ON CONFLICT (scope, key) DO UPDATE SET
             used = CASE WHEN w.window_start >= excluded.window_start THEN w.used + 1 ELSE 1 END,
             window_start = greatest(w.window_start, excluded.window_start),
             window_end = greatest(w.window_end, excluded.window_end)
         RETURNING used, greatest(extract(epoch FROM window_end - clock_timestamp()), 0)::float8",
    )
    .bind(scope)
    .bind(key)
    .bind(period_ms)
    .fetch_one(db)
    .await
}

/// Deletes the request counts of windows that ended. Returns how many.
pub async fn request_windows_delete_ended<'e>(db: impl PgExecutor<'e>) -> Result<u64, sqlx::Error> {
    let r = sqlx::query("DELETE FROM request_windows WHERE window_end < now()")
        .execute(db)
        .await?;
    Ok(r.rows_affected())
}
