//! The benchmarks, as library functions so that `reqkey bench` and
//! `cargo bench` print the same figures. A room of their own: nothing
//! outside `cmd/bench.rs` and `benches/` calls them.
//!
//! - [`checker`]: records a real concurrent history and times the
//!   linearizability check of it; the checker on generated workloads; how
//!   often and how fast the race scenarios catch a racy store.
//! - [`lookup`]: `getRunByRequestKey` latency in a small and a large store,
//!   through the protocol (any store, any language).
//! - [`backends`]: the key lookup of the reference backends in process,
//!   beside each backend's own primitive.
//! - [`failover`]: keyed load on replicas while one is killed.
//! - [`model`]: the model checker on the worlds: states, CPU,
//!   wall clock and peak memory.
//! - [`soak`]: the reference servers and the proxy under mixed honest and
//!   hostile load: RSS and a fresh client's latency.
//! - [`heads`]: a fresh client's latency while hundreds of connections
//!   hold half-sent request heads.
//! - [`fuzz`]: the fuzz pass's detection of every built-in broken variant,
//!   seed by seed, and the curve certify's default budget is read from.
//! - [`race_window`]: how often a certification catches a check-then-set
//!   race of a set window, bursts plain and synchronised side by side.

pub mod backends;
pub mod checker;
pub mod failover;
pub mod fuzz;
pub mod heads;
pub mod lookup;
pub mod model;
pub mod race_window;
pub mod soak;
