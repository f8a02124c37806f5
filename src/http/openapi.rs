//! The REST API's endpoints in one table: the router is built from it and `/api/v1/openapi.json`
//! is generated from it, so the document cannot list a route the server lacks or miss one it has.
//! Request and response bodies are described by the JSON Schemas of the very types the handlers
//! read and write (derived with schemars, honouring their serde attributes).

use axum::extract::State;
use axum::routing::{delete, get, patch, post, MethodRouter};
use axum::Json;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::state::AppState;
use super::{
    api_alerts, api_history, api_inbound, api_job_tools, api_jobs, api_questions, api_queues,
    api_schedules, api_webhook_deliveries, api_webhook_endpoints, api_workflows, sse,
};
use crate::engine::job_filter::JobSuggestions;
use crate::engine::schedules::{ScheduleSpec, ScheduleView};
use crate::engine::{BulkReport, Job};
use crate::questions::service::QuestionDetail;
use crate::questions::store::{Prediction, Question};

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One operation of the API.
pub struct Endpoint {
    /// `get`, `post`, `patch` or `delete`.
    pub method: &'static str,
    /// Under `/api/v1`, with `{param}` placeholders as axum writes them.
    pub path: &'static str,
    pub summary: &'static str,
    /// The JSON body it reads.
    pub body: Option<SchemaFn>,
    /// The query string it reads (an object whose properties are the parameters).
    pub query: Option<SchemaFn>,
    /// The success status and the JSON it answers with (`None`: no body, or not JSON).
    pub ok: (u16, Option<SchemaFn>),
    /// The refusals of rules no schema can state (they depend on what the server holds, on the
    /// clock, or relate fields), each with its status and code: documented with the operation,
    /// and the only refusals a schema-valid request may get (`scripts/schemathesis_hooks.py`).
    pub refusals: &'static [Refusal],
    /// The handler.
    pub route: fn() -> MethodRouter<AppState>,
}

/// The records a create answers with, and where its id is in the answer: the document links the
/// create to every operation on that record (OpenAPI `links`), so that a client, or a fuzzer's
/// stateful phase, follows one to the other.
const CREATES: [(&str, &str, &str, &str); 6] = [
    // (the create's path, the record's path, its parameter, where the answer holds it)
    ("/jobs", "/jobs/{id}", "id", "/job/id"),
    ("/questions", "/questions/{id}", "id", "/id"),
    ("/alert-rules", "/alert-rules/{id}", "id", "/id"),
    (
        "/webhook-endpoints",
        "/webhook-endpoints/{id}",
        "id",
        "/endpoint/id",
    ),
    ("/schedules", "/schedules/{name}", "name", "/name"),
    ("/workflows", "/workflows/{id}", "id", "/run/id"),
];

/// The links of a create's answer: every operation on the record it made.
fn links_of(e: &Endpoint) -> Option<Value> {
    if e.method != "post" {
        return None;
    }
    let (_, record, param, pointer) = CREATES.iter().find(|c| c.0 == e.path)?;
    let mut links = Map::new();
    for other in endpoints() {
        if other.path == *record || other.path.starts_with(&format!("{record}/")) {
            let id = operation_id(&other);
            links.insert(
                id.clone(),
                json!({
                    "operationId": id,
                    "parameters": { *param: format!("$response.body#{pointer}") },
                }),
            );
        }
    }
    Some(Value::Object(links))
}

fn operation_id(e: &Endpoint) -> String {
    format!(
        "{}{}",
        e.method,
        e.path.replace(['/', '{', '}', '-', '.'], "_")
    )
}

/// A body the server accepts, for the creates (times relative to now: the document is written
/// per request): what a reader copies first, and what a fuzzer starts its stateful runs from.
fn example_of(method: &str, path: &str) -> Option<Value> {
    let in_a_day = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    Some(match (method, path) {
        ("post", "/jobs") => json!({
            "kind": "noop", "args": { "game_id": 42 }, "schedule_in_ms": 60_000,
            "tags": ["example"],
        }),
        ("post", "/questions") => json!({
            "game": "Lions vs Bears", "prompt": "Who scores first?",
            "choices": ["Lions", "Bears", "Nobody"], "game_time": in_a_day,
        }),
        ("post", "/schedules") => json!({
            "name": "nightly-report", "cron": "0 3 * * *", "time_zone": "Europe/London",
            "job": { "kind": "noop", "args": { "report": "daily" } },
        }),
        ("post", "/alert-rules") => json!({
            "name": "default backlog", "condition": "queue_backlog", "queue": "default",
            "threshold_n": 1000,
        }),
        ("post", "/webhook-endpoints") => json!({ "url_prefix": "https://partner.example/hooks/" }),
        ("post", "/workflows") => json!({
            "name": "game", "key": "game:8812", "times": { "kickoff_at": in_a_day },
            "steps": [
                { "name": "lock", "job": { "kind": "noop", "args": { "game": 8812 } },
                  "at": { "time": "kickoff_at" } },
                { "name": "await_final", "job": { "kind": "noop", "args": { "game": 8812 } },
                  "after": [{ "step": "lock" }], "signal": "final",
                  "deadline": { "time": "kickoff_at", "offset_ms": 18_000_000 } },
                { "name": "settle", "job": { "kind": "noop", "args": { "game": 8812 } },
                  "after": [{ "step": "await_final" }] },
                { "name": "notify", "job": { "kind": "noop", "args": { "game": 8812 } },
                  "after": [{ "step": "settle" }] },
                { "name": "leaderboard", "job": { "kind": "noop", "args": { "game": 8812 } },
                  "after": [{ "step": "notify", "on_failure": "run" }] },
            ],
        }),
        _ => return None,
    })
}

/// A refusal an operation may answer a schema-valid request with.
pub struct Refusal {
    pub status: u16,
    /// The error's `code`.
    pub code: &'static str,
    /// The rule, in words.
    pub when: &'static str,
}

