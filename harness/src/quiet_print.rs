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
