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
//! - [`cmd`]: the `reqkey` command line, one file per command; the binary's
//!   `main` only parses and dispatches.

// First: its print macros shadow std's in every module below.
#[macro_use]
mod quiet_print;

pub mod bench;
pub mod cmd;
pub mod proxy;
pub mod report;
pub mod run;
pub mod secrets;
pub mod targets;

// The pure crates under their room names, for the tests and for embedders
// that reach the whole kit through one dependency.
pub use reqkey_check as check;
pub use reqkey_scenario as scenario;
