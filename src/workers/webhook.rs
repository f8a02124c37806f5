//! `webhook`: an HTTP call at a set time. A non-2xx answer or a timeout fails the attempt (retried
//! with backoff); a non-2xx answer with `kickoff-no-retry: true` fails the job for good (it is
//! discarded: how a worker in another language says no retry can help, docs/workers.md). Only hosts in `KICKOFF_WEBHOOK_ALLOWED_HOSTS` (an entry without a port: on the
//! scheme's default port only), and URLs under a webhook endpoint that allows calls (see
//! `crate::webhooks`), may be called: the check runs at insert time (a clear error; the
//! endpoints are read on the inserting connection) and again before each call (either may have
//! changed). The call carries the longest matching endpoint's signature and default headers,
//! beneath the job's own headers.
//!
//! Args: `url` (http or https), `method` (default POST), `headers` (object of strings), `body`
//! (JSON), `timeout_ms` (1 to 300000, default 10000).
//!
//! # Where a call may connect
//!
//! The allowlist names hosts, but a host name is only as trustworthy as its DNS: a name that
//! resolved to a public address at insert time can resolve to `127.0.0.1`, `10.0.0.5` or the cloud
//! metadata service `169.254.169.254` when the job runs (DNS rebinding). So each attempt resolves
//! the host itself and checks every address it gets (see `webhook_address` for the classes):
//!
//! - **An IP literal** in the URL (`http://10.0.0.5:8080/`) is called whatever its class: it only
//!   gets past the allowlist if the operator listed that exact address, and no DNS is involved.
//! - **A host name** is called only if *every* address it resolves to is public. One private,
//!   loopback, link-local, ... answer refuses the attempt as fatal (not retried): `webhook host
//!   example.test resolves to 10.0.0.5, a private address: refused`.
//! - **A host name the operator marked** with the `private:` prefix in the allowlist
//!   (`private:billing.internal` or `private:billing.internal:8443`) may resolve to any address:
//!   the operator vouches for that name's DNS. Only the entry written with the prefix is trusted
//!   this way (`private:8443` alone is the host `private` on port 8443, unmarked). An endpoint
//!   that allows calls vouches the same way with `private_network`.
//!
//! The addresses checked are the addresses connected to: each call gets a client whose DNS
//! resolver is `PinnedResolver`, which answers the checked host with exactly the checked
//! addresses and fails for any other name. That is preferred over `ClientBuilder::resolve_to_addrs`
//! alone, which falls back to the system resolver for a name it was not given (a redirect, a
//! spelling of the host that misses its key): here any name we did not check fails closed instead
//! of reaching DNS. It is also preferred over one shared client with a validating resolver: the
//! refusal is decided in our code before any connection, so it is a clean fatal error rather than
//! a connect error to dig out of reqwest's error chain, and no pooled connection outlives a change
//! of the allowlist. The cost is a connection (and TLS setup) per call, which webhooks can afford.
//! The client also ignores `HTTP_PROXY` and friends: a proxy would resolve the host itself,
//! after our check.
//!
//! Redirects are never followed. Of an answer's body only the first
//! `webhooks::deliveries::BODY_CHARS` characters are kept in the delivery record and a failure's
//! error.
//!
//! # The answer as the attempt's output
//!
//! A 2xx answer whose body is JSON (`Content-Type: application/json` or `...+json`, at most
//! [`ANSWER_BYTES`]) is kept as the attempt's output beside the status and the duration
//! (`{"status": 200, "duration_ms": ..., "answer": {...}}`): a worker in another language
//! reports what it did, shown on the job's page, and a workflow step's dependents read it as the
//! step's output. Not when the call carried a credential, its endpoint's default headers or the
//! job's own (a header, a URL's user or query): what was read with it is the delivery record's,
//! shown whole to admins and the job's creator only. A signed call is no credential of that
//! kind (its signature proves who calls, it opens nothing): a worker's answer to it is kept.
//!
//! # The delivery record
//!
//! Every call, and every refusal before one, leaves a row in `webhook_deliveries` (see
//! `webhooks::deliveries`): when it started and how late, where it connected, the status, the
//! duration, the response's headers and the start of its body, or the error.
//!
//! # A receiver that asks us to wait
//!
//! A `429 Too Many Requests` or `503 Service Unavailable` with `Retry-After` (seconds, or an HTTP
//! date) snoozes the job until then instead of spending an attempt and its backoff: the attempt
//! number stays, `meta.snoozes` counts. Bounded: at most [`MAX_RETRY_AFTER`] (a longer wait is cut
//! to it), and at most [`MAX_SNOOZES`] times per job; past that the answer fails the attempt like
//! any other error. Without `Retry-After`, or with one that does not parse, it is an ordinary
//! failure.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use super::webhook_address::classify;
use crate::engine::{ArgsRefused, BoxFuture, JobContext, WorkError, Worker};
use crate::webhooks::deliveries::{
    capped, NewDelivery, BODY_CHARS, HEADER_NAME_CHARS, HEADER_VALUE_CHARS, MAX_HEADERS,
};

