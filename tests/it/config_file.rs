//! The configuration file (`--config FILE` or `KICKOFF_CONFIG`), read by the real binary: its
//! settings in force under the environment and the flags, shown by `kickoff config check` with
//! where each came from and secrets masked, and a bad file refused with its key named.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::test_db;

/// Runs `kickoff` with `file` as its configuration file (`{dir}` in it replaced by a directory
/// of the test's own, which holds `token`, a secret file), in an environment holding only `env`;
/// the file is named by `--config`, or by `KICKOFF_CONFIG` when `by_variable`.
fn kickoff(file: &str, by_variable: bool, args: &[&str], env: &[(&str, &str)]) -> Output {
    let dir = Path::new("/tmp").join(format!("kickoff-config-test-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "a-token-from-a-file\n").unwrap();
    let path = dir.join("kickoff.toml");
    std::fs::write(&path, file.replace("{dir}", &dir.display().to_string())).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kickoff"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .env("KICKOFF_DATA_DIR", &dir);
    if by_variable {
        command.env("KICKOFF_CONFIG", &path);
    } else {
        command.arg("--config").arg(&path);
    }
    command.args(args).envs(env.iter().copied());
    let out = command.output().expect("run kickoff");
    let _ = std::fs::remove_dir_all(&dir);
    out
}

fn printed(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The words of the report's line for `key`: key, variable, source, value.
fn setting(report: &str, key: &str) -> Vec<String> {
    let line = report
        .lines()
        .find(|l| l.split_whitespace().next() == Some(key))
        .unwrap_or_else(|| panic!("no line for {key} in:\n{report}"));
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn a_files_settings_are_in_force_under_the_environment_and_the_flags() {
    let file = r#"
        database_url = "postgres://kick:s3cret@db.example:5432/kickoff"
        queues = ["default:5", "webhooks:10,rate=100/s,per=host"]
        retention_hours = 48
        lease_ms = 9000
        secure_cookies = true
        api_token_file = "{dir}/token"
    "#;
    let out = kickoff(
        file,
        false,
        &["--lease-ms", "7000", "config", "check"],
        &[("KICKOFF_RETENTION_HOURS", "12")],
    );
    let report = printed(&out);
    assert!(out.status.success(), "{report}");
    assert!(!report.contains("s3cret"), "a password shown:\n{report}");
    let expect = [
        (
            "database_url",
            "file",
            "postgres://kick:***@db.example:5432/kickoff",
        ),
        (
            "queues",
            "file",
            "default:5,webhooks:10,rate=100/s,per=host",
        ),
        ("retention_hours", "environment", "12"),
        ("lease_ms", "flag", "7000"),
        ("secure_cookies", "file", "true"),
        ("log_format", "default", "text"),
    ];
    for (key, source, value) in expect {
        let words = setting(&report, key);
        assert_eq!(
            (words[2].as_str(), words[3].as_str()),
            (source, value),
            "{key}"
        );
    }
    assert_eq!(setting(&report, "api_token_file")[2], "file");
    assert_eq!(setting(&report, "node_id")[2], "unset");

    // Named by the variable instead of the flag: the same file.
    let out = kickoff(file, true, &["config", "check"], &[]);
    let report = printed(&out);
    assert!(out.status.success(), "{report}");
    assert_eq!(setting(&report, "lease_ms")[3], "9000");
}

#[test]
fn a_bad_file_is_refused_with_its_key_named() {
    let refused = [
        ("queues = ['default:5']\nqueue = 'x'", "unknown key `queue`"),
        ("api_token = 'x'", "`api_token` is a secret"),
        ("admin_password = 'x'", "`admin_password_file`"),
        ("queues = { default = 5 }", "`queues`: expected a string"),
        ("queues = ", "not TOML"),
        ("config = 'other.toml'", "unknown key `config`"),
        // The values themselves are checked as the environment's would be.
        (
            "queues = ['default:x']",
            "KICKOFF_QUEUES: `default:x` is not name:concurrency",
        ),
        ("lease_ms = 'soon'", "soon"),
    ];
    for (file, said) in refused {
        let out = kickoff(file, false, &["config", "check"], &[]);
        let text = printed(&out);
        assert!(!out.status.success(), "{file}: accepted:\n{text}");
        assert!(text.contains(said), "{file}: expected `{said}` in:\n{text}");
    }
    // Every command reads it, before anything starts.
    let out = kickoff("no_such_setting = 1", false, &["migrate"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", printed(&out));
    let missing = kickoff("", false, &["config", "check"], &[]);
    assert!(missing.status.success(), "{}", printed(&missing));
}

/// The file's database is the one a command uses, unless the environment names another.
#[tokio::test]
async fn the_files_database_is_used_unless_the_environment_names_another() {
    let db = test_db().await;
    let absent = db.url.replace(&db.name, "kickoff_no_such_database");
    let file = format!("database_url = \"{absent}\"");
    let out = kickoff(&file, false, &["migrate"], &[]);
    assert!(!out.status.success(), "{}", printed(&out));
    assert!(
        printed(&out).contains("kickoff_no_such_database"),
        "{}",
        printed(&out)
    );
    let out = kickoff(&file, false, &["migrate"], &[("DATABASE_URL", &db.url)]);
    assert!(out.status.success(), "{}", printed(&out));
}
