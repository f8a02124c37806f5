//! A new game question (`/questions/new`): its lock job is created with it, in one transaction.

use leptos::prelude::*;

use crate::components::action_form::ActionForm;

use crate::components::session::Csrf;
use leptos_router::hooks::use_navigate;

use crate::components::loaded::{failure, ActionError};
use crate::components::time_field::TimeField;
use crate::console::questions::CreateQuestion;

#[component]
pub fn NewQuestionPage() -> impl IntoView {
    let create = ServerAction::<CreateQuestion>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(id)) = create.value().get() {
            navigate(&format!("/questions/{id}"), Default::default());
        }
    });
    view! {
        <section class="page">
            <div class="page-head">
                <h1>"New question"</h1>
                <a href=crate::base::href("/questions")>"All questions"</a>
            </div>
            <ActionError error=failure(create.value())/>
            <ActionForm action=create attr:class="form-card" attr:aria-label="New question">
                <Csrf/>
                <label>"Game" <input name="game" required maxlength="200" placeholder="Lions vs Tigers"/></label>
                <label>"Question" <input name="prompt" required maxlength="500" placeholder="Who scores first?"/></label>
                <label>
                    "Choices, one per line"
                    <textarea name="choices" rows="4" required>"Lions\nTigers"</textarea>
                </label>
                <TimeField label="Game time" name="game_time" which_name="which" zone_name="zone" required=true/>
                <p class="field-note">"Predictions close exactly at game time: the lock job fires then, and later predictions are refused."</p>
                <fieldset>
                    <legend>"The game's workflow"</legend>
                    <label class="inline">
                        <input type="checkbox" name="workflow" value="on"/>
                        " Start its game's workflow now: lock at kickoff, settle on the final result, tell the players, publish the leaderboard (a live run of the game is kept)"
                    </label>
                    <label>"Players told at (a webhook URL, optional)" <input name="notify_url" type="url" maxlength="2048" placeholder="https://push.example/players"/></label>
                    <label>"Result asked at every 30 s (the partner's API, optional; else the partner calls us)" <input name="result_url" type="url" maxlength="2048" placeholder="https://partner.example/games/8812/result"/></label>
                </fieldset>
                <button type="submit" class="primary">"Create question"</button>
            </ActionForm>
        </section>
    }
}
