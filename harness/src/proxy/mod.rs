//! `reqkey proxy`: a fault-injecting, recording proxy between a real client
//! and a real `reqkey-agent/1` server (SPEC 9).
//!
//! - `reqkey_check::plan`: the fault plan (`--plan`) and the seeded choice
//!   of a fault per entry request; pure, so it lives with the judge.
//! - `reqkey_check::trace`: what the proxy records of every exchange (route,
//!   key, body digest, time, fault, answers) and the server snapshots it
//!   reads at the end; the data the client verdict judges. Pure.
//! - [`server`]: the listener, the forwarding and the faults. Bounded:
//!   body sizes, connections, upstream calls, delays.
//!
//! May not: judge (the verdict is `reqkey_check::client`'s) or render reports.

pub mod server;