pub const KIND: &str = crate::webhooks::WEBHOOK_KIND;
const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const MAX_TIMEOUT_MS: u64 = 300_000;
/// The longest a receiver's `Retry-After` snoozes a call.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// The most times one job is snoozed by receivers' `Retry-After`.
pub const MAX_SNOOZES: u64 = 20;
/// The most bytes read of a response's body (a UTF-8 character is at most 4 bytes): the delivery
/// record and a failure's error keep its first [`BODY_CHARS`] characters.
const BODY_BYTES: usize = BODY_CHARS * 4;
/// The largest JSON answer kept as an attempt's output (an output's bound: what a node keeps of
/// an attempt, `engine::attempt_log::MAX_OUTPUT_BYTES`).
pub const ANSWER_BYTES: usize = crate::engine::attempt_log::MAX_OUTPUT_BYTES - 1024;
/// The allowlist prefix that lets a host name resolve to non-public addresses.
const PRIVATE_MARK: &str = "private:";
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookArgs {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Value>,
    #[serde(
        default,
        deserialize_with = "crate::engine::worker::optional_whole_number"
    )]
    timeout_ms: Option<u64>,
}

/// One `KICKOFF_WEBHOOK_ALLOWED_HOSTS` entry.
#[derive(Debug, Clone, PartialEq)]
struct AllowedHost {
    /// `host` or `host:port`, lower-cased, spelled as in a URL (an IPv6 address in brackets).
    host: String,
    /// Listed as `private:host`: the host name may resolve to non-public addresses.
    private_ok: bool,
}

impl AllowedHost {
    fn parse(entry: &str) -> Self {
        let entry = entry.trim().to_ascii_lowercase();
        match entry.strip_prefix(PRIVATE_MARK) {
            // `private:8443` is the host `private` on port 8443, not a marked host `8443`.
            Some(rest) if !rest.is_empty() && !rest.bytes().all(|b| b.is_ascii_digit()) => {
                AllowedHost {
                    host: rest.to_string(),
                    private_ok: true,
                }
            }
            _ => AllowedHost {
                host: entry,
                private_ok: false,
            },
        }
    }
}

/// A call whose args are well formed.
#[derive(Debug)]
struct CheckedCall {
    url: Url,
    method: reqwest::Method,
    timeout: Duration,
    /// The URL's host, lower-cased (an IPv6 literal in brackets).
    host: String,
    port: u16,
    /// `KICKOFF_WEBHOOK_ALLOWED_HOSTS` allows the host (else only an endpoint can).
    listed: bool,
    /// An allowlist entry (or an endpoint) allowing this host lets it resolve privately.
    private_ok: bool,
}

impl CheckedCall {
    fn refused(&self) -> String {
        format!(
            "url: host `{}:{}` is not in KICKOFF_WEBHOOK_ALLOWED_HOSTS, and no webhook endpoint \
             allows calls under this URL",
            self.host, self.port
        )
    }
}

#[derive(Clone)]
pub struct WebhookWorker {
    allowed_hosts: Vec<AllowedHost>,
    /// Opens the endpoints' secrets to sign calls (none: calls go unsigned, as in tools that never
    /// run webhooks).
    signing_key: Option<Arc<crate::webhooks::SecretKey>>,
}

impl WebhookWorker {
    /// `allowed_hosts`: `host`, `host:port`, or either with the `private:` prefix (see the module
    /// doc).
    pub fn new(allowed_hosts: Vec<String>) -> Self {
        WebhookWorker {
            allowed_hosts: allowed_hosts
                .iter()
                .map(|h| AllowedHost::parse(h))
                .filter(|h| !h.host.is_empty())
                .collect(),
            signing_key: None,
        }
    }

