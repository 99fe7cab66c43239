//! The spec's functions: every rule of `spec/SPEC.md` as a pure function or
//! a plain type, once. Stores, executors and checks call these; nothing
//! restates them. No IO, no async.

pub mod agent;
pub mod agent_blame;
pub mod agent_exchange;
pub mod clauses;
pub mod digest;
pub mod error;
pub mod idem_batch;
pub mod idem_blame;
pub mod idem_model;
pub mod idem_place;
pub mod idem_profile;
pub mod idem_timing;
pub mod idem_why;
pub mod json_text;
pub mod key;
pub mod linspec;
pub mod plan;
pub mod rules;
pub mod seq;
pub mod types;
pub mod vocab;
