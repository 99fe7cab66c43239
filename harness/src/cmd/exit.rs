//! How a command ends: the exit codes every command documents, a harness
//! error (printed inert, exit 2), and the seed a run takes when it was
//! given none.

use std::process::ExitCode;

use crate::targets::spec::TARGET_HELP;

pub const EXIT_CODES: &str = "\
Exit codes:
  0  every scenario passed (scenarios in --expected-failures may fail)
  1  a scenario failed: the target does not conform; or a scenario listed in
     --expected-failures passed (take it off the list)
  2  the harness could not judge: bad YAML, a scenario file over 1 MiB or 64
     levels deep, bad arguments, a target unreachable, hung, closing
     connections, answering over --max-response-bytes, not HTTP or speaking
     the other protocol, 3 silent scenarios in a row (the run stops early), an
     --expected-failures id not in the suite, a report not written, a --start
     whose faults would not reach the target (reason `wiring`)
130  interrupted (SIGINT, SIGTERM): what --start started is stopped, and the
     reports keep the scenarios that finished (a proven failure included)
     and say `interrupted` and 130";

pub fn target_help() -> String {
    format!("Targets (--target):\n{}\n\n{EXIT_CODES}", TARGET_HELP)
}

/// A harness error: printed, exit 2.
/// The message is shown as one inert line: it may quote what a target sent.
pub fn harness_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!(
        "reqkey: error: {}",
        crate::report::inert::terminal(&message.to_string())
    );
    ExitCode::from(2)
}

/// A seed from the clock, for runs that did not ask for one.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(40)
}
