//! The HTTP/1.1 accept loop both reference servers run on, with the limits
//! a server exposed to any client needs (issue 15, F5).
//!
//! `axum::serve` has no timeouts and no connection cap: a client that opens
//! connections and sends nothing keeps them (and their file descriptors)
//! forever, and once the process runs out of descriptors a fresh client is
//! never even accepted. This loop serves an axum [`Router`] through hyper's
//! HTTP/1 connection directly, with:
//!
//! - **a header read timeout** ([`ServerLimits::header_read_timeout`]):
//!   hyper closes a connection whose request head does not arrive in time.
//!   Its timer also runs while a keep-alive connection waits for its next
//!   request, so it is the idle timeout as well;
//! - **a body read timeout** ([`ServerLimits::body_read_timeout`]): a request
//!   body that is not complete in time ends in an error the handlers turn
//!   into their ordinary "body could not be read" answer;
//! - **a connection cap** ([`ServerLimits::max_connections`], a semaphore):
//!   when it is reached, or when `accept` fails for want of descriptors, the
//!   **oldest idle** connection (no request in flight, no response being
//!   streamed) is closed to make room, so a flood of idle connections never
//!   starves a fresh client. Open connections stay below
//!   `max_connections +` [`EVICTION_SLACK`] (those closing included): when
//!   every connection is busy, a new one waits up to
//!   [`ServerLimits::admission_wait`] for a slot and is then closed
//!   unanswered.
//!
//! Shutdown is graceful and bounded: accepting stops, every connection is
//! asked to close once its request in flight is answered, and the loop waits
//! up to [`ServerLimits::shutdown_grace`] for them.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use axum::Router;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// How long a failed `accept` (other than a descriptor shortage) pauses
/// the loop before it accepts again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(20);

/// Connections that may be open beyond `max_connections` while the idle
/// connections closed to make room for them finish closing.
pub const EVICTION_SLACK: usize = 32;

/// The listen backlog [`bind`] asks for (the kernel may cap it, e.g. at
/// `net.core.somaxconn`). The standard library's and mio's 128 overflow
/// under a burst of connections, and a client whose SYN is dropped waits a
/// second before it tries again.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener for [`serve`] with a [`LISTEN_BACKLOG`] backlog: the
/// first of `addr`'s addresses that binds.
pub async fn bind(addr: impl tokio::net::ToSocketAddrs) -> std::io::Result<TcpListener> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host(addr).await? {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As std and mio do: a restarted server rebinds its port at once.
        #[cfg(unix)]
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return socket.listen(LISTEN_BACKLOG),
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to bind")
    }))
}

/// The limits of one server. [`ServerLimits::default`] is what the `reqkey
/// serve` commands use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Open connections at most (each is one file descriptor).
    pub max_connections: usize,
    /// A request head must arrive within this, counted from the moment the
    /// connection waits for it (also the keep-alive idle timeout).
    pub header_read_timeout: Duration,
    /// A request body must be read completely within this, counted from
    /// the moment its head was read.
    pub body_read_timeout: Duration,
    /// How long a connection accepted while every slot is busy waits for
    /// one before it is closed.
    pub admission_wait: Duration,
    /// How long a graceful shutdown waits for connections to finish.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 192,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            admission_wait: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// One open connection, as the accept loop sees it.
#[derive(Debug)]
struct Conn {
    /// Requests in flight, responses still streaming included.
    in_flight: Arc<AtomicUsize>,
    /// Asks the connection to close once idle (eviction or shutdown).
    close: Arc<Notify>,
    /// Already asked: not a candidate for eviction again.
    closing: bool,
}

