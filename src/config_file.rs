//! The configuration file (`--config FILE` or `KICKOFF_CONFIG`): every setting that has an
//! environment variable, in TOML, named after its variable without the `KICKOFF_` or `LEPTOS_`
//! prefix and in lower case (`KICKOFF_QUEUES` is `queues`, `DATABASE_URL` is `database_url`,
//! `LEPTOS_SITE_ADDR` is `site_addr`). A flag overrides the environment, which overrides the
//! file, which overrides the default: the file's values become the defaults of the command line
//! (`clap`'s own precedence does the rest), so no variable of the process is written.
//!
//! Refused, naming the key: a key no setting has, a secret written in the file (the API token,
//! the admin password and the secret key are given as file references: `api_token_file`, ...),
//! a value that is not a string, a number, a boolean or a list of those. `kickoff config check`
//! prints the settings in force with where each comes from, secrets masked ([`Loaded::report`]).

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::cli::Cli;

/// The variable that names the configuration file (also `--config`).
pub const CONFIG_VARIABLE: &str = "KICKOFF_CONFIG";

/// Secrets that a file may not hold, only point to (their `_file` settings).
const SECRETS: [&str; 3] = ["api_token", "admin_password", "secret_key"];

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Environment,
    File,
    Default,
    /// No value (an optional setting left out).
    Unset,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Environment => "environment",
            Source::File => "file",
            Source::Default => "default",
            Source::Unset => "unset",
        }
    }
}

/// One setting in force.
#[derive(Debug, Clone)]
pub struct Setting {
    /// Its key in the file: `queues`.
    pub key: String,
    /// Its variable: `KICKOFF_QUEUES`.
    pub variable: String,
    /// Its value as given (lists joined with commas), secrets masked.
    pub shown: String,
    pub source: Source,
}

/// The command line, read with the configuration file (when one is named), and where each
/// setting came from.
#[derive(Debug)]
pub struct Loaded {
    pub cli: Cli,
    /// The file read, if any.
    pub file: Option<OsString>,
    pub settings: Vec<Setting>,
}

#[derive(Debug)]
pub enum LoadError {
    /// The command line itself (including `--help` and `--version`): clap prints and exits.
    Cli(clap::Error),
    /// The configuration file: unreadable, not TOML, an unknown key, a secret, a bad value.
    File(String),
}

/// The file key of a setting's variable.
pub fn key_of(variable: &str) -> String {
    variable
        .strip_prefix("KICKOFF_")
        .or_else(|| variable.strip_prefix("LEPTOS_"))
        .unwrap_or(variable)
        .to_ascii_lowercase()
}

/// Reads the command line of this process (see [`load_from`]).
pub fn load() -> Result<Loaded, LoadError> {
    load_from(std::env::args_os())
}

/// Reads `args` as the command line: once to find the configuration file, then, when one is
/// named, again with the file's values as the settings' defaults.
pub fn load_from<I, T>(args: I) -> Result<Loaded, LoadError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let first = Cli::command()
        .try_get_matches_from(&args)
        .map_err(LoadError::Cli)?;
    let file = first
        .get_one::<std::path::PathBuf>("config_file")
        .map(|p| p.clone().into_os_string());
    let Some(path) = file.clone() else {
        let cli = Cli::from_arg_matches(&first).map_err(LoadError::Cli)?;
        let settings = settings(&first, &HashSet::new());
        return Ok(Loaded {
            cli,
            file: None,
            settings,
        });
    };
    let values = read_file(Path::new(&path))?;
    let mut command = Cli::command();
    let mut from_file = HashSet::new();
    for (id, value) in values {
        // A default is `'static`: the file is read once per process.
        let value: &'static str = Box::leak(value.into_boxed_str());
        command = command.mut_arg(id.as_str(), |a| a.default_value(value));
        from_file.insert(id);
    }
    let matches = command
        .try_get_matches_from(&args)
        .map_err(LoadError::Cli)?;
    let cli = Cli::from_arg_matches(&matches).map_err(LoadError::Cli)?;
    let settings = settings(&matches, &from_file);
    Ok(Loaded {
        cli,
        file: Some(path),
        settings,
    })
}