    /// The same worker, signing the calls to webhook endpoints with the secrets `key` opens.
    pub fn with_signing_key(mut self, key: Arc<crate::webhooks::SecretKey>) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// Checks the args, and whether `KICKOFF_WEBHOOK_ALLOWED_HOSTS` allows the host (the
    /// endpoints that allow calls are read from the database: [`Self::allowed`]).
    fn check(&self, args: &WebhookArgs) -> Result<CheckedCall, String> {
        let url = call_url(&args.url)?;
        let host = host_of(&url).ok_or("url: no host")?;
        let port = url.port_or_known_default().unwrap_or(0);
        let host_port = format!("{host}:{port}");
        // An entry without a port allows the scheme's default port only (`Url::port` is `None`
        // for it): not every service listening on an allowed host.
        let default_port = url.port().is_none();
        let mut matching = self
            .allowed_hosts
            .iter()
            .filter(|a| a.host == host_port || (default_port && a.host == host))
            .peekable();
        let listed = matching.peek().is_some();
        let private_ok = matching.any(|a| a.private_ok);
        let method = args
            .method
            .as_deref()
            .unwrap_or("POST")
            .to_ascii_uppercase();
        let method = match method.as_str() {
            "GET" | "POST" | "PUT" | "PATCH" | "DELETE" => {
                reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?
            }
            other => {
                return Err(format!(
                    "method: `{other}` is not one of GET, POST, PUT, PATCH, DELETE"
                ))
            }
        };
        let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(format!("timeout_ms: must be 1 to {MAX_TIMEOUT_MS}"));
        }
        crate::webhooks::headers::check(&args.headers)?;
        Ok(CheckedCall {
            url,
            method,
            timeout: Duration::from_millis(timeout_ms),
            host,
            port,
            listed,
            private_ok,
        })
    }

    /// `call` as allowed, when the allowlist or an endpoint allows it (read on `conn`), and when
    /// its method may carry the endpoint's default headers (see `webhooks::service::
    /// header_methods_refusal`).
    async fn allowed(
        &self,
        conn: &mut sqlx::PgConnection,
        mut call: CheckedCall,
    ) -> Result<Result<CheckedCall, String>, sqlx::Error> {
        if let Some(refusal) = crate::webhooks::service::header_methods_refusal(
            &mut *conn,
            call.url.as_str(),
            call.method.as_str(),
        )
        .await?
        {
            return Ok(Err(refusal));
        }
        if call.listed {
            return Ok(Ok(call));
        }
        Ok(
            match crate::webhooks::service::allows(conn, call.url.as_str()).await? {
                Some(private_ok) => {
                    call.private_ok = private_ok;
                    Ok(call)
                }
                None => Err(call.refused()),
            },
        )
    }
}

/// A job's `url` as the call reads it: the `url` crate's parse (reqwest connects with it), http
/// or https only.
fn call_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("url: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("url: only http and https are allowed".into());
    }
    Ok(url)
}

/// The host a call to `url` connects to, lower-cased (an IPv6 literal in brackets). The parser
/// has read every spelling already: user info (up to the last `@`), a `\` (a path separator in an
/// http URL), percent-escapes in the host, the other forms of an IPv4 address.
fn host_of(url: &Url) -> Option<String> {
    url.host_str().map(str::to_ascii_lowercase)
}

/// The URL host as an IP address, if it is a literal (`10.0.0.5`, `[::1]`). The URL parser has
/// already turned every other spelling of an IPv4 address (`0x7f.1`, `2130706433`) into dotted
/// decimal, so anything that does not parse here is a host name.
fn ip_literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// Resolves `call`'s host name once and checks every address; returns the addresses the call may
/// connect to. A DNS failure is retryable; a refused address is fatal (the name is allowlisted but
/// points where it must not, and retrying would only ask again).
async fn resolve_checked(call: &CheckedCall) -> Result<Vec<SocketAddr>, WorkError> {
    let host = call.host.as_str();
    let lookup = tokio::net::lookup_host((host, call.port));
    let mut addrs: Vec<SocketAddr> = match tokio::time::timeout(call.timeout, lookup).await {
        Err(_) => {
            return Err(WorkError::Retryable(format!(
                "webhook host {host}: DNS lookup timed out after {} ms",
                call.timeout.as_millis()
            )))
        }
        Ok(Err(e)) => {
            return Err(WorkError::Retryable(format!(
                "webhook host {host}: DNS lookup failed: {e}"
            )))
        }
        Ok(Ok(addrs)) => addrs.collect(),
    };
    addrs.dedup();
    if addrs.is_empty() {
        return Err(WorkError::Retryable(format!(
            "webhook host {host} resolves to no address"
        )));
    }
    if !call.private_ok {
        if let Some((ip, class)) = addrs
            .iter()
            .map(|a| (a.ip(), classify(a.ip())))
            .find(|(_, class)| !class.is_public())
        {
            return Err(WorkError::Fatal(format!(
                "webhook host {host} resolves to {ip}, {class}: refused \
                 (list it as `{PRIVATE_MARK}{host}` in KICKOFF_WEBHOOK_ALLOWED_HOSTS, or let its \
                 webhook endpoint reach the private network, to allow it)"
            )));
        }
    }
    Ok(addrs)
}

/// The DNS of one call's client: the checked host resolves to exactly the checked addresses, and
/// every other name fails, so that nothing the client does can reach an address we did not check.
/// (IP literals never reach a resolver: the connector parses them itself.)
struct PinnedResolver {
    host: String,
    addrs: Vec<SocketAddr>,
}

impl Resolve for PinnedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let answer: Result<Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if !self.addrs.is_empty() && name.as_str().eq_ignore_ascii_case(&self.host) {
                let addrs: Addrs = Box::new(self.addrs.clone().into_iter());
                Ok(addrs)
            } else {
                Err(format!(
                    "webhook host {} was not checked before the call",
                    name.as_str()
                )
                .into())
            };
        Box::pin(std::future::ready(answer))
    }
}

