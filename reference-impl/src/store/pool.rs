//! The small bounded connection pool the SQL backends use: at most `size`
//! connections out at once, idle ones reused newest first, a failed one
//! replaced rather than given back.

use std::fmt;
use std::sync::{Arc, Mutex};

use reqkey_model::StoreError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A bounded pool of connections of any kind.
///
/// At most `size` connections are out at once (a semaphore); idle ones wait
/// in a stack and are reused, newest first. A connection that failed is not
/// given back (the caller drops it), so a broken socket is replaced by a new
/// one on the next call instead of poisoning the pool.
pub(crate) struct Pool<C> {
    idle: Arc<Mutex<Vec<C>>>,
    permits: Arc<Semaphore>,
}

impl<C> fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("available_permits", &self.permits.available_permits())
            .finish()
    }
}

/// A permit to hold one connection; give the connection back with
/// [`Pool::put`] when it is still healthy.
#[derive(Debug)]
pub(crate) struct Lease {
    _permit: OwnedSemaphorePermit,
}

impl<C> Pool<C> {
    pub fn new(size: usize) -> Self {
        Self {
            idle: Arc::new(Mutex::new(Vec::with_capacity(size))),
            permits: Arc::new(Semaphore::new(size.max(1))),
        }
    }

    /// Waits for a permit and takes an idle connection if there is one
    /// (`None`: the caller opens a new connection under the lease).
    pub async fn take(&self) -> Result<(Lease, Option<C>), StoreError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::internal("connection pool closed"))?;
        let conn = self.lock().pop();
        Ok((Lease { _permit: permit }, conn))
    }

    /// Gives a healthy connection back (the lease is released by drop).
    pub fn put(&self, _lease: Lease, conn: C) {
        self.lock().push(conn);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<C>> {
        // The stack is never left half-updated (push/pop only), so a
        // poisoned lock is still consistent.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}
