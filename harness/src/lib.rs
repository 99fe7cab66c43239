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
//! - [`report`]: reporters subscribed to those events.
//! - [`cli`]: the `reqkey` command line (the binary is a thin `main`);
//!   [`serve_agent_cmd`] its `serve agent` command.

pub mod agent_steps;
pub mod agent_target;
pub mod cli;
pub mod event;
pub mod pattern;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod serve_agent_cmd;
pub mod target;
pub mod vars;
