//! Webhook endpoints and the signature of every call to them (issue 17, Standard Webhooks).
//!
//! - An **endpoint** is a URL prefix with a signing secret (`whsec_` + base64 of 32 random bytes
//!   from the OS generator). The secret is shown once, when it is made; the database keeps it
//!   sealed with the server's [`SecretKey`] (see `key`), so a dump alone does not reveal it.
//! - A webhook call whose URL starts with an endpoint's prefix (the longest prefix wins) carries
//!   `webhook-signature`: `v1,` + base64 HMAC-SHA256 of `webhook-id.webhook-timestamp.body` (see
//!   `signing`); during a rotation's overlap, the previous secret's signature too, space-separated;
//!   after it the leader drops the previous secret (`sweeper`).
//! - An endpoint may carry **default headers** (an `Authorization` for the partner, say), sent with
//!   every call under it beneath the job's own (see `headers`); sealed like the secret, shown by
//!   name only.
//! - An endpoint may **allow calls** under its prefix: the allowlist kept in the database, beside
//!   `KICKOFF_WEBHOOK_ALLOWED_HOSTS`, checked when a job is inserted and again before each call.
//!   A prefix matches a URL at a boundary only (`https://partner.example` is not a prefix of
//!   `https://partner.example.evil.test/`).
//! - An endpoint may **send signals** to the live runs of the workflows it names
//!   (`signal_workflows`): its calls to `POST /api/v1/inbound/{endpoint}/signals` are signed with
//!   the same secret, and checked (see `inbound`).
//! - Admins manage endpoints through the REST API (`http::api_webhook_endpoints`); every change is
//!   audited, and no answer after the creation or rotation carries a secret.

pub mod deliveries;
pub mod headers;
pub mod inbound;
pub mod key;
pub mod service;
pub mod signing;
pub mod store;
pub mod sweeper;

/// The job kind that makes webhook calls (run by `workers::webhook`; named here so that floor 2
/// can insert webhook jobs, as the alerts' notifications, without importing the worker).
pub const WEBHOOK_KIND: &str = "webhook";

pub use key::SecretKey;
pub use service::{EndpointError, EndpointSettings, Endpoints, NewSecret};
pub use store::EndpointRow;