/// A job kind no worker of this server runs.
const UNKNOWN_KIND: Refusal = Refusal {
    status: 422,
    code: "unknown_kind",
    when: "no worker of this server runs the kind",
};
/// The kind's worker refused the args.
const ARGS_REFUSED: Refusal = Refusal {
    status: 422,
    code: "args_refused",
    when: "the kind's worker refused the args (each kind has its own: a webhook's URL must be allowed, say)",
};
/// A filter written as JSON that is not.
const INVALID_JSON: Refusal = Refusal {
    status: 422,
    code: "invalid_json",
    when: "`args` starts with `{` but is not a JSON object, or `tags` starts with `[` but is not a JSON array of tags",
};
/// A named schedule that does not exist.
const UNKNOWN_SCHEDULE: Refusal = Refusal {
    status: 404,
    code: "not_found",
    when: "no schedule has the name `schedule`",
};
/// A choice the question does not have.
const UNKNOWN_CHOICE: Refusal = Refusal {
    status: 422,
    code: "unknown_choice",
    when: "the choice is not one of the question's",
};
/// A cron expression that does not parse (its syntax is more than a pattern can state).
const INVALID_CRON: Refusal = Refusal {
    status: 422,
    code: "invalid_cron",
    when: "the cron expression does not parse (the message names the field and the character)",
};
/// A game whose workflow cannot start.
const GAME_NOT_OPEN: Refusal = Refusal {
    status: 409,
    code: "conflict",
    when: "the game has no open question (its run starts before its kickoff)",
};
/// Fields that do not fit together.
const INCONSISTENT: Refusal = Refusal {
    status: 422,
    code: "inconsistent",
    when: "two fields do not fit together (an end before its start, a range over its limit)",
};
/// An alert's notification URL the webhook worker refuses.
const NOTIFY_URL_REFUSED: Refusal = Refusal {
    status: 422,
    code: "notify_url_refused",
    when: "webhook calls may not go to the URL (`KICKOFF_WEBHOOK_ALLOWED_HOSTS` and the endpoints' `allow_calls` say where they may)",
};
/// A unique key held by a job another domain owns.
const KEY_HELD: Refusal = Refusal {
    status: 409,
    code: "conflict",
    when: "the unique key is held by a live job another domain owns (a question's lock job), which is not the caller's to find or move; or it starts with another kind's name and `:` (that kind's namespace)",
};
/// A URL prefix the URL parser refuses.
const INVALID_URL: Refusal = Refusal {
    status: 422,
    code: "invalid_url",
    when: "the URL parser (WHATWG, with IDNA for the host) refuses the prefix: its grammar is more than a pattern states",
};
/// A name another record has.
const NAME_TAKEN: Refusal = Refusal {
    status: 409,
    code: "conflict",
    when: "the name is taken (or, for alert rules, there are 200 already)",
};
/// A URL prefix another endpoint has.
const PREFIX_TAKEN: Refusal = Refusal {
    status: 409,
    code: "taken",
    when: "another endpoint has the URL prefix (as the URL parser writes it)",
};
/// A time too far from now.
const OUT_OF_WINDOW: Refusal = Refusal {
    status: 422,
    code: "out_of_window",
    when: "a time is too far from now (the message says which and the bound)",
};

/// Every operation of `/api/v1`.
/// The one route a partner calls with a signature instead of a bearer token (see `api_inbound`).
pub const INBOUND_SIGNALS: &str = "/inbound/{endpoint}/signals";

/// Whether the route at `path` takes signed calls instead of a bearer token.
pub fn is_inbound(path: &str) -> bool {
    path == INBOUND_SIGNALS
}

