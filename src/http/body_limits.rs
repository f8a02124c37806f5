//! The largest request bodies the server reads: the API's and the dashboard's (its forms and
//! server functions), each answered 413 past its bound.

/// The largest request body the API reads.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The largest body a dashboard request may carry (its forms send a few kilobytes; a new job's
/// args are limited to 256 KiB by the engine).
pub const MAX_DASHBOARD_BODY_BYTES: usize = 1024 * 1024;
