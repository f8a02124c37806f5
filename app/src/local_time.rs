//! Wall-clock times typed in a time zone: what a `datetime-local` field holds, and which instant
//! it means.
//!
//! A form sends the typed time with the IANA name of the zone it was typed in (the browser's,
//! `Intl.DateTimeFormat().resolvedOptions().timeZone`, once the page has hydrated; none without
//! JavaScript, which means UTC, as the page then says). The server converts with that zone's full
//! rules (chrono-tz), so a game typed in December for a date in April gets April's offset. Only the
//! server carries the zone database: in the browser, JavaScript's `Date` knows the browser zone's
//! offset at any instant, which is all the pages need to show times and to spot a repeated hour.
//!
//! Twice a year a wall-clock time is not one instant. In the hour the clocks skip it is none: the
//! server refuses it and names the gap. In the hour they repeat it is two: the server does not
//! guess, it refuses naming both instants, and the form asks which one is meant (`which`, either
//! [`EARLIER`] or [`LATER`]).

use chrono::NaiveDateTime;

/// The zone of a form that names none (a page without JavaScript).
pub const UTC: &str = "UTC";

/// `which` for the first of the two instants of a repeated wall-clock time (before the clocks go
/// back).
pub const EARLIER: &str = "earlier";
/// `which` for the second one (after the clocks went back).
pub const LATER: &str = "later";

/// Parses a `datetime-local` value (`2026-11-30T18:00`, seconds optional).
pub fn parse_wall_clock(value: &str) -> Result<NaiveDateTime, String> {
    let value = value.trim();
    NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M")
        .or_else(|_| NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S"))
        .or_else(|_| NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S%.f"))
        .map_err(|_| format!("`{value}` is not a date and time (YYYY-MM-DDTHH:MM)"))
}

/// A wall-clock time as the operator reads it: `2027-03-14 02:30` (seconds only when typed).
pub fn show_wall_clock(t: NaiveDateTime) -> String {
    use chrono::Timelike;
    if t.second() == 0 {
        t.format("%Y-%m-%d %H:%M").to_string()
    } else {
        t.format("%Y-%m-%d %H:%M:%S").to_string()
    }
}

/// An offset from UTC in minutes east, as `UTC`, `UTC+05:30` or `UTC-04:00`.
pub fn offset_label(minutes_east: i32) -> String {
    if minutes_east == 0 {
        return UTC.to_string();
    }
    let sign = if minutes_east < 0 { '-' } else { '+' };
    let m = minutes_east.unsigned_abs();
    format!("UTC{sign}{:02}:{:02}", m / 60, m % 60)
}

/// The instant's time of day in UTC, `05:30 UTC`, for naming the two instants of a repeated hour.
pub fn utc_time_of_day(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M UTC").to_string())
        .unwrap_or_default()
}

/// The question the form asks, and the server's refusal says, for a repeated wall-clock time:
/// `(earlier, later)` are the two instants with their offsets (minutes east).
pub fn repeated_question(
    wall: NaiveDateTime,
    zone: &str,
    earlier: (i64, i32),
    later: (i64, i32),
) -> String {
    format!(
        "{} happens twice in {zone} (the clocks go back): first at {} ({}), then at {} ({}). \
         Say which one is meant.",
        show_wall_clock(wall),
        offset_label(earlier.1),
        utc_time_of_day(earlier.0),
        offset_label(later.1),
        utc_time_of_day(later.0),
    )
}

const DAY_MS: i64 = 86_400_000;

/// The browser zone's name (`Europe/London`); UTC outside a browser.
pub fn browser_zone() -> String {
    #[cfg(feature = "hydrate")]
    {
        let format =
            js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new());
        js_sys::Reflect::get(&format.resolved_options(), &"timeZone".into())
            .ok()
            .and_then(|z| z.as_string())
            .filter(|z| !z.is_empty())
            .unwrap_or_else(|| UTC.to_string())
    }
    #[cfg(not(feature = "hydrate"))]
    UTC.to_string()
}

/// The browser zone's offset from UTC (minutes east) at the instant `ms`: its own offset, not
/// today's (a July time in New York is UTC-04:00 even when read in December). 0 outside a browser.
pub fn browser_offset_min(ms: i64) -> i32 {
    #[cfg(feature = "hydrate")]
    {
        let date = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
        -(date.get_timezone_offset() as i32)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = ms;
        0
    }
}

/// The instants a wall-clock time means in the browser's zone, earliest first, each with its
/// offset: none in the hour the clocks skip, two in the hour they repeat, else one.
pub fn browser_instants(wall: NaiveDateTime) -> Vec<(i64, i32)> {
    // The offsets in force a day either side; the time means, for each, the instant that offset
    // puts it at, when the zone has that offset then. (Zones change offset at most once a day.)
    let as_if_utc = wall.and_utc().timestamp_millis();
    let mut found: Vec<(i64, i32)> = [
        browser_offset_min(as_if_utc - DAY_MS),
        browser_offset_min(as_if_utc + DAY_MS),
    ]
    .into_iter()
    .map(|offset| (as_if_utc - i64::from(offset) * 60_000, offset))
    .filter(|&(at, offset)| browser_offset_min(at) == offset)
    .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// The instant (ms since the epoch) that the wall-clock `value` means in `zone` (an IANA name;
/// absent or blank: UTC). `which` picks one of the two instants of a repeated time; a time in the
/// skipped hour is refused, and so is a repeated one without `which`.
#[cfg(feature = "ssr")]
pub fn instant_ms(value: &str, zone: Option<&str>, which: Option<&str>) -> Result<i64, String> {
    use chrono::{LocalResult, TimeZone};
    let wall = parse_wall_clock(value)?;
    let zone_name = zone.map(str::trim).filter(|z| !z.is_empty()).unwrap_or(UTC);
    let tz: chrono_tz::Tz = zone_name.parse().map_err(|_| {
        format!("`{zone_name}` is not a time zone (an IANA name like Europe/London)")
    })?;
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) => Ok(t.timestamp_millis()),
        LocalResult::Ambiguous(a, b) => {
            let offset = |t: &chrono::DateTime<chrono_tz::Tz>| {
                use chrono::Offset;
                t.offset().fix().local_minus_utc() / 60
            };
            let (earlier, later) = if a <= b { (a, b) } else { (b, a) };
            match which.map(str::trim).filter(|w| !w.is_empty()) {
                Some(EARLIER) => Ok(earlier.timestamp_millis()),
                Some(LATER) => Ok(later.timestamp_millis()),
                Some(other) => Err(format!(
                    "which: `{other}` is neither `{EARLIER}` nor `{LATER}`"
                )),
                None => Err(repeated_question(
                    wall,
                    zone_name,
                    (earlier.timestamp_millis(), offset(&earlier)),
                    (later.timestamp_millis(), offset(&later)),
                )),
            }
        }
        LocalResult::None => Err(skipped_refusal(tz, zone_name, wall)),
    }
}

