//! The reference agent: executor, scripted test agent, and its HTTP server.
//!
//! - [`executor`]: keyed and keyless entries over any `SessionStateStore`,
//!   deciding with `reqkey_model::plan_keyed_entry` (SPEC 5), with the two
//!   concurrency policies and deliberately broken variants for testing the
//!   tests.
//! - [`test_agent`]: the scripted agent of SPEC 7 and the per-run event
//!   buffers that let an attached chat stream replay a run from its start.
//! - [`server`]: `reqkey-agent/1` over axum; the only module here that knows
//!   HTTP, with [`body`], its request bodies read as text.

pub mod body;
pub mod config;
pub mod entry;
pub mod executor;
pub mod forgetful;
pub mod runs;
pub mod server;
pub mod test_agent;

pub use executor::{
    ConcurrentEntry, EntryError, EntryKind, EntryOutcome, EntryRequest, Executor, ExecutorConfig,
    ExecutorDefect, OrphanRule, LEASE_MS, MAX_TRACKED_LOG_BYTES, MAX_TRACKED_RUNS,
    MAX_WAITING_POLLS,
};
pub use server::{router, serve, serve_with_limits, spawn, ServerHandle};
