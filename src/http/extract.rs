//! Extractors whose rejections are [`AppError`]s, so that malformed input gets the same error
//! shape as every other error.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::AppError;
use super::state::ServerKinds;
use crate::engine::JobId;

/// `axum::Json` with [`AppError`] rejections, checked first against the JSON Schema of `T` (the
/// schema the OpenAPI document serves for it): a body that breaks a rule the document states is a
/// 422 naming the field and the rule, so the document cannot state a rule the server does not
/// hold. Where the schema says `integer`, a number written with a zero fraction (`5.0`, which
/// JSON Schema's `integer` admits) is read as an integer; anywhere else (args, meta, a webhook's
/// body) a number stays as written: `10.0` reaches the partner as `10.0`.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned + schemars::JsonSchema + 'static,
    S: Send + Sync,
    ServerKinds: axum::extract::FromRef<S>,
{
    type Rejection = AppError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let kinds = <ServerKinds as axum::extract::FromRef<S>>::from_ref(state);
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(req, state).await?;
        body_of(value, &kinds).map(ApiJson)
    }
}

/// A request body as [`ApiJson`] reads it: integers where the schema says so, checked against
/// `T`'s schema (its job kinds `kinds`), then deserialized.
pub(crate) fn body_of<T>(mut value: serde_json::Value, kinds: &ServerKinds) -> Result<T, AppError>
where
    T: DeserializeOwned + schemars::JsonSchema + 'static,
{
    let checker = validator_of::<T>(kinds);
    integers_where_the_schema_says(&mut value, &checker.schema, &checker.schema, 0);
    check_against_schema::<T>(&value, kinds)?;
    serde_json::from_value(value).map_err(|e| AppError::invalid(format!("body: {e}")))
}

/// A request type's schema and its compiled validator.
struct Checker {
    validator: jsonschema::Validator,
    schema: serde_json::Value,
}

/// A request schema compiled as the check of requests reads it (JSON Schema 2020-12, formats
/// checked).
pub(crate) fn compile(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// The compiled schema of each request type with the server's job kinds stated in it
/// (`schema_rules::with_kinds`, as the document states them), built once per type and kinds.
fn validator_of<T: schemars::JsonSchema + 'static>(kinds: &ServerKinds) -> std::sync::Arc<Checker> {
    use std::any::TypeId;
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    type Checkers = HashMap<(TypeId, ServerKinds), Arc<Checker>>;
    static VALIDATORS: OnceLock<Mutex<Checkers>> = OnceLock::new();
    let map = VALIDATORS.get_or_init(Default::default);
    let key = (TypeId::of::<T>(), kinds.clone());
    if let Some(v) = map.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return v.clone();
    }
    let mut schema = schemars::generate::SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    crate::schema_rules::with_kinds(&mut schema, &kinds.0);
    let validator = Arc::new(Checker {
        validator: compile(&schema)
            .unwrap_or_else(|e| panic!("the schema of {} compiles: {e}", T::schema_name())),
        schema,
    });
    map.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, validator.clone());
    validator
}

/// The first rule of `T`'s schema (its job kinds `kinds`) that `value` breaks, as a 422 naming
/// where.
pub(crate) fn check_against_schema<T: schemars::JsonSchema + 'static>(
    value: &serde_json::Value,
    kinds: &ServerKinds,
) -> Result<(), AppError> {
    let checker = validator_of::<T>(kinds);
    if let Some(e) = checker.validator.iter_errors(value).next() {
        // A rule that answers with a code of its own (a kind this server does not run:
        // `unknown_kind`, as the insert itself would).
        let path = e.schema_path.to_string();
        if innermost(&checker.schema, &path, crate::schema_rules::CODE).as_deref()
            == Some("unknown_kind")
        {
            let kind = e.instance.as_str().unwrap_or_default().to_string();
            // A kind this server runs but only Kickoff inserts (a question's lock job): the
            // engine's rules refuse it, saying so (`kickoff_check_job`).
            if kinds.1.contains(&kind.as_str()) {
                return Ok(());
            }
            return Err(crate::engine::ClientError::UnknownKind(kind).into());
        }
    }
    let broken = checker.validator.iter_errors(value).next().map(|e| {
        if let Some(words) = rule_words(&checker.schema, &e.schema_path.to_string()) {
            return words;
        }
        let at = e.instance_path.to_string();
        let field = at.trim_start_matches('/').replace('/', ".");
        let field = if field.is_empty() {
            "body".to_string()
        } else {
            field
        };
        // A value of many parts (args, headers) is not repeated: it may hold a secret.
        if e.instance.is_object() || e.instance.is_array() {
            return format!("{field}: {}", e.masked());
        }
        format!("{field}: {e}")
    });
    match broken {
        None => Ok(()),
        Some(message) => Err(AppError::invalid(message)),
    }
}