/// Why a time in the skipped hour is refused: the gap it falls in, as wall-clock times, and the
/// offsets either side.
#[cfg(feature = "ssr")]
fn skipped_refusal(tz: chrono_tz::Tz, zone_name: &str, wall: NaiveDateTime) -> String {
    use chrono::{Offset, TimeZone};
    let offset_at = |ms: i64| -> i32 {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| {
                tz.offset_from_utc_datetime(&t.naive_utc())
                    .fix()
                    .local_minus_utc()
            })
            .unwrap_or(0)
    };
    // The switch is the first instant with the later offset, found by halving the two days
    // around the typed time down to the second.
    let as_if_utc = wall.and_utc().timestamp_millis();
    let (mut lo, mut hi) = (as_if_utc - DAY_MS, as_if_utc + DAY_MS);
    let (before, after) = (offset_at(lo), offset_at(hi));
    while hi - lo > 1_000 {
        let mid = lo + (hi - lo) / 2;
        if offset_at(mid) == before {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let wall_at = |offset_secs: i32| {
        chrono::DateTime::from_timestamp_millis(hi + i64::from(offset_secs) * 1_000)
            .map(|t| t.naive_utc().format("%H:%M").to_string())
            .unwrap_or_default()
    };
    format!(
        "{} does not exist in {zone_name}: the clocks go forward from {} to {} that night \
         ({} to {}). Give a time outside the skipped hour.",
        show_wall_clock(wall),
        wall_at(before),
        wall_at(after),
        offset_label(before / 60),
        offset_label(after / 60),
    )
}
