//! Endpoints' secrets: made from the OS generator, sealed before they reach the database, shown
//! once; opened to sign a call.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::db::Db;
use password_hash::rand_core::{OsRng, RngCore};
use sqlx::PgConnection;

use super::deliveries::{self, DeliveryRow, DeliverySearch};
use super::key::{endpoint_context, SealedField, SecretKey};
use super::signing::whsec;
use super::store::{self, Allowance, EndpointRow, SealedHeaders};

/// The longest a previous secret may keep signing after a rotation: 7 days.
pub const MAX_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);
/// The overlap of a rotation unless one is given: 24 hours.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// Raw bytes of a signing secret.
const SECRET_BYTES: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("{0}")]
    Invalid(String),
    /// A change that does not fit the endpoint as it is.
    #[error("{0}")]
    Inconsistent(String),
    /// A URL prefix the URL parser refuses.
    #[error("{0}")]
    BadUrl(String),
    #[error("no webhook endpoint {0}")]
    NotFound(i64),
    #[error("an endpoint with the URL prefix {0} exists already")]
    Taken(String),
    /// The secret was sealed with another key than this server's.
    #[error("the secret of endpoint {id} was sealed with the key {sealed_with}, and this server has {ours}: give every node the same KICKOFF_SECRET_KEY")]
    OtherKey {
        id: i64,
        sealed_with: String,
        ours: String,
    },
    #[error("{0}")]
    Unsealing(String),
    /// A call to us that is not signed as its endpoint's (see `inbound`).
    #[error(transparent)]
    Unsigned(#[from] super::inbound::Unsigned),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

/// A secret just made: shown once, as receivers configure it.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct NewSecret {
    pub endpoint: EndpointRow,
    /// `whsec_` + base64 of 32 random bytes: shown this once, never again.
    pub secret: String,
}

/// What an endpoint is made with, or changes (`None`: as it is; made: none, and no calls allowed).
#[derive(Debug, Clone, Default)]
pub struct EndpointSettings {
    /// Sent with every call under the endpoint, beneath the job's own headers; replaces all the
    /// defaults it had (empty: none).
    pub headers: Option<BTreeMap<String, String>>,
    /// Webhook jobs may call URLs under the prefix.
    pub allow_calls: Option<bool>,
    /// A host name under the prefix may resolve to a private address (needs `allow_calls`).
    pub private_network: Option<bool>,
    /// The methods the default headers go with (made: POST only).
    pub header_methods: Option<Vec<String>>,
    /// The workflows whose live runs the partner may signal, signed (made: none).
    pub signal_workflows: Option<Vec<String>>,
}

/// The most workflows an endpoint may signal.
pub const MAX_SIGNAL_WORKFLOWS: usize = 20;

/// `names` as stored: trimmed, each once, in the order given; 1 to 128 characters each, at most
/// [`MAX_SIGNAL_WORKFLOWS`].
fn check_signal_workflows(names: &[String]) -> Result<Vec<String>, EndpointError> {
    let mut kept: Vec<String> = Vec::new();
    for name in names {
        let name = name.trim();
        if name.is_empty() || name.chars().count() > 128 || name.contains('\0') {
            return Err(EndpointError::Invalid(
                "signal_workflows: each a workflow's name, 1 to 128 characters, without NUL".into(),
            ));
        }
        if !kept.iter().any(|k| k == name) {
            kept.push(name.to_string());
        }
    }
    if kept.len() > MAX_SIGNAL_WORKFLOWS {
        return Err(EndpointError::Invalid(format!(
            "signal_workflows: at most {MAX_SIGNAL_WORKFLOWS} workflows"
        )));
    }
    Ok(kept)
}

