//! The delivery record: one row per webhook call made (`webhook_deliveries`), written by the
//! `webhook` worker after each call and read by the job detail, the API and the Webhooks page.
//!
//! A row says when the call started by the database clock and how late that was against the
//! attempt's due time, where it connected, the status, how long it took, the response's headers
//! (`Set-Cookie` values left out) and the first characters of its body, or the error. Request
//! headers are never kept: they may carry a job's credentials and the signature.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgExecutor, Postgres, QueryBuilder};

use crate::engine::sight::{self, Sight};

/// How many characters of a response body are kept.
pub const BODY_CHARS: usize = 500;
/// How many response headers are kept (the first, in the order received).
pub const MAX_HEADERS: usize = 50;
/// How many characters of one header value are kept.
pub const HEADER_VALUE_CHARS: usize = 300;
/// How many characters of one header name are kept (a receiver may send names of any length:
/// 50 names of 64 KB each would be 3 MB a row).
pub const HEADER_NAME_CHARS: usize = 100;
/// How many characters of an error are kept.
pub const ERROR_CHARS: usize = 2000;
/// The most rows one search returns.
pub const MAX_PAGE: i64 = 500;

/// One call, as recorded.
#[derive(schemars::JsonSchema, Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub job_id: i64,
    /// The job's attempt the call belonged to (a call snoozed by `Retry-After` and made again
    /// keeps its attempt number).
    pub attempt: i32,
    /// When the call started, by the database clock.
    pub started_at: DateTime<Utc>,
    /// How long after the attempt's due time the call started, in milliseconds.
    pub late_ms: i64,
    pub duration_ms: i32,
    /// Where the call connected (`ip:port`), or the addresses it would have tried.
    pub address: Option<String>,
    /// The HTTP status; absent when no answer came (a time-out, a refused connection, a
    /// refusal before the call).
    pub status: Option<i16>,
    /// The response's headers (lower-case names; repeated headers joined with `, `).
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub response_headers: Option<sqlx::types::Json<BTreeMap<String, String>>>,
    /// The first characters of the response body.
    pub response_body: Option<String>,
    /// Why the call failed, as the job's error says it.
    pub error: Option<String>,
    /// The call carried its endpoint's default headers (credentials): its response's headers and
    /// body are shown only to admins and the job's creator.
    pub credentialed: bool,
    /// The job's creator (while the job exists), to tell who may see a credentialed answer.
    #[serde(skip)]
    #[schemars(skip)]
    pub job_created_by: Option<String>,
    /// The job's kind, args and meta (as text: read leniently) and former secrets: what the
    /// answer may quote, hidden from whoever may not see the job's secrets.
    #[serde(skip)]
    #[schemars(skip)]
    pub job_kind: Option<String>,
    #[serde(skip)]
    #[schemars(skip)]
    pub job_args: Option<String>,
    #[serde(skip)]
    #[schemars(skip)]
    pub job_meta: Option<String>,
    #[serde(skip)]
    #[schemars(skip)]
    pub job_former_secrets: Option<Vec<String>>,
}

impl DeliveryRow {
    /// The call as `sight` sees it, by the rule every surface applies to a job's data
    /// (`engine::sight`): whole for admins and the job's creator; for anyone else, the answer to
    /// a call that carried its endpoint's default headers is left out, and every other answer
    /// (its body, its headers, the error) shows with the job's own secrets hidden, a careless
    /// partner echoing them (its header values, its URL's credentials) included.
    pub fn as_seen_by(self, sight: &Sight<'_>) -> Self {
        let secrets = self.secrets(sight);
        self.seen_with(sight, secrets.as_ref())
    }

    /// Each of `rows` as `sight` sees it ([`Self::as_seen_by`]), each job's secrets found once.
    pub fn all_as_seen_by(rows: Vec<DeliveryRow>, sight: &Sight<'_>) -> Vec<DeliveryRow> {
        let mut found: HashMap<i64, Option<sight::Secrets>> = HashMap::new();
        rows.into_iter()
            .map(|row| {
                if sight.sees_secrets_of_creator(row.job_created_by.as_deref()) {
                    return row;
                }
                let secrets = found
                    .entry(row.job_id)
                    .or_insert_with(|| row.secrets(sight))
                    .clone();
                row.seen_with(sight, secrets.as_ref())
            })
            .collect()
    }

