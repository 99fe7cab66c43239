//! # reqkey-check: the judges, pure
//!
//! Everything here decides from what was recorded; nothing here records.
//! No async, no network, no target: a history, a trace or a scenario set
//! comes in, a verdict with the clause it concerns goes out.
//!
//! - [`answer`]: the universal invariants every agent answer keeps
//!   (error shape, stream shape, no echo of a malformed key), whatever
//!   the scenario is about.
//! - [`lin`]: linearizability of concurrent store histories against the
//!   sequential spec (`reqkey_model::seq::SeqStore`).
//! - [`client`]: the client verdict of `reqkey proxy` (SPEC 9), judged
//!   from a [`trace`] recorded under a fault [`plan`].
//! - [`history`]: the file forms of a history (reqkey's JSON, Jepsen's
//!   events), read and written, for `reqkey check history` and
//!   `--export-histories`.
//! - [`coverage`]: which clause of the spec has a scenario that can fail
//!   on it, per level.
//!
//! Checks name what the spec requires; they never hold a target to the
//! reference's own choices.

pub mod answer;
pub mod client;
pub mod coverage;
pub mod history;
pub mod lin;
pub mod plan;
pub mod stream;
pub mod trace;
