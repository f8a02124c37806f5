//! `webhook`: an HTTP call at a set time. A non-2xx answer or a timeout fails the attempt (retried
//! with backoff). Only hosts in `KICKOFF_WEBHOOK_ALLOWED_HOSTS` may be called: the check runs at
//! insert time (a clear error) and again before each call (the list may have changed).
//!
//! Args: `url` (http or https), `method` (default POST), `headers` (object of strings), `body`
//! (JSON), `timeout_ms` (1 to 300000, default 10000).

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;
use serde_json::Value;

use crate::engine::{BoxFuture, JobContext, WorkError, Worker};

pub const KIND: &str = "webhook";
const DEFAULT_TIMEOUT_MS: u64 = 10_000;
const MAX_TIMEOUT_MS: u64 = 300_000;
/// How much of a failed response's body is kept in the job's error.
const ERROR_BODY_CHARS: usize = 500;

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
    #[serde(default)]
    timeout_ms: Option<u64>,
}

pub struct WebhookWorker {
    allowed_hosts: Vec<String>,
    http: reqwest::Client,
}

impl WebhookWorker {
    pub fn new(allowed_hosts: Vec<String>) -> Self {
        let http = reqwest::Client::builder()
            // Never follow a redirect to a host that was not allowed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("building the HTTP client");
        WebhookWorker {
            allowed_hosts,
            http,
        }
    }

    fn check(&self, args: &WebhookArgs) -> Result<(Url, reqwest::Method, Duration), String> {
        let url = Url::parse(&args.url).map_err(|e| format!("url: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("url: only http and https are allowed".into());
        }
        let host = url.host_str().ok_or("url: no host")?.to_ascii_lowercase();
        let port = url.port_or_known_default().unwrap_or(0);
        let host_port = format!("{host}:{port}");
        if !self
            .allowed_hosts
            .iter()
            .any(|a| *a == host || *a == host_port)
        {
            return Err(format!(
                "url: host `{host_port}` is not in KICKOFF_WEBHOOK_ALLOWED_HOSTS"
            ));
        }
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
        for (k, v) in &args.headers {
            reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("headers: `{k}` is not a valid header name"))?;
            reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| format!("headers: the value of `{k}` is not valid"))?;
        }
        Ok((url, method, Duration::from_millis(timeout_ms)))
    }
}

impl Worker for WebhookWorker {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let a: WebhookArgs = serde_json::from_value(args.clone()).map_err(|e| e.to_string())?;
        self.check(&a).map(|_| ())
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(MAX_TIMEOUT_MS + 5_000)
    }

    fn work(&self, ctx: JobContext) -> BoxFuture<'_, Result<(), WorkError>> {
        Box::pin(async move {
            let a: WebhookArgs = ctx.args()?;
            let (url, method, timeout) = self.check(&a).map_err(WorkError::Fatal)?;
            let mut req = self
                .http
                .request(method, url)
                .timeout(timeout)
                .header("x-kickoff-job-id", ctx.job.id.to_string())
                .header("x-kickoff-attempt", ctx.job.attempt.to_string());
            for (k, v) in &a.headers {
                req = req.header(k, v);
            }
            if let Some(body) = &a.body {
                req = req.json(body);
            }
            let res = req.send().await.map_err(|e| {
                if e.is_timeout() {
                    WorkError::Retryable(format!("timed out after {} ms", timeout.as_millis()))
                } else {
                    WorkError::Retryable(format!("request failed: {e}"))
                }
            })?;
            let status = res.status();
            if status.is_success() {
                return Ok(());
            }
            // Read only the start of the body: an endpoint must not make us buffer megabytes.
            let mut res = res;
            let mut head = Vec::new();
            while head.len() < ERROR_BODY_CHARS * 4 {
                match res.chunk().await {
                    Ok(Some(chunk)) => head.extend_from_slice(&chunk),
                    _ => break,
                }
            }
            let body: String = String::from_utf8_lossy(&head)
                .chars()
                .take(ERROR_BODY_CHARS)
                .collect();
            Err(WorkError::Retryable(format!("HTTP {status}: {body}")))
        })
    }
}
