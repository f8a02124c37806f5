//! One question (`/questions/:id`): predictions per choice, the lock job, and its game time, which
//! an operator can move while the question is open (the same lock job moves with it).

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::session::Csrf;
use leptos_router::hooks::use_params_map;

use crate::components::live::use_live;
use crate::components::loaded::{failure, ActionError, Loaded};
use crate::components::table::{Column, DataTable};
use crate::components::time::{fine_span, use_clock, Countdown, When};
use crate::components::time_field::TimeField;
use crate::console::questions::{get_question, MoveQuestion, QuestionDetail};

const CHOICE_COLUMNS: &[Column] = &[("Choice", false), ("Predictions", false), ("Share", false)];

#[component]
pub fn QuestionDetailPage() -> impl IntoView {
    let live = use_live();
    let clock = use_clock();
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|i| i.parse::<i64>().ok());
    let move_time = ServerAction::<MoveQuestion>::new();
    let draft = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        if move_time.value().with(|v| matches!(v, Some(Ok(())))) {
            draft.set(None);
        }
    });
    let question = Resource::new(
        move || {
            // The versions are part of the key: an unchanged key would not refetch.
            (id(), live.version.get(), move_time.version().get())
        },
        |(id, ..)| async move {
            match id {
                Some(id) => get_question(id).await,
                None => Err(ServerFnError::new("the question id must be a number")),
            }
        },
    );
    clock.follow(question, |q: &QuestionDetail| q.now_ms);
    view! {
        <section class="page">
            <div class="page-head">
                <h1>{move || id().map(|i| format!("Question {i}")).unwrap_or_else(|| "Question".into())}</h1>
                <a href=crate::base::href("/questions")>"All questions"</a>
            </div>
            <ActionError error=failure(move_time.value())/>
            <Loaded resource=question render=move |d: QuestionDetail| view! { <Detail d move_time draft/> }/>
        </section>
    }
}

#[component]
fn Detail(
    d: QuestionDetail,
    move_time: ServerAction<MoveQuestion>,
    /// What the operator typed as the new time: kept when live updates render the page again.
    draft: RwSignal<Option<String>>,
) -> impl IntoView {
    let q = d.question.clone();
    let now = d.now_ms;
    let open = q.status == "open";
    let game_ms = q.game_ms;
    let id = q.id;
    let total = d.predictions.max(1);
    let correct = d.correct_choice.clone();
    view! {
        <p class="lead"><strong>{q.game.clone()}</strong>": "{q.prompt.clone()}</p>
        <dl class="facts">
            <dt>"Status"</dt>
            <dd><span class=format!("badge status-{}", q.status)>{q.status.clone()}</span></dd>
            <dt>"Game time"</dt>
            <dd>
                <When at_ms=game_ms base_ms=now/>
                {open.then(|| view! { " · locks " <Countdown at_ms=game_ms base_ms=now/> })}
            </dd>
            {d.locked_ms.map(|l| view! {
                <dt>"Locked"</dt>
                <dd>
                    <When at_ms=l base_ms=now/>
                    {d.lock_late_ms.map(|late| view! {
                        " · "
                        <span class="lock-proof">
                            {if late >= 0.0 {
                                format!("{} after game time", fine_span(late))
                            } else {
                                format!("{} before game time", fine_span(late))
                            }}
                            {d.lock_node.clone().map(|n| view! { " by node " <code>{n}</code> })}
                        </span>
                    })}
                </dd>
            })}
            <dt>"Lock job"</dt>
            <dd>
                {d.lock_job.clone().map(|j| view! {
                    <a href=crate::base::href(&format!("/jobs/{}", j.id))>{format!("#{}", j.id)}</a>
                    " "
                    <span class=format!("badge state-{}", j.state)>{j.state.clone()}</span>
                })}
            </dd>
            <dt>"Predictions"</dt>
            <dd>
                {d.predictions}
                {(d.refused_predictions > 0).then(|| view! {
                    " · "
                    <span data-refused="">
                        {format!("{} refused after the lock", d.refused_predictions)}
                    </span>
                })}
            </dd>
        </dl>
        {open.then(|| view! {
            <ActionForm action=move_time attr:class="inline-form">
                <Csrf/>
                <input type="hidden" name="id" value=id/>
                <TimeField
                    label="Move game time to "
                    name="game_time"
                    which_name="which"
                    zone_name="zone"
                    required=true
                    draft
                    at_ms=game_ms
                />
                <button type="submit">"Move"</button>
            </ActionForm>
        })}
        <h2>"Predictions per choice"</h2>
        <DataTable label="Predictions per choice" columns=CHOICE_COLUMNS>
                {d.choices
                    .into_iter()
                    .map(|(choice, n, _)| {
                        let is_correct = correct.as_deref() == Some(choice.as_str());
                        let pct = n as f64 * 100.0 / total as f64;
                        view! {
                            <tr class:correct=is_correct>
                                <td>{choice}{is_correct.then_some(" ✓ correct")}</td>
                                <td>{n}</td>
                                <td>
                                    <span class="share" style=format!("--share: {pct:.1}%")>{format!("{pct:.0}%")}</span>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </DataTable>
    }
}