/// A client that connects only to `addrs` for `host` (or to the IP literal in the URL).
fn pinned_client(host: &str, addrs: Vec<SocketAddr>) -> Result<reqwest::Client, WorkError> {
    reqwest::Client::builder()
        // Never follow a redirect: its target was not allowed.
        .redirect(reqwest::redirect::Policy::none())
        // A proxy would resolve the host itself, after our check.
        .no_proxy()
        .dns_resolver(Arc::new(PinnedResolver {
            host: host.to_string(),
            addrs,
        }))
        .build()
        .map_err(|e| WorkError::Retryable(format!("building the HTTP client: {e}")))
}

impl Worker for WebhookWorker {
    fn kind(&self) -> &'static str {
        KIND
    }

    /// The whole check in one place (no synchronous `validate`: it would parse and check the
    /// args a second time). The allowlist: `KICKOFF_WEBHOOK_ALLOWED_HOSTS` without a query, else the endpoints that
    /// allow calls, read on the inserting connection (so an endpoint made a moment ago, on any
    /// node, counts).
    fn validate_in<'a>(
        &'a self,
        conn: &'a mut sqlx::PgConnection,
        args: &'a Value,
    ) -> BoxFuture<'a, Result<(), ArgsRefused>> {
        Box::pin(async move {
            let a: WebhookArgs = serde_json::from_value(args.clone())
                .map_err(|e| ArgsRefused::Invalid(e.to_string()))?;
            let call = self.check(&a).map_err(ArgsRefused::Invalid)?;
            self.allowed(conn, call)
                .await?
                .map(drop)
                .map_err(ArgsRefused::Invalid)
        })
    }

    /// The host the call connects to, by the parse of `Self::check` (the args passed it at
    /// insert, before the engine asks): `http://127.0.0.1:9\@k1.test/`,
    /// `http://u@k1.test@127.0.0.1:9/` and `http://0x7f.1:9/` all call `127.0.0.1`. A domain's
    /// one trailing dot goes (`k1.test.` is `k1.test` to the resolver).
    fn call_host(&self, args: &Value) -> Option<String> {
        let url = call_url(args.get("url")?.as_str()?).ok()?;
        let host = host_of(&url)?;
        // An IPv4 address written as IPv4-mapped IPv6 (`[::ffff:7f00:1]`) reaches that IPv4
        // address: one key.
        if let Some(IpAddr::V6(v6)) = ip_literal(&host) {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return Some(v4.to_string());
            }
        }
        Some(match host.strip_suffix('.') {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => host,
        })
    }

    /// A webhook's own credentials: every header value (an `Authorization`, often), and what of
    /// its URL may be one: its user info (`https://svc:hunter2@host`) and its query's values
    /// (`?api_key=K`). An alert's notification (meta `alert_incident`, see `alerts::notifier`)
    /// calls the rule's URL, an incoming-webhook URL whose path is the secret (Slack's carries its
    /// token there): only its origin is shown.
    fn hide_secrets(&self, args: &mut Value, meta: &Value) -> Vec<String> {
        use crate::engine::sight::{collect_strings, url_for_reader, url_origin_for_reader};
        let mut found = Vec::new();
        if let Some(Value::Object(headers)) = args.get_mut("headers") {
            for value in headers.values_mut() {
                collect_strings(value, &mut found);
                *value = Value::String(crate::engine::sight::REDACTED.into());
            }
        }
        if let Some(Value::String(url)) = args.get_mut("url") {
            if let Ok(parsed) = reqwest::Url::parse(url) {
                found.extend(parsed.password().map(String::from));
                if !parsed.username().is_empty() {
                    found.push(parsed.username().to_string());
                }
                for pair in parsed.query().unwrap_or_default().split('&') {
                    found.push(pair.split_once('=').map_or(pair, |(_, v)| v).to_string());
                }
                found.extend(parsed.query_pairs().map(|(_, v)| v.into_owned()));
                if meta.get("alert_incident").is_some() {
                    found.push(parsed.path().trim_start_matches('/').to_string());
                }
            }
            *url = if meta.get("alert_incident").is_some() {
                url_origin_for_reader(url)
            } else {
                url_for_reader(url)
            };
        }
        found
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(MAX_TIMEOUT_MS + 5_000)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let args = ctx.job.args.clone();
            let call_as = CallAs {
                body_bytes: ANSWER_BYTES,
                id: webhook_id(&ctx.job),
                snoozes_left: ctx.job.meta["snoozes"].as_u64().unwrap_or(0) < MAX_SNOOZES,
                no_retry: true,
            };
            self.recorded_call(&ctx, &args, &call_as).await.map(drop)
        })
    }
}

/// One call as its job makes it.
pub(crate) struct CallAs {
    /// The most of a 2xx answer's body read (at least what the delivery record keeps).
    pub body_bytes: usize,
    /// Its `webhook-id`: a webhook job's is the same on every attempt ([`webhook_id`]); a job
    /// that calls again and again (a poll) gives each call its own.
    pub id: String,
    /// A `429` or `503` with `Retry-After` is a snooze (a webhook job's, at most
    /// [`MAX_SNOOZES`] times); else it fails the attempt as any other answer.
    pub snoozes_left: bool,
    /// A failure answered with [`NO_RETRY_HEADER`]`: true` fails the job for good (a worker in
    /// another language that knows no retry can help); else it is retried as any other.
    pub no_retry: bool,
}