/// The open connections, by id; ids grow, so the first is the oldest.
#[derive(Debug, Default)]
struct Table {
    conns: Mutex<BTreeMap<u64, Conn>>,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Conn>> {
        // Only inserts, removes and flag flips happen under it; poison is benign.
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the oldest idle connection to close; `false` if none is idle.
    fn evict_oldest_idle(&self) -> bool {
        let mut conns = self.lock();
        let oldest = conns
            .values_mut()
            .find(|c| !c.closing && c.in_flight.load(Ordering::Acquire) == 0);
        match oldest {
            Some(conn) => {
                conn.closing = true;
                conn.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Open connections, those asked to close included.
    fn open(&self) -> usize {
        self.lock().len()
    }

    fn close_all(&self) {
        for conn in self.lock().values_mut() {
            conn.closing = true;
            conn.close.notify_one();
        }
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes.
///
/// Once `max_connections` are open, each new connection asks the oldest
/// idle one to close and is served at once: closing an idle connection
/// takes a moment, so up to [`EVICTION_SLACK`] more may be open while
/// those closes complete (the semaphore holds `max_connections +
/// EVICTION_SLACK` permits). Only when no permit is free does the loop
/// wait, at most [`ServerLimits::admission_wait`], and then close the new
/// connection unanswered.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = max + EVICTION_SLACK;
    let slots = Arc::new(Semaphore::new(permits));
    let table = Arc::new(Table::default());
    let mut next_id: u64 = 0;
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if is_out_of_descriptors(&e) => {
                // The backlog holds clients we cannot even accept: make room.
                let freed = table.evict_oldest_idle();
                let pause = if freed {
                    Duration::from_millis(2)
                } else {
                    ACCEPT_ERROR_PAUSE
                };
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(e) if is_per_connection_error(&e) => continue,
            Err(_) => {
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        if table.open() >= max {
            table.evict_oldest_idle();
        }
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let wait = slots.clone().acquire_owned();
                match tokio::time::timeout(limits.admission_wait, wait).await {
                    Ok(Ok(permit)) => permit,
                    // Every connection is busy: close this one unanswered.
                    _ => continue,
                }
            }
        };
        next_id += 1;
        spawn_connection(
            next_id,
            stream,
            permit,
            &table,
            &builder,
            &router,
            limits.body_read_timeout,
        );
    }
    drop(listener);
    table.close_all();
    // Every permit back means every connection ended.
    let all = u32::try_from(permits).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await;
    Ok(())
}

fn spawn_connection(
    id: u64,
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    table: &Arc<Table>,
    builder: &http1::Builder,
    router: &Router,
    body_read_timeout: Duration,
) {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let close = Arc::new(Notify::new());
    table.lock().insert(
        id,
        Conn {
            in_flight: in_flight.clone(),
            close: close.clone(),
            closing: false,
        },
    );
    let inner = TowerToHyperService::new(router.clone());
    let counter = in_flight;
    let service = service_fn(move |req: Request<Incoming>| {
        let guard = InFlight::enter(&counter);
        let req = req.map(|body| Body::new(DeadlineBody::new(body, body_read_timeout)));
        let answer = hyper::service::Service::call(&inner, req);
        async move {
            let response: Response<Body> = match answer.await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(CountedBody {
                    body,
                    _guard: guard,
                })
            }))
        }
    });
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let table = table.clone();
    tokio::spawn(async move {
        let _permit = permit;
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => {}
            () = close.notified() => {
                // Closes at once when idle; otherwise after the request in
                // flight is answered.
                conn.as_mut().graceful_shutdown();
                let _ = conn.as_mut().await;
            }
        }
        table.lock().remove(&id);
    });
}

fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    // EMFILE (24) and ENFILE (23) on Linux and the BSDs.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Errors that concern only the connection being accepted.
fn is_per_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Counts one request in flight until its response body is done (or the
/// request is dropped).
#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        InFlight(counter.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted in flight while it
/// streams (an SSE stream is not idle).
#[derive(Debug)]
struct CountedBody {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for CountedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails once its deadline passes before it ends.
#[derive(Debug)]
struct DeadlineBody {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl DeadlineBody {
    fn new(body: Incoming, timeout: Duration) -> Self {
        Self {
            body,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

/// The error of a body that was not read in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within the body read timeout")]
pub struct BodyReadTimeout;

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.map(|f| f.map_err(Into::into))),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyReadTimeout)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
