//! # reqkey-harness: scenarios, targets, checks, reports
//!
//! (module map filled in as modules land)

pub mod lin;
pub mod target;