/// The methods a webhook call may use (and so an endpoint may list for its default headers).
pub const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `methods` as stored: upper case, each once, in [`METHODS`] order; at least one.
fn check_methods(methods: &[String]) -> Result<Vec<String>, EndpointError> {
    let upper: Vec<String> = methods
        .iter()
        .map(|m| m.trim().to_ascii_uppercase())
        .collect();
    if let Some(bad) = upper.iter().find(|m| !METHODS.contains(&m.as_str())) {
        return Err(EndpointError::Invalid(format!(
            "header_methods: `{bad}` is not one of {}",
            METHODS.join(", ")
        )));
    }
    let kept: Vec<String> = METHODS
        .iter()
        .filter(|m| upper.iter().any(|u| u == *m))
        .map(|m| m.to_string())
        .collect();
    if kept.is_empty() {
        return Err(EndpointError::Invalid(
            "header_methods: at least one method".into(),
        ));
    }
    Ok(kept)
}

/// What a call to a URL gets from the endpoints matching it.
#[derive(Debug, Clone, Default)]
pub struct CallEndpoint {
    /// The raw secrets that sign it (the current one first); empty without a key to open them.
    pub keys: Vec<Vec<u8>>,
    /// The longest matching endpoint's default headers.
    pub headers: BTreeMap<String, String>,
    /// ... and the methods they go with.
    pub header_methods: Vec<String>,
    /// An endpoint allows the call, and lets its host resolve privately.
    pub allowed: bool,
    pub private_ok: bool,
}

/// The endpoints in the database behind `pool`, sealed with `key`.
#[derive(Clone)]
pub struct Endpoints {
    pool: Db,
    key: Arc<SecretKey>,
}

impl Endpoints {
    pub fn new(pool: Db, key: Arc<SecretKey>) -> Self {
        Endpoints { pool, key }
    }

    pub async fn list(&self) -> Result<Vec<EndpointRow>, EndpointError> {
        Ok(store::endpoint_list(&self.pool).await?)
    }

    /// The delivery record's calls that `search` finds, newest first.
    pub async fn deliveries(
        &self,
        search: &DeliverySearch,
    ) -> Result<Vec<DeliveryRow>, EndpointError> {
        Ok(deliveries::search(&self.pool, search).await?)
    }

    /// Every call of one job, in the order made.
    pub async fn deliveries_of_job(&self, job_id: i64) -> Result<Vec<DeliveryRow>, EndpointError> {
        Ok(deliveries::of_job(&self.pool, job_id).await?)
    }

