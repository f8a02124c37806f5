//! The late-start policy's two fields, shared by the new-job and schedule forms: how late an
//! attempt may start, and what happens past it (see the engine's `late_start`).

use leptos::prelude::*;

/// "If it would start more than [N] s after its due time: [run it anyway | skip it | discard it]".
/// `after` and `then` are the current values (`""` and `run`: no policy).
#[component]
pub fn LateStartFields(
    after_name: &'static str,
    then_name: &'static str,
    #[prop(into)] after: String,
    #[prop(into)] then: String,
) -> impl IntoView {
    let chosen = move |v: &str| then == v;
    view! {
        <fieldset class="late-start">
            <legend>"If it would start late"</legend>
            <label class="inline">
                "More than "
                <input type="number" name=after_name min="0" max="86400" step="any" size="7"
                    value=after aria-label="Seconds after its due time" placeholder="60"/>
                " s after its due time: "
            </label>
            <select name=then_name aria-label="What happens to a late start">
                <option value="run" selected=chosen("run")>"run it anyway"</option>
                <option value="skip" selected=chosen("skip")>"skip it (cancelled, saying how late)"</option>
                <option value="discard" selected=chosen("discard")>"discard it (the job-discarded alert sees it)"</option>
            </select>
        </fieldset>
    }
}
