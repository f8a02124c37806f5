//! The database handle every part of Kickoff goes through: a sqlx pool, and the way to reach the
//! database through it ([`PoolMode`]).
//!
//! **Directly** (PostgreSQL itself, or PgBouncer in session mode) a [`Db`] is its pool: a statement
//! runs on any pooled connection, and a pool's settings (`synchronous_commit` for the claims,
//! `statement_timeout` for the web, ...) are sent once per connection, at log-in.
//!
//! **Behind a transaction pooler** (PgBouncer `pool_mode = transaction`; `PoolMode::Transaction`)
//! a client connection is lent a server connection for one transaction at a time, so nothing may
//! rely on a session. sqlx 0.8 relies on one in two ways: it prepares a statement (`Parse`, `Sync`)
//! and only then binds and runs it (`Bind`, `Execute`, `Sync`), two round trips between which the
//! pooler may hand the client another server; and it names its statements (`sqlx_s_1`, ...) per
//! client connection, names which collide on a server that two clients used. So here:
//!
//! - every statement runs inside a transaction: a statement sent to the `Db` itself (`.execute(&db)`)
//!   gets one of its own, and [`Db::begin`] opens the others. The pooler keeps one server for the
//!   whole of a transaction, both round trips included;
//! - each transaction opens with `DEALLOCATE ALL` (in the same message as its `BEGIN`: no extra
//!   round trip), which drops whatever statements an earlier client left on that server, and sqlx
//!   caches none (`statement_cache_capacity = 0`), so each statement is prepared in the transaction
//!   that runs it;
//! - a pool's settings become `SET LOCAL` in that same message (PgBouncer 1.18 refuses the startup
//!   `options` that carry them directly), and sqlx's `extra_float_digits` startup parameter, which
//!   it refuses too, is not sent;
//! - what needs a session gets a direct connection of its own: LISTEN and the migrations'
//!   advisory lock (`KICKOFF_LISTEN_DATABASE_URL`), or does without (the node then polls).
//!
//! That works with PgBouncer 1.18 (Debian 12's), which knows nothing of prepared statements; 1.21's
//! `max_prepared_statements` is not needed. The cost is two round trips per statement run alone
//! (measured in docs/BENCHMARKS.md, "Through PgBouncer").

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow, PgStatement, PgTypeInfo,
};
use sqlx::{Describe, Either, Execute, Executor, PgConnection, PgPool, Postgres, Transaction};

/// How long a pooled connection of the engine's own pools may sit idle and still be handed out
/// without a ping first (see [`ping_when_idle`]).
pub const IDLE_BEFORE_PING: std::time::Duration = std::time::Duration::from_secs(1);

/// `options` with a ping before a checkout only for a connection idle longer than
/// [`IDLE_BEFORE_PING`]. sqlx pings before every checkout by default: a round trip before every
/// claim, every batch of outcomes and every beat of the engine's own pools (and behind a
/// transaction pooler, a server's round trip too). Under load those connections are used every
/// few milliseconds; one idle for longer (a quiet node, or one whose database restarted
/// meanwhile) is still pinged, and closed and replaced when it does not answer. (sqlx 0.8 also
/// pings each connection as it goes back to the pool, in the background, off the statement's
/// path: that one stays, and drops a connection that died in use. After a restart, a connection
/// used within the last second fails its next statement once, and the statement's own retry
/// takes another.)
pub fn ping_when_idle(options: PgPoolOptions) -> PgPoolOptions {
    ping_when_idle_over(options, IDLE_BEFORE_PING)
}

