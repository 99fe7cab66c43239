//! Where the reference idempotency middleware keeps its keys: a small
//! trait with a memory backend (this file) and a Redis backend
//! (`redis_storage.rs`).
//!
//! The one operation that must be atomic is [`IdemStorage::try_lock`]:
//! "take the key if nobody holds it, else tell me what holds it". Every
//! double execution a middleware author ships comes from splitting it in
//! two ([`IdemStorage::peek`] then [`IdemStorage::put_lock`], which only
//! the `check-then-set` broken variant calls).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// The most keys the memory backend holds; past it, expired ones are swept
/// and, if still full, a new key is refused (503), never silently dropped.
pub const MEMORY_MAX_KEYS: usize = 100_000;

/// An answer kept for replay: what the handler answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAnswer {
    pub status: u16,
    /// The headers that matter (lower-case names): the content type and
    /// the handler's own (`x-reqkey-order`).
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// What holds a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Slot {
    /// A request with the key is being handled.
    InFlight { fingerprint: String },
    /// A request with the key completed; its answer is kept.
    Done {
        fingerprint: String,
        answer: StoredAnswer,
    },
}

/// A backend that did not answer. The middleware answers 503.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("idempotency storage: {0}")]
pub struct StorageError(pub String);

#[async_trait]
pub trait IdemStorage: Send + Sync + 'static {
    /// `memory` or `redis`, for `/.reqkey/health`.
    fn name(&self) -> &'static str;
    /// Whether a completed key survives a restart of the app.
    fn durable(&self) -> bool;
    /// Atomically: when nothing (unexpired) holds `key`, marks it in flight
    /// for `lock_ms` (`None`: until released or completed) and answers
    /// `None`; otherwise answers what holds it.
    async fn try_lock(
        &self,
        key: &str,
        fingerprint: &str,
        lock_ms: Option<u64>,
    ) -> Result<Option<Slot>, StorageError>;
    /// What holds `key` now (not atomic with anything).
    async fn peek(&self, key: &str) -> Result<Option<Slot>, StorageError>;
    /// Marks `key` in flight whatever holds it (not atomic with anything).
    async fn put_lock(
        &self,
        key: &str,
        fingerprint: &str,
        lock_ms: Option<u64>,
    ) -> Result<(), StorageError>;
    /// Keeps `answer` for `key`, for `expiry_ms` (`None`: forever).
    async fn complete(
        &self,
        key: &str,
        fingerprint: &str,
        answer: &StoredAnswer,
        expiry_ms: Option<u64>,
    ) -> Result<(), StorageError>;
    /// Frees `key` (after an error answer under `errors: released`).
    async fn release(&self, key: &str) -> Result<(), StorageError>;
}

/// The memory backend: one mutex over a map; each entry's deadline is its
/// lock's or its record's expiry.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    slots: Mutex<HashMap<String, (Slot, Option<Instant>)>>,
}

impl MemoryStorage {
    pub fn new() -> Self {
        Self::default()
    }

    fn deadline(ms: Option<u64>) -> Option<Instant> {
        ms.map(|ms| Instant::now() + Duration::from_millis(ms))
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&mut HashMap<String, (Slot, Option<Instant>)>) -> Result<T, StorageError>,
    ) -> Result<T, StorageError> {
        let mut map = self
            .slots
            .lock()
            .map_err(|_| StorageError("memory storage lock poisoned".into()))?;
        f(&mut map)
    }

    fn live(map: &HashMap<String, (Slot, Option<Instant>)>, key: &str) -> Option<Slot> {
        let now = Instant::now();
        map.get(key)
            .filter(|(_, until)| until.is_none_or(|t| t > now))
            .map(|(slot, _)| slot.clone())
    }

    fn insert(
        map: &mut HashMap<String, (Slot, Option<Instant>)>,
        key: &str,
        entry: (Slot, Option<Instant>),
    ) -> Result<(), StorageError> {
        if map.len() >= MEMORY_MAX_KEYS && !map.contains_key(key) {
            let now = Instant::now();
            map.retain(|_, (_, until)| until.is_none_or(|t| t > now));
            if map.len() >= MEMORY_MAX_KEYS {
                return Err(StorageError(format!(
                    "memory storage full ({MEMORY_MAX_KEYS} keys)"
                )));
            }
        }
        map.insert(key.to_owned(), entry);
        Ok(())
    }
}

#[async_trait]
impl IdemStorage for MemoryStorage {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn durable(&self) -> bool {
        false
    }

    async fn try_lock(
        &self,
        key: &str,
        fingerprint: &str,
        lock_ms: Option<u64>,
    ) -> Result<Option<Slot>, StorageError> {
        self.with(|map| {
            if let Some(held) = Self::live(map, key) {
                return Ok(Some(held));
            }
            let slot = Slot::InFlight {
                fingerprint: fingerprint.to_owned(),
            };
            Self::insert(map, key, (slot, Self::deadline(lock_ms)))?;
            Ok(None)
        })
    }

    async fn peek(&self, key: &str) -> Result<Option<Slot>, StorageError> {
        self.with(|map| Ok(Self::live(map, key)))
    }

    async fn put_lock(
        &self,
        key: &str,
        fingerprint: &str,
        lock_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        self.with(|map| {
            let slot = Slot::InFlight {
                fingerprint: fingerprint.to_owned(),
            };
            Self::insert(map, key, (slot, Self::deadline(lock_ms)))
        })
    }

    async fn complete(
        &self,
        key: &str,
        fingerprint: &str,
        answer: &StoredAnswer,
        expiry_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        self.with(|map| {
            let slot = Slot::Done {
                fingerprint: fingerprint.to_owned(),
                answer: answer.clone(),
            };
            Self::insert(map, key, (slot, Self::deadline(expiry_ms)))
        })
    }

    async fn release(&self, key: &str) -> Result<(), StorageError> {
        self.with(|map| {
            map.remove(key);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn answer() -> StoredAnswer {
        StoredAnswer {
            status: 201,
            headers: vec![("x-reqkey-order".into(), "1".into())],
            body: "{}".into(),
        }
    }

    #[tokio::test]
    async fn a_key_is_locked_once_then_completed_then_expires() {
        let m = MemoryStorage::new();
        assert_eq!(m.try_lock("k", "f", None).await.unwrap(), None);
        assert!(matches!(
            m.try_lock("k", "g", None).await.unwrap(),
            Some(Slot::InFlight { fingerprint }) if fingerprint == "f"
        ));
        m.complete("k", "f", &answer(), Some(30)).await.unwrap();
        assert!(matches!(
            m.try_lock("k", "f", None).await.unwrap(),
            Some(Slot::Done { .. })
        ));
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert_eq!(m.try_lock("k", "f", None).await.unwrap(), None);
        m.release("k").await.unwrap();
        assert_eq!(m.peek("k").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_lock_with_a_length_lapses() {
        let m = MemoryStorage::new();
        assert_eq!(m.try_lock("k", "f", Some(20)).await.unwrap(), None);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(m.try_lock("k", "f", None).await.unwrap(), None);
    }
}
