//! docs/ARCHITECTURE.md and CONTRIBUTING.md held to the tree: every path they name exists, and
//! the floors they state hold (every module of `src/lib.rs` on a floor, none importing from a
//! floor above its own). Docs that drifted fail here, not in a newcomer's first minute.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every file and folder of the tree (folders end with `/`), relative to the root; build output,
/// packages and git's own files left out.
fn tree() -> BTreeSet<String> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeSet<String>) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(name.as_str(), "target" | "node_modules" | ".git") {
                continue;
            }
            let path = format!("{rel}{name}");
            if entry.file_type().unwrap().is_dir() {
                out.insert(format!("{path}/"));
                walk(&entry.path(), &format!("{path}/"), out);
            } else {
                out.insert(path);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(&root(), "", &mut out);
    out
}

/// Names the docs put in backticks that look like paths but are none of this tree's, each for a
/// reason: a rate's grammar, the offline query data of sqlx projects (Kickoff keeps none), the
/// files a history run writes.
const NOT_PATHS: [&str; 4] = ["N/period", ".sqlx/", "history.json", "snapshot.json"];

/// Whether `token` names a file or folder (an extension of the tree's, or a slash in a word).
fn path_like(token: &str) -> bool {
    const EXTENSIONS: [&str; 11] = [
        ".rs", ".md", ".sql", ".mjs", ".js", ".sh", ".toml", ".py", ".json", ".yml", ".css",
    ];
    let word = !token.is_empty()
        && token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
        && !token.starts_with('/');
    word && (EXTENSIONS.iter().any(|e| token.ends_with(e)) || token.contains('/'))
}

/// The paths a document names: in backticks (outside code blocks) and, in its code blocks, each
/// line's first word and every word ending in `.rs`.
fn named_paths(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            let words: Vec<&str> = line.split_whitespace().collect();
            let first = words
                .first()
                .filter(|w| !line.starts_with(' ') && path_like(w));
            out.extend(first.map(|w| w.to_string()));
            out.extend(
                words
                    .iter()
                    .map(|w| w.trim_matches(|c: char| "(),".contains(c)))
                    .filter(|w| w.ends_with(".rs") && path_like(w))
                    .map(String::from),
            );
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let Some(token) = parts.next() {
            if path_like(token) {
                out.push(token.to_string());
            }
            parts.next();
        }
    }
    out
}

/// Whether the tree holds `token`: the path itself, or a path ending with it (the docs name a
/// file by its place in its folder: `store/errors.rs`).
fn in_tree(tree: &BTreeSet<String>, token: &str) -> bool {
    tree.iter()
        .any(|p| p == token || p.ends_with(&format!("/{token}")))
}