/// The answer's header by which a receiver says a failure is for good: `kickoff-no-retry: true`
/// on a non-2xx answer discards a webhook job at once (docs/workers.md).
pub const NO_RETRY_HEADER: &str = "kickoff-no-retry";

impl WebhookWorker {
    /// Makes the call `args` describes (a webhook's args) as `ctx`'s attempt, and records it as
    /// a delivery, whatever happened: the first `body_bytes` of a 2xx answer's body, or the
    /// error as a webhook's attempt sees it (a non-2xx answer retryable, a refused host fatal, a
    /// receiver's `Retry-After` a snooze). The attempt's output is the status and the duration.
    /// Another kind calling out the way a webhook does (a game's result polled) calls this.
    pub(crate) async fn recorded_call(
        &self,
        ctx: &JobContext,
        args: &Value,
        call_as: &CallAs,
    ) -> Result<Vec<u8>, WorkError> {
        let started = Instant::now();
        let mut seen = Seen::default();
        let outcome = self.call(ctx, args, &mut seen, call_as).await;
        // The attempt's output: the status and the call's duration, and a JSON answer read
        // without the endpoint's credentials (the delivery record below keeps the detail, the
        // response read with them shown to admins only).
        let mut output = serde_json::json!({
            "status": seen.status,
            "duration_ms": started.elapsed().as_secs_f64() * 1000.0,
        });
        // Not when the call carried a credential of the job's own (a header, a URL's user or
        // query): what it read with it is the delivery record's, shown whole to admins and the
        // job's creator, scrubbed for the others.
        let own_credentials = self
            .hide_secrets(&mut args.clone(), &ctx.job.meta)
            .iter()
            .any(|s| !s.is_empty());
        let answer = outcome
            .as_ref()
            .ok()
            .and_then(|body| json_answer(&seen, body));
        if let Some(answer) = answer.filter(|_| !own_credentials) {
            output["answer"] = answer;
        }
        if ctx.record(&output).is_err() {
            // Past an output's bound as written again, or holding what jsonb cannot (`\u0000`):
            // the status and the duration alone.
            if let Some(fields) = output.as_object_mut() {
                fields.remove("answer");
            }
            let _ = ctx.record(&output);
        }
        // Recorded whatever happened, the refusals before a call included. A record that
        // cannot be written does not undo the call: the attempt's outcome stands.
        let delivery = NewDelivery {
            credentialed: seen.credentialed,
            job_id: ctx.job.id.0,
            attempt: ctx.job.attempt,
            due_at: ctx.job.scheduled_at,
            duration_ms: started.elapsed().as_millis().min(i32::MAX as u128) as i32,
            address: seen.address,
            status: seen.status,
            response_headers: seen.headers,
            response_body: seen.body,
            error: match &outcome {
                Ok(_) => None,
                Err(WorkError::Snooze(wait)) => Some(format!(
                    "the receiver asked to wait: snoozed for {} s (Retry-After)",
                    wait.as_secs()
                )),
                Err(WorkError::Retryable(e) | WorkError::Fatal(e)) => Some(e.clone()),
                Err(other) => Some(other.to_string()),
            },
        };
        if let Err(e) = crate::webhooks::deliveries::insert(ctx.pool(), &delivery).await {
            tracing::warn!(job = ctx.job.id.0, error = %e, "the webhook delivery record was not written");
        }
        outcome
    }
}

