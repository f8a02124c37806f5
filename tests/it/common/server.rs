//! A `kickoff serve` process for the tests that need real processes (killed, restarted, several
//! on one database).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// The API token every test server accepts.
pub const TOKEN: &str = "process-test-token";

/// The secret key (KICKOFF_SECRET_KEY) every test server seals webhook secrets with.
pub const SECRET_KEY: &str = "dGVzdC1rZXktdGVzdC1rZXktdGVzdC1rZXktMzJieXQ=";

/// A server process; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// Every line it printed on its standard output so far.
    pub output: Arc<Mutex<Vec<String>>>,
    /// Every line it logged on its standard error so far (also passed on to the test's).
    logged: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(envs: &[(&str, String)]) -> Server {
        Server::start_binary(env!("CARGO_BIN_EXE_kickoff").as_ref(), envs)
    }

    /// [`Server::start`] of another build's binary (the previous release's).
    pub fn start_binary(binary: &std::path::Path, envs: &[(&str, String)]) -> Server {
        let mut cmd = Command::new(binary);
        cmd.arg("serve")
            .env_remove("DATABASE_URL")
            .env("LEPTOS_SITE_ADDR", "127.0.0.1:0")
            .env("KICKOFF_API_TOKEN", TOKEN)
            .env("KICKOFF_SECRET_KEY", SECRET_KEY)
            .env("KICKOFF_LEASE_MS", "1000")
            .env("KICKOFF_SHUTDOWN_GRACE_SECS", "2")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start kickoff");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let output = Arc::new(Mutex::new(Vec::new()));
        let logged = Arc::new(Mutex::new(Vec::new()));
        std::thread::spawn({
            let logged = logged.clone();
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    eprintln!("{line}");
                    logged.lock().unwrap().push(line);
                }
            }
        });
        std::thread::spawn({
            let output = output.clone();
            move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(addr) = line.strip_prefix("Kickoff listening on http://") {
                        let _ = tx.send(addr.to_string());
                    }
                    output.lock().unwrap().push(line);
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("the server should print its address");
        Server {
            child,
            addr,
            output,
            logged,
        }
    }

    /// What it logged (standard error) so far.
    pub fn logged(&self) -> String {
        self.logged.lock().unwrap().join("\n")
    }

    /// What it printed before it listened, and since.
    pub fn printed(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// The status of `GET /api/v1/jobs` with `token`.
    pub async fn status_with(&self, token: &str) -> reqwest::StatusCode {
        reqwest::Client::new()
            .get(format!("http://{}/api/v1/jobs?limit=1", self.addr))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
    }

    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn terminate(mut self) {
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "graceful stop exits 0, got {status}");
    }

    pub async fn post_job(&self, body: Value) -> Value {
        let res = reqwest::Client::new()
            .post(format!("http://{}/api/v1/jobs", self.addr))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(res.status().is_success(), "{}", res.status());
        res.json().await.unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
