//! The request headers a webhook call may carry from its job or its endpoint, and the names no
//! one may set.

use std::collections::BTreeMap;

/// Headers neither a job nor an endpoint may set: `Host` would reach a virtual host the allowlist
/// does not name (on an allowed address), and the hop-by-hop headers and the length would let it
/// frame the request; the Standard Webhooks headers are the call's own.
pub const RESERVED: [&str; 13] = [
    "host",
    "connection",
    "transfer-encoding",
    "content-length",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
];

/// The most default headers an endpoint has.
pub const MAX_DEFAULT_HEADERS: usize = 20;
/// The longest value of a default header, in bytes.
pub const MAX_VALUE_BYTES: usize = 4096;

/// An endpoint's default headers as the schema states them (or `null`): at most
/// [`MAX_DEFAULT_HEADERS`], each name an HTTP token and none of [`RESERVED`] (in any case), each
/// value visible ASCII, spaces and tabs, at most [`MAX_VALUE_BYTES`]. Two names that differ only
/// in case are refused as `inconsistent` (no schema states it).
pub fn defaults_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let any_case = |word: &str| -> String {
        word.chars()
            .map(|c| {
                if c.is_ascii_alphabetic() {
                    format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
                } else {
                    regex_escape(c)
                }
            })
            .collect()
    };
    let reserved: Vec<String> = RESERVED.iter().map(|r| any_case(r)).collect();
    let name = format!("^(?!({})$)[!#$%&'*+.^_`|~0-9A-Za-z-]+$", reserved.join("|"));
    schemars::json_schema!({
        "type": ["object", "null"],
        "x-message": format!(
            "headers: at most {MAX_DEFAULT_HEADERS}, each name a header name other than Host, \
             the hop-by-hop headers and webhook-*, each value visible ASCII of at most \
             {MAX_VALUE_BYTES} bytes"
        ),
        "maxProperties": MAX_DEFAULT_HEADERS,
        "propertyNames": { "pattern": name },
        "additionalProperties": {
            "type": "string",
            "maxLength": MAX_VALUE_BYTES,
            "pattern": "^[\\t\\x20-\\x7e]*$",
        },
    })
}

fn regex_escape(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\{c}")
    }
}

/// The first name given twice in different cases.
pub fn twice_in_any_case(headers: &BTreeMap<String, String>) -> Option<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for k in headers.keys() {
        if seen.iter().any(|n| n.eq_ignore_ascii_case(k)) {
            return Some(k);
        }
        seen.push(k);
    }
    None
}

/// Checks headers a call would send: valid names and values, none reserved. The message names
/// a valid header (never its value, nor a name that is not one: either may be a credential).
pub fn check(headers: &BTreeMap<String, String>) -> Result<(), String> {
    for (n, (k, v)) in headers.iter().enumerate() {
        // Not repeated: a name that is not one may be a pasted credential.
        reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
            format!(
                "headers: the name of header {} (in name order) is not a valid header name",
                n + 1
            )
        })?;
        if RESERVED.iter().any(|r| k.eq_ignore_ascii_case(r)) {
            return Err(format!(
                "headers: `{k}` cannot be set: the call sets the host, frames the request and \
                 names it (webhook-id, webhook-timestamp) itself"
            ));
        }
        reqwest::header::HeaderValue::from_str(v)
            .map_err(|_| format!("headers: the value of `{k}` is not valid"))?;
    }
    Ok(())
}

/// Checks an endpoint's default headers: as [`check`], at most [`MAX_DEFAULT_HEADERS`] of at most
/// [`MAX_VALUE_BYTES`] each, no name twice (in any case). Returns their names as given.
pub fn check_defaults(headers: &BTreeMap<String, String>) -> Result<Vec<String>, String> {
    if headers.len() > MAX_DEFAULT_HEADERS {
        return Err(format!("headers: at most {MAX_DEFAULT_HEADERS}"));
    }
    check(headers)?;
    if let Some((k, _)) = headers.iter().find(|(_, v)| v.len() > MAX_VALUE_BYTES) {
        return Err(format!(
            "headers: the value of `{k}` is longer than {MAX_VALUE_BYTES} bytes"
        ));
    }
    if let Some(k) = twice_in_any_case(headers) {
        return Err(format!("headers: `{k}` is given twice"));
    }
    Ok(headers.keys().cloned().collect())
}

