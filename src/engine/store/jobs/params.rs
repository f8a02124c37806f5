//! How the job statements bind what Rust holds: ids, claims and durations as parameters.

use std::time::Duration;

use crate::engine::job::{Claim, JobId};

/// Claims as the two arrays `unnest($1::bigint[], $2::bigint[])` takes.
pub(super) fn split_claims(claims: &[Claim]) -> (Vec<i64>, Vec<i64>) {
    claims.iter().map(|c| (c.id.0, c.token.0)).unzip()
}

/// A duration as the seconds of `make_interval(secs => $n)`.
pub(super) fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Ids as the array `= ANY($1::bigint[])` takes.
pub(super) fn ids_param(ids: &[JobId]) -> Vec<i64> {
    ids.iter().map(|id| id.0).collect()
}
