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
//! - [`report`]: reporters subscribed to those events.
//! - [`cli`]: the `reqkey` command line (the binary is a thin `main`).

pub mod cli;
pub mod event;
pub mod pattern;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod target;
pub mod vars;