/// A 2xx answer's body as JSON, when it says it is JSON and is whole (no longer than
/// [`ANSWER_BYTES`]) and was not read with the endpoint's credentials.
fn json_answer(seen: &Seen, body: &[u8]) -> Option<Value> {
    let content_type = seen.headers.as_ref()?.get("content-type")?;
    let essence = content_type.split(';').next()?.trim().to_ascii_lowercase();
    let json = essence == "application/json" || essence.ends_with("+json");
    if seen.credentialed || !json || body.len() >= ANSWER_BYTES {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// What one call saw, for the delivery record.
#[derive(Default)]
struct Seen {
    /// The call carried its endpoint's default headers (its response is shown only to admins
    /// and the job's creator).
    credentialed: bool,
    address: Option<String>,
    status: Option<u16>,
    headers: Option<BTreeMap<String, String>>,
    body: Option<String>,
}

impl WebhookWorker {
    /// The call, its answer's first `call_as.body_bytes` (of which the record keeps
    /// [`BODY_CHARS`] characters) when it is a 2xx.
    async fn call(
        &self,
        ctx: &JobContext,
        args: &Value,
        seen: &mut Seen,
        call_as: &CallAs,
    ) -> Result<Vec<u8>, WorkError> {
        let a: WebhookArgs = serde_json::from_value(args.clone())
            .map_err(|e| WorkError::Fatal(format!("invalid args for {KIND}: {e}")))?;
        let mut call = self.check(&a).map_err(WorkError::Fatal)?;
        // The endpoints as they are now: an allowance, a secret or a default header may have
        // changed since the insert.
        let endpoint = crate::webhooks::service::for_call(
            ctx.pool(),
            self.signing_key.as_deref(),
            call.url.as_str(),
        )
        .await
        .map_err(|e| WorkError::Retryable(format!("cannot read the call's endpoint: {e}")))?
        .unwrap_or_default();
        if !call.listed && !endpoint.allowed {
            return Err(WorkError::Fatal(call.refused()));
        }
        if !endpoint.headers.is_empty() {
            // The endpoint may have changed since the insert.
            if let Some(refusal) = crate::webhooks::service::refusal_for_method(
                &endpoint.header_methods,
                call.method.as_str(),
            ) {
                return Err(WorkError::Fatal(refusal));
            }
            seen.credentialed = true;
        }
        // Either allowlist may vouch for a private address.
        call.private_ok |= endpoint.allowed && endpoint.private_ok;
        let started = Instant::now();
        let addrs = match ip_literal(&call.host) {
            // The operator listed this exact address (see the module doc).
            Some(ip) => {
                seen.address = Some(SocketAddr::new(ip, call.port).to_string());
                Vec::new()
            }
            None => {
                let addrs = resolve_checked(&call).await?;
                seen.address = Some(
                    addrs
                        .iter()
                        .map(SocketAddr::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                addrs
            }
        };
        let http = pinned_client(&call.host, addrs)?;
        // The lookup spent part of the attempt's time.
        let remaining = call
            .timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        let id = call_as.id.clone();
        let timestamp = chrono::Utc::now().timestamp();
        // Serialised once: the bytes sent are the bytes the signature covers.
        let body = match &a.body {
            Some(body) => {
                Some(serde_json::to_vec(body).map_err(|e| WorkError::Fatal(format!("body: {e}")))?)
            }
            None => None,
        };
        let signature = (!endpoint.keys.is_empty()).then(|| {
            crate::webhooks::signing::signature_header(
                &endpoint.keys,
                &id,
                timestamp,
                body.as_deref().unwrap_or_default(),
            )
        });
        let headers = crate::webhooks::headers::merged(&endpoint.headers, &a.headers);
        // The call in the job's trace: a span of its own, whose `traceparent` the partner gets (or,
        // without traces exported, the one the job was inserted under), unless the job sets one.
        let call_span = tracing::info_span!(
            "webhook.call",
            host = call.url.host_str().unwrap_or_default()
        );
        let inserted_under = ctx
            .job
            .meta
            .get(crate::telemetry::META_TRACEPARENT)
            .and_then(serde_json::Value::as_str);
        let traceparent = crate::telemetry::hand_on(&call_span, inserted_under).filter(|_| {
            !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("traceparent"))
        });
        let mut req = http
            .request(call.method, call.url)
            .timeout(remaining)
            .header("x-kickoff-job-id", ctx.job.id.to_string())
            .header("x-kickoff-attempt", ctx.job.attempt.to_string())
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string());
        if let Some(signature) = signature {
            req = req.header("webhook-signature", signature);
        }
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        for (k, v) in &headers {
            req = req.header(k, v);
        }
        if let Some(bytes) = body {
            // A job's or its endpoint's own Content-Type stands (as `json` left it).
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
            }
            req = req.body(bytes);
        }
        let mut res = tracing::Instrument::instrument(req.send(), call_span)
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    WorkError::Retryable(format!("timed out after {} ms", call.timeout.as_millis()))
                } else {
                    // Without the URL: the job shows it already, and to an admin only when it carries
                    // a credential (an alert's Slack URL); the error is shown to everyone.
                    WorkError::Retryable(format!(
                        "request failed: {}",
                        with_causes(&e.without_url())
                    ))
                }
            })?;
        let status = res.status();
        if let Some(addr) = res.remote_addr() {
            seen.address = Some(addr.to_string());
        }
        seen.status = Some(status.as_u16());
        seen.headers = Some(kept_headers(res.headers()));
        let for_good = call_as.no_retry
            && res
                .headers()
                .get(NO_RETRY_HEADER)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if !status.is_success() {
            if let Some(wait) = asked_to_wait(&res, chrono::Utc::now()) {
                if call_as.snoozes_left {
                    tracing::info!(job = ctx.job.id.0, %status, wait_ms = wait.as_millis() as u64, "webhook receiver asked to wait: snoozed");
                    return Err(WorkError::Snooze(wait));
                }
            }
        }
        // Only the start of the body: an endpoint must not make us buffer megabytes. A body that
        // stops coming (the call's time-out) keeps what came: the status stands.
        let mut head = Vec::new();
        // A failure's answer is read as far as its record keeps it.
        let limit = match status.is_success() {
            true => call_as.body_bytes.max(BODY_BYTES),
            false => BODY_BYTES,
        };
        while head.len() < limit {
            match res.chunk().await {
                Ok(Some(chunk)) => {
                    let room = limit - head.len();
                    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
                }
                _ => break,
            }
        }
        // Dropping the response closes the connection: the rest is not read.
        drop(res);
        let body: String = String::from_utf8_lossy(&head)
            .chars()
            .take(BODY_CHARS)
            .collect();
        seen.body = Some(body.clone());
        if status.is_success() {
            return Ok(head);
        }
        let failed = if for_good {
            |m: String| {
                WorkError::Fatal(format!(
                    "{m} (the receiver answered {NO_RETRY_HEADER}: true)"
                ))
            }
        } else {
            WorkError::Retryable
        };
        if seen.credentialed {
            // The job's errors are shown to everyone; what the call read with the endpoint's
            // credentials is shown to admins and the job's creator (the delivery record).
            return Err(failed(format!(
                "HTTP {status} (the answer is in the delivery record, shown to admins and the \
                 job's creator: the call carried its endpoint's default headers)"
            )));
        }
        Err(failed(format!("HTTP {status}: {body}")))
    }
}

