//! Rules of the request types that their JSON Schemas state beyond what schemars derives from a
//! field's type: fields that exclude each other, a change that must name something, and the
//! patterns of the texts the server reads (a rate, a name). The OpenAPI document serves these
//! schemas and the REST API checks every request against them (`http::extract`), so a rule
//! written here is both documented and enforced. Beside the floors: any type may use it.

use schemars::transform::Transform;
use schemars::Schema;
use serde_json::{json, Value};

/// The keyword holding a rule's words: the check of a request answers them when the rule is
/// broken (`http::extract`), and the document shows them.
pub const MESSAGE: &str = "x-message";

/// The keyword naming the code a broken rule is answered with, where it is not `invalid` (a
/// kind this server does not run: `unknown_kind`).
pub const CODE: &str = "x-kickoff-code";

/// A field present and not `null` (serde reads `null` as absent).
fn given(field: &str) -> Value {
    json!({ "required": [field], "properties": { field: { "not": { "type": "null" } } } })
}

/// A field absent or `null`.
fn not_given(field: &str) -> Value {
    json!({ "properties": { field: { "type": "null" } } })
}

/// Adds `rule`, in `words`, to the schema's `allOf` (beside any rule there already).
fn add_rule(schema: &mut Schema, mut rule: Value, words: String) {
    rule[MESSAGE] = words.into();
    add_rules(schema, [rule]);
}

/// Adds `rules` (each carrying its own words, if any) to the schema's `allOf`: a type's own
/// transform uses it for the rules these do not cover.
pub fn add_rules(schema: &mut Schema, rules: impl IntoIterator<Item = Value>) {
    let all = schema
        .ensure_object()
        .entry("allOf")
        .or_insert_with(|| json!([]));
    if let Some(all) = all.as_array_mut() {
        all.extend(rules);
    }
}

/// An alert rule's notification URL as the server reads it: blank (none), or an absolute `http`
/// or `https` URL with a host, outer whitespace trimmed (Rust's `trim`: the class below, where
/// `\s` differs on U+0085 and U+FEFF); no NUL. Whether its host may be called is the allowlist's
/// (422 `notify_url_refused`).
pub const NOTIFY_URL_PATTERN: &str = concat!(
    r"^[\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*",
    r"([hH][tT][tT][pP][sS]?://[^\s/?#\u0000]+([/?#][^\s\u0000]*)?",
    r"[\t\n\u000b\u000c\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*)?$"
);

/// Marks a job's `kind` in a request's schema: one of the kinds this server runs (less Kickoff's
/// own), known only once the server has its workers. [`with_kinds`] states them.
pub const KINDS_MARK: &str = "x-kickoff-kinds";

/// Marks the `kind` of the `job` a schedule's request carries (the template type is shared with
/// answers, where a stored schedule may name a kind no longer run): see [`KINDS_MARK`].
pub struct JobKindRun;

impl Transform for JobKindRun {
    fn transform(&mut self, schema: &mut Schema) {
        add_rules(
            schema,
            [
                json!({ "properties": { "job": { "properties": { "kind": { KINDS_MARK: true } } } } }),
            ],
        );
    }
}

/// `schema` with every `kind` marked [`KINDS_MARK`] stated as one of `kinds` (an `enum`, `null`
/// kept where the field admits it, in words too); the marks stay where `kinds` is empty (a
/// schema looked at without a server).
pub fn with_kinds(schema: &mut Value, kinds: &[&str]) {
    match schema {
        Value::Object(map) => {
            if kinds.is_empty() || map.remove(KINDS_MARK).is_none() {
                map.values_mut().for_each(|v| with_kinds(v, kinds));
                return;
            }
            let nullable = match map.get("type") {
                Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
                _ => false,
            };
            let mut one_of: Vec<Value> = kinds.iter().map(|k| json!(k)).collect();
            if nullable {
                one_of.push(Value::Null);
            }
            map.insert("enum".into(), Value::Array(one_of));
            map.insert(
                MESSAGE.into(),
                format!(
                    "kind: one of the kinds this server runs: {}",
                    kinds.join(", ")
                )
                .into(),
            );
            map.insert(CODE.into(), "unknown_kind".into());
        }
        Value::Array(items) => items.iter_mut().for_each(|v| with_kinds(v, kinds)),
        _ => {}
    }
}

/// A field given with another set to `null` beside it: refused (a queue's partition with its
/// rate removed in the same change).
pub struct NotRemovedWith(pub &'static str, pub &'static str);

impl Transform for NotRemovedWith {
    fn transform(&mut self, schema: &mut Schema) {
        let removed = json!({ "required": [self.1], "properties": { self.1: { "type": "null" } } });
        add_rule(
            schema,
            json!({ "not": { "allOf": [given(self.0), removed] } }),
            format!("{}: not with {} removed (`null`)", self.0, self.1),
        );
    }
}

/// Exactly one of the fields is given.
pub struct ExactlyOne(pub &'static [&'static str]);

