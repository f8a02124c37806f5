//! The messages nodes send each other on the `kickoff_control` channel (NOTIFY, sent inside the
//! transaction of the change, so they arrive at commit or not at all).
//!
//! The wire format is a JSON object, which an operator may also send from SQL:
//! `{"cancel": [ids], "claims": [[id, token]]}` stops these attempts of cancelled jobs (only the
//! attempts of those claims, when given; else whatever attempt of the jobs runs), and
//! `{"queue": name}` makes every node read that queue's settings again, `{"kinds": true}` the
//! paused kinds. A cancellation's stop is sent by SQL (`kickoff_cancel_jobs`, migration
//! `20261231000001_sql_actions.sql`), at most 100 claims a message: a notification's payload is
//! limited to 8000 bytes, and a claim takes at most 62 (`[id,token],` and `id,` in `cancel`).

use serde::{Deserialize, Serialize};
use sqlx::PgExecutor;

use super::job::{Claim, ClaimToken, JobId};
use super::store::jobs as job_store;

/// The channel's name.
pub const CHANNEL: &str = "kickoff_control";

/// One control message.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    /// These attempts were cancelled while executing: the node running them stops them.
    StopClaims(Vec<Claim>),
    /// These jobs were cancelled while executing (a message without claims, from SQL): whatever
    /// attempt of them runs is stopped.
    StopJobs(Vec<JobId>),
    /// A queue's settings changed: every node reads them again.
    QueueChanged(String),
    /// A kind was paused or resumed: every node reads the paused kinds again.
    KindsChanged,
}

#[derive(Serialize, Deserialize, Default)]
struct Wire {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    cancel: Vec<JobId>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    claims: Vec<(JobId, i64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queue: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    kinds: bool,
}

impl Control {
    fn payload(&self) -> String {
        let wire = match self {
            Control::StopClaims(claims) => Wire {
                cancel: claims.iter().map(|c| c.id).collect(),
                claims: claims.iter().map(|c| (c.id, c.token.0)).collect(),
                ..Wire::default()
            },
            Control::StopJobs(ids) => Wire {
                cancel: ids.clone(),
                ..Wire::default()
            },
            Control::QueueChanged(name) => Wire {
                queue: Some(name.clone()),
                ..Wire::default()
            },
            Control::KindsChanged => Wire {
                kinds: true,
                ..Wire::default()
            },
        };
        serde_json::to_string(&wire).expect("a control message serializes")
    }

    /// The messages in a payload (one object may carry a cancel and a queue); none when it is not
    /// a control message.
    pub fn parse(payload: &str) -> Vec<Control> {
        let Ok(wire) = serde_json::from_str::<Wire>(payload) else {
            return Vec::new();
        };
        let mut messages = Vec::new();
        if !wire.claims.is_empty() {
            messages.push(Control::StopClaims(
                wire.claims
                    .into_iter()
                    .map(|(id, token)| Claim {
                        id,
                        token: ClaimToken(token),
                    })
                    .collect(),
            ));
        } else if !wire.cancel.is_empty() {
            messages.push(Control::StopJobs(wire.cancel));
        }
        if let Some(name) = wire.queue {
            messages.push(Control::QueueChanged(name));
        }
        if wire.kinds {
            messages.push(Control::KindsChanged);
        }
        messages
    }

    /// Sends the message to every node, at the commit of `db`'s transaction.
    pub async fn send<'e>(&self, db: impl PgExecutor<'e>) -> Result<(), sqlx::Error> {
        job_store::notify(db, CHANNEL, &self.payload()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_sent() {
        let claims = vec![Claim {
            id: JobId(7),
            token: ClaimToken(-3),
        }];
        for m in [
            Control::StopClaims(claims),
            Control::StopJobs(vec![JobId(1), JobId(2)]),
            Control::QueueChanged("webhooks".into()),
            Control::KindsChanged,
        ] {
            assert_eq!(Control::parse(&m.payload()), vec![m.clone()]);
        }
    }

    #[test]
    fn an_operators_message_from_sql_is_understood() {
        assert_eq!(
            Control::parse(r#"{"cancel": [5], "queue": "default"}"#),
            vec![
                Control::StopJobs(vec![JobId(5)]),
                Control::QueueChanged("default".into())
            ]
        );
        assert_eq!(Control::parse("not json"), vec![]);
    }
}
