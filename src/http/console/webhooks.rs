//! Webhook endpoints (admins): the page, making one, changing one (its default headers, whether it
//! allows calls), rotating its secret, deleting it. A secret is in the answer that made it and
//! nowhere else (not in the audit entry); a default header's value is in no answer and no entry.

use std::time::Duration;

use kickoff_app::console::webhooks::{
    CallsPage, CallsQuery, EndpointForm, EndpointInfo, EndpointsPage, NewEndpointSecret,
    WebhooksConsole,
};
use kickoff_app::console::Refusal;

use super::jobs::delivery_row;
use super::{conn, ms, operator, refused, Act, ServerConsole, LIST_ROWS};
use crate::accounts::Role;
use crate::webhooks::deliveries::{DeliverySearch, StatusFilter};
use crate::webhooks::service::MAX_OVERLAP;
use crate::webhooks::{EndpointRow, EndpointSettings, NewSecret};

fn info(e: &EndpointRow) -> EndpointInfo {
    EndpointInfo {
        id: e.id,
        url_prefix: e.url_prefix.clone(),
        created_ms: ms(e.created_at),
        created_by: e.created_by.clone(),
        rotated_ms: e.rotated_at.map(ms),
        previous_until_ms: e.previous_until.map(ms),
        header_names: e.header_names.clone(),
        allow_calls: e.allow_calls,
        private_network: e.private_network,
        header_methods: e.header_methods.clone(),
        signal_workflows: e.signal_workflows.clone(),
    }
}

/// A comma-separated list of the form, its blanks left out.
fn listed(field: &str) -> Vec<String> {
    field
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// The settings a form asks for; `change`: an empty header field keeps the headers.
fn settings(form: &EndpointForm, change: bool) -> Result<EndpointSettings, Refusal> {
    let headers = if form.clear_headers {
        Some(Default::default())
    } else if form.headers.trim().is_empty() {
        (!change).then(Default::default)
    } else {
        Some(crate::webhooks::headers::parse_lines(&form.headers).map_err(Refusal::invalid)?)
    };
    let methods: Vec<String> = form
        .header_methods
        .split([',', ' '])
        .filter(|m| !m.trim().is_empty())
        .map(|m| m.trim().to_string())
        .collect();
    Ok(EndpointSettings {
        headers,
        allow_calls: Some(form.allow_calls),
        private_network: Some(form.private_network),
        header_methods: (!methods.is_empty()).then_some(methods),
        signal_workflows: Some(listed(&form.signal_workflows)),
    })
}

/// What the audit entry says of a form: the settings and the headers' names, never a value.
fn described(form: &EndpointForm) -> String {
    let mut parts = vec![if form.private_network {
        "allows calls, private network too".to_string()
    } else if form.allow_calls {
        "allows calls".to_string()
    } else {
        "signs only".to_string()
    }];
    let methods: Vec<String> = form
        .header_methods
        .split([',', ' '])
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| crate::webhooks::service::METHODS.contains(&m.as_str()))
        .collect();
    if !methods.is_empty() {
        parts.push(format!("headers with {}", methods.join(", ")));
    }
    let signals = listed(&form.signal_workflows);
    if !signals.is_empty() {
        parts.push(format!("signals {}", signals.join(", ")));
    }
    if form.clear_headers {
        parts.push("no default headers".into());
    } else if let Ok(headers) = crate::webhooks::headers::parse_lines(&form.headers) {
        if !headers.is_empty() {
            parts.push(format!(
                "headers {}",
                crate::webhooks::headers::described_names(&headers)
            ));
        }
    }
    parts.join("; ")
}

fn shown(made: NewSecret) -> NewEndpointSecret {
    NewEndpointSecret {
        id: made.endpoint.id,
        url_prefix: made.endpoint.url_prefix,
        secret: made.secret,
    }
}

#[async_trait::async_trait]
impl WebhooksConsole for ServerConsole {
    async fn endpoints(&self) -> Result<EndpointsPage, Refusal> {
        operator(Role::Admin)?;
        let endpoints = self.endpoints.list().await.map_err(refused)?;
        Ok(EndpointsPage {
            now_ms: self.now_ms().await?,
            endpoints: endpoints.iter().map(info).collect(),
        })
    }

    async fn create_endpoint(
        &self,
        url_prefix: String,
        form: EndpointForm,
    ) -> Result<NewEndpointSecret, Refusal> {
        let act = Act {
            action: "webhook_endpoint.create".into(),
            // As a reader sees a webhook's URL: a pasted prefix may carry user info or a query
            // with a credential, and the entry is written whether the prefix is taken or not.
            target: Some(format!(
                "endpoint {} ({})",
                crate::engine::sight::url_for_reader(url_prefix.trim()),
                described(&form)
            )),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let by = operator(Role::Admin)?.user.name;
                let settings = settings(&form, false)?;
                self.endpoints
                    .create_with(conn(work).await?, &url_prefix, &settings, Some(&by))
                    .await
                    .map(shown)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn update_endpoint(&self, id: i64, form: EndpointForm) -> Result<(), Refusal> {
        let act = Act {
            action: "webhook_endpoint.update".into(),
            target: Some(format!("endpoint {id} ({})", described(&form))),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let change = settings(&form, true)?;
                self.endpoints
                    .update_with(conn(work).await?, id, &change)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn rotate_endpoint(
        &self,
        id: i64,
        overlap_hours: String,
    ) -> Result<NewEndpointSecret, Refusal> {
        let act = Act {
            action: "webhook_endpoint.rotate".into(),
            target: Some(format!("endpoint {id}, overlap {} h", overlap_hours.trim())),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                let hours: f64 = overlap_hours.trim().parse().map_err(|_| {
                    Refusal::invalid(format!(
                        "overlap: `{}` is not a number of hours",
                        overlap_hours.trim()
                    ))
                })?;
                if !(0.0..=MAX_OVERLAP.as_secs_f64() / 3600.0).contains(&hours) {
                    return Err(Refusal::invalid("overlap: 0 to 168 hours (7 days)"));
                }
                self.endpoints
                    .rotate_with(
                        conn(work).await?,
                        id,
                        Duration::from_secs_f64(hours * 3600.0),
                    )
                    .await
                    .map(shown)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn delete_endpoint(&self, id: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "webhook_endpoint.delete".into(),
            target: Some(format!("endpoint {id}")),
            filter: None,
        };
        self.act_as(
            Role::Admin,
            act,
            |_| None,
            async |work| {
                self.endpoints
                    .delete_with(conn(work).await?, id)
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn calls(&self, query: CallsQuery) -> Result<CallsPage, Refusal> {
        let op = operator(Role::Viewer)?;
        let status = query
            .status
            .as_deref()
            .filter(|s| !s.trim().is_empty())
            .map(str::parse::<StatusFilter>)
            .transpose()
            .map_err(Refusal::invalid)?;
        let rows = self
            .endpoints
            .deliveries(&DeliverySearch {
                status,
                job_id: None,
                before: query.before,
                limit: LIST_ROWS,
            })
            .await
            .map_err(refused)?;
        let next_before = (rows.len() as i64 == LIST_ROWS)
            .then(|| rows.last().map(|r| r.id))
            .flatten();
        Ok(CallsPage {
            now_ms: self.now_ms().await?,
            rows: crate::webhooks::deliveries::DeliveryRow::all_as_seen_by(
                rows,
                &op.sight(self.client.workers()),
            )
            .into_iter()
            .map(delivery_row)
            .collect(),
            next_before,
        })
    }
}
