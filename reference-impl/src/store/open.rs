//! Opening a store from its specification string: the one place that knows
//! every backend.

use std::sync::Arc;

use super::api::{OpenError, SessionStateStore};
use super::memory::{MemoryDefect, MemoryStore};
#[cfg(feature = "postgres")]
use super::postgres::PostgresStore;
#[cfg(feature = "redis")]
use super::redis::RedisStore;
#[cfg(feature = "sqlite")]
use super::sqlite::SqliteStore;

/// The store specifications [`open`] accepts, for help texts.
pub const STORE_HELP: &str = "\
memory                    the in-process memory store
broken-memory:DEFECT      a deliberately broken memory store (tests of tests)
sqlite:PATH               a SQLite database file (created and migrated on open)
postgres://USER@HOST/DB   PostgreSQL (tables reqkey_*, migrated on open)
redis://HOST:PORT[/DB]    Redis (keys session:request-keys:{id} and reqkey:*:{id})
redis+cluster://HOST:PORT[,HOST:PORT...]
                          Redis Cluster (the same keys; a session's keys share
                          the hash tag {id}, so one slot)";

/// Opens a store from its specification: `memory`, `sqlite:PATH`,
/// `postgres://...` (or `postgresql://...`), `redis://...`,
/// `redis+cluster://...`. SQL stores are
/// migrated to this build's schema on open.
pub async fn open(spec: &str) -> Result<Arc<dyn SessionStateStore>, OpenError> {
    if spec == "memory" {
        return Ok(Arc::new(MemoryStore::new()));
    }
    if let Some(name) = spec.strip_prefix("broken-memory:") {
        return match MemoryDefect::parse(name) {
            Some(defect) => Ok(Arc::new(MemoryStore::with_defect(defect))),
            None => Err(OpenError::UnknownSpec(spec.to_owned())),
        };
    }
    if let Some(path) = spec.strip_prefix("sqlite:") {
        if path.is_empty() {
            return Err(OpenError::UnknownSpec(spec.to_owned()));
        }
        #[cfg(feature = "sqlite")]
        return Ok(Arc::new(SqliteStore::open(path).await?));
        #[cfg(not(feature = "sqlite"))]
        return Err(OpenError::NotBuilt("sqlite"));
    }
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return Ok(Arc::new(PostgresStore::connect(spec).await?));
        #[cfg(not(feature = "postgres"))]
        return Err(OpenError::NotBuilt("postgres"));
    }
    if spec.starts_with("redis://")
        || spec.starts_with("rediss://")
        || spec.starts_with("redis+cluster://")
    {
        #[cfg(feature = "redis")]
        return Ok(Arc::new(RedisStore::connect(spec).await?));
        #[cfg(not(feature = "redis"))]
        return Err(OpenError::NotBuilt("redis"));
    }
    Err(OpenError::UnknownSpec(spec.to_owned()))
}