    /// The secrets of the row's job (`None` when it cannot be read).
    fn secrets(&self, sight: &Sight<'_>) -> Option<sight::Secrets> {
        let kind = self.job_kind.as_deref()?;
        let args: Value = serde_json::from_str(self.job_args.as_deref()?).ok()?;
        let meta: Value = serde_json::from_str(self.job_meta.as_deref()?).ok()?;
        let former = self.job_former_secrets.clone().unwrap_or_default();
        Some(sight::secrets_of_parts(
            sight.workers,
            kind,
            &args,
            &meta,
            &former,
        ))
    }

    fn seen_with(mut self, sight: &Sight<'_>, secrets: Option<&sight::Secrets>) -> Self {
        if sight.sees_secrets_of_creator(self.job_created_by.as_deref()) {
            return self;
        }
        if self.credentialed {
            self = self.without_answer();
        }
        let Some(secrets) = secrets else {
            // The job cannot be read (gone, or a row no float reads): nothing says what of the
            // answer is its secret, so none of it is shown.
            self = self.without_answer();
            self.error = self.error.map(|_| sight::REDACTED.into());
            return self;
        };
        self.response_body = self.response_body.map(|b| secrets.scrub(&b));
        self.error = self.error.map(|e| secrets.scrub(&e));
        if let Some(headers) = self.response_headers.as_mut() {
            for (name, value) in headers.0.iter_mut() {
                *value = if sight::is_secret_name(name) {
                    sight::REDACTED.into()
                } else {
                    secrets.scrub(value)
                };
            }
        }
        self
    }

    /// The row without what the call's answer said: for a credentialed call seen by someone who
    /// may not spend the endpoint's credentials.
    pub fn without_answer(mut self) -> Self {
        if self.response_body.is_some() {
            self.response_body = Some(ANSWER_HIDDEN.into());
        }
        self.response_headers = None;
        self
    }
}

/// What a credentialed call's answer is shown as to everyone but admins and the job's creator.
pub const ANSWER_HIDDEN: &str = "[redacted: the call carried its endpoint's default headers]";

/// A call to record.
#[derive(Debug, Clone, Default)]
pub struct NewDelivery {
    /// The call carried its endpoint's default headers.
    pub credentialed: bool,
    pub job_id: i64,
    pub attempt: i32,
    /// The attempt's due time (the job's `scheduled_at` when it was claimed).
    pub due_at: DateTime<Utc>,
    /// How long ago, and for how long, the call ran (it ends now).
    pub duration_ms: i32,
    pub address: Option<String>,
    pub status: Option<u16>,
    pub response_headers: Option<BTreeMap<String, String>>,
    pub response_body: Option<String>,
    pub error: Option<String>,
}

/// Which calls a search finds by their status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    /// `500`
    Exactly(u16),
    /// `5xx`: the class (1 to 9).
    Class(u16),
    /// `none`: calls that got no answer.
    NoAnswer,
}

impl std::str::FromStr for StatusFilter {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        let bad =
            || format!("status: `{s}` is not a status code (`500`), a class (`5xx`) or `none`");
        if s == "none" {
            return Ok(StatusFilter::NoAnswer);
        }
        if let Some(class) = s.strip_suffix("xx") {
            return match class.parse::<u16>() {
                Ok(c @ 1..=9) if class.len() == 1 => Ok(StatusFilter::Class(c)),
                _ => Err(bad()),
            };
        }
        match s.parse::<u16>() {
            Ok(code @ 100..=999) => Ok(StatusFilter::Exactly(code)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for StatusFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusFilter::Exactly(code) => write!(f, "{code}"),
            StatusFilter::Class(c) => write!(f, "{c}xx"),
            StatusFilter::NoAnswer => f.write_str("none"),
        }
    }
}

/// A search of the record, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeliverySearch {
    pub status: Option<StatusFilter>,
    pub job_id: Option<i64>,
    /// Keyset cursor: calls with a smaller id.
    pub before: Option<i64>,
    pub limit: i64,
}

