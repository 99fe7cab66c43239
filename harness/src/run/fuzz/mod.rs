//! The fuzzers, a room of their own: programs generated from a seed, run
//! against a target and judged by the spec's sequential model, a failure
//! shrunk to a YAML scenario.
//!
//! - [`store`]: programs of store operations, judged by `SeqStore`
//!   (`reqkey fuzz` on a store target);
//! - [`agent`]: programs over every SPEC 7 route, judged by `AgentModel`
//!   ([`agent_program`]: its domain, steps and requests;
//!   [`agent_requests`]: a request's forms on the wire and the requests
//!   SPEC 7 refuses; [`agent_scenario`]: a failing program as a YAML
//!   scenario);
//! - [`idem`]: programs over every `reqkey-idem/1` route, judged by
//!   `IdemModel` under the declared profile ([`idem_program`] their domain,
//!   [`idem_scenario`] a failure as a scenario, [`idem_battery`] the fixed
//!   bursts and timing probes every run sends first, [`idem_map`] both
//!   fitted to an API map's routes and callers, and the requests they
//!   send counted from the seed; [`body_size`] how large each program's
//!   bodies are, tiny to large, from the seed);
//! - [`alphabet`]: every fuzzer's dimensions, keyed by the SPEC parameter
//!   each generates, with the clauses it can break (`reqkey coverage
//!   --fuzz`);
//! - [`cases`]: the seeded proptest loop the fuzzers share (cases, shrinking, no
//!   verdict on a target that did not answer);
//! - [`program`]: the store fuzzer's domain, every write with reads by other
//!   clients around it; [`inputs`]: the inputs of every JSON shape and kind
//!   of text both send; [`scenario`]: a store program as a YAML scenario;
//! - [`violation`]: one distinct violation proved, the record every
//!   report renders; [`every`]: every violation of a run, one per set of
//!   clauses, at every level;
//! - [`replay`]: a reproduction run through the scenario runner against
//!   the target before it is written (reproduced or not, and why);
//! - [`pass`]: a certification's bounded fuzz pass at the target's level,
//!   its budget, seed and verdict;
//! - [`scale`]: every declared promise at its own scale (issue 55), beside
//!   the programs: [`scale_store`], [`scale_agent`] and [`scale_idem`]
//!   seed state and thousands of keys before them, wait within the
//!   [`patience`] after them (timing `expiryMs` and `lockMs` meanwhile),
//!   then read everything again.
//!
//! `run/mixed.rs` (the `mixed_histories` step) draws its programs from
//! [`store`]; nothing here renders output.

pub mod agent;
pub mod agent_program;
pub mod agent_requests;
pub mod agent_scenario;
pub mod alphabet;
pub mod body_size;
pub mod cases;
pub mod every;
pub mod idem;
pub mod idem_battery;
pub mod idem_map;
pub mod idem_program;
pub mod idem_scenario;
pub mod inputs;
pub mod key_forms;
pub mod pass;
pub mod patience;
pub mod program;
pub mod replay;
pub mod scale;
pub mod scale_agent;
pub mod scale_idem;
pub mod scale_store;
pub mod scenario;
pub mod store;
pub mod violation;
