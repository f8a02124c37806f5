//! Times as operators read them: absolute in the browser's time zone, plus a relative form
//! ("in 3 min", "2 s late", "5 min ago") that keeps counting down in the browser.
//!
//! The server renders UTC and relative forms measured against the database clock of the page's
//! data. Once hydrated, the clock switches to the browser's zone and ticks every second, corrected
//! by the skew between the browser's clock and the database's (`Clock::sync`). Rendering on the
//! client starts from the same values as the server so hydration matches.
//!
//! Each instant is shown with the browser zone's offset *at that instant* (a July time in New York
//! is UTC-04:00 even when read in December), and the page says which zone that is
//! ([`ZoneNote`]).

use leptos::prelude::*;

#[cfg(feature = "hydrate")]
use crate::local_time::browser_zone;
use crate::local_time::{browser_offset_min, offset_label, UTC};

/// The app's clock, provided once.
#[derive(Clone, Copy)]
pub struct Clock {
    /// True in the browser after hydration.
    pub ticking: RwSignal<bool>,
    /// The estimated database time, ticking each second once hydrated.
    pub now_ms: RwSignal<i64>,
    /// The zone times are shown and typed in: UTC on the server (and without JavaScript), the
    /// browser's (an IANA name) once hydrated.
    pub zone: RwSignal<String>,
    /// Database time minus browser time.
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    skew_ms: StoredValue<i64>,
}

pub fn provide_clock() -> Clock {
    let clock = Clock {
        ticking: RwSignal::new(false),
        now_ms: RwSignal::new(0),
        zone: RwSignal::new(UTC.to_string()),
        skew_ms: StoredValue::new(0),
    };
    provide_context(clock);
    #[cfg(feature = "hydrate")]
    Effect::new(move |prev: Option<()>| {
        if prev.is_none() {
            clock.zone.set(browser_zone());
            clock.tick();
            clock.ticking.set(true);
            let handle = set_interval_with_handle(
                move || clock.tick(),
                std::time::Duration::from_millis(500),
            );
            // The clock lives as long as the app.
            std::mem::forget(handle);
        }
    });
    clock
}

pub fn use_clock() -> Clock {
    expect_context::<Clock>()
}

impl Clock {
    /// Learns the database time from freshly loaded data.
    pub fn sync(&self, db_now_ms: i64) {
        #[cfg(feature = "hydrate")]
        {
            self.skew_ms
                .set_value(db_now_ms - js_sys::Date::now() as i64);
            self.tick();
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = db_now_ms;
    }

    /// Follows the database clock of a resource's data each time it loads.
    pub fn follow<T>(self, resource: Resource<Result<T, ServerFnError>>, now_ms: fn(&T) -> i64)
    where
        T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static,
    {
        Effect::new(move |_| {
            if let Some(Ok(value)) = resource.get() {
                self.sync(now_ms(&value));
            }
        });
    }

    #[cfg(feature = "hydrate")]
    fn tick(&self) {
        self.now_ms
            .set(js_sys::Date::now() as i64 + self.skew_ms.get_value());
    }
}

/// `2026-11-30 18:00:05` in the browser's zone (`in_browser_zone`, with the zone's offset at that
/// instant), else in UTC with ` UTC` after it.
pub fn format_time(ms: i64, in_browser_zone: bool) -> String {
    if in_browser_zone {
        browser_format(ms, "%Y-%m-%d %H:%M:%S")
    } else {
        format!("{} UTC", utc_format(ms, "%Y-%m-%d %H:%M:%S"))
    }
}

/// A `datetime-local` value for `ms`: in the browser's zone (`in_browser_zone`) or in UTC.
pub fn datetime_local_value(ms: i64, in_browser_zone: bool) -> String {
    if in_browser_zone {
        browser_format(ms, "%Y-%m-%dT%H:%M:%S")
    } else {
        utc_format(ms, "%Y-%m-%dT%H:%M:%S")
    }
}

/// The offset an instant is shown with: the browser zone's at that instant, or UTC.
pub fn shown_offset(ms: i64, in_browser_zone: bool) -> String {
    offset_label(if in_browser_zone {
        browser_offset_min(ms)
    } else {
        0
    })
}

fn browser_format(ms: i64, format: &str) -> String {
    use chrono::{DateTime, FixedOffset};
    let zone = FixedOffset::east_opt(browser_offset_min(ms) * 60)
        .unwrap_or(FixedOffset::east_opt(0).unwrap());
    DateTime::from_timestamp_millis(ms)
        .map(|t| t.with_timezone(&zone).format(format).to_string())
        .unwrap_or_else(|| "—".into())
}

fn utc_format(ms: i64, format: &str) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format(format).to_string())
        .unwrap_or_else(|| "—".into())
}

