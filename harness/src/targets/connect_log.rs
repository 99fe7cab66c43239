//! How long each connection to an HTTP target took to open, and the
//! listen-queue overflow it names (issue 45).
//!
//! Why: a server whose listen backlog is smaller than a burst (Python's
//! `http.server` keeps 5 by default) cannot queue every connection of the
//! burst; the kernel drops the extra SYNs and the client's kernel sends
//! them again a second later (the first SYN retransmission is at 1 s on
//! Linux). By then the first request of the burst has finished, so the
//! late duplicates are (correctly) replayed instead of meeting it in
//! flight. A scenario judging the burst as concurrent would then blame
//! the implementation for a race it never saw. On loopback, or on any
//! network a conformance run uses, nothing else makes a connection take a
//! second to open, so a connect of [`SLOW_CONNECT_MS`] or more is that
//! overflow: the run says so as `warning[listen_queue]` with the fix, and
//! a parallel group during which one happened is not judged
//! (`run/group.rs`).
//!
//! The measure is a layer around reqwest's connector: it times every new
//! connection, from the connector's call to the connection being usable.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::targets::latency::TargetWarning;

/// A connection that took this long to open was dropped by the target's
/// full listen queue and retried by the kernel (its first SYN
/// retransmission is at 1 s).
pub const SLOW_CONNECT_MS: u64 = 1_000;

/// The connections one target opened: how many, how many slowly, the
/// slowest (thread-safe counters, nothing kept per connection).
#[derive(Debug, Default)]
pub struct ConnectLog {
    opened: AtomicU64,
    slow: AtomicU64,
    slowest_ms: AtomicU64,
}

impl ConnectLog {
    /// Records one connection attempt that took `took`.
    pub fn record(&self, took: Duration) {
        let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        self.opened.fetch_add(1, Ordering::Relaxed);
        if ms >= SLOW_CONNECT_MS {
            self.slow.fetch_add(1, Ordering::Relaxed);
            self.slowest_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// How many connections so far took [`SLOW_CONNECT_MS`] or more (a
    /// group compares it before and after).
    pub fn slow_connects(&self) -> u64 {
        self.slow.load(Ordering::Relaxed)
    }

    /// `warning[listen_queue]` once any connection opened slowly.
    pub fn warning(&self) -> Option<TargetWarning> {
        let slow = self.slow.load(Ordering::Relaxed);
        (slow > 0).then(|| {
            listen_queue_warning(
                slow,
                self.opened.load(Ordering::Relaxed),
                self.slowest_ms.load(Ordering::Relaxed),
            )
        })
    }
}

/// The warning for `slow` of `opened` connections, the slowest `slowest_ms`.
pub fn listen_queue_warning(slow: u64, opened: u64, slowest_ms: u64) -> TargetWarning {
    TargetWarning {
        code: "listen_queue",
        message: format!(
            "{slow} of {opened} connections took {SLOW_CONNECT_MS} ms or more to open (the slowest {slowest_ms} ms): the target's listen queue was full, the kernel dropped the connection and retried it a second later. A burst's late requests then arrive after its first one finished, so they are not concurrent: the parallel groups they belong to are not judged (never blamed on the implementation)."
        ),
        fix: "give the server a listen backlog larger than the bursts (Python `http.server`: `request_queue_size = 128` on the server class, as docs/examples/idem_app.py does; `socket.listen(128)`; uvicorn `--backlog`; Node's default 511 is enough)".into(),
    }
}

/// A connector layer that times every connection into a [`ConnectLog`]
/// (`reqwest::ClientBuilder::connector_layer`).
#[derive(Debug, Clone)]
pub struct TimedConnect {
    pub log: Arc<ConnectLog>,
}

impl<S> tower_layer::Layer<S> for TimedConnect {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            log: Arc::clone(&self.log),
        }
    }
}

/// The connector, timed.
#[derive(Debug, Clone)]
pub struct Timed<S> {
    inner: S,
    log: Arc<ConnectLog>,
}

impl<S, R> tower_service::Service<R> for Timed<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let started = Instant::now();
        let connecting = self.inner.call(request);
        let log = Arc::clone(&self.log);
        Box::pin(async move {
            let connected = connecting.await;
            log.record(started.elapsed());
            connected
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connect_of_a_second_or_more_is_named_with_its_fix() {
        let log = ConnectLog::default();
        log.record(Duration::from_millis(2));
        log.record(Duration::from_millis(999));
        assert_eq!(log.slow_connects(), 0);
        assert_eq!(log.warning(), None, "fast connects say nothing");
        log.record(Duration::from_millis(1_031));
        log.record(Duration::from_millis(1_007));
        assert_eq!(log.slow_connects(), 2);
        let w = log.warning().map(|w| w.line()).unwrap_or_default();
        assert!(
            w.starts_with("warning[listen_queue]: 2 of 4 connections"),
            "{w}"
        );
        assert!(w.contains("the slowest 1031 ms"), "{w}");
        assert!(w.contains("request_queue_size = 128"), "{w}");
    }

    #[tokio::test]
    async fn the_layer_times_the_connection_it_wraps() {
        use tower_layer::Layer as _;
        use tower_service::Service as _;
        let log = Arc::new(ConnectLog::default());
        let slow = tower_service_fn(|()| async {
            tokio::time::sleep(Duration::from_millis(1_050)).await;
            Ok::<_, std::convert::Infallible>(7)
        });
        let mut timed = TimedConnect {
            log: Arc::clone(&log),
        }
        .layer(slow);
        assert_eq!(timed.call(()).await, Ok(7));
        assert_eq!(log.slow_connects(), 1);
    }

    /// A service from a closure (tower's `service_fn`, without tower).
    fn tower_service_fn<F, Fut, T>(f: F) -> FnService<F>
    where
        F: FnMut(()) -> Fut,
        Fut: Future<Output = Result<T, std::convert::Infallible>>,
    {
        FnService(f)
    }

    struct FnService<F>(F);

    impl<F, Fut, T> tower_service::Service<()> for FnService<F>
    where
        F: FnMut(()) -> Fut,
        Fut: Future<Output = Result<T, std::convert::Infallible>> + Send + 'static,
    {
        type Response = T;
        type Error = std::convert::Infallible;
        type Future = Fut;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, r: ()) -> Fut {
            (self.0)(r)
        }
    }
}
