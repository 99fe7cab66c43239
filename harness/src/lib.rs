//! # reqkey-harness: scenarios, targets, checks, reports
//!
//! Data flows one way, and each folder holds one step of it:
//!
//! ```text
//! scenarios/*.yaml -> scenario/ (load + validate, file:line:col errors)
//!                  -> run/      (fresh $variables per trial, parallel groups
//!                                behind a barrier, repeat) on a target/
//!                  -> check/    (linearizability of recorded histories)
//!                  -> events -> report/ (terminal, JUnit, JSON, certificate)
//! ```
//!
//! - [`scenario`]: the YAML format, its loader and JSON Schema, `$variables`
//!   and expectation patterns. Pure data: nothing there talks to a network.
//! - [`run`]: the runner, agent-level steps, events, recorded instants, the
//!   certification suite and `--expected-failures`.
//! - [`target`]: the only door to an implementation, one file per kind of
//!   target behind the one `Target` seam; `target::spec` parses `--target`.
//! - [`check`]: the linearizability checker and the model-based fuzzer.
//! - [`report`]: reporters subscribed to the runner's events.
//! - [`cmd`]: the `reqkey` command line, one file per command; the binary's
//!   `main` only parses and dispatches.

pub mod check;
pub mod cmd;
pub mod proxy;
pub mod report;
pub mod run;
pub mod scenario;
pub mod target;