/// The words of the rule broken (`x-message`, on the rule or the field holding it, the innermost
/// on the way to the broken keyword), where the schema gives them: "give either ids or filter"
/// rather than the validator's account of a `oneOf`.
fn rule_words(schema: &serde_json::Value, schema_path: &str) -> Option<String> {
    innermost(schema, schema_path, crate::schema_rules::MESSAGE)
}

/// The innermost value of `keyword` on the way along `schema_path` (through `$ref`).
fn innermost(schema: &serde_json::Value, schema_path: &str, keyword: &str) -> Option<String> {
    let mut node = schema;
    let mut words = node.get(keyword).and_then(|m| m.as_str());
    for segment in schema_path.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        // A `$ref` within the schema (`#/$defs/...`) leads on into the definition.
        let next = if segment == "$ref" {
            node.get("$ref")
                .and_then(|r| r.as_str())
                .and_then(|r| r.strip_prefix('#'))
                .and_then(|pointer| schema.pointer(pointer))
        } else {
            None
        };
        let next = next.or_else(|| match node {
            serde_json::Value::Object(map) => map.get(&segment),
            serde_json::Value::Array(items) => {
                segment.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => None,
        });
        // A path leading out of this schema: the words found so far stand.
        let Some(next) = next else { break };
        node = next;
        if let Some(m) = node.get(keyword).and_then(|m| m.as_str()) {
            words = Some(m);
        }
    }
    words.map(String::from)
}

/// `5.0` as `5` where `schema` (a part of `root`, the request type's schema) says `integer`: JSON
/// Schema's `integer` admits it, serde's integers do not. Followed through `$ref`, the
/// alternatives (`allOf`, `anyOf`, `oneOf`), properties and items; free JSON (args, meta, a
/// body) says `number` at most, so its numbers stay as written.
fn integers_where_the_schema_says(
    value: &mut serde_json::Value,
    schema: &serde_json::Value,
    root: &serde_json::Value,
    depth: usize,
) {
    use serde_json::Value;
    // A schema that refers to itself (a recursive type) goes no deeper than the value does; this
    // bounds a `$ref` cycle that does not descend.
    if depth > 64 {
        return;
    }
    if let Some(target) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        integers_where_the_schema_says(value, target, root, depth + 1);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for part in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            integers_where_the_schema_says(value, part, root, depth + 1);
        }
    }
    let says_integer = match schema.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(types)) => {
            types.iter().any(|t| t == "integer") && !types.iter().any(|t| t == "number")
        }
        _ => false,
    };
    match value {
        Value::Number(n) if says_integer && n.is_f64() => {
            if let Some(f) = n.as_f64() {
                if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    *value = Value::from(f as i64);
                }
            }
        }
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, v) in map.iter_mut() {
                if let Some(part) = properties.and_then(|p| p.get(key)).or(additional) {
                    integers_where_the_schema_says(v, part, root, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(part) = schema.get("items").filter(|i| i.is_object()) {
                for v in items.iter_mut() {
                    integers_where_the_schema_says(v, part, root, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// `axum::extract::Query` with [`AppError`] rejections (a value of the wrong type: 400), then
/// checked, as read, against the JSON Schema of `T` (the parameters the OpenAPI document serves):
/// a value breaking a stated rule (a range, a pattern, a length) is a 422 naming it.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned + serde::Serialize + schemars::JsonSchema + 'static,
    S: Send + Sync,
{
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Query(v) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        let read = serde_json::to_value(&v)
            .map_err(|e| AppError::Internal(format!("a query read back: {e}")))?;
        // A query names no kind a job must be (a filter's kind is any text).
        check_against_schema::<T>(&read, &ServerKinds::default())?;
        Ok(ApiQuery(v))
    }
}

/// A positive integer id from the path; anything else names no record (404).
async fn positive_id<S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    what: &str,
) -> Result<i64, AppError> {
    let axum::extract::Path(raw) =
        axum::extract::Path::<String>::from_request_parts(parts, state).await?;
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(AppError::NotFound(format!("{what} {raw} not found"))),
    }
}

/// A job id from the path.
pub struct JobIdPath(pub JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "job")
            .await
            .map(|id| JobIdPath(JobId(id)))
    }
}

/// A question id from the path.
pub struct IdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for IdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "question").await.map(IdPath)
    }
}

/// A webhook endpoint's id from the path.
pub struct EndpointIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for EndpointIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "webhook endpoint")
            .await
            .map(EndpointIdPath)
    }
}

/// An alert rule's or incident's id from the path.
pub struct AlertIdPath(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for AlertIdPath {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        positive_id(parts, state, "alert").await.map(AlertIdPath)
    }
}

/// Deserializes a present field, `null` included, as `Some` (absent stays `None`): with
/// `#[serde(default, deserialize_with = "…")]` on an `Option<Option<T>>`, a patch tells "set to
/// null" from "leave as it is".
pub fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}
