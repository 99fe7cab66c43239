//! What SIGTERM or SIGINT does to a run: stop what it started, write the
//! reports with the reason, exit 130, without unwinding the runtime.
//!
//! Why not simply drop the command's future: the run's scenarios hold the
//! target (and with it the started processes) in tasks of the runtime,
//! which are dropped only while the runtime shuts down; a drop then could
//! panic ("A Tokio 1.x context was found, but it is being shutdown") before
//! the processes were stopped, and no report said why the run ended. So
//! the signal path does its work synchronously and in order: every
//! process carrying the run's marker is stopped (SIGTERM, a grace, then
//! SIGKILL; [`crate::targets::reap`]), then every other descendant of the
//! judge (those that shed the marker), the reports the command asked for
//! are written as a run with no verdict (reason `interrupted`), and the
//! process exits at once.

use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::targets::reap::{kill_marked, marked, signal_marked, Scope};

/// How long started processes get to exit on SIGTERM before SIGKILL.
const STOP_GRACE_MS: u64 = 2_000;

/// What runs after the processes are stopped, given the signal's name.
pub type Hook = Box<dyn FnOnce(&str) + Send>;

static ON_INTERRUPT: Mutex<Option<Hook>> = Mutex::new(None);

/// Sets what a signal does after the processes are stopped (write the
/// reports, `cmd::interrupt_reports`); the last set wins.
pub fn on_interrupt(hook: Hook) {
    *ON_INTERRUPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hook);
}

/// Stops every process the run started, writes the reports (if a command
/// asked for them), and exits 130.
pub fn interrupted(signal: &str) -> ! {
    eprintln!("reqkey: interrupted by {signal}; stopping what it started");
    signal_marked(Scope::All, Signal::SIGCONT);
    signal_marked(Scope::All, Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
    while !marked(Scope::All).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if !kill_marked(Scope::All, STOP_GRACE_MS)
        || !crate::targets::reap::stop_descendants(STOP_GRACE_MS)
    {
        eprintln!("reqkey: error: some started processes did not die on SIGKILL");
    }
    let hook = ON_INTERRUPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(hook) = hook {
        hook(signal);
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(130)
}