#[test]
fn every_path_the_architecture_and_contributing_docs_name_exists() {
    let tree = tree();
    let mut missing = Vec::new();
    for doc in ["docs/ARCHITECTURE.md", "CONTRIBUTING.md"] {
        for token in named_paths(&read(doc)) {
            if !NOT_PATHS.contains(&token.as_str()) && !in_tree(&tree, &token) {
                missing.push(format!("{doc}: `{token}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "named but not in the tree: {missing:#?}"
    );
}

/// The text of docs/ARCHITECTURE.md under the heading `## {heading}`, up to the next one.
fn architecture_section(heading: &str) -> String {
    let doc = read("docs/ARCHITECTURE.md");
    let section = doc
        .split(&format!("## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no section `{heading}`"));
    section.split("\n## ").next().unwrap().to_string()
}

#[test]
fn the_engines_files_table_names_files_of_the_engine() {
    let section = architecture_section("The engine's files");
    let mut missing = Vec::new();
    let mut rows = 0;
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap().trim().trim_matches('`');
        rows += 1;
        if !root().join("src/engine").join(first).exists() {
            missing.push(first.to_string());
        }
    }
    assert!(rows > 20, "the table was not read: {rows} rows");
    assert!(missing.is_empty(), "not in src/engine/: {missing:?}");
}

/// The floors table of docs/ARCHITECTURE.md: each top-level module of the crate (`main` for the
/// binary) and its floor.
fn floors() -> BTreeMap<String, u32> {
    let section = architecture_section("Floors: what may import what");
    let mut floors = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let floor: String = cells[0]
            .trim_start_matches("| ")
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let Ok(floor) = floor.parse::<u32>() else {
            continue;
        };
        for token in cells[1].split('`').skip(1).step_by(2) {
            let Some(module) = token.strip_prefix("src/") else {
                continue;
            };
            let module = module.trim_end_matches('/').trim_end_matches(".rs");
            let earlier = floors.insert(module.to_string(), floor);
            assert!(earlier.is_none_or(|e| e == floor), "{module} on two floors");
        }
    }
    floors
}

/// The crate's top-level modules (`pub mod x;` in `src/lib.rs`).
fn modules() -> Vec<String> {
    read("src/lib.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect()
}

/// A file's code without its comments (`//` to the end of a line), on one line.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    for line in text.lines() {
        let line = match line.find("//") {
            // A `//` inside a string (a URL) is kept: only one that opens the line or follows a
            // space starts a comment here, which is how this tree writes them.
            Some(0) => "",
            Some(_) => line.split(" //").next().unwrap(),
            None => line,
        };
        code.push_str(line);
        code.push(' ');
    }
    code
}

/// The names a path `prefix` leads to in `code`: `prefix` + `x::…` gives `x`, and
/// `prefix` + `{x, y::…, z}` gives `x`, `y` and `z`.
fn names_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for piece in code.split(prefix).skip(1) {
        if let Some(group) = piece.strip_prefix('{') {
            // The group's top-level items, nested braces skipped.
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            out.insert(ident(&item));
        } else {
            out.insert(ident(piece));
        }
    }
    out.remove("");
    out
}

/// Every `crate::x` (in the binary: `kickoff::x`) a file's code names, comments left out.
fn imported_modules(text: &str, prefix: &str) -> BTreeSet<String> {
    names_after(&code_of(text), prefix)
}

#[test]
fn every_module_stands_on_a_floor_and_imports_nothing_from_a_floor_above() {
    let floors = floors();
    let unplaced: Vec<String> = modules()
        .into_iter()
        .chain(["main".to_string()])
        .filter(|m| !floors.contains_key(m))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules on no floor of docs/ARCHITECTURE.md: {unplaced:?}"
    );
    let mut upward = Vec::new();
    let mut files = 0;
    for path in tree() {
        let Some(rel) = path.strip_prefix("src/") else {
            continue;
        };
        if !rel.ends_with(".rs") || rel == "lib.rs" {
            continue;
        }
        files += 1;
        let module = rel.split('/').next().unwrap().trim_end_matches(".rs");
        let floor = floors[module];
        let prefix = if module == "main" {
            "kickoff::"
        } else {
            "crate::"
        };
        for used in imported_modules(&read(&path), prefix) {
            match floors.get(&used) {
                Some(&above) if above > floor => upward.push(format!(
                    "{path} (floor {floor}) uses {used} (floor {above})"
                )),
                _ => {}
            }
        }
    }
    assert!(files > 100, "the source files were not read: {files}");
    assert!(upward.is_empty(), "imports that reach up: {upward:#?}");
}

#[test]
fn the_checks_above_see_what_they_look_for() {
    // A path in backticks and in a code block is read; a word that is no path is not.
    let doc = "A `src/engine/` and `job_claim` and `N/period`.\n```\nsrc/x/  a (y.rs)\n  z\n```\n";
    assert_eq!(
        named_paths(doc),
        ["src/engine/", "N/period", "src/x/", "y.rs"]
    );
    // An import in code counts, grouped or not; one in a comment does not.
    let code = "use crate::engine::Db;\n// crate::http is named here\nlet x = crate::rate::parse(); // crate::cli\nuse crate::{db::{a, b}, questions,\n    workers::x};\n";
    let names = ["db", "engine", "questions", "rate", "workers"].map(String::from);
    assert_eq!(imported_modules(code, "crate::"), BTreeSet::from(names));
    assert!(names_after(
        &code_of("use crate::engine::{job, store::jobs};"),
        "engine::"
    )
    .contains("store"));
}

