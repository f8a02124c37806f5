//! Which database errors are worth trying again.

/// Whether `e` may succeed if the same statement runs again: the connection or the server was
/// interrupted (I/O, a pool timeout, the server shutting down or cancelling the statement, too many
/// connections, a read-only server after a failover), or the transaction lost a race (a
/// serialization failure, a deadlock, a lock timeout). A constraint or data error, a syntax error,
/// or an exception a trigger raised deliberately is final.
pub fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => true,
        // A broken protocol exchange leaves the connection closed: a new one may work.
        sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| is_transient_code(&code)),
        _ => false,
    }
}

/// Whether `e` says the connection itself is gone (closed, reset, shut down by the server): the
/// statement never ran to its end, and the same statement on another connection may well work.
/// Not a timeout, a lock or a conflict: those are answers of a live connection.
pub fn is_connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}

/// SQLSTATE codes of errors that a retry may get past.
fn is_transient_code(code: &str) -> bool {
    matches!(
        code,
        // 40001 serialization failure, 40P01 deadlock, 40003 statement completion unknown
        "40001" | "40P01" | "40003"
        // read-only transaction (a standby after a failover, or a server set read-only)
        | "25006"
        // lock not available (lock_timeout)
        | "55P03"
        // query cancelled (statement_timeout, pg_cancel_backend)
        | "57014"
    ) || code.starts_with("08") // connection exception
        || code.starts_with("53") // insufficient resources (too many connections, disk full)
        || code.starts_with("57P") // admin or crash shutdown, cannot connect now
        || code.starts_with("58") // system error (I/O)
}

#[cfg(test)]
mod tests {
    use super::is_transient_code;

    #[test]
    fn races_and_outages_are_transient_and_bad_data_is_not() {
        for code in [
            "40001", "40P01", "57P01", "57P02", "57P03", "25006", "57014", "08006", "53300",
            "55P03",
        ] {
            assert!(is_transient_code(code), "{code}");
        }
        for code in ["23505", "23514", "22P02", "42P01", "P0001", "42501"] {
            assert!(!is_transient_code(code), "{code}");
        }
    }
}