/// Headers written one per line, `Name: value` (as the dashboard's form takes them); blank lines
/// are skipped. A line without `:` is refused by its number, never its text (it may hold a
/// credential).
pub fn parse_lines(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut headers = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| format!("headers: line {} is not `Name: value`", n + 1))?;
        let name = name.trim();
        if headers
            .insert(name.to_string(), value.trim().to_string())
            .is_some()
        {
            return Err(format!("headers: `{name}` is given twice"));
        }
    }
    Ok(headers)
}

/// The valid header names among `headers`, to name in an audit entry; the others are counted.
pub fn described_names(headers: &BTreeMap<String, String>) -> String {
    let valid: Vec<&str> = headers
        .keys()
        .filter(|k| reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_ok())
        .map(String::as_str)
        .collect();
    let others = headers.len() - valid.len();
    match (valid.is_empty(), others) {
        (_, 0) => valid.join(", "),
        (true, n) => format!("{n} not valid"),
        (false, n) => format!("{} and {n} not valid", valid.join(", ")),
    }
}

/// The headers a call sends: the endpoint's defaults, beneath the job's own (a job's header of
/// the same name, in any case, replaces the default).
pub fn merged(
    defaults: &BTreeMap<String, String>,
    own: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut sent: Vec<(String, String)> = defaults
        .iter()
        .filter(|(k, _)| !own.keys().any(|o| o.eq_ignore_ascii_case(k)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    sent.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_jobs_own_header_replaces_the_default_of_that_name() {
        let defaults = map(&[("Authorization", "Bearer team"), ("X-Team", "blue")]);
        let own = map(&[("authorization", "Bearer job")]);
        assert_eq!(
            merged(&defaults, &own),
            vec![
                ("X-Team".to_string(), "blue".to_string()),
                ("authorization".to_string(), "Bearer job".to_string())
            ]
        );
    }

    #[test]
    fn lines_of_names_and_values_are_read_without_echoing_a_value() {
        assert_eq!(
            parse_lines("Authorization: Bearer a:b\n\n  X-Team :blue \n").unwrap(),
            map(&[("Authorization", "Bearer a:b"), ("X-Team", "blue")])
        );
        let bad = parse_lines("X-A: 1\nsecret-without-colon").unwrap_err();
        assert_eq!(bad, "headers: line 2 is not `Name: value`");
    }

    #[test]
    fn defaults_are_checked_by_name_never_showing_a_value() {
        assert_eq!(
            check_defaults(&map(&[("Authorization", "Bearer x")])).unwrap(),
            vec!["Authorization"]
        );
        let twice = check_defaults(&map(&[("X-A", "1"), ("x-a", "2")])).unwrap_err();
        assert!(twice.contains("`x-a` is given twice"), "{twice}");
        let reserved = check_defaults(&map(&[("Host", "evil.test")])).unwrap_err();
        assert!(reserved.contains("`Host` cannot be set"), "{reserved}");
        let bad = check_defaults(&map(&[("X-Key", "line\nbreak-secret")])).unwrap_err();
        assert!(!bad.contains("secret"), "{bad}");
        // A pasted line that is no header name is not repeated either.
        let pasted = map(&[("Authorization Bearer sk_live_1", "x")]);
        let bad = check_defaults(&pasted).unwrap_err();
        assert!(!bad.contains("sk_live"), "{bad}");
        assert_eq!(described_names(&pasted), "1 not valid");
        let long = "v".repeat(MAX_VALUE_BYTES + 1);
        assert!(check_defaults(&map(&[("X-Long", &long)])).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_DEFAULT_HEADERS)
            .map(|i| (format!("X-{i}"), "v".to_string()))
            .collect();
        assert!(check_defaults(&many).is_err());
    }
}
