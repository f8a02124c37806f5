//! A data table: labelled for screen readers, scrolling sideways on narrow screens, where the
//! columns marked wide are hidden.

use leptos::prelude::*;

/// A column: its header, and whether it is secondary (hidden on phones).
pub type Column = (&'static str, bool);

#[component]
pub fn DataTable(
    label: &'static str,
    columns: &'static [Column],
    children: Children,
) -> impl IntoView {
    view! {
        <div class="table-wrap">
            <table class="grid" aria-label=label>
                <thead>
                    <tr>
                        {columns
                            .iter()
                            .map(|(name, wide)| view! { <th scope="col" class:wide=*wide>{*name}</th> })
                            .collect_view()}
                    </tr>
                </thead>
                <tbody>{children()}</tbody>
            </table>
        </div>
    }
}
