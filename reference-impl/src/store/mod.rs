//! The store trait and its backends.
//!
//! One trait, many backends (the sqlx way): every backend runs the same
//! conformance corpus. [`dispatch`] maps a wire [`StoreOp`] onto the trait,
//! so the in-process harness target and the `reqkey-store/1` server share
//! one path.

pub mod api;
pub mod legacy;
pub mod link_defects;
pub mod memory;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod rows;
pub mod scale_defects;
pub mod spec;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use self::api::{
    dispatch, dispatch_wire, dispatch_wire_bytes, redact_url, OpenError, SessionStateStore,
    REDACTED,
};
pub use self::link_defects::PgLinkDefect;
pub use self::memory::{MemoryDefect, MemoryStore};
#[cfg(feature = "postgres")]
pub use self::postgres::PostgresStore;
#[cfg(feature = "redis")]
pub use self::redis::{cluster_node_urls, RedisStore};
pub use self::spec::{open, SecretUrl, StoreSpec, STORE_HELP};
#[cfg(feature = "sqlite")]
pub use self::sqlite::SqliteStore;
