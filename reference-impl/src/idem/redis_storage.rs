//! The Redis backend of the reference idempotency middleware: one string
//! per key (`reqkey-idem:{scope hash}`) holding the slot as JSON, the
//! lock taken by a Lua script (GET, else SET with its PX) so that two
//! duplicates can never both see the key free; renewed and freed (with the
//! answer left to its waiters) by scripts too, so that only the lock's
//! holder touches it.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;

use super::storage::{waiters_key, IdemStorage, Slot, StorageError, StoredAnswer};

/// Every key this backend writes starts with this.
pub const KEY_PREFIX: &str = "reqkey-idem:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Atomically: the answer left to the waiters of the lock we waited on
/// (KEYS[2], when ARGV[3] says we wait), else the current value, else nil
/// after setting ours (PX when ARGV[2] is not empty).
const TRY_LOCK: &str = r"
if ARGV[3] == '1' then
  local left = redis.call('GET', KEYS[2])
  if left then return left end
end
local held = redis.call('GET', KEYS[1])
if held then return held end
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return false
";

/// Atomically: extends the lock by ARGV[2] ms if the key still holds ours.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Atomically: leaves the answer to the waiters (PX ARGV[2]), frees the key.
const RELEASE_TO_WAITERS: &str = r"
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[1])
return 0
";

pub struct RedisStorage {
    conn: ConnectionManager,
    try_lock: Script,
    renew: Script,
    release_to_waiters: Script,
}

impl std::fmt::Debug for RedisStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RedisStorage")
    }
}

fn err(e: impl std::fmt::Display) -> StorageError {
    StorageError(format!("redis: {e}"))
}

fn encode(slot: &Slot) -> Result<String, StorageError> {
    serde_json::to_string(slot).map_err(err)
}

fn decode(text: &str) -> Result<Slot, StorageError> {
    serde_json::from_str(text).map_err(|e| err(format!("a slot that is not ours: {e}")))
}

fn ms_arg(ms: Option<u64>) -> String {
    ms.map(|ms| ms.max(1).to_string()).unwrap_or_default()
}

impl RedisStorage {
    /// Connects to `redis://HOST:PORT[/DB]`; the URL never reaches an error
    /// message (it may carry a password).
    pub async fn connect(url: &str) -> Result<Self, StorageError> {
        let client = redis::Client::open(url).map_err(|_| err("not a Redis URL"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2);
        let conn = tokio::time::timeout(
            CONNECT_TIMEOUT,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| err("no answer within 5 s"))?
        .map_err(err)?;
        Ok(Self {
            conn,
            try_lock: Script::new(TRY_LOCK),
            renew: Script::new(RENEW),
            release_to_waiters: Script::new(RELEASE_TO_WAITERS),
        })
    }

    fn key(key: &str) -> String {
        format!("{KEY_PREFIX}{key}")
    }

    async fn set(&self, key: &str, value: String, ms: Option<u64>) -> Result<(), StorageError> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(Self::key(key)).arg(value);
        if let Some(ms) = ms {
            cmd.arg("PX").arg(ms.max(1));
        }
        cmd.query_async::<()>(&mut conn).await.map_err(err)
    }
}

#[async_trait]
impl IdemStorage for RedisStorage {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn durable(&self) -> bool {
        true
    }

    async fn try_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
        waiting_on: Option<&str>,
    ) -> Result<Option<Slot>, StorageError> {
        let mut conn = self.conn.clone();
        let held: Option<String> = self
            .try_lock
            .key(Self::key(key))
            .key(Self::key(&waiters_key(key, waiting_on.unwrap_or(""))))
            .arg(encode(ours)?)
            .arg(ms_arg(lock_ms))
            .arg(if waiting_on.is_some() { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
            .map_err(err)?;
        held.as_deref().map(decode).transpose()
    }

    async fn renew(&self, key: &str, ours: &Slot, lock_ms: u64) -> Result<(), StorageError> {
        let mut conn = self.conn.clone();
        self.renew
            .key(Self::key(key))
            .arg(encode(ours)?)
            .arg(lock_ms.max(1))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(err)
    }

    async fn release_to_waiters(
        &self,
        key: &str,
        token: &str,
        answer: &StoredAnswer,
        keep_ms: u64,
    ) -> Result<(), StorageError> {
        let mut conn = self.conn.clone();
        let left = encode(&Slot::Released {
            answer: answer.clone(),
        })?;
        self.release_to_waiters
            .key(Self::key(key))
            .key(Self::key(&waiters_key(key, token)))
            .arg(left)
            .arg(keep_ms.max(1))
            .invoke_async::<i64>(&mut conn)
            .await
            .map(drop)
            .map_err(err)
    }

    async fn peek(&self, key: &str) -> Result<Option<Slot>, StorageError> {
        let mut conn = self.conn.clone();
        let held: Option<String> = redis::cmd("GET")
            .arg(Self::key(key))
            .query_async(&mut conn)
            .await
            .map_err(err)?;
        held.as_deref().map(decode).transpose()
    }

    async fn put_lock(
        &self,
        key: &str,
        ours: &Slot,
        lock_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        self.set(key, encode(ours)?, lock_ms).await
    }

    async fn complete(
        &self,
        key: &str,
        fingerprint: &str,
        caller: &str,
        answer: &StoredAnswer,
        expiry_ms: Option<u64>,
    ) -> Result<(), StorageError> {
        let slot = encode(&Slot::Done {
            fingerprint: fingerprint.to_owned(),
            caller: caller.to_owned(),
            answer: answer.clone(),
        })?;
        self.set(key, slot, expiry_ms).await
    }

    async fn release(&self, key: &str) -> Result<(), StorageError> {
        let mut conn = self.conn.clone();
        redis::cmd("DEL")
            .arg(Self::key(key))
            .query_async::<()>(&mut conn)
            .await
            .map_err(err)
    }
}
