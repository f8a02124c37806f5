//! Endpoints' secrets: made from the OS generator, sealed before they reach the database, shown
//! once; opened to sign a call.

use std::sync::Arc;
use std::time::Duration;

use password_hash::rand_core::{OsRng, RngCore};
use sqlx::{PgConnection, PgPool};

use super::deliveries::{self, DeliveryRow, DeliverySearch};
use super::key::SecretKey;
use super::signing::whsec;
use super::store::{self, EndpointRow};

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

/// The endpoints in the database behind `pool`, sealed with `key`.
#[derive(Clone)]
pub struct Endpoints {
    pool: PgPool,
    key: Arc<SecretKey>,
}

impl Endpoints {
    pub fn new(pool: PgPool, key: Arc<SecretKey>) -> Self {
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
        by: Option<&str>,
    ) -> Result<NewSecret, EndpointError> {
        let prefix = check_prefix(url_prefix)?;
        let raw = new_secret();
        match store::endpoint_insert(conn, &prefix, &self.key.seal(&raw), self.key.id(), by).await {
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
            &self.key.seal(&raw),
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

/// The raw secrets that sign a call to `url` (the current one first), `None` when no endpoint's
/// prefix matches it.
pub async fn secrets_for(
    pool: &PgPool,
    key: &SecretKey,
    url: &str,
) -> Result<Option<Vec<Vec<u8>>>, EndpointError> {
    let Some(sealed) = store::endpoint_secrets_for(pool, url).await? else {
        return Ok(None);
    };
    if sealed.key_id != key.id() {
        return Err(EndpointError::OtherKey {
            id: sealed.id,
            sealed_with: sealed.key_id,
            ours: key.id().to_string(),
        });
    }
    let mut keys = vec![key
        .unseal(&sealed.secret)
        .map_err(EndpointError::Unsealing)?];
    if let Some(previous) = &sealed.previous_secret {
        // A previous secret sealed under an older key (rotated since) is left out, not fatal.
        if let Ok(raw) = key.unseal(previous) {
            keys.push(raw);
        }
    }
    Ok(Some(keys))
}

fn new_secret() -> Vec<u8> {
    let mut raw = vec![0u8; SECRET_BYTES];
    OsRng.fill_bytes(&mut raw);
    raw
}

/// A prefix an endpoint may have: an http(s) URL with a host, without user info or fragment.
fn check_prefix(prefix: &str) -> Result<String, EndpointError> {
    let invalid = |m: &str| EndpointError::Invalid(format!("url_prefix: {m}"));
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
    // As written (a job's URL is compared as written too), but the scheme and host lower case.
    let lowered_head = format!("{}://{}", url.scheme(), url.host_str().unwrap_or(""));
    let written_head_len =
        prefix.find("://").map(|i| i + 3).unwrap_or(0) + url.host_str().map(str::len).unwrap_or(0);
    // A host written otherwise than the URL reads it (an international name) is refused: jobs'
    // URLs are compared as written.
    let rest = prefix
        .get(written_head_len..)
        .filter(|_| prefix[..written_head_len].eq_ignore_ascii_case(&lowered_head))
        .ok_or_else(|| invalid("write the host as the URL reads it (lower case, ASCII)"))?;
    Ok(format!("{lowered_head}{rest}"))
}

#[cfg(test)]
mod tests {
    use super::check_prefix;

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
}