    /// Makes an endpoint for `url_prefix` (`http://` or `https://`, a host at least) and its
    /// secret, inside the caller's transaction.
    pub async fn create_with(
        &self,
        conn: &mut PgConnection,
        url_prefix: &str,
        settings: &EndpointSettings,
        by: Option<&str>,
    ) -> Result<NewSecret, EndpointError> {
        let prefix = check_prefix(url_prefix)?;
        let id = store::endpoint_next_id(&mut *conn).await?;
        let headers = match &settings.headers {
            Some(h) if !h.is_empty() => Some(self.seal_headers(id, h)?),
            _ => None,
        };
        let allowance = Allowance {
            allow_calls: settings.allow_calls.unwrap_or(false),
            private_network: settings.private_network.unwrap_or(false),
        };
        check_allowance(allowance)?;
        let header_methods = match &settings.header_methods {
            Some(m) => check_methods(m)?,
            None => store::HEADER_METHODS_DEFAULT
                .iter()
                .map(|m| m.to_string())
                .collect(),
        };
        let signal_workflows =
            check_signal_workflows(settings.signal_workflows.as_deref().unwrap_or_default())?;
        let raw = new_secret();
        match store::endpoint_insert(
            conn,
            id,
            &prefix,
            &self
                .key
                .seal_bound(&raw, &endpoint_context(id, SealedField::Secret)),
            self.key.id(),
            headers.as_ref(),
            allowance,
            &header_methods,
            &signal_workflows,
            by,
        )
        .await
        {
            Ok(endpoint) => Ok(NewSecret {
                endpoint,
                secret: whsec(&raw),
            }),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(EndpointError::Taken(prefix))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Gives an endpoint a new secret; the current one signs too for `overlap` (at most
    /// [`MAX_OVERLAP`]; zero: it stops at once).
    pub async fn rotate_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        overlap: Duration,
    ) -> Result<NewSecret, EndpointError> {
        if overlap > MAX_OVERLAP {
            return Err(EndpointError::Invalid(format!(
                "overlap_secs: at most {} (7 days)",
                MAX_OVERLAP.as_secs()
            )));
        }
        let raw = new_secret();
        let endpoint = store::endpoint_rotate(
            conn,
            id,
            &self
                .key
                .seal_bound(&raw, &endpoint_context(id, SealedField::Secret)),
            self.key.id(),
            overlap.as_secs_f64(),
        )
        .await?
        .ok_or(EndpointError::NotFound(id))?;
        Ok(NewSecret {
            endpoint,
            secret: whsec(&raw),
        })
    }

    /// Changes an endpoint's default headers (all of them) and what it allows.
    pub async fn update_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
        change: &EndpointSettings,
    ) -> Result<EndpointRow, EndpointError> {
        let headers = match &change.headers {
            None => None,
            Some(h) if h.is_empty() => Some(None),
            Some(h) => Some(Some(self.seal_headers(id, h)?)),
        };
        let header_methods = change
            .header_methods
            .as_deref()
            .map(check_methods)
            .transpose()?;
        let signal_workflows = change
            .signal_workflows
            .as_deref()
            .map(check_signal_workflows)
            .transpose()?;
        let row = store::endpoint_update(
            &mut *conn,
            id,
            headers.as_ref().map(Option::as_ref),
            change.allow_calls,
            change.private_network,
            header_methods.as_deref(),
            signal_workflows.as_deref(),
        )
        .await;
        match row {
            Ok(row) => row.ok_or(EndpointError::NotFound(id)),
            Err(sqlx::Error::Database(e)) if e.constraint() == Some(PRIVATE_NEEDS_CALLS) => {
                Err(EndpointError::Inconsistent(
                    "private_network: only for an endpoint that allows calls (allow_calls)".into(),
                ))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Seals again, bound to their endpoint, the values of the endpoints sealed before values were
    /// bound: once, by the first node of this version to start (called at start, before the
    /// engine runs); after that it opens nothing, so an unbound value pasted into a row later
    /// (from an old dump) is never opened. This server's key only: another key's rows stay
    /// unbound and sign nothing (rotating the secret binds it; headers must be given again).
    /// Returns how many were bound; a row whose values do not open is reported.
    pub async fn bind_sealed(&self) -> Result<(u64, Vec<(i64, String)>), EndpointError> {
        let mut tx = self.pool.begin().await?;
        if store::binding_done_lock(&mut tx).await? {
            return Ok((0, Vec::new()));
        }
        let rows = store::endpoint_unbound_lock(&mut tx, self.key.id()).await?;
        let (mut bound, mut failed) = (0, Vec::new());
        for row in rows {
            let secret_context = endpoint_context(row.id, SealedField::Secret);
            let reseal = |sealed: &[u8], context: &str| -> Result<Vec<u8>, String> {
                let plain = self.key.unseal_unbound(sealed)?;
                Ok(self.key.seal_bound(&plain, context))
            };
            let secret = reseal(&row.secret, &secret_context);
            // A previous secret that no longer opens is dropped (as `for_call` left it out).
            let previous = row
                .previous_secret
                .as_deref()
                .and_then(|p| reseal(p, &secret_context).ok());
            let headers = match (&row.headers, &row.headers_key_id) {
                (Some(h), Some(k)) if k == self.key.id() => {
                    Some(reseal(h, &endpoint_context(row.id, SealedField::Headers)))
                }
                (Some(_), Some(k)) => {
                    Some(Err(format!("its headers were sealed with the key {k}")))
                }
                _ => None,
            };
            match (secret, headers.transpose()) {
                (Ok(secret), Ok(headers)) => {
                    store::endpoint_set_bound(
                        &mut tx,
                        row.id,
                        &secret,
                        previous.as_deref(),
                        headers.as_deref(),
                    )
                    .await?;
                    bound += 1;
                }
                (Err(e), _) | (_, Err(e)) => failed.push((row.id, e)),
            }
        }
        store::binding_mark_done(&mut tx).await?;
        tx.commit().await?;
        Ok((bound, failed))
    }

    fn seal_headers(
        &self,
        id: i64,
        headers: &BTreeMap<String, String>,
    ) -> Result<SealedHeaders, EndpointError> {
        let names = super::headers::check_defaults(headers).map_err(EndpointError::Invalid)?;
        let plain = serde_json::to_vec(headers).expect("a map of strings serializes");
        Ok(SealedHeaders {
            sealed: self
                .key
                .seal_bound(&plain, &endpoint_context(id, SealedField::Headers)),
            key_id: self.key.id().to_string(),
            names,
        })
    }

    /// The workflows endpoint `id` may signal, when `signed` is a call signed with its secret
    /// (or the previous one while its overlap lasts) within the tolerance of the database's clock;
    /// else why not. An endpoint that signals no workflow takes no call.
    pub async fn inbound(
        &self,
        id: i64,
        signed: &super::inbound::Signed<'_>,
    ) -> Result<Vec<String>, EndpointError> {
        use super::inbound::{verify, Unsigned};
        let sealed = match store::endpoint_inbound(&self.pool, id).await? {
            Some(s) if !s.signal_workflows.is_empty() => s,
            _ => return Err(Unsigned::NotTaking(id).into()),
        };
        if sealed.key_id != self.key.id() {
            return Err(EndpointError::OtherKey {
                id,
                sealed_with: sealed.key_id,
                ours: self.key.id().to_string(),
            });
        }
        if !sealed.bound {
            return Err(EndpointError::Unsealing(format!(
                "the secret of endpoint {id} was sealed before binding and does not open: rotate it"
            )));
        }
        let context = endpoint_context(id, SealedField::Secret);
        let mut keys = vec![self
            .key
            .unseal_bound(&sealed.secret, &context)
            .map_err(EndpointError::Unsealing)?];
        if let Some(previous) = &sealed.previous_secret {
            if let Ok(raw) = self.key.unseal_bound(previous, &context) {
                keys.push(raw);
            }
        }
        verify(&keys, signed, sealed.now_secs)?;
        Ok(sealed.signal_workflows)
    }

    pub async fn delete_with(
        &self,
        conn: &mut PgConnection,
        id: i64,
    ) -> Result<EndpointRow, EndpointError> {
        store::endpoint_delete(conn, id)
            .await?
            .ok_or(EndpointError::NotFound(id))
    }
}

/// The constraint that keeps `private_network` to endpoints that allow calls.
const PRIVATE_NEEDS_CALLS: &str = "webhook_endpoints_private_needs_calls";

fn check_allowance(allowance: Allowance) -> Result<(), EndpointError> {
    if allowance.private_network && !allowance.allow_calls {
        return Err(EndpointError::Invalid(
            "private_network: only for an endpoint that allows calls (allow_calls)".into(),
        ));
    }
    Ok(())
}

/// What the endpoints give a call to `url` (its URL as parsed): the secrets that sign it and the
/// default headers (opened with `key`; none without one), and whether an endpoint allows it.
/// `None` when no endpoint's prefix matches it.
pub async fn for_call(
    pool: &Db,
    key: Option<&SecretKey>,
    url: &str,
) -> Result<Option<CallEndpoint>, EndpointError> {
    let Some(sealed) = store::endpoint_for_call(pool, url).await? else {
        return Ok(None);
    };
    let mut call = CallEndpoint {
        allowed: sealed.allowed,
        private_ok: sealed.private_ok,
        header_methods: sealed.header_methods.clone(),
        ..CallEndpoint::default()
    };
    let Some(key) = key else {
        return Ok(Some(call));
    };
    let other_key = |sealed_with: &str| EndpointError::OtherKey {
        id: sealed.id,
        sealed_with: sealed_with.to_string(),
        ours: key.id().to_string(),
    };
    if sealed.key_id != key.id() {
        return Err(other_key(&sealed.key_id));
    }
    if !sealed.bound {
        return Err(EndpointError::Unsealing(format!(
            "the values of endpoint {} were sealed before binding and do not open: rotate its \
             secret and give its default headers again",
            sealed.id
        )));
    }
    let secret_context = endpoint_context(sealed.id, SealedField::Secret);
    call.keys.push(
        key.unseal_bound(&sealed.secret, &secret_context)
            .map_err(EndpointError::Unsealing)?,
    );
    if let Some(previous) = &sealed.previous_secret {
        // A previous secret sealed under an older key (rotated since) is left out, not fatal.
        if let Ok(raw) = key.unseal_bound(previous, &secret_context) {
            call.keys.push(raw);
        }
    }
    if let (Some(headers), Some(key_id)) = (&sealed.headers, &sealed.headers_key_id) {
        if key_id != key.id() {
            return Err(EndpointError::Unsealing(format!(
                "the default headers of endpoint {} were sealed with the key {key_id}, and this \
                 server has {}: give every node the same KICKOFF_SECRET_KEY, or give the headers \
                 again (PATCH /api/v1/webhook-endpoints/{})",
                sealed.id,
                key.id(),
                sealed.id
            )));
        }
        let plain = key
            .unseal_bound(headers, &endpoint_context(sealed.id, SealedField::Headers))
            .map_err(EndpointError::Unsealing)?;
        call.headers = serde_json::from_slice(&plain).map_err(|e| {
            EndpointError::Unsealing(format!(
                "the default headers of endpoint {}: {e}",
                sealed.id
            ))
        })?;
    }
    Ok(Some(call))
}

/// Why a call to `url` with `method` may not carry its endpoint's default headers, if it may not
/// (the longest matching endpoint has default headers and does not list the method).
pub async fn header_methods_refusal<'e>(
    db: impl sqlx::PgExecutor<'e>,
    url: &str,
    method: &str,
) -> Result<Option<String>, sqlx::Error> {
    Ok(store::endpoint_header_methods(db, url)
        .await?
        .and_then(|methods| refusal_for_method(&methods, method)))
}

/// The refusal of `method` by an endpoint whose default headers go with `methods`, if any.
pub fn refusal_for_method(methods: &[String], method: &str) -> Option<String> {
    (!methods.iter().any(|m| m.eq_ignore_ascii_case(method))).then(|| {
        format!(
            "method: the webhook endpoint for this URL sends its default headers (credentials) \
             with {} only, not {method}: an admin may list more methods (header_methods)",
            methods.join(", ")
        )
    })
}

/// Whether an endpoint allows calls to `url` (its URL as parsed): `None` for none, else whether
/// its host may resolve to a private address.
pub async fn allows<'e>(
    db: impl sqlx::PgExecutor<'e>,
    url: &str,
) -> Result<Option<bool>, sqlx::Error> {
    store::endpoint_allows(db, url).await
}

fn new_secret() -> Vec<u8> {
    let mut raw = vec![0u8; SECRET_BYTES];
    OsRng.fill_bytes(&mut raw);
    raw
}

/// The prefixes the document states: `http://` or `https://`, a host, then a path or a query,
/// without spaces, user info or a fragment. The URL parser (WHATWG, IDNA) has the last word: a
/// prefix it refuses is a 422 `invalid_url` (no pattern states that grammar).
pub const PREFIX_PATTERN: &str = r"^[hH][tT][tT][pP][sS]?://[^\s/?#@]+([/?][^\s#]*)?$";

/// A prefix an endpoint may have: an http(s) URL with a host, without user info or fragment,
/// kept as the URL parser reads it (the scheme and host in lower case, an international host in
/// ASCII, a default port dropped, `.` and `..` segments resolved, characters percent-encoded):
/// calls' URLs are compared as parsed, so a prefix kept any other way could never match.
fn check_prefix(prefix: &str) -> Result<String, EndpointError> {
    let invalid = |m: &str| EndpointError::BadUrl(format!("url_prefix: {m}"));
    let prefix = prefix.trim();
    if prefix.len() > 2048 {
        return Err(invalid("at most 2048 characters"));
    }
    let url = reqwest::Url::parse(prefix).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("only http and https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("a host is needed"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(invalid("no user info and no fragment"));
    }
    let parsed = url.as_str();
    // The parser gives a URL without a path the path `/`: a prefix written without one
    // (`http://127.0.0.1:8080`) stays without it, and matches that host and port at a boundary.
    let kept = if url.path() == "/" && url.query().is_none() && !prefix.ends_with('/') {
        parsed.strip_suffix('/').unwrap_or(parsed)
    } else {
        parsed
    };
    if kept.len() > 2048 {
        return Err(invalid("at most 2048 characters, as the URL reads it"));
    }
    Ok(kept.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_http_urls_with_a_host() {
        assert_eq!(
            check_prefix("HTTPS://Partner.Example/hooks/").unwrap(),
            "https://partner.example/hooks/"
        );
        assert_eq!(
            check_prefix("http://127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        // As calls' URLs are read: no default port, no dot segments, encoded.
        assert_eq!(
            check_prefix("https://partner.example:443/a/../hooks b/").unwrap(),
            "https://partner.example/hooks%20b/"
        );
        assert_eq!(
            check_prefix("https://bücher.example").unwrap(),
            "https://xn--bcher-kva.example"
        );
        for bad in [
            "ftp://x.example/",
            "https://",
            "https://u:p@x.example/",
            "nonsense",
            "https://x.example/#f",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad}");
        }
    }

    /// Every prefix [`check_prefix`] keeps is one the document's pattern admits (the pattern
    /// refuses nothing the server takes); one it admits and the parser refuses is `BadUrl`, the
    /// refusal the document names (`invalid_url`).
    #[test]
    fn the_pattern_admits_every_prefix_kept_and_the_rest_is_a_bad_url() {
        let pattern = jsonschema::validator_for(&serde_json::json!({
            "type": "string", "pattern": PREFIX_PATTERN, "maxLength": 2000,
        }))
        .unwrap();
        let (mut kept, mut bad) = (0, 0);
        for scheme in ["http", "HTTPS", "ftp"] {
            for host in [
                "0",
                "l.6",
                "1.2.3.4",
                "1.2.3.4.5",
                "256.1.1.1",
                "a.b",
                "xn--a",
                "xn--bcher-kva.example",
                "A.EXAMPLE",
                "localhost",
                "my_app",
                "[::1]",
                "[::zz]",
                "-a.b",
                "\u{fc}.example",
                "u:p@x",
            ] {
                for port in ["", ":0", ":8080", ":65535", ":65536"] {
                    for rest in ["", "/", "/a/../b", "?:~-", "/p?q=1&r", "/%zz", "#f"] {
                        let text = format!("{scheme}://{host}{port}{rest}");
                        let admitted = pattern.is_valid(&serde_json::json!(text));
                        match check_prefix(&text) {
                            Ok(_) => {
                                kept += 1;
                                assert!(admitted, "{text} is kept but the pattern refuses it");
                            }
                            Err(EndpointError::BadUrl(_)) => bad += 1,
                            Err(e) => panic!("{text}: {e}"),
                        }
                    }
                }
            }
        }
        assert!(kept > 100 && bad > 100, "{kept} {bad}");
    }

    #[test]
    fn header_methods_are_kept_upper_case_once_each_and_checked() {
        let given: Vec<String> = ["put", " POST ", "put"]
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(check_methods(&given).unwrap(), ["POST", "PUT"]);
        assert!(check_methods(&[]).is_err());
        assert!(check_methods(&["TRACE".to_string()]).is_err());
        let post = vec!["POST".to_string()];
        assert!(refusal_for_method(&post, "POST").is_none());
        assert!(refusal_for_method(&post, "DELETE").is_some_and(|r| r.contains("POST only")));
    }
}
