//! The command line against a running server's REST API: `kickoff jobs ...`, `kickoff queues ...`,
//! `kickoff questions ...` (like `gh`). Where and as whom: `--server` / `KICKOFF_URL`, a token from
//! `--token` / `KICKOFF_TOKEN`, `--token-file` / `KICKOFF_TOKEN_FILE`, or else the bootstrap token
//! a local server keeps in its data directory. Human tables by default, `--json` for scripts, and
//! an exit code that says what happened ([`Exit`]).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::Value;

use crate::config::Config;

/// Where the remote commands act, and how they answer.
#[derive(Debug, Clone, Args)]
pub struct Remote {
    /// The server's base URL.
    #[arg(
        long,
        global = true,
        env = "KICKOFF_URL",
        default_value = "http://127.0.0.1:3000"
    )]
    pub server: String,
    /// An API token: a user's, or the bootstrap token. Default: --token-file, else the bootstrap
    /// token in the data directory (a server on this machine).
    #[arg(long, global = true, env = "KICKOFF_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file whose first line is the API token.
    #[arg(long, global = true, env = "KICKOFF_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Print the server's answer as JSON (one document; an export as it comes).
    #[arg(long, global = true)]
    pub json: bool,
    /// Send the token over plain HTTP to a server that is not on this machine (refused without
    /// it: anyone on the way would read the token). Only on a network you trust.
    #[arg(long, global = true, env = "KICKOFF_INSECURE")]
    pub insecure: bool,
}

/// Whether `url` names this machine: `localhost` or a loopback address (IPv4-mapped included).
/// Not a name under `localhost` (`x.localhost`): a resolver may well ask DNS for it.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    match host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback(),
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

/// The HTTP client for a server at `server`, whose calls carry an API token: refused for plain
/// HTTP to another machine unless `insecure` (anyone on the way would read the token), and never
/// through a proxy for a server on this machine (the proxy would read it: the bootstrap token,
/// an admin's, among them). Also `loopback`: whether `server` is on this machine.
pub fn client_for(server: &str, insecure: bool) -> Result<(reqwest::Client, bool), Failure> {
    let url = reqwest::Url::parse(server)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
        .ok_or_else(|| {
            Failure::new(
                Exit::Usage,
                format!("--server: `{server}` is not an http(s) URL (http://127.0.0.1:3000)"),
            )
        })?;
    let loopback = is_loopback(&url);
    if url.scheme() == "http" && !loopback && !insecure {
        return Err(Failure::new(
            Exit::Refused,
            format!(
                "the API token would go to {} over plain HTTP: give an https:// server, or \
                 --insecure (KICKOFF_INSECURE=1) on a network you trust",
                url.host_str().unwrap_or_default()
            ),
        ));
    }
    let mut http = reqwest::Client::builder();
    if loopback {
        http = http.no_proxy();
    }
    let http = http
        .build()
        .map_err(|e| Failure::new(Exit::Failed, format!("the HTTP client: {e}")))?;
    Ok((http, loopback))
}

/// What a command's exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Anything else (an answer that could not be read, a file that could not be written).
    Failed = 1,
    /// The command line itself is wrong (clap's own code too).
    Usage = 2,
    /// The job, queue or question does not exist (404).
    NotFound = 3,
    /// No token, or the token may not do this (401, 403).
    Refused = 4,
    /// The state does not allow it (409): a running job edited, a question locked.
    Conflict = 5,
    /// The server refused the input (400, 422): it says which field and why.
    Invalid = 6,
    /// The server could not be reached, or failed (5xx, 429).
    Unavailable = 7,
}

/// A command that did not succeed: its exit code and what to print.
#[derive(Debug)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Failure {
            exit,
            message: message.into(),
        }
    }
}

pub type Outcome = Result<(), Failure>;

/// Runs a remote command and turns its outcome into the process's exit code.
pub async fn exit_code(outcome: impl std::future::Future<Output = Outcome>) -> ExitCode {
    match outcome.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("kickoff: {}", f.message);
            ExitCode::from(f.exit as u8)
        }
    }
}

/// A client of one server's `/api/v1`.
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    pub json: bool,
}

