//! What a cancellation reports of each job it moved.

use crate::engine::job::{Claim, ClaimToken, JobId, JobState};

/// A job a cancellation moved: its state before, and the claim of its attempt if it was
/// executing (that attempt is to be stopped on its node, and only that one).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct CancelledJob {
    pub id: JobId,
    pub before: JobState,
    pub claim_token: Option<ClaimToken>,
}

impl CancelledJob {
    /// The claim of the attempt that was running when the job was cancelled.
    pub fn claim(&self) -> Option<Claim> {
        self.claim_token.map(|token| Claim { id: self.id, token })
    }
}
