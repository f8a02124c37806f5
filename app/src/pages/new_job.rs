//! A new job (`/jobs/new`): kind, args as JSON (checked while typing), when it runs (now, in N
//! minutes, or at a date and time in the browser's zone), queue, priority, attempts, unique key.
//! The server validates everything again; its refusal is shown above the form.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::session::Csrf;
use leptos_router::hooks::use_navigate;

use crate::components::late_start::LateStartFields;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::time_field::TimeField;
use crate::console::jobs::{get_job_choices, CreateJob, JobChoices, JobLimits};

/// Why `text` is not acceptable as a job's args, if it is not.
pub fn args_problem(text: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(_) => Some("args must be a JSON object, like {\"game_id\": 42}".into()),
        Err(e) => Some(format!("not valid JSON: {e}")),
    }
}

#[component]
pub fn NewJobPage() -> impl IntoView {
    let create = ServerAction::<CreateJob>::new();
    let choices = Resource::new(|| (), |_| get_job_choices());
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(id)) = create.value().get() {
            navigate(&format!("/jobs/{id}"), Default::default());
        }
    });
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"New job"</h1>
                <a href=crate::base::href("/jobs")>"All jobs"</a>
            </div>
            <ActionError error=failure(create.value())/>
            <Loaded resource=choices render=move |c: JobChoices| view! { <NewJobForm c create/> }/>
        </section>
    }
}

#[component]
fn NewJobForm(c: JobChoices, create: ServerAction<CreateJob>) -> impl IntoView {
    let args = RwSignal::new("{}".to_string());
    let problem = Memo::new(move |_| args.with(|a| args_problem(a)));
    let first_kind = c.kinds.first().cloned().unwrap_or_default();
    // The ranges as the server states them.
    let limits = c.limits;
    let limit = move |f: fn(&JobLimits) -> String| limits.as_ref().map(f);
    view! {
        <ActionForm action=create attr:class="form-card" attr:aria-label="New job">
            <Csrf/>
            <label>
                "Kind"
                <select name="input[kind]" required>
                    {c.kinds
                        .iter()
                        .map(|k| {
                            let selected = *k == first_kind;
                            view! { <option value=k.clone() selected=selected>{k.clone()}</option> }
                        })
                        .collect_view()}
                </select>
            </label>
            <label>
                "Args (JSON object)"
                <textarea
                    name="input[args]"
                    rows="6"
                    spellcheck="false"
                    aria-invalid=move || problem.get().is_some().to_string()
                    aria-describedby="args-problem"
                    prop:value=move || args.get()
                    on:input=move |ev| args.set(event_target_value(&ev))
                >
                    "{}"
                </textarea>
            </label>
            <p id="args-problem" class="field-note" class:error=move || problem.get().is_some() aria-live="polite">
                {move || problem.get().unwrap_or_else(|| "Valid JSON object.".into())}
            </p>
            <fieldset>
                <legend>"When"</legend>
                <label class="inline">
                    <input type="radio" name="input[when]" value="now" checked/>
                    " now"
                </label>
                <label class="inline">
                    <input type="radio" name="input[when]" value="in"/>
                    " in "
                    <input type="number" name="input[in_minutes]" min="0" max="1051200" step="any" size="6" value="5"
                        aria-label="Minutes from now"/>
                    " minutes"
                </label>
                <span class="at-time">
                    <label class="inline">
                        <input type="radio" name="input[when]" value="at"/>
                        " at "
                    </label>
                    <TimeField
                        aria_label="Date and time"
                        name="input[at]"
                        which_name="input[which]"
                        zone_name="input[zone]"
                    />
                </span>
            </fieldset>
            <div class="row">
                <label>
                    "Queue"
                    <input name="input[queue]" list="queue-names" value="default" required pattern="[a-z0-9_\\-]{1,64}"/>
                    <datalist id="queue-names">
                        {c.queues.iter().map(|q| view! { <option value=q.clone()/> }).collect_view()}
                    </datalist>
                </label>
                <label>
                    "Priority (0 first)"
                    <input type="number" name="input[priority]" value="0"
                        min=limit(|l| l.priority_min.to_string()) max=limit(|l| l.priority_max.to_string())/>
                </label>
                <label>
                    "Max attempts"
                    <input type="number" name="input[max_attempts]" value="20"
                        min=limit(|l| l.max_attempts_min.to_string()) max=limit(|l| l.max_attempts_max.to_string())/>
                </label>
                <label>
                    "Unique key (optional)"
                    <input name="input[unique_key]" maxlength="255"/>
                </label>
            </div>
            <LateStartFields after_name="input[late_after_secs]" then_name="input[late_then]" after="" then="run"/>
            <button type="submit" class="primary" disabled=move || problem.get().is_some()>
                "Create job"
            </button>
        </ActionForm>
    }
}
