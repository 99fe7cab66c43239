//! # reqkey-model: the request-key contract as code
//!
//! This crate is the single source of truth for the rules of
//! `spec/SPEC.md`, the contract the project certifies. Everything else in
//! the workspace — the reference stores, the executor, the harness checks —
//! *calls* these functions; nobody restates them.
//!
//! Two folders: [`contract`] holds the spec's functions and types, [`checker`]
//! the stateright model built on them. What lives here, and why it is pure:
//!
//! - [`key`]: `parse_request_key` (SPEC 2). A malformed key never reaches a
//!   lookup, and its raw value never reaches an error message.
//! - [`digest`]: canonical JSON and the request digests (SPEC 3), plus the
//!   start digest a store compares for a same-runId replay (SPEC 4.1).
//! - [`types`]: the wire types (`RunMetadata`, `StartRun`, ...) with the
//!   exact serde names of the wire protocols.
//! - [`error`]: typed store errors that carry the wire codes.
//! - [`rules`]: `apply_run_start_rules`, the four ordered rules of the
//!   run-start commit as one function over what a store read inside its
//!   atomic step.
//! - [`plan`]: `plan_keyed_entry` (SPEC 5), the executor's decision table.
//! - [`seq`]: the sequential specification of a whole store (SPEC 4), the
//!   oracle for linearizability checks and model-based tests.
//! - [`linspec`]: that oracle as a stateright `SequentialSpec`.
//! - [`system`]: the stateright model of the whole keyed-entry protocol
//!   (clients, executor steps, store commits, finishes, deletes), with its
//!   properties ([`props`] names them); [`mutants`]: single-bug switches that prove the properties
//!   can fail.
//!
//! Deliberately absent: IO, async, HTTP, YAML, SQL. A rule that needs any of
//! those is not a rule but an implementation.

pub mod checker;
pub mod contract;

// The flat paths every other crate uses (`reqkey_model::seq::SeqStore`):
// the folders are for readers of this crate, not a second vocabulary.
pub use checker::{bridge, check, compact, export, inline, mutants, props, system};
pub use contract::{
    agent, agent_blame, agent_exchange, clauses, digest, error, idem_batch, idem_blame, idem_model,
    idem_place, idem_profile, idem_timing, idem_why, json_text, key, linspec, plan, rules, seq,
    types, vocab,
};

pub use digest::{
    canonical_json, execute_request_digest, request_digest, resume_request_digest,
    retry_request_digest, start_digest, written_json, DigestKind,
};
pub use error::{RunStartRejection, StoreError};
pub use key::{parse_request_key, KeyError, RequestKey, REQUEST_KEY_HEADER, REQUEST_KEY_MAX_LEN};
pub use plan::{plan_keyed_entry, KeyedEntryPlan};
pub use rules::{
    apply_run_start_rules, check_status_transition, RunStartContext, RunStartDecision,
};
pub use types::{
    CommitOutcome, CommitResult, DeleteResult, InputEntry, RunMetadata, RunStatus, StartRun,
};