/// [`ping_when_idle`] with another bound than [`IDLE_BEFORE_PING`].
pub fn ping_when_idle_over(options: PgPoolOptions, idle: std::time::Duration) -> PgPoolOptions {
    options
        .test_before_acquire(false)
        .before_acquire(move |conn, meta| {
            Box::pin(async move {
                if meta.idle_for > idle {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
}

/// Runs `$call` (an action taking a transaction as `$tx`) in a transaction of `$owner.pool`,
/// committed when it succeeds: how a `*_with(conn, …)` method becomes the method that needs no
/// connection of the caller's.
macro_rules! in_transaction {
    ($owner:expr, |$tx:ident| $call:expr) => {{
        let mut tx = $owner.pool.begin().await?;
        let done = {
            let $tx: &mut sqlx::PgConnection = &mut tx;
            $call.await?
        };
        tx.commit().await?;
        Ok(done)
    }};
}
pub(crate) use in_transaction;

/// How Kickoff reaches PostgreSQL through `DATABASE_URL` (`KICKOFF_DATABASE_POOL_MODE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PoolMode {
    /// PostgreSQL itself, or a pooler in session mode: a connection is a session.
    #[default]
    Direct,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`, RDS Proxy, Supavisor):
    /// a server connection is kept for one transaction only.
    Transaction,
}

impl PoolMode {
    /// The connect options to reach the database in this mode.
    pub fn connect_options(self, options: PgConnectOptions) -> PgConnectOptions {
        match self {
            PoolMode::Direct => options,
            PoolMode::Transaction => options.extra_float_digits(None).statement_cache_capacity(0),
        }
    }
}

impl FromStr for PoolMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "direct" => Ok(PoolMode::Direct),
            "transaction" => Ok(PoolMode::Transaction),
            other => Err(format!(
                "unknown pool mode {other:?}: expected \"direct\" or \"transaction\""
            )),
        }
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolMode::Direct => "direct",
            PoolMode::Transaction => "transaction",
        })
    }
}

/// A pool and how to use it (see the module doc). Cheap to clone; `&Db` is a sqlx executor.
#[derive(Clone)]
pub struct Db {
    pool: PgPool,
    mode: PoolMode,
    /// Behind a transaction pooler: the message that opens each transaction.
    begin: Arc<str>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl From<PgPool> for Db {
    /// A pool reaching PostgreSQL directly.
    fn from(pool: PgPool) -> Db {
        Db::new(pool, PoolMode::Direct)
    }
}

impl Db {
    /// `pool`, reaching the database as `mode` says (its connect options made with
    /// [`PoolMode::connect_options`]).
    pub fn new(pool: PgPool, mode: PoolMode) -> Db {
        Db {
            pool,
            mode,
            begin: begin_statement(&[]).into(),
        }
    }

    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// The pool underneath. A statement sent to it directly, outside a transaction of
    /// [`Db::begin`], does not survive a transaction pooler: use it for what needs the pool
    /// itself (its size, its options, closing it).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// A pool of its own beside this one, on the same database: connections named
    /// `<application_name>-<role>` in `pg_stat_activity`, with `settings` in force in every
    /// statement (sent at log-in directly, `SET LOCAL` in each transaction behind a pooler).
    pub fn beside(&self, role: &str, settings: &[(&str, String)], options: PgPoolOptions) -> Db {
        let connect = with_role((*self.pool.connect_options()).clone(), role);
        match self.mode {
            PoolMode::Direct => Db {
                pool: options.connect_lazy_with(
                    connect.options(settings.iter().map(|(k, v)| (*k, v.as_str()))),
                ),
                mode: self.mode,
                begin: self.begin.clone(),
            },
            PoolMode::Transaction => Db {
                pool: options.connect_lazy_with(connect),
                mode: self.mode,
                begin: begin_statement(settings).into(),
            },
        }
    }

    /// Begins a transaction on a pooled connection.
    ///
    /// sqlx 0.8's `Pool::begin` is not cancel-safe on PostgreSQL (transact-rs/sqlx#4393): a
    /// future dropped while its `BEGIN` is on the wire leaves the connection inside a transaction
    /// that nothing rolls back, and the pool hands it on; the next borrower's statements run in it
    /// and keep its row locks (every sign-in from one address stalled for the statement timeout
    /// once). So the begin runs as a task of its own: a caller that goes away (a client that
    /// disconnects, a timeout) leaves it to finish, and the transaction it made is dropped there,
    /// rolled back, before the connection goes back to the pool.
    pub async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let pool = self.pool.clone();
        let begin = match self.mode {
            PoolMode::Direct => None,
            PoolMode::Transaction => Some(self.begin.to_string()),
        };
        let began = tokio::spawn(async move {
            match begin {
                None => pool.begin().await,
                Some(statement) => pool.begin_with(statement).await,
            }
        });
        match began.await {
            Ok(tx) => tx,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The runtime is shutting down.
            Err(_) => Err(sqlx::Error::PoolClosed),
        }
    }

    /// A connection held for a few statements in a row, each of which commits on its own in
    /// either mode (behind a transaction pooler, each runs in a transaction of its own on it).
    pub async fn connection(&self) -> Result<DbConn, sqlx::Error> {
        Ok(DbConn {
            conn: self.pool.acquire().await?,
            begin: (self.mode == PoolMode::Transaction).then(|| self.begin.clone()),
            beginning: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A connection for a unit of work that expects a [`PgConnection`] of its own outside any
    /// transaction (a check, then an insert): directly, a pooled connection on which each statement
    /// commits as it runs; behind a transaction pooler, a transaction, whose statements commit
    /// together at [`Unit::commit`], and not at all if it is dropped first. Call `commit` once the
    /// statements succeeded, whatever the mode.
    pub async fn unit(&self) -> Result<Unit, sqlx::Error> {
        Ok(match self.mode {
            PoolMode::Direct => Unit::Direct(self.pool.acquire().await?),
            PoolMode::Transaction => Unit::Pooled(self.begin().await?),
        })
    }

    /// Closes the pool (see [`PgPool::close`]).
    pub async fn close(&self) {
        self.pool.close().await
    }
}

/// Runs `query` alone in the transaction `begin` opens, committed once its results are in: they
/// are gathered first, so that a caller that stops reading half way leaves no transaction open
/// (nothing here streams large results).
fn fetch_many_alone<'t: 'e, 'e, 'q: 'e, E>(
    begin: impl Future<Output = Result<Transaction<'t, Postgres>, sqlx::Error>> + Send + 'e,
    query: E,
) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
where
    E: 'q + Execute<'q, Postgres>,
{
    stream::once(async move {
        let mut tx = begin.await?;
        let all: Vec<_> = tx.fetch_many(query).try_collect().await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(stream::iter(all.into_iter().map(Ok)))
    })
    .try_flatten()
    .boxed()
}

/// [`fetch_many_alone`] for at most one row.
fn fetch_optional_alone<'t: 'e, 'e, 'q: 'e, E>(
    begin: impl Future<Output = Result<Transaction<'t, Postgres>, sqlx::Error>> + Send + 'e,
    query: E,
) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
where
    E: 'q + Execute<'q, Postgres>,
{
    Box::pin(async move {
        let mut tx = begin.await?;
        let row = tx.fetch_optional(query).await?;
        tx.commit().await?;
        Ok(row)
    })
}

/// A connection of [`Db::connection`]; `&mut DbConn` is a sqlx executor.
pub struct DbConn {
    conn: PoolConnection<Postgres>,
    /// Behind a transaction pooler: what opens the transaction each statement runs in.
    begin: Option<Arc<str>>,
    /// A `BEGIN` was sent and its answer not read (the statement was given up on): the
    /// connection may be inside a transaction nothing will end (see [`Db::begin`]), so it is
    /// closed when dropped, not handed on.
    beginning: Arc<AtomicBool>,
}

impl Drop for DbConn {
    fn drop(&mut self) {
        if self.beginning.load(Ordering::Acquire) {
            self.conn.close_on_drop();
        }
    }
}

/// `begin`, with `beginning` set until it answered.
fn begin_marked<'c>(
    conn: &'c mut PgConnection,
    statement: &str,
    beginning: Arc<AtomicBool>,
) -> impl Future<Output = Result<Transaction<'c, Postgres>, sqlx::Error>> + Send + 'c {
    beginning.store(true, Ordering::Release);
    let begin = sqlx::Connection::begin_with(conn, statement.to_string());
    async move {
        let tx = begin.await;
        beginning.store(false, Ordering::Release);
        tx
    }
}

impl fmt::Debug for DbConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbConn")
            .field("pooled", &self.begin.is_some())
            .finish_non_exhaustive()
    }
}

impl DbConn {
    /// The connection is closed instead of going back to the pool (a statement cut short by a
    /// timeout may still run on it).
    pub fn close_on_drop(&mut self) {
        self.conn.close_on_drop();
    }
}

impl<'c> Executor<'c> for &'c mut DbConn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.begin.clone() {
            None => self.conn.fetch_many(query),
            Some(begin) => fetch_many_alone(
                begin_marked(&mut self.conn, &begin, self.beginning.clone()),
                query,
            ),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.begin.clone() {
            None => self.conn.fetch_optional(query),
            Some(begin) => fetch_optional_alone(
                begin_marked(&mut self.conn, &begin, self.beginning.clone()),
                query,
            ),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.conn.describe(sql)
    }
}

/// A connection of [`Db::unit`].
pub enum Unit {
    Direct(PoolConnection<Postgres>),
    Pooled(Transaction<'static, Postgres>),
}

impl Unit {
    /// Commits what the statements wrote behind a transaction pooler (directly, each committed as
    /// it ran).
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Unit::Direct(_) => Ok(()),
            Unit::Pooled(tx) => tx.commit().await,
        }
    }
}

impl Deref for Unit {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Unit::Direct(conn) => conn,
            Unit::Pooled(tx) => tx,
        }
    }
}

impl DerefMut for Unit {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Unit::Direct(conn) => conn,
            Unit::Pooled(tx) => tx,
        }
    }
}

/// `BEGIN`, then `settings` for this transaction only, then the server's prepared statements
/// dropped: one simple-protocol message, one round trip.
fn begin_statement(settings: &[(&str, String)]) -> String {
    let mut sql = String::from("BEGIN");
    for (name, value) in settings {
        // Names and values are Kickoff's own (never input); quoted all the same.
        sql.push_str(&format!(
            "; SET LOCAL {name} = '{}'",
            value.replace('\'', "''")
        ));
    }
    sql.push_str("; DEALLOCATE ALL");
    sql
}

impl<'c> Executor<'c> for &'c Db {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.mode {
            PoolMode::Direct => self.pool.fetch_many(query),
            PoolMode::Transaction => fetch_many_alone(self.begin(), query),
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        match self.mode {
            PoolMode::Direct => self.pool.fetch_optional(query),
            PoolMode::Transaction => fetch_optional_alone(self.begin(), query),
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        // A prepared statement outlives its transaction, which a transaction pooler does not
        // allow; Kickoff prepares nothing explicitly.
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        self.pool.describe(sql)
    }
}

/// `options` named for `role`: their application name (or `kickoff`) followed by `-<role>`, so
/// that `pg_stat_activity` tells a node's connections and their use apart.
pub fn with_role(options: PgConnectOptions, role: &str) -> PgConnectOptions {
    let name = match options.get_application_name() {
        Some(base) => format!("{base}-{role}"),
        None => format!("kickoff-{role}"),
    };
    options.application_name(&name)
}