impl Api {
    /// The client `remote` names, its token found as [`Remote`] says.
    pub fn new(remote: &Remote, config: &Config) -> Result<Api, Failure> {
        let loopback = reqwest::Url::parse(&remote.server)
            .ok()
            .is_some_and(|u| is_loopback(&u));
        let token = match (&remote.token, &remote.token_file) {
            (Some(t), _) => t.trim().to_string(),
            (None, Some(file)) => first_line(file)?,
            (None, None) => {
                // The bootstrap token is an admin's: only ever sent to a server on this machine.
                if !loopback {
                    return Err(Failure::new(
                        Exit::Refused,
                        "no API token: give --token, KICKOFF_TOKEN or --token-file (the local \
                         bootstrap token is only used for a server on this machine)",
                    ));
                }
                let local = config
                    .data_dir
                    .join(crate::accounts::bootstrap_token::FILE_NAME);
                if !local.exists() {
                    return Err(Failure::new(
                        Exit::Refused,
                        "no API token: give --token, KICKOFF_TOKEN or --token-file (a user's \
                         token from the dashboard's Account page, or the bootstrap token)",
                    ));
                }
                first_line(&local)?
            }
        };
        if token.is_empty() {
            return Err(Failure::new(Exit::Refused, "the API token is empty"));
        }
        let (http, _) = client_for(&remote.server, remote.insecure)?;
        Ok(Api {
            http,
            base: format!("{}/api/v1", remote.server.trim_end_matches('/')),
            token,
            json: remote.json,
        })
    }

    /// Sends a request; the answer's body (JSON, or `null` when empty) or the failure its status
    /// says, with the server's message.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Failure> {
        let res = self.send(method, path, body).await?;
        let text = res
            .text()
            .await
            .map_err(|e| Failure::new(Exit::Unavailable, format!("{}: {e}", self.base)))?;
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| Failure::new(Exit::Failed, format!("the answer is not JSON: {e}")))
    }

    /// Sends a request; the response when its status is a success.
    pub async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<reqwest::Response, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = self.http.request(method, &url).bearer_auth(&self.token);
        if let Some(body) = body {
            req = req.json(body);
        }
        let res = req
            .send()
            .await
            .map_err(|e| Failure::new(Exit::Unavailable, format!("{url}: {e}")))?;
        let status = res.status();
        if status.is_success() {
            return Ok(res);
        }
        let text = res.text().await.unwrap_or_default();
        let message = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(String::from))
            .unwrap_or(text);
        let exit = match status.as_u16() {
            404 => Exit::NotFound,
            401 | 403 => Exit::Refused,
            409 => Exit::Conflict,
            400 | 405 | 413 | 415 | 422 => Exit::Invalid,
            _ => Exit::Unavailable,
        };
        Err(Failure::new(exit, format!("{status}: {message}")))
    }

    /// Prints `value` as JSON when asked, else as `human` prints it.
    pub fn print(&self, value: &Value, human: impl FnOnce(&Value)) {
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(value).unwrap_or_default()
            );
        } else {
            human(value);
        }
    }
}

fn first_line(file: &std::path::Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::new(Exit::Refused, format!("{}: {e}", file.display())))?;
    Ok(text.lines().next().unwrap_or_default().trim().to_string())
}

/// Prints rows under a header, each column as wide as its widest cell.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<String>, out: &mut std::io::StdoutLock<'_>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| h.to_uppercase()).collect(), &mut out);
    for row in rows {
        line(row, &mut out);
    }
}

/// A JSON value as a table cell: text as it is, `null` as `-`, anything else as JSON.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Asks on the terminal whether to go on (`--yes` skips the question); no terminal: no.
pub fn confirm(question: &str, yes: bool) -> Result<(), Failure> {
    if yes {
        return Ok(());
    }
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| Failure::new(Exit::Failed, e.to_string()))?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Failure::new(
            Exit::Usage,
            "not confirmed: nothing changed (--yes to skip the question)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine, however it is written; nothing else (a name under `localhost` may be asked
    /// of DNS), and plain HTTP elsewhere is refused unless asked.
    #[test]
    fn a_token_goes_in_clear_only_to_this_machine() {
        let loopback = |u: &str| is_loopback(&reqwest::Url::parse(u).unwrap());
        for here in [
            "http://localhost:3000",
            "http://LOCALHOST.:3000",
            "http://127.0.0.1:3000",
            "http://127.1:3000",
            "http://0x7f.1:3000",
            "http://[::1]:3000",
            "http://[::ffff:127.0.0.1]:3000",
        ] {
            assert!(loopback(here), "{here}");
            assert!(client_for(here, false).is_ok(), "{here}");
        }
        for elsewhere in [
            "http://x.localhost:3000",
            "http://localhost@evil.example:3000",
            "http://192.0.2.1:3000",
            "HTTP://kickoff.example.com",
            "http://[::2]:3000",
        ] {
            assert!(!loopback(elsewhere), "{elsewhere}");
            let refused = client_for(elsewhere, false).unwrap_err();
            assert_eq!(refused.exit, Exit::Refused, "{elsewhere}");
            assert!(client_for(elsewhere, true).is_ok(), "{elsewhere}");
        }
        assert!(client_for("https://kickoff.example.com", false).is_ok());
        assert_eq!(
            client_for("kickoff.example.com", false).unwrap_err().exit,
            Exit::Usage
        );
    }
}
