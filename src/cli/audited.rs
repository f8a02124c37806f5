//! What the command line changes on the database is audited like the dashboard's and the API's
//! actions: named after the shell's user (`cli (ops)`), as an admin (the command line holds the
//! database), committed with its change, a refusal recorded too.

use std::fmt::Display;

use crate::audit::{AuditEntry, Auditor, NotRecorded};

/// The entry of `action` on `target`, by the command line's user.
pub fn entry(action: &str, target: String) -> AuditEntry {
    AuditEntry {
        actor: format!(
            "cli ({})",
            std::env::var("USER").unwrap_or_else(|_| "unknown".into())
        ),
        role: "admin".into(),
        action: action.to_string(),
        target: Some(target),
        filter: None,
        count: None,
        address: None,
        result: Ok(()),
    }
}

/// An action refused (or its entry not recorded): why.
struct Failure(String);

impl From<NotRecorded> for Failure {
    fn from(e: NotRecorded) -> Self {
        Failure(e.to_string())
    }
}

/// Runs `run` in a transaction committed with its audit entry; a refusal is recorded too.
pub async fn run<T, E: Display>(
    auditor: &Auditor,
    entry: impl Fn() -> AuditEntry,
    run: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, E>,
) -> Result<T, String> {
    let done: Result<T, Failure> = auditor
        .run(
            entry(),
            |_| None,
            async |work| {
                let conn = work.conn().await.map_err(|e| Failure(e.to_string()))?;
                run(conn).await.map_err(|e| Failure(e.to_string()))
            },
        )
        .await;
    if let Err(Failure(why)) = &done {
        let refused = AuditEntry {
            result: Err(why.clone()),
            ..entry()
        };
        auditor.record_first(&refused).await.ok();
    }
    done.map_err(|Failure(why)| why)
}
