//! The async runtime a command runs on, and the one that stops cleanly
//! on Ctrl-C or SIGTERM for commands that own processes.

use std::process::ExitCode;

use crate::cmd::exit::harness_error;

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

pub fn with_runtime<F: std::future::Future<Output = ExitCode>>(f: impl FnOnce() -> F) -> ExitCode {
    match runtime() {
        Ok(rt) => rt.block_on(f()),
        Err(e) => harness_error(format!("cannot start the runtime: {e}")),
    }
}

/// [`with_runtime`] for a command that may own processes (`--start`):
/// Ctrl-C or SIGTERM drops the command's future, so whatever it started is
/// stopped before the process exits (exit 130).
pub fn with_runtime_interruptible<F: std::future::Future<Output = ExitCode>>(
    f: impl FnOnce() -> F,
) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    match runtime() {
        Ok(rt) => rt.block_on(async {
            // Registered before the command starts anything, so that a
            // signal can never kill the harness and leave a process behind.
            let (Ok(mut interrupt), Ok(mut terminate)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return harness_error("cannot install the signal handlers");
            };
            tokio::select! {
                code = f() => code,
                _ = interrupt.recv() => crate::cmd::interrupt::interrupted("SIGINT"),
                _ = terminate.recv() => crate::cmd::interrupt::interrupted("SIGTERM"),
            }
        }),
        Err(e) => harness_error(format!("cannot start the runtime: {e}")),
    }
}