/// Cuts `s` to at most `chars` characters.
pub fn capped(s: &str, chars: usize) -> String {
    s.chars().take(chars).collect()
}

/// Records one call. The call started `duration_ms` before now by the database clock.
pub async fn insert<'e>(db: impl PgExecutor<'e>, d: &NewDelivery) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO webhook_deliveries (job_id, attempt, started_at, late_ms, duration_ms,
             address, status, response_headers, response_body, error, credentialed)
         SELECT $1, $2, s, floor(extract(epoch FROM s - $3) * 1000)::bigint, $4, $5, $6, $7, $8, $9,
                $10
         FROM (SELECT clock_timestamp() - make_interval(secs => $4::float8 / 1000) AS s) t",
    )
    .bind(d.job_id)
    .bind(d.attempt)
    .bind(d.due_at)
    .bind(d.duration_ms.max(0))
    .bind(d.address.as_deref().map(|a| capped(a, 1000)))
    .bind(d.status.map(|s| s as i16))
    .bind(d.response_headers.as_ref().map(sqlx::types::Json))
    .bind(d.response_body.as_deref().map(|b| capped(b, BODY_CHARS)))
    .bind(d.error.as_deref().map(|e| capped(e, ERROR_CHARS)))
    .bind(d.credentialed)
    .execute(db)
    .await
    .map(drop)
}

const COLUMNS: &str = "d.id, d.job_id, d.attempt, d.started_at, d.late_ms, d.duration_ms, \
                       d.address, d.status, d.response_headers, d.response_body, d.error, \
                       d.credentialed, j.created_by AS job_created_by, j.kind AS job_kind, \
                       j.args::text AS job_args, j.meta::text AS job_meta, \
                       j.former_secrets AS job_former_secrets";
/// The record with each call's job (for its creator; the job may have been pruned).
const FROM: &str = "webhook_deliveries d LEFT JOIN jobs j ON j.id = d.job_id";

/// Every call of one job, in the order made.
pub async fn of_job<'e>(
    db: impl PgExecutor<'e>,
    job_id: i64,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM {FROM} WHERE d.job_id = $1 ORDER BY d.id"
    ))
    .bind(job_id)
    .fetch_all(db)
    .await
}

/// The calls `search` finds, newest first.
pub async fn search<'e>(
    db: impl PgExecutor<'e>,
    search: &DeliverySearch,
) -> Result<Vec<DeliveryRow>, sqlx::Error> {
    let mut qb: QueryBuilder<'_, Postgres> =
        QueryBuilder::new(format!("SELECT {COLUMNS} FROM {FROM} WHERE true"));
    match search.status {
        Some(StatusFilter::Exactly(code)) => {
            qb.push(" AND d.status = ").push_bind(code as i16);
        }
        Some(StatusFilter::Class(c)) => {
            qb.push(" AND d.status BETWEEN ")
                .push_bind((c * 100) as i16)
                .push(" AND ")
                .push_bind((c * 100 + 99) as i16);
        }
        Some(StatusFilter::NoAnswer) => {
            qb.push(" AND d.status IS NULL");
        }
        None => {}
    }
    if let Some(job_id) = search.job_id {
        qb.push(" AND d.job_id = ").push_bind(job_id);
    }
    if let Some(before) = search.before {
        qb.push(" AND d.id < ").push_bind(before);
    }
    qb.push(" ORDER BY d.id DESC LIMIT ")
        .push_bind(search.limit.clamp(1, MAX_PAGE));
    qb.build_query_as().persistent(false).fetch_all(db).await
}

#[cfg(test)]
mod tests {
    use super::StatusFilter;

    #[test]
    fn status_filters_read_codes_classes_and_none() {
        assert_eq!("500".parse(), Ok(StatusFilter::Exactly(500)));
        assert_eq!(" 5XX ".parse(), Ok(StatusFilter::Class(5)));
        assert_eq!("none".parse(), Ok(StatusFilter::NoAnswer));
        for bad in ["", "99", "1000", "0xx", "50x", "55xx", "abc", "-1"] {
            assert!(bad.parse::<StatusFilter>().is_err(), "{bad}");
        }
        assert_eq!(StatusFilter::Class(2).to_string(), "2xx");
    }
}
