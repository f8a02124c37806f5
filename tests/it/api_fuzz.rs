//! Fuzzing the REST API from its own OpenAPI document: for every operation, requests made from
//! the schemas (valid-looking ones, then broken ones: missing and wrong-typed fields, unknown
//! fields, extreme numbers and strings, NUL characters, deep nesting, bodies that are not JSON,
//! odd path and query values) against the whole router and real PostgreSQL.
//!
//! Checked for every request: no 5xx; and a refused state-changing request leaves the jobs,
//! questions, predictions and queues exactly as they were (nothing half-stored). The number of
//! requests is printed (`--no-capture`); `KICKOFF_FUZZ_ROUNDS` (per operation, default 150) and
//! `KICKOFF_FUZZ_SEED` make longer or repeatable runs.

use axum::http::{Method, StatusCode};
use serde_json::{json, Map, Value};

use crate::common::test_db;

const TOKEN: &str = "fuzz-test-token";

struct Fuzzer {
    app: axum::Router,
    pool: kickoff::engine::Db,
    rng: fastrand::Rng,
    schemas: Map<String, Value>,
}

impl Fuzzer {
    async fn send(
        &self,
        method: Method,
        uri: &str,
        body: Option<(Vec<u8>, &str)>,
    ) -> (StatusCode, String) {
        crate::common::rest::send(&self.app, method, uri, Some(TOKEN), body).await
    }