impl Transform for ExactlyOne {
    fn transform(&mut self, schema: &mut Schema) {
        let one_of: Vec<Value> = self
            .0
            .iter()
            .map(|field| {
                let mut all = vec![given(field)];
                all.extend(self.0.iter().filter(|f| *f != field).map(|f| not_given(f)));
                json!({ "allOf": all })
            })
            .collect();
        let words = format!("give exactly one of {}", self.0.join(", "));
        add_rule(schema, json!({ "oneOf": one_of }), words);
    }
}

/// At most one of the fields is given.
pub struct AtMostOne(pub &'static [&'static str]);

impl Transform for AtMostOne {
    fn transform(&mut self, schema: &mut Schema) {
        for (i, a) in self.0.iter().enumerate() {
            for b in &self.0[i + 1..] {
                let words = format!("give either {a} or {b}, not both");
                add_rule(
                    schema,
                    json!({ "not": { "allOf": [given(a), given(b)] } }),
                    words,
                );
            }
        }
    }
}

/// At least one of the fields is present (`null` counts: in a patch it removes a setting).
pub struct AtLeastOne(pub &'static [&'static str]);

impl Transform for AtLeastOne {
    fn transform(&mut self, schema: &mut Schema) {
        let any: Vec<Value> = self.0.iter().map(|f| json!({ "required": [f] })).collect();
        let words = format!("name a setting to change: {}", self.0.join(", "));
        add_rule(schema, json!({ "anyOf": any }), words);
    }
}

/// At least one of the fields is given (present and not `null`).
pub struct AtLeastOneGiven(pub &'static [&'static str]);

impl Transform for AtLeastOneGiven {
    fn transform(&mut self, schema: &mut Schema) {
        let any: Vec<Value> = self.0.iter().map(|f| given(f)).collect();
        let words = format!("nothing to change: give one of {}", self.0.join(", "));
        add_rule(schema, json!({ "anyOf": any }), words);
    }
}

/// The field, when given, requires the other one to be given too.
pub struct Requires(pub &'static str, pub &'static str);

impl Transform for Requires {
    fn transform(&mut self, schema: &mut Schema) {
        add_rule(
            schema,
            json!({ "anyOf": [not_given(self.0), given(self.1)] }),
            format!("{}: only with {}", self.0, self.1),
        );
    }
}

/// A field (an object, when given) that must hold another field, given.
pub struct InnerRequired(pub &'static str, pub &'static str);

impl Transform for InnerRequired {
    fn transform(&mut self, schema: &mut Schema) {
        let words = format!(
            "{}.{}: confirm the count first (GET /api/v1/jobs/count answers it), so that jobs \
             inserted after it are left alone",
            self.0, self.1
        );
        add_rule(
            schema,
            json!({ "properties": { self.0: given(self.1) } }),
            words,
        );
    }
}

/// A flag that may be `true` only when another one is `true` too.
pub struct TrueNeedsTrue(pub &'static str, pub &'static str);

impl Transform for TrueNeedsTrue {
    fn transform(&mut self, schema: &mut Schema) {
        add_rule(
            schema,
            json!({ "anyOf": [
                { "properties": { self.0: { "not": { "const": true } } } },
                { "required": [self.1], "properties": { self.1: { "const": true } } },
            ]}),
            format!(
                "{}: only for an endpoint that allows calls ({})",
                self.0, self.1
            ),
        );
    }
}

/// Text with a character that is not a space (`trim` leaves something), without NUL.
pub const NOT_BLANK: &str = r"^[^\x00]*[^\s\x00\x85][^\x00]*$";

/// Text without outer spaces, not empty, without NUL (`trim` leaves it as it is).
pub const TRIMMED: &str = r"^[^\s\x00\x85]([^\x00]*[^\s\x00\x85])?$";

/// Text without NUL characters (PostgreSQL's text and jsonb cannot hold them).
pub const NO_NUL: &str = r"^[^\x00]*$";

/// Any JSON whose texts (values and keys, at any depth) hold no NUL character: the schema of
/// args and meta (`#[schemars(with = "JsonWithoutNul")]` on a `Value`).
pub struct JsonWithoutNul;

impl schemars::JsonSchema for JsonWithoutNul {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "JsonWithoutNul".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> Schema {
        let inner = generator.subschema_for::<Self>();
        schemars::json_schema!({
            "description": "Any JSON whose texts (keys included) hold no NUL character and whose numbers are at most 1e300 in magnitude",
            "pattern": NO_NUL,
            "maximum": 1e300,
            "minimum": -1e300,
            "propertyNames": { "pattern": NO_NUL },
            "additionalProperties": inner,
            "items": inner,
        })
    }
}

/// A JSON object of [`JsonWithoutNul`] (args, meta).
pub struct ObjectWithoutNul;

impl schemars::JsonSchema for ObjectWithoutNul {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ObjectWithoutNul".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> Schema {
        let inner = generator.subschema_for::<JsonWithoutNul>();
        schemars::json_schema!({
            "description": "A JSON object whose texts (keys included) hold no NUL character",
            "type": "object",
            "propertyNames": { "pattern": NO_NUL },
            "additionalProperties": inner,
        })
    }
}