#[test]
fn nothing_outside_the_engine_reaches_its_store() {
    // docs/ARCHITECTURE.md: the server goes through the engine's `Client` and the types it
    // re-exports; the benches alone time the store's statements directly.
    let mut reaching = Vec::new();
    for path in tree() {
        let outside = path.starts_with("src/")
            && path.ends_with(".rs")
            && !path.starts_with("src/engine/")
            && !path.starts_with("src/bench");
        if !outside {
            continue;
        }
        let code = code_of(&read(&path));
        let uses = names_after(&code, "engine::").contains("store");
        if uses {
            reaching.push(path);
        }
    }
    assert!(
        reaching.is_empty(),
        "files that reach the engine's store: {reaching:?}"
    );
}

/// Whether every CHECK of `table` naming `column` admits `value` (on a row of that column alone,
/// its attempt 0: the CHECKs are evaluated, nothing is written).
async fn checks_admit(pool: &kickoff::engine::Db, table: &str, column: &str, value: i32) -> bool {
    let checks: Vec<String> = sqlx::query_scalar(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
         JOIN pg_class t ON t.oid = c.conrelid
         WHERE t.relname = $1 AND c.contype = 'c'
           AND pg_get_constraintdef(c.oid) LIKE '%' || $2 || '%'",
    )
    .bind(table)
    .bind(column)
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(!checks.is_empty(), "{table} has no CHECK on {column}");
    let mut admits = true;
    for check in checks {
        let expr = check.trim_start_matches("CHECK ");
        let sql = format!("SELECT {expr} FROM (SELECT $1::int AS {column}, 0 AS attempt) row");
        let holds: Option<bool> = sqlx::query_scalar(&sql)
            .bind(value)
            .fetch_one(pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        admits &= holds != Some(false);
    }
    admits
}

#[tokio::test]
async fn the_tables_checks_hold_the_engines_ranges_of_priority_and_max_attempts() {
    use kickoff::engine::job::{MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN, PRIORITY_MAX, PRIORITY_MIN};
    let db = crate::common::test_db().await;
    // The tables' CHECKs are the one statement of these ranges the engine's constants cannot
    // make: each bound admitted, one past it refused, in the jobs and the schedules tables.
    let ranges = [
        ("priority", i32::from(PRIORITY_MIN), i32::from(PRIORITY_MAX)),
        ("max_attempts", MAX_ATTEMPTS_MIN, MAX_ATTEMPTS_MAX),
    ];
    for table in ["jobs", "schedules"] {
        for (column, lo, hi) in ranges {
            let pool = &db.pool;
            assert!(
                checks_admit(pool, table, column, lo).await,
                "{table}.{column} {lo}"
            );
            assert!(
                checks_admit(pool, table, column, hi).await,
                "{table}.{column} {hi}"
            );
            assert!(
                !checks_admit(pool, table, column, lo - 1).await,
                "{table}.{column}"
            );
            assert!(
                !checks_admit(pool, table, column, hi + 1).await,
                "{table}.{column}"
            );
        }
    }
}

/// The tooling that is not the product (the chaos suite, the benches, the demo) is kept apart:
/// modules of their own on the top floor, reached from the command line alone (`main.rs`,
/// `src/cli/`), never from the server's code. (One binary on purpose: a second would link the
/// engine again on every change, docs/ARCHITECTURE.md.)
#[test]
fn the_tooling_is_reached_from_the_command_line_alone() {
    let tooling = ["chaos", "bench", "demo"];
    let mut reached = Vec::new();
    for path in tree() {
        let Some(rel) = path.strip_prefix("src/") else {
            continue;
        };
        let module = rel.split('/').next().unwrap().trim_end_matches(".rs");
        if !rel.ends_with(".rs")
            || rel == "lib.rs"
            || module == "main"
            || module == "cli"
            || tooling.contains(&module)
        {
            continue;
        }
        for used in imported_modules(&read(&path), "crate::") {
            if tooling.contains(&used.as_str()) {
                reached.push(format!("{path} uses {used}"));
            }
        }
    }
    assert!(
        reached.is_empty(),
        "the server's code reaches the tooling: {reached:#?}"
    );
}