    /// Everything the API can change, as one hash.
    async fn fingerprint(&self) -> String {
        sqlx::query_scalar(
            "SELECT md5(
                 coalesce((SELECT string_agg(j::text, '|' ORDER BY id) FROM jobs j), '') || '#' ||
                 coalesce((SELECT string_agg(q::text, '|' ORDER BY id) FROM questions q), '') || '#' ||
                 coalesce((SELECT string_agg(p::text, '|' ORDER BY p::text) FROM predictions p), '') || '#' ||
                 coalesce((SELECT string_agg(q::text, '|' ORDER BY name) FROM queues q), ''))",
        )
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    async fn some_id(&self, table: &str) -> Option<i64> {
        sqlx::query_scalar(&format!("SELECT id FROM {table} ORDER BY random() LIMIT 1"))
            .fetch_optional(&self.pool)
            .await
            .unwrap()
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.rng.usize(..items.len())]
    }

    /// A value of no particular schema, chosen to break things.
    fn garbage(&mut self) -> Value {
        match self.rng.u8(..14) {
            0 => Value::Null,
            1 => json!(true),
            2 => json!(-1),
            3 => json!(0),
            4 => json!(i64::MAX),
            5 => json!(u64::MAX),
            6 => json!(1e308),
            7 => json!(-0.5),
            8 => json!(""),
            9 => json!("x".repeat(self.rng.usize(1000..300_000))),
            10 => json!("nul \u{0000} inside"),
            11 => json!("🏈 ünïcode \u{202e} rtl"),
            12 => json!([1, "two", null, {"three": 3}]),
            _ => json!({"nested": {"deeper": [[[]]]}}),
        }
    }

    fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        match schema["$ref"].as_str().and_then(|r| r.rsplit('/').next()) {
            Some(name) => self.schemas.get(name).unwrap_or(schema),
            None => schema,
        }
    }

    /// An instance of `schema`, mostly valid-looking.
    fn sample(&mut self, schema: &Value, depth: usize) -> Value {
        let schema = self.resolve(schema).clone();
        if depth > 6 {
            return Value::Null;
        }
        if let Some(c) = schema.get("const") {
            return c.clone();
        }
        if let Some(values) = schema["enum"].as_array() {
            return self.pick(values).clone();
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(options) = schema[key].as_array() {
                let option = self.pick(options).clone();
                return self.sample(&option, depth + 1);
            }
        }
        let ty = match &schema["type"] {
            Value::String(t) => t.clone(),
            Value::Array(ts) => {
                let t = self.pick(ts).clone();
                t.as_str().unwrap_or("null").to_string()
            }
            _ => "object".to_string(),
        };
        match ty.as_str() {
            "null" => Value::Null,
            "boolean" => json!(self.rng.bool()),
            "integer" => json!(*self.pick(&[0i64, 1, 3, 5, 10, 100, 3_600_000, -3])),
            "number" => json!(self.rng.f64() * 100.0),
            "string" => {
                if schema["format"] == "date-time" {
                    let offset = *self.pick(&[-86_400 * 400, -30, 60, 3_600, 86_400 * 5000]);
                    json!((chrono::Utc::now() + chrono::Duration::seconds(offset)).to_rfc3339())
                } else {
                    json!(*self.pick(&[
                        "default",
                        "noop",
                        "a",
                        "webhook",
                        "lock_question",
                        "Home",
                        "yes"
                    ]))
                }
            }
            "array" => {
                let n = self.rng.usize(0..4);
                let items = schema.get("items").cloned().unwrap_or(json!({}));
                Value::Array((0..n).map(|_| self.sample(&items, depth + 1)).collect())
            }
            _ => {
                let mut out = Map::new();
                let required: Vec<String> = schema["required"]
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(props) = schema["properties"].as_object() {
                    for (name, prop) in props {
                        if required.contains(name) || self.rng.bool() {
                            let v = self.sample(prop, depth + 1);
                            out.insert(name.clone(), v);
                        }
                    }
                }
                Value::Object(out)
            }
        }
    }

    /// A body for an operation that reads `schema`: well-formed, broken, or not JSON at all.
    fn body(&mut self, schema: &Value) -> (Vec<u8>, &'static str) {
        let mut value = self.sample(schema, 0);
        match self.rng.u8(..12) {
            0 => return (b"{\"kind\": ".to_vec(), "application/json"),
            1 => return (vec![0xff, 0xfe, 0x00, 0x7b], "application/json"),
            2 => return (Vec::new(), "application/json"),
            3 => return (b"kind=noop".to_vec(), "application/x-www-form-urlencoded"),
            4 => {
                let depth = self.rng.usize(100..5000);
                let deep = "[".repeat(depth) + &"]".repeat(depth);
                return (deep.into_bytes(), "application/json");
            }
            5 => {
                // Drop a field.
                if let Some(obj) = value.as_object_mut() {
                    if let Some(k) = obj.keys().next().cloned() {
                        obj.remove(&k);
                    }
                }
            }
            6..=8 => {
                // A field of the wrong type or value.
                let g = self.garbage();
                match value.as_object_mut() {
                    Some(obj) if !obj.is_empty() => {
                        let keys: Vec<String> = obj.keys().cloned().collect();
                        let k = keys[self.rng.usize(..keys.len())].clone();
                        obj.insert(k, g);
                    }
                    _ => value = g,
                }
            }
            9 => {
                if let Some(obj) = value.as_object_mut() {
                    obj.insert("unknown_field".into(), json!(1));
                }
            }
            10 => value = self.garbage(),
            _ => {}
        }
        (serde_json::to_vec(&value).unwrap(), "application/json")
    }

    /// Something to act on: jobs in several states, a question, a queue with a setting.
    async fn seed(&mut self) {
        let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM jobs WHERE kind = 'noop'")
            .fetch_one(&self.pool)
            .await
            .unwrap();
        if jobs < 3 {
            for body in [
                json!({"kind": "noop", "schedule_in_ms": 600_000}),
                json!({"kind": "noop"}),
                json!({"kind": "noop", "args": {"x": 1}, "tags": ["t"]}),
            ] {
                let (status, text) = self
                    .send(
                        Method::POST,
                        "/api/v1/jobs",
                        Some((body.to_string().into_bytes(), "application/json")),
                    )
                    .await;
                assert!(status.is_success(), "{text}");
            }
        }
        if self.some_id("questions").await.is_none() {
            let game_time = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
            let q = json!({"game": "Home v Away", "prompt": "Who scores first?", "choices": ["Home", "Away"], "game_time": game_time});
            let (status, text) = self
                .send(
                    Method::POST,
                    "/api/v1/questions",
                    Some((q.to_string().into_bytes(), "application/json")),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{text}");
        }
        self.send(
            Method::PATCH,
            "/api/v1/queues/default",
            Some((b"{\"concurrency\": 5}".to_vec(), "application/json")),
        )
        .await;
    }

    async fn path_value(&mut self, name: &str, path: &str) -> String {
        let table = if path.starts_with("/api/v1/questions") {
            "questions"
        } else {
            "jobs"
        };
        if name == "id" {
            let existing = self.some_id(table).await.unwrap_or(1);
            let choices = [
                existing.to_string(),
                existing.to_string(),
                existing.to_string(),
                "0".into(),
                "-1".into(),
                i64::MAX.to_string(),
                "9223372036854775808".into(),
                "abc".into(),
                "1.5".into(),
                "%00".into(),
                "9".repeat(500),
            ];
            self.pick(&choices).clone()
        } else {
            let choices = [
                "default",
                "default",
                "e2e",
                "UPPER",
                "a%20b",
                "%F0%9F%8F%88",
                "..",
                &"q".repeat(200),
            ];
            self.pick(&choices).to_string()
        }
    }

    fn query_value(&mut self, schema: &Value) -> String {
        if self.rng.bool() {
            let v = self.sample(schema, 0);
            match v {
                Value::String(s) => s,
                other => other.to_string(),
            }
        } else {
            self.pick(&[
                "",
                "-1",
                "0",
                "99999999999999999999",
                "abc",
                "%00",
                "retryable",
                "%E2%80%AE",
            ])
            .to_string()
        }
    }
}

