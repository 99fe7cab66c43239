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
//! - [`target`]: the only way to reach an implementation; [`agent_target`]
//!   the `reqkey-agent/1` ones (any server over HTTP, the reference one in
//!   process).
//! - [`agent_steps`]: agent-level steps (raw HTTP, SSE, waiting for a run).
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
//! - [`agent_target`], [`agent_steps`]: agent targets and HTTP steps.
//! - [`serve_cmd`]: `reqkey serve store|agent` ([`serve_agent_cmd`] for the agent).

pub mod agent_steps;
pub mod agent_target;
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
pub mod serve_agent_cmd;
pub mod serve_cmd;
pub mod suite;
pub mod target;
pub mod vars;