pub fn endpoints() -> Vec<Endpoint> {
    vec![
        Endpoint {
            method: "post",
            path: "/jobs",
            summary:
                "Insert a job (201; 200 with `existing: true` when a live job has its unique key)",
            body: Some(schema::<api_jobs::CreateJob>),
            query: None,
            ok: (201, Some(schema::<api_jobs::InsertedBody>)),
            refusals: &[ARGS_REFUSED, OUT_OF_WINDOW, KEY_HELD],
            route: || post(api_jobs::create),
        },
        Endpoint {
            method: "get",
            path: "/jobs",
            summary: "List jobs, newest first, by keyset pages",
            body: None,
            query: Some(schema::<api_jobs::ListParams>),
            ok: (200, Some(schema::<api_jobs::JobPage>)),
            refusals: &[INVALID_JSON],
            route: || get(api_jobs::list),
        },
        Endpoint {
            method: "get",
            path: "/jobs/suggestions",
            summary: "What a job filter may suggest: the kinds the workers run and the queues that exist, with the kinds, queues, tags and top-level args keys of the newest 1,000 jobs (each list sorted, at most 100)",
            body: None,
            query: None,
            ok: (200, Some(schema::<JobSuggestions>)),
            refusals: &[],
            route: || get(api_jobs::suggestions),
        },
        Endpoint {
            method: "get",
            path: "/jobs/count",
            summary: "How many jobs the filters of GET /jobs match (counted up to 100,000), with the newest one's id: the `max_id` an edit or a move of every matching job needs",
            body: None,
            query: Some(schema::<api_job_tools::CountParams>),
            ok: (200, Some(schema::<api_job_tools::FilterCount>)),
            refusals: &[INVALID_JSON],
            route: || get(api_job_tools::count),
        },
        Endpoint {
            method: "get",
            path: "/jobs/export",
            summary: "The jobs the filters of GET /jobs match, newest first, as CSV (`format=csv`, the default) or JSON lines (`format=jsonl`), streamed; at most `max_rows` (default 100,000), stated in the `Kickoff-Max-Rows` header",
            body: None,
            query: Some(schema::<api_job_tools::ExportParams>),
            ok: (200, None),
            refusals: &[INVALID_JSON],
            route: || get(api_job_tools::export),
        },
        Endpoint {
            method: "post",
            path: "/jobs/edit",
            summary: "Edit listed waiting jobs or every waiting job matching a confirmed filter (args, priority, queue, max_attempts, tags, meta); each checked by its kind's worker",
            body: Some(schema::<api_job_tools::EditManyBody>),
            query: None,
            ok: (200, Some(schema::<BulkReport>)),
            refusals: &[],
            route: || post(api_job_tools::edit_many),
        },
        Endpoint {
            method: "post",
            path: "/jobs/shift",
            summary: "Move every waiting job matching a confirmed filter by a duration or to a time (a postponed game), in batches; the game's open questions move with their lock jobs",
            body: Some(schema::<api_job_tools::ShiftBody>),
            query: None,
            ok: (200, Some(schema::<api_job_tools::ShiftReport>)),
            refusals: &[OUT_OF_WINDOW],
            route: || post(api_job_tools::shift),
        },
        Endpoint {
            method: "post",
            path: "/jobs/bulk",
            summary: "Cancel, retry, run now or delete listed jobs or every job matching a filter",
            body: Some(schema::<api_jobs::BulkBody>),
            query: None,
            ok: (200, Some(schema::<BulkReport>)),
            refusals: &[],
            route: || post(api_jobs::bulk),
        },
        Endpoint {
            method: "get",
            path: "/jobs/{id}",
            summary: "A job with its attempts' errors",
            body: None,
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[],
            route: || get(api_jobs::get),
        },
        Endpoint {
            method: "get",
            path: "/jobs/{id}/attempts",
            summary: "The records of a job's attempts that ended, oldest first: due time, start, lateness, node, duration, outcome, error, output and log lines",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<api_history::AttemptView>>)),
            refusals: &[],
            route: || get(api_history::attempts),
        },
        Endpoint {
            method: "patch",
            path: "/jobs/{id}",
            summary: "Edit a waiting job (scheduled, available or retryable: 409 otherwise, and 409 for a max_attempts it already reached): args (whole, or `args_patch` as a JSON merge patch), priority, queue, max_attempts, tags, `meta_patch`; checked by its kind's worker like an insert (422)",
            body: Some(schema::<crate::engine::job_edit::JobEdit>),
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[UNKNOWN_KIND, ARGS_REFUSED],
            route: || patch(api_job_tools::edit),
        },
        Endpoint {
            method: "delete",
            path: "/jobs/{id}",
            summary: "Delete a job that is not executing",
            body: None,
            query: None,
            ok: (204, None),
            refusals: &[],
            route: || delete(api_jobs::delete),
        },
        Endpoint {
            method: "post",
            path: "/jobs/{id}/cancel",
            summary: "Cancel a job (an executing attempt is stopped)",
            body: None,
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[],
            route: || post(api_jobs::cancel),
        },
        Endpoint {
            method: "post",
            path: "/jobs/{id}/retry",
            summary: "Run a failed, finished or retryable job again now",
            body: None,
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[],
            route: || post(api_jobs::retry),
        },
        Endpoint {
            method: "post",
            path: "/jobs/{id}/run-now",
            summary: "Make a waiting job due now (409 for a question's lock job, and for a workflow step's job before its first start: its run starts it)",
            body: None,
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[],
            route: || post(api_jobs::run_now),
        },
        Endpoint {
            method: "post",
            path: "/jobs/{id}/reschedule",
            summary: "Move a waiting job to another time (409 for a question's lock job, and for a workflow step's job before its first start: move its run's times)",
            body: Some(schema::<api_jobs::RescheduleBody>),
            query: None,
            ok: (200, Some(schema::<Job>)),
            refusals: &[OUT_OF_WINDOW],
            route: || post(api_jobs::reschedule),
        },
        Endpoint {
            method: "get",
            path: "/queues",
            summary: "Every queue with its settings and counts",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<api_queues::QueueView>>)),
            refusals: &[],
            route: || get(api_queues::list),
        },
        Endpoint {
            method: "patch",
            path: "/queues/{name}",
            summary: "Set a queue's per-node concurrency and its limits across every node (rate, per, global_concurrency); absent fields keep theirs, null removes one",
            body: Some(schema::<api_queues::QueuePatch>),
            query: None,
            ok: (200, Some(schema::<crate::engine::QueueRow>)),
            refusals: &[INCONSISTENT],
            route: || patch(api_queues::update),
        },
        Endpoint {
            method: "post",
            path: "/queues/{name}/pause",
            summary: "Pause a queue on every node",
            body: None,
            query: None,
            ok: (200, Some(schema::<crate::engine::QueueRow>)),
            refusals: &[],
            route: || post(api_queues::pause),
        },
        Endpoint {
            method: "post",
            path: "/queues/{name}/resume",
            summary: "Resume a paused queue",
            body: None,
            query: None,
            ok: (200, Some(schema::<crate::engine::QueueRow>)),
            refusals: &[],
            route: || post(api_queues::resume),
        },
        Endpoint {
            method: "get",
            path: "/kinds",
            summary: "Every job kind this server runs, with whether it is paused on every node",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<api_queues::KindView>>)),
            refusals: &[],
            route: || get(api_queues::kinds),
        },
        Endpoint {
            method: "post",
            path: "/kinds/{kind}/pause",
            summary: "Pause a job kind on every node: no node claims its jobs until it is resumed (404 for a kind no worker runs)",
            body: None,
            query: None,
            ok: (200, Some(schema::<api_queues::KindView>)),
            refusals: &[],
            route: || post(api_queues::pause_kind),
        },
        Endpoint {
            method: "post",
            path: "/kinds/{kind}/resume",
            summary: "Resume a paused job kind on every node",
            body: None,
            query: None,
            ok: (200, Some(schema::<api_queues::KindView>)),
            refusals: &[],
            route: || post(api_queues::resume_kind),
        },
        Endpoint {
            method: "get",
            path: "/webhook-endpoints",
            summary: "Webhook endpoints, without their secrets (admins)",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<crate::webhooks::EndpointRow>>)),
            refusals: &[],
            route: || get(api_webhook_endpoints::list),
        },
        Endpoint {
            method: "post",
            path: "/webhook-endpoints",
            summary: "Make a webhook endpoint (admins): calls whose URL starts with `url_prefix` (at a boundary: the whole URL, or followed by `/`, `?` or `#`, or a prefix ending in `/`) are signed (Standard Webhooks `webhook-signature`) and carry its default `headers` beneath the job's own; with `allow_calls`, webhook jobs may call URLs under it (the allowlist, beside `KICKOFF_WEBHOOK_ALLOWED_HOSTS`). 201 with its secret, `whsec_…`, shown this once; 409 for a prefix taken",
            body: Some(schema::<api_webhook_endpoints::CreateEndpoint>),
            query: None,
            ok: (201, Some(schema::<crate::webhooks::NewSecret>)),
            refusals: &[INCONSISTENT, INVALID_URL, PREFIX_TAKEN],
            route: || post(api_webhook_endpoints::create),
        },
        Endpoint {
            method: "post",
            path: "/webhook-endpoints/{id}/rotate",
            summary: "Give an endpoint a new secret, shown this once (admins); the current one keeps signing beside it for `overlap_secs` (default a day, at most 7 days)",
            body: Some(schema::<api_webhook_endpoints::RotateEndpoint>),
            query: None,
            ok: (200, Some(schema::<crate::webhooks::NewSecret>)),
            refusals: &[],
            route: || post(api_webhook_endpoints::rotate),
        },
        Endpoint {
            method: "patch",
            path: "/webhook-endpoints/{id}",
            summary: "Change a webhook endpoint (admins): its default headers (all of them; `{}` for none; the values are sealed and never shown again, only the names), whether webhook jobs may call under it (`allow_calls`), and whether its host may resolve to a private address (`private_network`, with `allow_calls`). Jobs already inserted are checked again before each call",
            body: Some(schema::<api_webhook_endpoints::UpdateEndpoint>),
            query: None,
            ok: (200, Some(schema::<crate::webhooks::EndpointRow>)),
            refusals: &[INCONSISTENT],
            route: || patch(api_webhook_endpoints::update),
        },
        Endpoint {
            method: "delete",
            path: "/webhook-endpoints/{id}",
            summary: "Delete a webhook endpoint (admins): calls to it go unsigned, without its default headers, and are allowed only by `KICKOFF_WEBHOOK_ALLOWED_HOSTS` or another endpoint",
            body: None,
            query: None,
            ok: (200, Some(schema::<crate::webhooks::EndpointRow>)),
            refusals: &[],
            route: || delete(api_webhook_endpoints::delete),
        },
        Endpoint {
            method: "get",
            path: "/webhook-deliveries",
            summary: "The delivery record of webhook calls, newest first, by keyset pages: when each call started and how late, where it connected, the status, the duration, the response's headers and first 500 characters, or the error. Search by `status` (`500`, `5xx`, `none`) and `job_id`",
            body: None,
            query: Some(schema::<api_webhook_deliveries::DeliveryParams>),
            ok: (200, Some(schema::<api_webhook_deliveries::DeliveryPage>)),
            refusals: &[],
            route: || get(api_webhook_deliveries::list),
        },
        Endpoint {
            method: "get",
            path: "/alert-rules",
            summary: "Every alert rule, with its condition in words (admins)",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<crate::alerts::RuleRow>>)),
            refusals: &[],
            route: || get(api_alerts::list_rules),
        },
        Endpoint {
            method: "post",
            path: "/alert-rules",
            summary: "Make an alert rule (admins): a condition (late_lock, question_open, job_discarded, queue_backlog, failure_rate, node_lost, overdue, late_start), its scope and thresholds (a field its condition does not read is refused), and where to notify (a webhook call, signed under an endpoint; `slack` payload for incoming webhooks). 201; 409 for a name taken or past 200 rules",
            body: Some(schema::<crate::alerts::RuleSpec>),
            query: None,
            ok: (201, Some(schema::<crate::alerts::RuleRow>)),
            refusals: &[NOTIFY_URL_REFUSED, NAME_TAKEN],
            route: || post(api_alerts::create_rule),
        },
        Endpoint {
            method: "patch",
            path: "/alert-rules/{id}",
            summary: "Switch an alert rule on or off (admins); off, its firing incidents resolve without a notification",
            body: Some(schema::<api_alerts::RulePatch>),
            query: None,
            ok: (200, Some(schema::<crate::alerts::RuleRow>)),
            refusals: &[],
            route: || patch(api_alerts::update_rule),
        },
        Endpoint {
            method: "delete",
            path: "/alert-rules/{id}",
            summary: "Delete an alert rule and its incidents (admins)",
            body: None,
            query: None,
            ok: (200, Some(schema::<crate::alerts::RuleRow>)),
            refusals: &[],
            route: || delete(api_alerts::delete_rule),
        },
        Endpoint {
            method: "get",
            path: "/alerts",
            summary: "Alert incidents, newest first, by keyset pages: `state=firing` or `resolved`",
            body: None,
            query: Some(schema::<api_alerts::IncidentParams>),
            ok: (200, Some(schema::<api_alerts::IncidentPage>)),
            refusals: &[],
            route: || get(api_alerts::list_incidents),
        },
        Endpoint {
            method: "post",
            path: "/alerts/{id}/acknowledge",
            summary: "Acknowledge an incident (operators and admins); 409 when acknowledged already, naming who",
            body: None,
            query: None,
            ok: (200, Some(schema::<crate::alerts::IncidentRow>)),
            refusals: &[],
            route: || post(api_alerts::acknowledge),
        },
        Endpoint {
            method: "get",
            path: "/stats",
            summary: "Job counts by state and by queue",
            body: None,
            query: None,
            ok: (200, Some(schema::<api_queues::Stats>)),
            refusals: &[],
            route: || get(api_queues::stats),
        },
        Endpoint {
            method: "get",
            path: "/stats/history",
            summary: "The attempts' history as series (per queue or kind with `group`): outcomes, lateness p50/p99 and histogram, durations per step; 422 for a range or step the rollups cannot answer, 404 for an unknown schedule",
            body: None,
            query: Some(schema::<api_history::HistoryParams>),
            ok: (200, Some(schema::<api_history::HistoryView>)),
            refusals: &[UNKNOWN_SCHEDULE, INCONSISTENT, OUT_OF_WINDOW],
            route: || get(api_history::history),
        },
        Endpoint {
            method: "get",
            path: "/workflows",
            summary: "Workflow runs, newest first (keyset pages: `before` is the previous page's `next_before`), each with its steps counted by state; `state` keeps one state",
            body: None,
            query: Some(schema::<api_workflows::ListParams>),
            ok: (200, Some(schema::<api_workflows::RunPage>)),
            refusals: &[],
            route: || get(api_workflows::list),
        },
        Endpoint {
            method: "post",
            path: "/workflows",
            summary: "Insert a workflow run: named steps, each a job (of a kind this server runs, checked like any insert) made once the steps it waits for allow it, in the transaction that settles the last of them. A dependency that failed or was cancelled does its `on_failure` to the step; a completed or skipped one lets it go on. 201 with the run and its steps; 200 with `existing` when a live run holds `key` (nothing written); 422 `inconsistent` for a step waiting for one not declared before it, or named twice, or two steps of one name",
            body: Some(schema::<api_workflows::CreateWorkflow>),
            query: None,
            ok: (201, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[UNKNOWN_KIND, ARGS_REFUSED, INCONSISTENT, OUT_OF_WINDOW],
            route: || post(api_workflows::create),
        },
        Endpoint {
            method: "get",
            path: "/workflows/{id}",
            summary: "A workflow run with its steps (state, dependencies left, job)",
            body: None,
            query: None,
            ok: (200, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[],
            route: || get(api_workflows::get),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/cancel",
            summary: "Cancel a workflow run: nothing of it starts once the cancel commits. Its blocked steps are cancelled, and the jobs of its ready steps (running attempts are stopped on their nodes), each step with its job; the run ends `cancelled`. 409 when it is not running",
            body: None,
            query: None,
            ok: (200, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[],
            route: || post(api_workflows::cancel),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/retry",
            summary: "Retry a workflow run's steps: `failed` (the default) the steps that failed, were cancelled or skipped, never a completed one; `failed_and_following` those and every step after them; `all` every step. They wait again for their dependencies, those whose dependencies completed get their job at once, and the run is running again. 409 for a cancelled run (run it again from a step), one with nothing failed, running steps under `all`, or a key a live run holds",
            body: Some(schema::<api_workflows::RetryWorkflow>),
            query: None,
            ok: (200, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[],
            route: || post(api_workflows::retry),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/skip",
            summary: "Skip a blocked or ready step of a running workflow run: it settles `skipped` and the steps after it go on as after a completed one; its job, if it has one, is cancelled (a running attempt is stopped). 409 when the run is not running or the step has settled; 422 for a step the run does not have",
            body: Some(schema::<api_workflows::SkipStep>),
            query: None,
            ok: (200, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[INCONSISTENT],
            route: || post(api_workflows::skip),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/rerun",
            summary: "Run a settled workflow run again from a step, as a new run (`rerun_of`) of the same shape and key: the step, every step that did not complete and every step after either run again; the others keep their completion and output (`kept_from`), so the steps that run again read the outputs before them. 201 with the new run; 409 while the run is running or when a live run holds its key; 422 for a step the run does not have",
            body: Some(schema::<api_workflows::RerunWorkflow>),
            query: None,
            ok: (201, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[INCONSISTENT],
            route: || post(api_workflows::rerun),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/signals",
            summary: "Send a running workflow run a signal (`final`, with a payload the steps waiting for it read): the first of a name stands and is kept until a step waits for it; the steps waiting for it start at once. 201 when stored, 200 with `existing` when one of that name came first (nothing changed); 409 when the run is not running",
            body: Some(schema::<api_workflows::SendSignal>),
            query: None,
            ok: (201, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[],
            route: || post(api_workflows::signal),
        },
        Endpoint {
            method: "post",
            path: "/games/{game}/workflow",
            summary: "Start a game's workflow (operators): a run `game` keyed `game:<game>` whose `lock` step locks the game's questions at kickoff (`kickoff_at`: the earliest game time of its open questions), whose `settle` step waits for the signal `final` (a partner's signed call or an operator's; its payload `{\"answers\": {\"<question id>\": \"<choice>\"}}`) until `deadline_ms` after kickoff, records the answers and scores every prediction; `poll` (when `result_url` is given: from the lock on, asks that URL with `GET` every `poll_every_ms` as a webhook call, until it answers `{\"final\": true, \"answers\": {…}}`, which it sends as the `final` signal, source `polled <host>`; it stops once the signal came another way, and fails with the settle past its deadline); then `notify` (when `notify_url` is given: a map step of `notify_tasks` tasks, each telling a share of the players how they did in pages of `notify_batch`, each page a webhook call to `notify_url` through the `webhooks` queue) and `leaderboard` (the players ranked by correct predictions, as its output; published even if the notification failed). 201 with the run; 200 with `existing` when a live run of the game holds its key; 409 when the game has no open question; 422 `args_refused` for a `notify_url` or `result_url` webhook calls may not reach",
            body: Some(schema::<api_workflows::StartGame>),
            query: None,
            ok: (201, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[ARGS_REFUSED, GAME_NOT_OPEN],
            route: || post(api_workflows::start_game),
        },
        Endpoint {
            method: "post",
            path: INBOUND_SIGNALS,
            summary: "A partner's signed signal (no bearer token: Standard Webhooks headers `webhook-id`, `webhook-timestamp`, within 300 s of the server's clock, and `webhook-signature`, `v1,` + base64 HMAC-SHA256 of `id.timestamp.body` with the secret of webhook endpoint `{endpoint}`, or its previous one while a rotation's overlap lasts). Sent to the live run holding `key`, which must be a run of a workflow the endpoint names in `signal_workflows`; the first signal of a name stands, kept until a step waits for it. Audited as `endpoint:<id>`, the signal's source. 201 when stored, 200 with `existing` when one of that name came first; 401 `unsigned` for a missing or stale header, a signature that does not match, or an endpoint that signals no workflow; 404 for no live run of those workflows with the key; 409 when the run is not running",
            body: Some(schema::<api_inbound::InboundSignal>),
            query: None,
            ok: (201, Some(schema::<api_inbound::InboundAnswer>)),
            refusals: &[],
            route: || post(api_inbound::signal),
        },
        Endpoint {
            method: "post",
            path: "/workflows/{id}/times",
            summary: "Move a running workflow run's named times (a postponed game's `kickoff_at`): the steps' timers anchored to them move with them (a job that has not started is due anew), and the deadlines of the steps waiting for a signal. A game's run moves its game's open questions and their lock jobs by as much as its `kickoff_at`, in the same transaction (refused as a whole when a question refuses its new time). 409 when the run is not running; 422 `inconsistent` for a time the run does not have, `out_of_window` for one too far",
            body: Some(schema::<api_workflows::MoveTimes>),
            query: None,
            ok: (200, Some(schema::<api_workflows::RunDetail>)),
            refusals: &[INCONSISTENT, OUT_OF_WINDOW],
            route: || post(api_workflows::move_times),
        },
        Endpoint {
            method: "get",
            path: "/schedules",
            summary: "Every schedule, with its rule in words, its next run and its latest run",
            body: None,
            query: None,
            ok: (200, Some(schema::<Vec<ScheduleView>>)),
            refusals: &[],
            route: || get(api_schedules::list),
        },
        Endpoint {
            method: "post",
            path: "/schedules",
            summary: "Create a schedule (a cron expression or an interval, a zone, a job template of one of the kinds this server runs) and insert its runs ahead; 422 `invalid_cron` names the field and the character where an expression goes wrong, 422 for an unknown zone, 409 for a name taken",
            body: Some(schema::<ScheduleSpec>),
            query: None,
            ok: (201, Some(schema::<ScheduleView>)),
            refusals: &[ARGS_REFUSED, INVALID_CRON, INCONSISTENT, OUT_OF_WINDOW, NAME_TAKEN],
            route: || post(api_schedules::create),
        },
        Endpoint {
            method: "get",
            path: "/schedules/{name}",
            summary: "A schedule",
            body: None,
            query: None,
            ok: (200, Some(schema::<ScheduleView>)),
            refusals: &[],
            route: || get(api_schedules::get),
        },
        Endpoint {
            method: "patch",
            path: "/schedules/{name}",
            summary: "Change a schedule's settings (absent fields keep theirs); a change of its rule, zone, template, start, end or overlap policy cancels the runs inserted ahead and starts its slots again from now",
            body: Some(schema::<api_schedules::SchedulePatch>),
            query: None,
            ok: (200, Some(schema::<ScheduleView>)),
            refusals: &[UNKNOWN_KIND, ARGS_REFUSED, INVALID_CRON, INCONSISTENT, OUT_OF_WINDOW],
            route: || patch(api_schedules::update),
        },
        Endpoint {
            method: "delete",
            path: "/schedules/{name}",
            summary: "Delete a schedule and cancel its runs ahead (its past runs stay)",
            body: None,
            query: None,
            ok: (204, None),
            refusals: &[],
            route: || delete(api_schedules::delete),
        },
        Endpoint {
            method: "post",
            path: "/schedules/{name}/pause",
            summary: "Pause a schedule: its runs ahead are cancelled; the slots of the pause are not run later",
            body: None,
            query: None,
            ok: (200, Some(schema::<ScheduleView>)),
            refusals: &[],
            route: || post(api_schedules::pause),
        },
        Endpoint {
            method: "post",
            path: "/schedules/{name}/resume",
            summary: "Resume a schedule from its next slot",
            body: None,
            query: None,
            ok: (200, Some(schema::<ScheduleView>)),
            refusals: &[],
            route: || post(api_schedules::resume),
        },
        Endpoint {
            method: "post",
            path: "/schedules/{name}/trigger",
            summary: "Run a schedule now, outside its slots (also while paused): 201 with the job",
            body: None,
            query: None,
            ok: (201, Some(schema::<Job>)),
            refusals: &[],
            route: || post(api_schedules::trigger),
        },
        Endpoint {
            method: "get",
            path: "/schedules/{name}/preview",
            summary: "The next slots (n: 1 to 100, default 10) after `from` (default now), in UTC and in the schedule's zone",
            body: None,
            query: Some(schema::<api_schedules::PreviewParams>),
            ok: (200, Some(schema::<api_schedules::Preview>)),
            refusals: &[],
            route: || get(api_schedules::preview),
        },
        Endpoint {
            method: "get",
            path: "/schedules/{name}/runs",
            summary: "A schedule's runs (its jobs), newest first, by keyset pages",
            body: None,
            query: Some(schema::<api_schedules::RunsParams>),
            ok: (200, Some(schema::<api_schedules::RunPage>)),
            refusals: &[],
            route: || get(api_schedules::runs),
        },
        Endpoint {
            method: "post",
            path: "/questions",
            summary: "Create a game question and its lock job, due at game time; with `workflow`, the game's workflow started (or its live run kept) in the same transaction",
            body: Some(schema::<api_questions::CreateQuestion>),
            query: None,
            ok: (201, Some(schema::<api_questions::CreatedQuestion>)),
            refusals: &[OUT_OF_WINDOW, ARGS_REFUSED],
            route: || post(api_questions::create),
        },
        Endpoint {
            method: "get",
            path: "/questions",
            summary: "List questions",
            body: None,
            query: Some(schema::<api_questions::ListParams>),
            ok: (200, Some(schema::<Vec<Question>>)),
            refusals: &[],
            route: || get(api_questions::list),
        },
        Endpoint {
            method: "get",
            path: "/questions/{id}",
            summary: "A question with its predictions per choice",
            body: None,
            query: None,
            ok: (200, Some(schema::<QuestionDetail>)),
            refusals: &[],
            route: || get(api_questions::get),
        },
        Endpoint {
            method: "patch",
            path: "/questions/{id}",
            summary: "Change an open question (a new game time moves its lock job)",
            body: Some(schema::<api_questions::UpdateQuestion>),
            query: None,
            ok: (200, Some(schema::<QuestionDetail>)),
            refusals: &[OUT_OF_WINDOW],
            route: || patch(api_questions::update),
        },
        Endpoint {
            method: "delete",
            path: "/questions/{id}",
            summary: "Delete a question (and cancel its lock job)",
            body: None,
            query: None,
            ok: (204, None),
            refusals: &[],
            route: || delete(api_questions::delete),
        },
        Endpoint {
            method: "post",
            path: "/questions/{id}/predictions",
            summary: "A player's prediction; refused (409) once the question is locked",
            body: Some(schema::<api_questions::PredictBody>),
            query: None,
            ok: (201, Some(schema::<Prediction>)),
            refusals: &[UNKNOWN_CHOICE],
            route: || post(api_questions::predict),
        },
        Endpoint {
            method: "post",
            path: "/questions/{id}/settle",
            summary: "Give a locked question its correct choice",
            body: Some(schema::<api_questions::SettleBody>),
            query: None,
            ok: (200, Some(schema::<QuestionDetail>)),
            refusals: &[UNKNOWN_CHOICE],
            route: || post(api_questions::settle),
        },
        Endpoint {
            method: "get",
            path: "/events",
            summary: "Server-Sent Events: one `jobs` event per statement that changed jobs. At most `KICKOFF_MAX_STREAMS` (default 2048) open per node, else 503 `busy` with `Retry-After`; the stream ends within 5 s of its token being revoked or its owner disabled",
            body: None,
            query: None,
            ok: (200, None),
            refusals: &[],
            route: || get(sse::events),
        },
        Endpoint {
            method: "get",
            path: "/openapi.json",
            summary: "This document",
            body: None,
            query: None,
            ok: (200, None),
            refusals: &[],
            route: || {
                get(|State(state): State<AppState>| async move {
                    Json(document_for(&state.kinds.0))
                })
            },
        },
    ]
}

/// The OpenAPI 3.1 document of `/api/v1` of a server whose callers may insert jobs of `kinds`
/// (stated as the `enum` of a job's `kind`; none: left open).
pub fn document_for(kinds: &[&str]) -> Value {
    let mut doc = document();
    crate::schema_rules::with_kinds(&mut doc, kinds);
    doc
}

/// The OpenAPI 3.1 document of `/api/v1`, its job kinds left open (see [`document_for`]).
pub fn document() -> Value {
    // OpenAPI 3.1 takes JSON Schema 2020-12 as it is; only the definitions move.
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = settings.into_generator();
    let mut paths = Map::new();
    for e in endpoints() {
        let mut parameters: Vec<Value> = path_params(e.path)
            .into_iter()
            .map(|name| {
                let schema = match name {
                    "id" | "endpoint" => json!({ "type": "integer", "format": "int64" }),
                    // A game's name, as its questions hold it (`kickoff_check_question`).
                    "game" => json!({ "type": "string", "minLength": 1, "maxLength": 200,
                                      "pattern": crate::schema_rules::NOT_BLANK }),
                    _ => json!({ "type": "string" }),
                };
                json!({ "name": name, "in": "path", "required": true, "schema": schema })
            })
            .collect();
        if let Some(query) = e.query {
            parameters.extend(query_params(&mut generator, query));
        }
        let inbound = is_inbound(e.path);
        if inbound {
            for (name, description) in [
                ("webhook-id", "the call's id, 1 to 256 characters"),
                ("webhook-timestamp", "seconds since 1970, within 300 s of the server's clock"),
                ("webhook-signature", "`v1,` + base64 of HMAC-SHA256 over `id.timestamp.body` with the endpoint's secret; several space-separated"),
            ] {
                parameters.push(json!({
                    "name": name, "in": "header", "required": true, "description": description,
                    "schema": { "type": "string", "minLength": 1 },
                }));
            }
        }
        let mut op = json!({
            "summary": e.summary,
            "operationId": operation_id(&e),
            "security": if inbound { json!([]) } else { json!([{ "bearer": [] }]) },
            "responses": responses(&mut generator, &e),
        });
        if !parameters.is_empty() {
            op["parameters"] = Value::Array(parameters);
        }
        if let Some(body) = e.body {
            let mut media = json!({ "schema": body(&mut generator) });
            if let Some(example) = example_of(e.method, e.path) {
                media["example"] = example;
            }
            op["requestBody"] = json!({
                "required": true,
                "content": { "application/json": media },
            });
        }
        let item = paths
            .entry(format!("/api/v1{}", e.path))
            .or_insert_with(|| json!({}));
        item[e.method] = op;
    }
    let mut schemas = generator.take_definitions(true);
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": { "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": { "code": { "type": "string" }, "message": { "type": "string" } },
            }},
        }),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Kickoff",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "A durable PostgreSQL job scheduler. Every call needs `Authorization: Bearer <token>`: a user's API token (read: GET only; write: what the owner's role allows) or the bootstrap token. With `KICKOFF_API_RATE_LIMIT` set (`N/period`, off by default), each token's calls are limited on all nodes together: past it, 429 with `Retry-After`; every answer carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
    })
}