/// A duration in words: `850 ms`, `12 s`, `3 min`, `2 h 5 min`, `4 d`.
/// A short span measured to the tenth of a millisecond below a second ("1.8 ms", "0.3 ms"),
/// as [`span`] above: how late an attempt started. Negative spans read as their size.
pub fn fine_span(ms: f64) -> String {
    if ms.abs() < 1_000.0 {
        format!("{:.1} ms", ms.abs())
    } else {
        span(ms as i64)
    }
}

pub fn span(ms: i64) -> String {
    let ms = ms.unsigned_abs();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let s = ms as f64 / 1000.0;
        if s < 10.0 {
            format!("{s:.1} s")
        } else {
            format!("{} s", ms / 1000)
        }
    } else if ms < 3_600_000 {
        format!("{} min", ms / 60_000)
    } else if ms < 86_400_000 {
        let h = ms / 3_600_000;
        let m = (ms % 3_600_000) / 60_000;
        if m == 0 {
            format!("{h} h")
        } else {
            format!("{h} h {m} min")
        }
    } else {
        format!("{} d", ms / 86_400_000)
    }
}

/// `in 3 min` for a future instant, `5 min ago` for a past one.
pub fn relative(at_ms: i64, now_ms: i64) -> String {
    let d = at_ms - now_ms;
    if d.abs() < 1_000 {
        "now".into()
    } else if d > 0 {
        format!("in {}", span(d))
    } else {
        format!("{} ago", span(d))
    }
}

/// An instant: absolute (browser zone once hydrated) and relative to the database clock.
#[component]
pub fn When(
    /// The instant.
    at_ms: i64,
    /// The database clock when the data was read (used until the browser's clock ticks).
    base_ms: i64,
) -> impl IntoView {
    let clock = use_clock();
    let iso = chrono::DateTime::from_timestamp_millis(at_ms)
        .map(|t| t.to_rfc3339())
        .unwrap_or_default();
    let absolute = move || format_time(at_ms, clock.ticking.get());
    // The zone and its offset at this instant, for whoever wonders which 19:00 this is.
    let title = move || {
        let (zone, offset) = (clock.zone.get(), shown_offset(at_ms, clock.ticking.get()));
        if zone == offset {
            zone
        } else {
            format!("{zone} ({offset})")
        }
    };
    let now = move || {
        if clock.ticking.get() {
            clock.now_ms.get()
        } else {
            base_ms
        }
    };
    view! {
        <time datetime=iso class="when" title=title>
            <span class="abs">{absolute}</span>
            " "
            <span class="rel">{move || relative(at_ms, now())}</span>
        </time>
    }
}

/// A waiting job's due time: a countdown, or how late it is once due.
#[component]
pub fn Countdown(at_ms: i64, base_ms: i64) -> impl IntoView {
    let clock = use_clock();
    let now = move || {
        if clock.ticking.get() {
            clock.now_ms.get()
        } else {
            base_ms
        }
    };
    let late = move || now() - at_ms;
    view! {
        <span class="countdown" class:late=move || { late() >= 1_000 }>
            {move || {
                let l = late();
                if l >= 1_000 {
                    format!("{} late", span(l))
                } else if l > -1_000 {
                    "due now".to_string()
                } else {
                    format!("in {}", span(-l))
                }
            }}
        </span>
    }
}

/// Says which zone the page's times are in: UTC until the page has hydrated (and without
/// JavaScript), then the browser's.
#[component]
pub fn ZoneNote() -> impl IntoView {
    let clock = use_clock();
    view! {
        <span class="zone-note">"Times in " <span class="zone">{move || clock.zone.get()}</span></span>
    }
}
