//! # reqkey-harness: scenarios, targets, checks, reports
//!
//! Data flows one way:
//!
//! ```text
//! scenarios/*.yaml -> scenario (load + validate, file:line:col errors)
//!                  -> runner (fresh $variables per trial, parallel groups
//!                     behind a barrier, repeat) on a target
//!                  -> events -> reporters
//! ```
//!
//! - [`scenario`]: the YAML format and its loader.
//! - [`vars`], [`pattern`]: variables and expectation matching.
//! - [`target`]: the only way to reach an implementation.
//! - [`runner`]: executes scenarios, emits [`event::Event`]s.
//! - [`lin`]: linearizability of recorded histories (`linearizable: true`).
//! - [`record`]: recording operations with monotonic instants; random
//!   concurrent workloads.
//! - [`bench`]: the checker and detection benchmarks (`reqkey bench`).
//! - [`report`]: reporters subscribed to those events (terminal, JUnit,
//!   JSON, Markdown certificate).
//! - [`suite`]: the certification suite, its version and digest.
//! - [`expected`]: `--expected-failures` lists.
//! - [`schema`]: the JSON Schema of the scenario format.
//! - [`cli`]: the `reqkey` command line (the binary is a thin `main`).
//! - [`serve_cmd`]: `reqkey serve store`, a reference store over `reqkey-store/1`.

pub mod bench;
pub mod cli;
pub mod event;
pub mod expected;
pub mod fuzz;
pub mod lin;
pub mod pattern;
pub mod record;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod schema;
pub mod serve_cmd;
pub mod suite;
pub mod target;
pub mod vars;
