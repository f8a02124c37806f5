//! A time field of a form: a `datetime-local` input with the zone it is typed in shown beside it,
//! and, when the typed time happens twice in that zone (the hour the clocks go back), the question
//! which one is meant. The form carries the zone itself ([`ZoneInput`]); the server converts
//! (`local_time::instant_ms`) and has the last word, also on the skipped hour.

use leptos::prelude::*;

use crate::components::time::{datetime_local_value, use_clock};
use crate::local_time::{
    browser_instants, offset_label, parse_wall_clock, repeated_question, show_wall_clock,
    utc_time_of_day, EARLIER, LATER,
};

/// The hidden field naming the zone the form's times are typed in: UTC until the page has
/// hydrated (a form posted without JavaScript is in UTC), then the browser's, or `zone` when given.
#[component]
pub fn ZoneInput(
    /// The field's name (`zone`, `input[zone]`).
    name: &'static str,
    /// The zone, when not the clock's (a filter read from the address bar).
    #[prop(optional, into)]
    zone: Option<Signal<String>>,
) -> impl IntoView {
    let clock = use_clock();
    let zone = zone.unwrap_or_else(|| Signal::derive(move || clock.zone.get()));
    view! { <input type="hidden" name=name value=move || zone.get()/> }
}

#[component]
pub fn TimeField(
    /// The visible label (`Game time`); none when the input sits in a sentence of its own (the
    /// new-job form's "at"), where `aria_label` names it.
    #[prop(optional)]
    label: Option<&'static str>,
    #[prop(optional)] aria_label: Option<&'static str>,
    /// The input's name (`at`, `game_time`, `input[at]`, `from`).
    name: &'static str,
    /// The name of the answer to "which one?" for a repeated time (`which`, `from_which`).
    which_name: &'static str,
    /// What the operator typed; kept by the caller when the field is redrawn on live refreshes.
    #[prop(optional)]
    draft: Option<RwSignal<Option<String>>>,
    /// What the field holds before anything is typed (a filter's bound from the address bar).
    #[prop(optional, into)]
    initial: Option<Signal<String>>,
    /// The instant the field holds before anything is typed (a job's due time), shown in the
    /// page's zone.
    #[prop(optional)]
    at_ms: Option<i64>,
    /// The name of the form's zone field, when this is the form's only time: the field then
    /// carries it ([`ZoneInput`]).
    #[prop(optional)]
    zone_name: Option<&'static str>,
    /// The zone the field is in, when not the clock's (a filter read from the address bar).
    #[prop(optional, into)]
    zone: Option<Signal<String>>,
    #[prop(optional)] required: bool,
) -> impl IntoView {
    let clock = use_clock();
    let draft = draft.unwrap_or_else(|| RwSignal::new(None));
    let initial = match at_ms {
        Some(ms) => Signal::derive(move || datetime_local_value(ms, clock.ticking.get())),
        None => initial.unwrap_or_else(|| Signal::stored(String::new())),
    };
    let zone = zone.unwrap_or_else(|| Signal::derive(move || clock.zone.get()));
    let value = move || draft.get().unwrap_or_else(|| initial.get());
    let input = view! {
        <input
            type="datetime-local"
            step="1"
            name=name
            required=required
            aria-label=aria_label
            prop:value=value
            on:input=move |ev| draft.set(Some(event_target_value(&ev)))
        />
    };
    let field = match label {
        Some(text) => view! { <label>{text} {input}</label> }.into_any(),
        None => input.into_any(),
    };
    // The browser knows its own zone's rules: a time it repeats gets the question at once.
    // (Another zone, from the address bar, is left to the server, which refuses and says why.)
    let repeated = move || {
        let zone = zone.get();
        if !clock.ticking.get() || zone != clock.zone.get() {
            return None;
        }
        let wall = parse_wall_clock(&value()).ok()?;
        match browser_instants(wall)[..] {
            [earlier, later] => Some((wall, zone, earlier, later)),
            _ => None,
        }
    };
    view! {
        {zone_name.map(|name| view! { <ZoneInput name zone/> })}
        <span class="time-field">
            {field}
            " "
            <span class="zone">{move || zone.get()}</span>
        </span>
        {move || {
            repeated()
                .map(|(wall, zone, earlier, later)| {
                    let option = |(at, offset): (i64, i32), which: &str| {
                        format!(
                            "{} at {} ({}), the {which}",
                            show_wall_clock(wall),
                            offset_label(offset),
                            utc_time_of_day(at),
                        )
                    };
                    view! {
                        <label class="which">
                            {repeated_question(wall, &zone, earlier, later)}
                            <select name=which_name required>
                                <option value="">"Which one?"</option>
                                <option value=EARLIER>{option(earlier, "first")}</option>
                                <option value=LATER>{option(later, "second")}</option>
                            </select>
                        </label>
                    }
                })
        }}
    }
}
