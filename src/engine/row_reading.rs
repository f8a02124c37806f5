//! Reading a row's JSON columns without failing on what a float cannot hold.
//!
//! PostgreSQL's `jsonb` keeps a number exactly (`1e400`, a 401-digit integer as it prints it),
//! and `serde_json` cannot read one beyond the largest float: read plainly, such a row fails the
//! whole statement it comes back from, a list, a page, the export, or a claim that already
//! committed (its batch then stayed `executing` for ever). Kickoff refuses such numbers on every
//! insert and edit (`engine::client`, and the database's `kickoff_json_numbers_bounded` triggers),
//! but plain SQL may have written one before, or an older release. Here such a value is read as
//! its text instead, and where it was is said, so the caller can end the row with an error that
//! names the field.

use serde_json::value::RawValue;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::Row;

/// What a value that cannot be read as JSON is said to be, after its field.
const OUT_OF_RANGE: &str = "a number out of range (at most 1e300 in magnitude), shown as text";

/// Column `name` as JSON; a value no float can hold is kept as its text and its place pushed to
/// `unreadable` (`args.n: ...`).
pub fn json_column(
    row: &PgRow,
    name: &str,
    unreadable: &mut Vec<String>,
) -> Result<Value, sqlx::Error> {
    match row.try_get::<Value, _>(name) {
        Ok(v) => Ok(v),
        Err(sqlx::Error::ColumnDecode { .. }) => {
            let raw: sqlx::types::Json<Box<RawValue>> = row.try_get(name)?;
            let mut found = Vec::new();
            let value = readable(&raw.0, name, &mut found);
            unreadable.extend(found.into_iter().map(|at| format!("{at}: {OUT_OF_RANGE}")));
            Ok(value)
        }
        Err(e) => Err(e),
    }
}

/// Column `name` as a JSON list of `T`: the entries that cannot be read as `T` are left out, and
/// their places pushed to `unreadable`.
pub fn json_list_column<T: serde::de::DeserializeOwned>(
    row: &PgRow,
    name: &str,
    unreadable: &mut Vec<String>,
) -> Result<Vec<T>, sqlx::Error> {
    match row.try_get::<sqlx::types::Json<Vec<T>>, _>(name) {
        Ok(list) => Ok(list.0),
        Err(sqlx::Error::ColumnDecode { .. }) => {
            let raw: sqlx::types::Json<Vec<Box<RawValue>>> = row.try_get(name)?;
            let mut kept = Vec::new();
            for (i, entry) in raw.0.iter().enumerate() {
                match serde_json::from_str(entry.get()) {
                    Ok(item) => kept.push(item),
                    Err(e) => unreadable.push(format!("{name}[{i}]: {e}")),
                }
            }
            Ok(kept)
        }
        Err(e) => Err(e),
    }
}

/// Column `name`, `None` where the statement does not return it.
pub fn optional_column<'r, T>(row: &'r PgRow, name: &str) -> Result<Option<T>, sqlx::Error>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    match row.try_get::<Option<T>, _>(name) {
        Err(sqlx::Error::ColumnNotFound(_)) => Ok(None),
        other => other,
    }
}

/// `raw` as JSON, each value that cannot be read (a number out of a float's range) as its text,
/// its place (`path.key[i]`) pushed to `found`.
fn readable(raw: &RawValue, path: &str, found: &mut Vec<String>) -> Value {
    if let Ok(v) = serde_json::from_str::<Value>(raw.get()) {
        return v;
    }
    let text = raw.get().trim_start();
    if text.starts_with('{') {
        // Keys in order, as `serde_json::Map` keeps them.
        type Entries = std::collections::BTreeMap<String, Box<RawValue>>;
        if let Ok(entries) = serde_json::from_str::<Entries>(text) {
            return Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let value = readable(&v, &format!("{path}.{k}"), found);
                        (k, value)
                    })
                    .collect(),
            );
        }
    } else if text.starts_with('[') {
        if let Ok(items) = serde_json::from_str::<Vec<Box<RawValue>>>(text) {
            return Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| readable(v, &format!("{path}[{i}]"), found))
                    .collect(),
            );
        }
    }
    found.push(path.to_string());
    Value::String(raw.get().trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Value, Vec<String>) {
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        let mut found = Vec::new();
        (readable(&raw, "args", &mut found), found)
    }

    #[test]
    fn a_number_no_float_holds_is_kept_as_text_and_its_place_named() {
        let big = format!("1{}", "0".repeat(400));
        let (value, found) = read(&format!(
            r#"{{"n": {big}, "team": "lions", "deep": [1, {{"m": -{big}}}]}}"#
        ));
        // Keys in order, as `serde_json::Map` keeps them.
        assert_eq!(found, ["args.deep[1].m", "args.n"]);
        assert_eq!(value["n"], Value::String(big.clone()));
        assert_eq!(value["team"], "lions");
        assert_eq!(value["deep"][0], 1);
        assert_eq!(value["deep"][1]["m"], Value::String(format!("-{big}")));
        let (value, found) = read(r#"{"n": 1e300}"#);
        assert!(found.is_empty());
        assert_eq!(value["n"], 1e300);
    }
}
