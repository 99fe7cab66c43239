//! # reqkey-reference: reference stores and servers
//!
//! Real implementations of the request-key contract, so that the harness has
//! something correct to certify and implementers have something to read.
//!
//! - [`store`]: the [`store::SessionStateStore`] trait (every SPEC 4
//!   operation) and its backends (memory, SQLite, Postgres, Redis), opened
//!   from a specification with [`store::open`]. Every backend decides a
//!   run-start commit with `reqkey_model::apply_run_start_rules` inside its
//!   own atomic step (the Redis Lua script is the one restatement, tested
//!   against the model).
//! - [`store_server`]: any store behind the `reqkey-store/1` wire (SPEC 6).
//! - [`http_serve`]: the accept loop both servers run on: header and body
//!   read timeouts, a connection cap that closes the oldest idle connection.
//!
//! - [`agent`]: the executor with keyed entries (SPEC 5), the scripted test
//!   agent, and the `reqkey-agent/1` HTTP server (SPEC 7).
//!
//! Deliberately absent: any dependency on the harness, and any restatement
//! of a spec rule (they live in `reqkey-model`).

pub mod agent;
pub mod http_serve;
pub mod idem;
pub mod scheme;
pub mod store;
pub mod store_server;
