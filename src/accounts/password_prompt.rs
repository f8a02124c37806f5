//! Reading a new password on the command line (`kickoff user add`): the first line of standard
//! input when it is a pipe or a file, else asked for twice on the terminal without echo.
//!
//! Echo is turned off with `stty`, which every Unix terminal has, rather than with a terminal crate:
//! this is the only place that needs it. Should `stty` fail, the prompt says the typing will show.

use std::io::{self, BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

/// Reads the password of a new account.
pub fn read_new_password() -> io::Result<String> {
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Err(io::Error::other("no password on standard input"));
        }
        return Ok(without_line_end(&line).to_string());
    }
    let first = prompt_hidden("Password: ")?;
    let second = prompt_hidden("Password (again): ")?;
    if first != second {
        return Err(io::Error::other("the two passwords differ"));
    }
    Ok(first)
}

/// Only the line break goes: spaces at either end are part of the password.
fn without_line_end(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

fn prompt_hidden(prompt: &str) -> io::Result<String> {
    let echo_off = EchoOff::new();
    let mut stderr = io::stderr();
    if echo_off.is_none() {
        write!(
            stderr,
            "(echo cannot be turned off: your typing will show) "
        )?;
    }
    write!(stderr, "{prompt}")?;
    stderr.flush()?;
    let mut line = String::new();
    let read = io::stdin().lock().read_line(&mut line);
    drop(echo_off);
    // The Enter the user typed was not echoed either.
    writeln!(stderr)?;
    if read? == 0 {
        return Err(io::Error::other("no password given"));
    }
    Ok(without_line_end(&line).to_string())
}

/// Terminal echo off for as long as it lives. (A Ctrl-C meanwhile ends the process before the
/// echo is back; `stty echo` or `reset` restores it.)
struct EchoOff;

impl EchoOff {
    fn new() -> Option<EchoOff> {
        stty("-echo").then_some(EchoOff)
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        stty("echo");
    }
}

/// Runs `stty <setting>` on the terminal that is standard input.
fn stty(setting: &str) -> bool {
    Command::new("stty")
        .arg(setting)
        .stdin(Stdio::inherit())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