/// The `{name}` placeholders of a path.
fn path_params(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
        .collect()
}

/// Query parameters from the properties of the query type's schema.
fn query_params(generator: &mut SchemaGenerator, query: SchemaFn) -> Vec<Value> {
    let schema = query(generator);
    let resolved = resolve(generator, schema.as_value());
    let required: Vec<&str> = resolved["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    resolved["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(name, schema)| {
                    json!({
                        "name": name,
                        "in": "query",
                        "required": required.contains(&name.as_str()),
                        "schema": schema,
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A schema with a top-level `$ref` replaced by the definition it names.
fn resolve(generator: &SchemaGenerator, schema: &Value) -> Value {
    let Some(name) = schema["$ref"].as_str().and_then(|r| r.rsplit('/').next()) else {
        return schema.clone();
    };
    generator
        .definitions()
        .get(name)
        .cloned()
        .unwrap_or_else(|| schema.clone())
}

fn responses(generator: &mut SchemaGenerator, e: &Endpoint) -> Value {
    let (status, body) = e.ok;
    let mut ok = json!({ "description": "done" });
    if let Some(body) = body {
        ok["content"] = json!({ "application/json": { "schema": body(generator) } });
    }
    let error = |description: &str| {
        json!({
            "description": description,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } },
        })
    };
    let mut r = json!({
        status.to_string(): ok,
        "401": error("no valid bearer token"),
        "503": error("the database is unreachable"),
    });
    let mut limited = error(
        "the token reached its limit of calls per period (`KICKOFF_API_RATE_LIMIT`, `N/period`, \
         N 1 to 1000000, period 1 ms to 1 day; off by default), shared by every node: \
         `too_many_requests`, not run",
    );
    limited["headers"] = json!({
        "Retry-After": {
            "description": "seconds until the token's window ends",
            "schema": { "type": "integer", "minimum": 1 },
        },
    });
    r["429"] = limited;
    // With a limit set, every answer says where the token stands.
    let limit_headers = json!({
        "RateLimit-Limit": {
            "description": "calls the token may make per window (with KICKOFF_API_RATE_LIMIT set)",
            "schema": { "type": "integer", "minimum": 1 },
        },
        "RateLimit-Remaining": {
            "description": "calls left in the current window",
            "schema": { "type": "integer", "minimum": 0 },
        },
        "RateLimit-Reset": {
            "description": "seconds until the current window ends",
            "schema": { "type": "integer", "minimum": 1 },
        },
    });
    r[status.to_string()]["headers"] = limit_headers.clone();
    // A create that finds what it would make already there answers that, 200 with `existing`.
    let existing = match (e.method, e.path) {
        ("post", "/jobs") => Some(
            "a live job holds the unique key: that job, `existing: true` (moved first with \
             `on_conflict: reschedule`)",
        ),
        ("post", "/workflows") => {
            Some("a live run holds the key: that run, `existing: true` (nothing written)")
        }
        ("post", "/workflows/{id}/signals") => Some(
            "a signal of that name came first and stands: the run, `existing: true` (nothing \
             changed)",
        ),
        ("post", "/games/{game}/workflow") => Some(
            "a live run of the game holds its key: that run, `existing: true` (nothing written)",
        ),
        ("post", INBOUND_SIGNALS) => {
            Some("a signal of that name came first and stands: `existing: true` (nothing changed)")
        }
        _ => None,
    };
    if let Some(description) = existing {
        let mut existing = json!({ "description": description, "headers": limit_headers });
        if let Some(body) = body {
            existing["content"] = json!({ "application/json": { "schema": body(generator) } });
        }
        r["200"] = existing;
    }
    if let Some(links) = links_of(e) {
        r[status.to_string()]["links"] = links;
    }
    if e.method != "get" {
        r["403"] = error("the token may only read, or its owner's role may not act");
        if !e.path.ends_with("/predictions") {
            r["503"] = error(
                "the database is unreachable (`unavailable`), or the audit log could not record \
                 the change, so it was undone (`not_recorded`)",
            );
        }
    }
    if !path_params(e.path).is_empty() {
        r["404"] = error("no such job, queue or question");
    }
    if is_inbound(e.path) {
        // Signed, not a token's: no token's limit, no role to lack.
        r["401"] = error(
            "`unsigned`: a Standard Webhooks header missing or malformed, a timestamp more than \
             300 s away, a signature that matches neither secret, or an endpoint that signals no \
             workflow",
        );
        r["404"] = error("no live run of the workflows the endpoint may signal holds the key");
        r["409"] = error("the run is not running");
        let r = r.as_object_mut().expect("an object");
        r.remove("429");
        r.remove("403");
        for status in [status.to_string(), "200".to_string()] {
            if let Some(ok) = r.get_mut(&status).and_then(Value::as_object_mut) {
                ok.remove("headers");
            }
        }
    }
    if e.body.is_some() {
        r["400"] = error("the body is not JSON of the expected shape");
        r["413"] = error("the body is over 1 MiB");
        r["408"] = error("the whole body did not arrive within 30 s of the request's start");
        r["415"] = error("the body is not sent as application/json");
        r["422"] = error(
            "a field breaks a rule its schema states (`invalid`; the message names the field and \
             the rule)",
        );
    }
    if e.query.is_some() {
        r["400"] = error("a query parameter is malformed");
        r["422"] = error(
            "a query parameter breaks a rule its schema states (`invalid`; the message names it \
             and the rule)",
        );
    }
    if e.method == "post" && e.path.contains("{id}") || e.method == "delete" || e.method == "patch"
    {
        r["409"] = error("the job's or question's state does not allow it");
    }
    for refusal in e.refusals {
        let status = refusal.status.to_string();
        if r.get(&status).is_none() {
            r[&status] = error("refused");
        }
        let line = format!("`{}`: {}", refusal.code, refusal.when);
        let response = &mut r[&status];
        let description = response["description"].as_str().unwrap_or_default();
        response["description"] = format!("{description}; {line}").into();
        let codes = response
            .as_object_mut()
            .expect("a response is an object")
            .entry("x-kickoff-codes")
            .or_insert_with(|| json!([]));
        if let Some(codes) = codes.as_array_mut() {
            codes.push(refusal.code.into());
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal<T: schemars::JsonSchema + 'static>(body: serde_json::Value) -> String {
        match crate::http::extract::check_against_schema::<T>(&body, &Default::default()) {
            Err(e) => e.to_string(),
            Ok(()) => panic!("admitted: {body}"),
        }
    }

    /// A rule the schema states in words is answered in them, not in the validator's account of
    /// a `oneOf`; a rule without words names the field.
    #[test]
    fn a_broken_rule_is_answered_in_its_words() {
        use crate::http::extract::check_against_schema;
        use crate::http::{api_jobs, api_webhook_endpoints};
        use serde_json::json;
        assert_eq!(
            refusal::<api_jobs::BulkBody>(json!({"action": "retry", "ids": [1], "filter": {}})),
            "give exactly one of ids, filter"
        );
        let node_lost = refusal::<crate::alerts::RuleSpec>(
            json!({"name": "n", "condition": "node_lost", "queue": "q"}),
        );
        assert_eq!(node_lost, "queue: a node_lost rule is not scoped by queue");
        let private = refusal::<api_webhook_endpoints::CreateEndpoint>(
            json!({"url_prefix": "http://x.example/", "private_network": true}),
        );
        assert!(
            private.starts_with("private_network: only for an endpoint"),
            "{private}"
        );
        let priority = refusal::<api_jobs::CreateJob>(json!({"kind": "k", "priority": 12}));
        assert!(priority.starts_with("priority: "), "{priority}");
        // Inside a nested type (a `$ref`), the rule's words still.
        let nested = refusal::<crate::http::api_job_tools::EditManyBody>(
            json!({"ids": [1], "edit": {"args": {"a": 1}, "args_patch": {"b": 2}}}),
        );
        assert_eq!(nested, "give either args or args_patch, not both");
        let late = refusal::<api_jobs::CreateJob>(json!({"kind": "k",
            "on_late": {"after_ms": 1000, "then": "skip"},
            "meta": {"late": {"after_ms": 1000, "then": "run"}}}));
        assert_eq!(late, "give either on_late or meta.late, not both");
        // A value of many parts is not repeated (it may hold a secret).
        let args = refusal::<api_jobs::CreateJob>(
            json!({"kind": "k", "args": ["Bearer s3cr3t"], "priority": 1}),
        );
        assert!(!args.contains("s3cr3t"), "{args}");
        // `null` meta is no meta: `on_late` alone is fine.
        assert!(check_against_schema::<api_jobs::CreateJob>(
            &json!({"kind": "k",
            "on_late": {"after_ms": 1000, "then": "skip"}, "meta": null}),
            &Default::default()
        )
        .is_ok());
    }

    /// A number written `5.0` is read as an integer where the schema says `integer` (a
    /// priority, a late policy's `after_ms`, a list of ids) and kept as written anywhere else
    /// (args, meta, a webhook's body).
    #[test]
    fn integral_floats_become_integers_only_where_the_schema_says_integer() {
        use crate::http::{api_job_tools, api_jobs};
        use serde_json::json;
        let job: api_jobs::CreateJob = crate::http::extract::body_of(
            json!({
                "kind": "noop", "priority": 5.0, "args": {"amount": 10.0, "list": [1.0, 2]},
                "meta": {"ratio": 2.0, "late": {"after_ms": 60000.0, "then": "skip"}},
            }),
            &Default::default(),
        )
        .unwrap();
        let shown = format!("{job:?}");
        for part in [
            "priority: Some(5)",
            "Number(10.0)",
            "Number(1.0)",
            "Number(2.0)",
        ] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
        assert!(!shown.contains("Number(60000.0)"), "{shown}");
        let edit: api_job_tools::EditManyBody = crate::http::extract::body_of(
            json!({
                "ids": [1.0, 2.0], "edit": {"max_attempts": 4.0, "args_patch": {"x": 3.0}},
            }),
            &Default::default(),
        )
        .unwrap();
        let shown = format!("{edit:?}");
        assert!(shown.contains("3.0"), "{shown}");
    }

    #[test]
    fn the_document_describes_every_endpoint_with_its_schemas() {
        let doc = document();
        let count: usize = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .map(|item| item.as_object().unwrap().len())
            .sum();
        assert_eq!(count, endpoints().len());
        let create = &doc["paths"]["/api/v1/jobs"]["post"];
        let body = &create["requestBody"]["content"]["application/json"]["schema"]["$ref"];
        assert_eq!(body, "#/components/schemas/CreateJob");
        let create_job = &doc["components"]["schemas"]["CreateJob"];
        assert_eq!(create_job["required"], json!(["kind"]));
        assert_eq!(create_job["additionalProperties"], json!(false));
        let list = doc["paths"]["/api/v1/jobs"]["get"]["parameters"]
            .as_array()
            .unwrap();
        assert!(list
            .iter()
            .any(|p| p["name"] == "state" && p["in"] == "query"));
        let get = &doc["paths"]["/api/v1/jobs/{id}"]["get"]["parameters"][0];
        assert_eq!(get["name"], "id");
        // Each state, with its doc comment.
        let states = doc["components"]["schemas"]["JobState"].to_string();
        assert!(states.contains("\"scheduled\""), "{states}");
        assert!(states.contains("\"discarded\""), "{states}");
    }

    /// Every request's schema compiles as the check of its requests compiles it (a schema that
    /// does not would refuse each request with a panic).
    #[test]
    fn every_request_schema_compiles() {
        let mut checked = 0;
        for e in endpoints() {
            for schema_fn in [e.body, e.query].into_iter().flatten() {
                let mut generator = SchemaSettings::draft2020_12().into_generator();
                let mut root = schema_fn(&mut generator).to_value();
                let defs: Map<String, Value> =
                    generator.take_definitions(true).into_iter().collect();
                root["$defs"] = Value::Object(defs);
                if let Err(err) = crate::http::extract::compile(&root) {
                    panic!("{} {}: {err}", e.method, e.path);
                }
                checked += 1;
            }
        }
        assert!(checked > 20, "{checked}");
    }

    /// The limits the document states are the server's own constants: a rule whose number is
    /// written in an attribute and in a check fails here when the two part.
    #[test]
    fn the_documents_limits_are_the_servers_constants() {
        let doc = document();
        let param = |path: &str, name: &str| -> Value {
            doc["paths"][path]["get"]["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == name)
                .unwrap_or_else(|| panic!("{path} {name}"))["schema"]
                .clone()
        };
        let page = crate::engine::client::MAX_PAGE;
        assert_eq!(param("/api/v1/jobs", "limit")["maximum"], json!(page));
        assert_eq!(param("/api/v1/questions", "limit")["maximum"], json!(500));
        assert_eq!(
            param("/api/v1/schedules/{name}/runs", "limit")["maximum"],
            json!(500)
        );
        assert_eq!(
            param("/api/v1/schedules/{name}/preview", "n")["maximum"],
            json!(crate::engine::schedules::service::MAX_PREVIEW)
        );
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["RotateEndpoint"]["properties"]["overlap_secs"]["maximum"],
            json!(crate::webhooks::service::MAX_OVERLAP.as_secs())
        );
        assert_eq!(
            schemas["CreateQuestion"]["properties"]["choices"]["maxItems"],
            json!(crate::questions::service::MAX_CHOICES)
        );
        assert_eq!(
            schemas["EditManyBody"]["properties"]["ids"]["maxItems"],
            json!(crate::engine::bulk::MAX_BULK_IDS)
        );
        assert_eq!(
            schemas["CreateWorkflow"]["properties"]["steps"]["maxItems"],
            json!(crate::engine::workflow::MAX_STEPS)
        );
        assert_eq!(
            schemas["CreateStep"]["properties"]["after"]["maxItems"],
            json!(crate::engine::workflow::MAX_DEPS)
        );
        assert_eq!(
            schemas["ShiftBody"]["properties"]["by_ms"]["maximum"],
            json!(crate::engine::job_edit::MAX_SHIFT_MS)
        );
        assert_eq!(
            schemas["JsonWithoutNul"]["maximum"],
            json!(crate::engine::job::MAX_JSON_NUMBER)
        );
        assert_eq!(
            schemas["JobEdit"]["properties"]["tags"]["maxItems"],
            json!(crate::engine::job::MAX_TAGS)
        );
    }
}