/// Shows the `url` of another kind's `args` (a URL its job calls) as `webhook`'s is shown: its
/// user info and query values hidden. The secrets found.
pub(crate) fn hide_url_as_a_webhooks(
    webhook: &dyn Worker,
    args: &mut Value,
    meta: &Value,
) -> Vec<String> {
    let Some(url) = args.get("url").cloned() else {
        return Vec::new();
    };
    let mut call = serde_json::json!({ "url": url });
    let found = webhook.hide_secrets(&mut call, meta);
    args["url"] = call["url"].take();
    found
}

/// The response headers the delivery record keeps: the first [`MAX_HEADERS`] names, each cut to
/// [`HEADER_NAME_CHARS`], values cut to [`HEADER_VALUE_CHARS`], repeated names joined with `, `,
/// and no `Set-Cookie` value (a
/// receiver's session is not ours to keep).
fn kept_headers(headers: &reqwest::header::HeaderMap) -> BTreeMap<String, String> {
    let mut kept: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let name = capped(name.as_str(), HEADER_NAME_CHARS);
        let name = name.as_str();
        if !kept.contains_key(name) && kept.len() >= MAX_HEADERS {
            continue;
        }
        let value = if name == "set-cookie" {
            "(not kept)".to_string()
        } else {
            capped(
                &String::from_utf8_lossy(value.as_bytes()),
                HEADER_VALUE_CHARS,
            )
        };
        kept.entry(name.to_string())
            .and_modify(|v| {
                if v != &value {
                    *v = capped(&format!("{v}, {value}"), HEADER_VALUE_CHARS);
                }
            })
            .or_insert(value);
    }
    kept
}

/// An error and its causes, `: `-separated (reqwest's own message alone says only that the
/// request failed, not that the connection was refused).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

/// The call's `webhook-id` (Standard Webhooks): the same on every attempt of a job, so that a
/// receiver can drop a second delivery (an attempt cut off after the receiver took it is made
/// again), and different for every job, also across databases: the job's id and the microsecond
/// it was inserted (`msg_42_1796220000123456`; no `.`, the signature's separator).
pub fn webhook_id(job: &crate::engine::Job) -> String {
    format!("msg_{}_{}", job.id.0, job.inserted_at.timestamp_micros())
}

/// How long a receiver that answered 429 or 503 asked to be left alone (`Retry-After`: seconds or
/// an HTTP date, at most [`MAX_RETRY_AFTER`]); `None` for any other answer.
fn asked_to_wait(res: &reqwest::Response, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let status = res.status();
    if status != reqwest::StatusCode::TOO_MANY_REQUESTS
        && status != reqwest::StatusCode::SERVICE_UNAVAILABLE
    {
        return None;
    }
    let value = res
        .headers()
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?;
    retry_after(value, now)
}