/// The settings of `path` as (argument id, value) pairs, each key checked.
fn read_file(path: &Path) -> Result<Vec<(String, String)>, LoadError> {
    let fail = |m: String| LoadError::File(format!("{}: {m}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| fail(format!("not TOML: {}", e.message())))?;
    let command = Cli::command();
    let mut out = Vec::new();
    for (key, value) in &table {
        if SECRETS.contains(&key.as_str()) {
            return Err(fail(format!(
                "`{key}` is a secret: name a file that holds it with `{key}_file` instead"
            )));
        }
        let arg = command.get_arguments().find(|a| {
            a.get_env()
                .and_then(|v| v.to_str())
                .is_some_and(|v| v != CONFIG_VARIABLE && key_of(v) == *key)
        });
        let Some(arg) = arg else {
            let mut known: Vec<String> = command
                .get_arguments()
                .filter_map(|a| a.get_env()?.to_str().map(key_of))
                .filter(|k| k != "config")
                .collect();
            known.sort();
            return Err(fail(format!(
                "unknown key `{key}` (the keys: {})",
                known.join(", ")
            )));
        };
        let text = value_text(value).map_err(|m| fail(format!("`{key}`: {m}")))?;
        out.push((arg.get_id().to_string(), text));
    }
    Ok(out)
}

/// A value as its variable would hold it: a list joined with commas.
fn value_text(value: &toml::Value) -> Result<String, String> {
    let scalar = |v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        _ => Err("expected a string, a number, a boolean or a list of them".to_string()),
    };
    match value {
        toml::Value::Array(items) => Ok(items
            .iter()
            .map(scalar)
            .collect::<Result<Vec<_>, _>>()?
            .join(",")),
        v => scalar(v),
    }
}

/// Every setting that has a variable, as `matches` holds it.
fn settings(matches: &ArgMatches, from_file: &HashSet<String>) -> Vec<Setting> {
    let command = Cli::command();
    let mut out: Vec<Setting> = command
        .get_arguments()
        .filter_map(|arg| {
            let variable = arg.get_env()?.to_str()?.to_string();
            let id = arg.get_id().as_str();
            let raw: Vec<String> = matches
                .get_raw(id)
                .map(|vs| vs.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let source = match matches.value_source(id) {
                Some(ValueSource::CommandLine) => Source::Flag,
                Some(ValueSource::EnvVariable) => Source::Environment,
                Some(ValueSource::DefaultValue) if from_file.contains(id) => Source::File,
                Some(_) => Source::Default,
                None => Source::Unset,
            };
            Some(Setting {
                key: key_of(&variable),
                shown: masked(&variable, &raw.join(",")),
                variable,
                source,
            })
        })
        .collect();
    // The secrets themselves are read from the environment only.
    for key in SECRETS {
        let variable = format!("KICKOFF_{}", key.to_ascii_uppercase());
        let set = std::env::var_os(&variable).is_some();
        out.push(Setting {
            key: key.to_string(),
            shown: if set {
                "(set, hidden)".into()
            } else {
                String::new()
            },
            variable,
            source: if set {
                Source::Environment
            } else {
                Source::Unset
            },
        });
    }
    out
}

/// `value` with any password a URL holds (in its user info, or as a `password` or
/// `sslpassword` parameter) replaced by `***`. A URL that does not parse, or whose user info
/// does not read as one, is not shown at all: a password with an unescaped `#` or `/` is what
/// makes it so.
fn masked(variable: &str, value: &str) -> String {
    if !variable.ends_with("_URL") || value.is_empty() {
        return value.to_string();
    }
    let hidden = || "(set, not shown: not a URL that can be masked)".to_string();
    let Ok(mut url) = reqwest::Url::parse(value) else {
        return hidden();
    };
    // A `user:...@` written where the parser found no password (it read the `@` as part of the
    // path, say): the text before the `@` may be one.
    let written_password = value
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .is_some_and(|(info, _)| info.contains(':'));
    if written_password && url.password().is_none() {
        return hidden();
    }
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    let secret = |k: &str| matches!(k, "password" | "sslpassword");
    if url.query_pairs().any(|(k, _)| secret(&k)) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if secret(&k) {
                    "***".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

impl Loaded {
    /// What `kickoff config check` prints: the file read, then one line per setting (its key,
    /// its variable, where it came from, its value).
    pub fn report(&self) -> String {
        let mut t = match &self.file {
            Some(f) => format!("configuration file: {}\n", Path::new(f).display()),
            None => format!("configuration file: none (--config or {CONFIG_VARIABLE})\n"),
        };
        let width = self.settings.iter().map(|s| s.key.len()).max().unwrap_or(0);
        let vwidth = self
            .settings
            .iter()
            .map(|s| s.variable.len())
            .max()
            .unwrap_or(0);
        for s in &self.settings {
            t.push_str(&format!(
                "{:width$}  {:vwidth$}  {:11}  {}\n",
                s.key,
                s.variable,
                s.source.as_str(),
                s.shown
            ));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_variables_without_their_prefix_in_lower_case() {
        assert_eq!(key_of("KICKOFF_QUEUES"), "queues");
        assert_eq!(key_of("DATABASE_URL"), "database_url");
        assert_eq!(key_of("LEPTOS_SITE_ADDR"), "site_addr");
    }

    #[test]
    fn values_are_written_as_their_variables_hold_them() {
        let v: toml::Table =
            "a = 'x'\nb = 5\nc = true\nd = ['default:10', 'hooks:2,rate=5/s']\ne = { f = 1 }"
                .parse()
                .unwrap();
        assert_eq!(value_text(&v["a"]).unwrap(), "x");
        assert_eq!(value_text(&v["b"]).unwrap(), "5");
        assert_eq!(value_text(&v["c"]).unwrap(), "true");
        assert_eq!(value_text(&v["d"]).unwrap(), "default:10,hooks:2,rate=5/s");
        assert!(value_text(&v["e"]).is_err());
    }

    #[test]
    fn a_database_urls_password_is_masked() {
        assert_eq!(
            masked("DATABASE_URL", "postgres://kick:s3cret@db:5432/k"),
            "postgres://kick:***@db:5432/k"
        );
        assert_eq!(masked("KICKOFF_QUEUES", "a:s3cret@b"), "a:s3cret@b");
        assert_eq!(
            masked(
                "DATABASE_URL",
                "postgres://kick@db/k?password=s3cret&sslmode=require"
            ),
            "postgres://kick@db/k?password=***&sslmode=require"
        );
        // Unparseable, or parsed as something else than a password: not shown at all.
        for url in [
            "postgres://u:pa#ss@db/k",
            "postgres://u:12/34@db/k",
            "postgres://u:s3cr et@db",
        ] {
            let shown = masked("DATABASE_URL", url);
            assert!(
                !shown.contains("ss@") && !shown.contains("34") && !shown.contains("s3cr"),
                "{url}: {shown}"
            );
        }
        assert_eq!(masked("DATABASE_URL", "postgres://db/k"), "postgres://db/k");
    }
}
