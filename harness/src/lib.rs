//! # reqkey-harness: scenarios, targets, checks, reports
//!
//! (module map filled in as modules land)

pub mod bench;
pub mod lin;
pub mod record;
pub mod target;