/// A `Retry-After` value as a wait from `now`, at most [`MAX_RETRY_AFTER`] (a date that passed:
/// no wait).
fn retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_record_keeps_bounded_header_names() {
        let mut headers = reqwest::header::HeaderMap::new();
        let long = "x".repeat(10_000);
        for i in 0..80 {
            headers.insert(
                reqwest::header::HeaderName::from_bytes(format!("{long}{i}").as_bytes()).unwrap(),
                reqwest::header::HeaderValue::from_static("v"),
            );
        }
        let kept = kept_headers(&headers);
        assert!(kept.len() <= MAX_HEADERS, "{}", kept.len());
        assert!(kept.keys().all(|k| k.chars().count() <= HEADER_NAME_CHARS));
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates_within_the_bound() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-02T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("Wed, 02 Dec 2026 10:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after("Wed, 02 Dec 2026 09:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("86400", now), Some(MAX_RETRY_AFTER));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-5", now), None);
    }

    fn worker(hosts: &[&str]) -> WebhookWorker {
        WebhookWorker::new(hosts.iter().map(|h| h.to_string()).collect())
    }

    fn check(w: &WebhookWorker, url: &str) -> Result<CheckedCall, String> {
        w.check(&WebhookArgs {
            url: url.into(),
            method: None,
            headers: BTreeMap::new(),
            body: None,
            timeout_ms: None,
        })
    }

    #[test]
    fn the_host_a_rate_counts_is_the_host_the_call_connects_to() {
        let w = worker(&["127.0.0.1:9"]);
        for url in [
            "http://127.0.0.1:9/plain",
            "http://127.0.0.1:9\\@k1.test/backslash",
            "http://u@k1.test@127.0.0.1:9/two-ats",
            "http://0x7f.1:9/hex",
            "http://127%2E0%2E0%2E1:9/escaped",
            "http://2130706433:9/decimal",
            "HTTP://127.0.0.1.:9/trailing-dot",
        ] {
            let call = check(&w, url).unwrap();
            assert!(call.listed, "{url}");
            assert_eq!(call.host, "127.0.0.1", "{url}");
            assert_eq!(
                w.call_host(&serde_json::json!({ "url": url })).as_deref(),
                Some("127.0.0.1"),
                "{url}"
            );
        }
        let host = |url: &str| w.call_host(&serde_json::json!({ "url": url }));
        assert_eq!(
            host("https://Hooks.Example.COM./x").as_deref(),
            Some("hooks.example.com")
        );
        assert_eq!(host("http://k1%2Etest/").as_deref(), Some("k1.test"));
        assert_eq!(host("http://[::1]:8080/").as_deref(), Some("[::1]"));
        assert_eq!(
            host("http://[::ffff:7f00:1]:9/mapped").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(host("ftp://k1.test/"), None);
        assert_eq!(host("not a url"), None);
    }

    #[test]
    fn the_private_prefix_marks_an_entry() {
        assert_eq!(
            AllowedHost::parse(" Private:Billing.Internal:8443 "),
            AllowedHost {
                host: "billing.internal:8443".into(),
                private_ok: true
            }
        );
        assert_eq!(
            AllowedHost::parse("hooks.example.com"),
            AllowedHost {
                host: "hooks.example.com".into(),
                private_ok: false
            }
        );
        // A host called `private` with a port stays that host, unmarked.
        assert_eq!(
            AllowedHost::parse("private:8443"),
            AllowedHost {
                host: "private:8443".into(),
                private_ok: false
            }
        );
    }

    #[test]
    fn only_a_marked_matching_entry_lets_a_host_resolve_privately() {
        let w = worker(&[
            "localhost:8080",
            "private:internal.test:8443",
            "127.0.0.1:9",
        ]);
        assert!(!check(&w, "http://localhost:8080/").unwrap().private_ok);
        assert!(check(&w, "https://internal.test:8443/").unwrap().private_ok);
        // The mark is for that port only; a host the list does not name is left to the
        // endpoints.
        assert!(!check(&w, "https://internal.test/").unwrap().listed);
        assert!(check(&w, "https://internal.test:8443/").unwrap().listed);
        let literal = check(&w, "http://127.0.0.1:9/").unwrap();
        assert_eq!(
            ip_literal(&literal.host),
            Some("127.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn ip_literals_are_told_from_host_names() {
        assert_eq!(ip_literal("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(ip_literal("10.0.0.5"), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(ip_literal("localhost"), None);
        assert_eq!(ip_literal("10.0.0.5.nip.io"), None);
        // Other spellings of an address reach us in dotted decimal.
        let w = worker(&["127.0.0.1"]);
        assert_eq!(check(&w, "http://0x7f.1/").unwrap().host, "127.0.0.1");
    }

    #[tokio::test]
    async fn a_host_name_resolving_to_loopback_is_refused_unless_marked() {
        let w = worker(&["localhost:9", "private:localhost:8080"]);
        let unmarked = check(&w, "http://localhost:9/").unwrap();
        match resolve_checked(&unmarked).await {
            Err(WorkError::Fatal(m)) => {
                assert!(
                    m.starts_with("webhook host localhost resolves to ")
                        && m.contains(", a loopback address: refused"),
                    "{m}"
                )
            }
            other => panic!("expected a fatal refusal, got {other:?}"),
        }
        let marked = check(&w, "http://localhost:8080/").unwrap();
        let addrs = resolve_checked(&marked).await.unwrap();
        assert!(addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
    }

    #[tokio::test]
    async fn the_pinned_resolver_answers_only_the_checked_host() {
        let addr: SocketAddr = "93.184.216.34:443".parse().unwrap();
        let r = PinnedResolver {
            host: "hooks.example.com".into(),
            addrs: vec![addr],
        };
        let got: Vec<_> = r
            .resolve("HOOKS.example.com".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert_eq!(got, vec![addr]);
        assert!(r
            .resolve("other.example.com".parse().unwrap())
            .await
            .is_err());
    }
}