/// An args filter of a query: blank (no filter), a JSON object (`{...}`, checked as JSON by the
/// handler) or `key=value` pairs separated by commas, each key not blank (blank parts between
/// commas are skipped).
pub const ARGS_FILTER_PATTERN: &str = concat!(
    r"^\s*$|^\s*\{[^\x00]*\}\s*$",
    r"|^(?=[^\x00]*[^\s,\x00])(\s*|\s*[^,=\s\x00\x85{][^,=\x00]*=[^,\x00]*)(,(\s*|\s*[^,=\s\x00\x85{][^,=\x00]*=[^,\x00]*))*$",
);

/// A tags filter of a query: blank (no filter), a JSON array (`[...]`, checked as JSON by the
/// handler) or 1 to 20 tags of 1 to 100 characters separated by commas (blank parts between
/// commas are skipped; at most 20 parts).
pub const TAGS_FILTER_PATTERN: &str = concat!(
    r"^\s*$|^\s*\[[^\x00]*\]\s*$",
    r"|^(?=[^\x00]*[^\s,\x00])(\s*|\s*[^,\s\x00\x85\[][^,\x00]{0,99})(,(\s*|\s*[^,\s\x00\x85][^,\x00]{0,99})){0,19}$",
);

/// A rate as the document states it: `N/period`, N 1 to 1,000,000, the period a count (none: 1)
/// and a unit (`ms`, `s`/`sec`/`second`, `m`/`min`/`minute`, `h`/`hour`, `d`/`day`) of at most a
/// day, spaces around the parts: what [`crate::rate::Rate`] parses and writes (`1/day`), but
/// for leading zeros.
pub const RATE_PATTERN: &str = concat!(
    r"^ *([1-9][0-9]{0,5}|1000000) */ *(",
    // 1 to 86,400,000 ms
    r"([1-9][0-9]{0,6}|[1-7][0-9]{7}|8[0-5][0-9]{6}|86[0-3][0-9]{5}|86400000)?ms",
    // 1 to 86,400 s
    r"|([1-9][0-9]{0,3}|[1-7][0-9]{4}|8[0-5][0-9]{3}|86[0-3][0-9]{2}|86400)?(s|sec|second)",
    // 1 to 1,440 min
    r"|([1-9][0-9]{0,2}|1[0-3][0-9]{2}|14[0-3][0-9]|1440)?(m|min|minute)",
    r"|([1-9]|1[0-9]|2[0-4])?(h|hour)",
    r"|1?(d|day)",
    r") *$",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rate_the_pattern_admits_parses() {
        let pattern = regex_lite(RATE_PATTERN);
        let mut admitted = 0;
        for n in ["1", "7", "999999", "1000000", "1000001", "0", "01", " 7 "] {
            for count in [
                "", "1", "2", "9999", "99999", "999", "24", "25", "9999999", "0", "86400", "86401",
                "1440", "1441", "86400000", "86400001",
            ] {
                for unit in [
                    "ms", "s", "sec", "second", "m", "min", "minute", "h", "hour", "d", "day",
                ] {
                    let text = format!("{n}/{count}{unit}");
                    if pattern(&text) {
                        admitted += 1;
                        assert!(text.parse::<crate::rate::Rate>().is_ok(), "{text}");
                    }
                }
            }
        }
        assert!(admitted > 300, "{admitted}");
        assert!(pattern("100/s") && pattern("5000/min") && pattern("20/10s"));
        // What `Rate` writes is what the document admits.
        for written in ["1/day", "10/h", "5/min", "20/10s", "50/500ms", "1/86400s"] {
            let rate: crate::rate::Rate = written.parse().unwrap();
            assert!(pattern(&rate.to_string()), "{rate}");
            assert!(pattern(written), "{written}");
        }
        assert!(!pattern("1000001/s") && !pattern("1/0s") && !pattern("1/25h"));
    }

    /// The pattern as the schema check reads it (the same crate: `jsonschema`).
    fn regex_lite(pattern: &str) -> impl Fn(&str) -> bool {
        let validator = jsonschema::validator_for(&json!({ "type": "string", "pattern": pattern }))
            .expect("the pattern compiles");
        move |text| validator.is_valid(&json!(text))
    }

    #[test]
    fn exclusive_fields_are_read_as_serde_reads_them() {
        let mut schema = schemars::json_schema!({ "type": "object" });
        ExactlyOne(&["ids", "filter"]).transform(&mut schema);
        let v = jsonschema::validator_for(schema.as_value()).unwrap();
        assert!(v.is_valid(&json!({ "ids": [1] })));
        assert!(v.is_valid(&json!({ "ids": [1], "filter": null })));
        assert!(!v.is_valid(&json!({ "ids": null, "filter": null })));
        assert!(!v.is_valid(&json!({ "ids": [1], "filter": {} })));
        let mut schema = schemars::json_schema!({ "type": "object" });
        AtMostOne(&["a", "b"]).transform(&mut schema);
        let v = jsonschema::validator_for(schema.as_value()).unwrap();
        assert!(v.is_valid(&json!({})));
        assert!(v.is_valid(&json!({ "a": 1, "b": null })));
        assert!(!v.is_valid(&json!({ "a": 1, "b": 2 })));
    }
}
