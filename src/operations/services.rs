//! The services an operation reaches, borrowed from the surface that calls it.

use crate::audit::{AuditEntry, Auditor};
use crate::engine::Client;
use crate::questions::QuestionService;

/// The shared use cases, over the services a surface holds. Cheap: it borrows them.
#[derive(Clone, Copy)]
pub struct Operations<'a> {
    pub client: &'a Client,
    pub questions: &'a QuestionService,
    pub auditor: &'a Auditor,
}

impl<'a> Operations<'a> {
    pub fn new(client: &'a Client, questions: &'a QuestionService, auditor: &'a Auditor) -> Self {
        Operations {
            client,
            questions,
            auditor,
        }
    }

    /// Records `entry` as refused with `e`, worded by `why` (nothing it names changed), and
    /// answers `e`: an operation records every outcome of its own.
    pub(super) async fn refused<E>(&self, entry: AuditEntry, e: E, why: fn(&E) -> String) -> E {
        self.auditor
            .record(AuditEntry {
                count: None,
                result: Err(why(&e)),
                ..entry
            })
            .await;
        e
    }
}