fn encode(s: &str) -> String {
    // Values already holding `%` escapes are sent as they are (some are meant to be odd).
    if s.contains('%') {
        return s.to_string();
    }
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn every_endpoint_survives_malformed_and_extreme_input() {
    let db = test_db().await;
    let app = crate::common::app(&db.pool, TOKEN);
    let seed = std::env::var("KICKOFF_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let rounds: usize = std::env::var("KICKOFF_FUZZ_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let mut f = Fuzzer {
        app,
        pool: db.pool.clone(),
        rng: fastrand::Rng::with_seed(seed),
        schemas: Map::new(),
    };
    let (status, text) = f.send(Method::GET, "/api/v1/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_str(&text).unwrap();
    f.schemas = doc["components"]["schemas"].as_object().unwrap().clone();

    f.seed().await;

    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations.push((path.clone(), method.clone(), op.clone()));
        }
    }
    let mut requests = 0usize;
    let mut by_status = std::collections::BTreeMap::<u16, usize>::new();
    for (path, method, op) in &operations {
        if path.ends_with("/events") {
            // A stream that stays open: its refusals are covered by the auth tests.
            continue;
        }
        // Deletions and bulk actions eat the seeds: make sure there is something to act on.
        f.seed().await;
        let method: Method = method.to_uppercase().parse().unwrap();
        let params = op["parameters"].as_array().cloned().unwrap_or_default();
        let body_schema = op["requestBody"]["content"]["application/json"]["schema"].clone();
        for _ in 0..rounds {
            let mut uri = path.clone();
            let mut query = Vec::new();
            for p in &params {
                let name = p["name"].as_str().unwrap();
                if p["in"] == "path" {
                    let v = f.path_value(name, path).await;
                    uri = uri.replace(&format!("{{{name}}}"), &v);
                } else if f.rng.bool() {
                    let v = f.query_value(&p["schema"]);
                    query.push(format!("{name}={}", encode(&v)));
                }
            }
            if f.rng.u8(..10) == 0 {
                query.push("unknown=1".into());
            }
            if !query.is_empty() {
                uri = format!("{uri}?{}", query.join("&"));
            }
            let body = (!body_schema.is_null()).then(|| f.body(&body_schema));
            let changes = method != Method::GET;
            let before = if changes {
                Some(f.fingerprint().await)
            } else {
                None
            };
            let shown_body = body
                .as_ref()
                .map(|(b, _)| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned());
            let (status, answer) = f.send(method.clone(), &uri, body).await;
            requests += 1;
            *by_status.entry(status.as_u16()).or_default() += 1;
            assert!(
                !status.is_server_error(),
                "{method} {uri} (seed {seed}) answered {status}: {answer}\nbody: {shown_body:?}"
            );
            if let Some(before) = before {
                if !status.is_success() {
                    assert_eq!(
                        f.fingerprint().await,
                        before,
                        "{method} {uri} (seed {seed}) was refused ({status}) but changed something\nbody: {shown_body:?}"
                    );
                }
            }
            if status.is_client_error()
                && status != StatusCode::NOT_FOUND
                && status != StatusCode::METHOD_NOT_ALLOWED
            {
                assert!(
                    serde_json::from_str::<Value>(&answer)
                        .is_ok_and(|v| v["error"]["message"].is_string()),
                    "{method} {uri}: a refusal says why in the error shape: {answer}"
                );
            }
        }
    }
    eprintln!(
        "fuzz: {requests} requests to {} operations (seed {seed}): no 5xx, nothing half-stored; statuses {by_status:?}",
        operations.len() - 1
    );
    assert!(requests >= rounds * 20);
}
