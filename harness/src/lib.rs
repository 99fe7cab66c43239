//! # reqkey-harness: running scenarios on targets, reporting; the `reqkey` CLI
//!
//! The workspace is in crates along the flow of data, each with one job:
//!
//! ```text
//! scenarios/*.yaml -> reqkey-scenario (load + validate once, typed steps,
//!                                      file:line:col errors; pure)
//!                  -> run/      (fresh $variables per trial, parallel groups
//!                                behind a barrier, repeat) on a targets/
//!                  -> reqkey-check (linearizability, client verdict,
//!                                   coverage; pure)
//!                  -> events -> report/ (terminal, JUnit, JSON, certificate, HTML)
//! ```
//!
//! This crate holds the parts that do IO:
//!
//! - [`run`]: the runner, agent-level steps, events, recorded instants, the
//!   certification suite, `--expected-failures`, and the two stages that
//!   generate programs (fuzz, mixed histories).
//! - [`targets`]: the only door to an implementation, one file per kind of
//!   target behind the one `Target` seam; `targets::spec` parses
//!   `--target` into a typed spec, once.
//! - [`report`]: reporters subscribed to the runner's events.
//! - [`proxy`]: `reqkey proxy`'s listener (its plan, trace and verdict are
//!   pure and live in `reqkey-check`).
//! - [`bench`]: the benchmarks (`reqkey bench`, `cargo bench`), a room of
//!   their own.
//! - [`secrets`]: the one redacted display of targets and command lines,
//!   and the scrub every output goes through.
//! - [`memory`]: the process's resident memory and the ceiling every
//!   reader of an input holds it to (`--max-memory-bytes`).
//! - [`cmd`]: the `reqkey` command line, one file per command; the binary's
//!   `main` only parses and dispatches.

// First: its print macros shadow std's in every module below.
#[macro_use]
mod quiet_print {
    //! `println!`/`print!`/`eprintln!` for the whole crate, quiet on a closed pipe.
    //!
    //! Why: std's macros panic when the reader has gone away (`reqkey targets |
    //! head -1` ended in a panic message and exit 101, issue 41). These
    //! macros, defined before every other module of the crate, shadow std's
    //! in all of them: a write to a closed pipe is dropped silently, the
    //! command goes on to its end and exits with its own code (so `reqkey run
    //! ... | head` still exits 1 when a scenario failed: closing the pipe
    //! neither hides a verdict nor invents one). Any other write error is
    //! reported once on stderr instead of a panic.

    use std::io::{ErrorKind, Write};
    use std::sync::atomic::{AtomicBool, Ordering};

    static STDOUT_ERROR_REPORTED: AtomicBool = AtomicBool::new(false);

    /// Writes formatted text to stdout (`to_stderr` false) or stderr, dropping
    /// it when the reader went away.
    pub fn write_quietly(to_stderr: bool, args: std::fmt::Arguments<'_>) {
        let result = if to_stderr {
            std::io::stderr().lock().write_fmt(args)
        } else {
            std::io::stdout().lock().write_fmt(args)
        };
        match result {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
            Err(e) => {
                if !to_stderr && !STDOUT_ERROR_REPORTED.swap(true, Ordering::Relaxed) {
                    let _ = writeln!(std::io::stderr(), "reqkey: cannot write to stdout: {e}");
                }
            }
        }
    }

    macro_rules! println {
        () => { $crate::quiet_print::write_quietly(false, format_args!("\n")) };
        ($($arg:tt)*) => {
            $crate::quiet_print::write_quietly(false, format_args!("{}\n", format_args!($($arg)*)))
        };
    }

    macro_rules! print {
        ($($arg:tt)*) => { $crate::quiet_print::write_quietly(false, format_args!($($arg)*)) };
    }

    macro_rules! eprintln {
        () => { $crate::quiet_print::write_quietly(true, format_args!("\n")) };
        ($($arg:tt)*) => {
            $crate::quiet_print::write_quietly(true, format_args!("{}\n", format_args!($($arg)*)))
        };
    }
}

pub mod bench;
pub mod cmd;
pub mod memory;
pub mod proxy;
pub mod report;
pub mod run;
pub mod secrets;
pub mod targets;

// The pure crates under their room names, for the tests and for embedders
// that reach the whole kit through one dependency.
pub use reqkey_check as check;
pub use reqkey_scenario as scenario;
