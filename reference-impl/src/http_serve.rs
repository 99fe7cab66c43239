//! The HTTP/1.1 accept loop the reference servers and `reqkey proxy` run
//! on, with the limits a server exposed to any client needs (issue 15 F5,
//! issue 29).
//!
//! `axum::serve` has no timeouts and no connection cap: a client that opens
//! connections and sends nothing keeps them (and their file descriptors)
//! forever, and once the process runs out of descriptors a fresh client is
//! never even accepted. This loop serves a [`Handler`] (an axum [`Router`]
//! through [`serve`], any other service through [`serve_handler`])
//! through hyper's HTTP/1 connection directly, with:
//!
//! - **a header read timeout** ([`ServerLimits::header_read_timeout`]):
//!   hyper closes a connection whose request head does not arrive in time.
//!   Its timer also runs while a keep-alive connection waits for its next
//!   request, so it is the idle timeout as well;
//! - **a body read timeout** ([`ServerLimits::body_read_timeout`]): a request
//!   body that is not complete in time ends in an error the handlers turn
//!   into their ordinary "body could not be read" answer;
//! - **a write timeout** ([`ServerLimits::write_timeout`]): a write to the
//!   client that makes no progress for that long closes the connection, so
//!   a client that never reads its answer does not hold it (and the memory
//!   it takes) for as long as it stays connected;
//! - **a connection cap** ([`ServerLimits::max_connections`], a semaphore):
//!   when it is reached, or when `accept` fails for want of descriptors, the
//!   **oldest idle** connection is closed to make room, so a flood of idle
//!   connections never starves a fresh client. Idle means no request in
//!   flight and no response being streamed, *or* a write stalled for
//!   [`ServerLimits::stalled_write_idle`] (the client stopped reading: such
//!   a connection is closed at once, its answer dropped), *or* a request
//!   head that began arriving [`ServerLimits::partial_head_idle`] ago and
//!   is still not complete (a half-sent head, issue 39: also closed at
//!   once, because hyper, asked to close it gracefully, would wait for the
//!   rest of the head until the header read timeout, its slot held all the
//!   while, so 400 of them kept fresh clients waiting ~9 s). A connection
//!   closed at once gives its slot back at once, so the connection that
//!   evicted it is served now rather than after the evicted task ends.
//!   Open connections stay below `max_connections +` [`EVICTION_SLACK`]
//!   (those closing gracefully included; those closed at once lose their
//!   socket a moment after their slot): when every connection is busy, a
//!   new one waits up to
//!   [`ServerLimits::admission_wait`] for a slot in a task of its own (at
//!   most [`EVICTION_SLACK`] wait at once; more are closed unanswered), so
//!   the accept loop itself never waits and a fresh client behind a queue
//!   of waiting ones is accepted at once.
//!
//! Shutdown is graceful and bounded: accepting stops, every connection is
//! asked to close once its request in flight is answered, and the loop waits
//! up to [`ServerLimits::shutdown_grace`] for them.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use axum::Router;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The bytes a stalled write must get through before its write deadline
/// is lifted (see [`ServerLimits::write_timeout`]).
pub const WRITE_PROGRESS_BYTES: usize = 64 * 1024;

/// How long a failed `accept` (other than a descriptor shortage) pauses
/// the loop before it accepts again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(20);

/// Connections that may be open beyond `max_connections` while the idle
/// connections closed to make room for them finish closing; also the most
/// accepted connections that wait for a slot at once.
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
/// serve` commands and `reqkey proxy` use.
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
    /// A write to the client that makes no progress for this long closes
    /// the connection. Progress is [`WRITE_PROGRESS_BYTES`] written (or
    /// the whole answer so far): a client that reads less than that per
    /// write timeout while an answer waits for it is closed.
    pub write_timeout: Duration,
    /// A connection whose write has made no progress for this long counts
    /// as idle for the connection cap (and is closed at once when evicted).
    pub stalled_write_idle: Duration,
    /// A connection whose request head began arriving this long ago, and
    /// is not complete yet, with no request in flight, counts as idle for
    /// the connection cap (and is closed at once when evicted). The grace
    /// keeps a head whose bytes are arriving right now from being cut.
    pub partial_head_idle: Duration,
    /// How long a connection accepted while every slot is busy waits for
    /// one (in its own task) before it is closed.
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
            write_timeout: Duration::from_secs(10),
            stalled_write_idle: Duration::from_secs(1),
            partial_head_idle: Duration::from_millis(50),
            admission_wait: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// What one connection shares with the accept loop.
#[derive(Debug)]
struct ConnShared {
    /// Requests in flight, responses still streaming included.
    in_flight: AtomicUsize,
    /// Since when (ms from the loop's epoch, plus one) a write has been
    /// pending without progress; 0 while none is.
    stalled_since_ms: AtomicU64,
    /// Since when (ms from the loop's epoch, plus one) bytes of a request
    /// head have been read with no request in flight; 0 from the moment
    /// the head is complete (the service is called) until the next one.
    head_since_ms: AtomicU64,
    /// Asks the connection to close once idle (eviction or shutdown).
    close: Notify,
    /// The close asked is immediate (a stalled write): drop, not drain.
    force: AtomicBool,
}

/// One open connection, as the accept loop sees it.
#[derive(Debug)]
struct Conn {
    shared: Arc<ConnShared>,
    /// Already asked to close gracefully.
    closing: bool,
    /// Already asked to close at once.
    forced: bool,
    /// Its slot: given back when the connection's task ends, or at once
    /// when it is closed at once (see [`force_close`]).
    permit: Option<OwnedSemaphorePermit>,
}

/// The open connections, by id; ids grow, so the first is the oldest.
#[derive(Debug)]
struct Table {
    conns: Mutex<BTreeMap<u64, Conn>>,
    epoch: Instant,
    stalled_write_idle_ms: u64,
    partial_head_idle_ms: u64,
}

impl Table {
    fn new(limits: &ServerLimits) -> Self {
        Self {
            conns: Mutex::new(BTreeMap::new()),
            epoch: Instant::now(),
            stalled_write_idle_ms: duration_ms(limits.stalled_write_idle),
            partial_head_idle_ms: duration_ms(limits.partial_head_idle),
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Conn>> {
        // Only inserts, removes and flag flips happen under it; poison is benign.
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ms(&self) -> u64 {
        duration_ms(self.epoch.elapsed())
    }

    /// Makes room for one more connection; `false` if nothing is idle.
    ///
    /// Every half-sent head (a request head arriving for
    /// [`ServerLimits::partial_head_idle`], no request in flight) is closed
    /// at once, all of them: each is as good as closed already (asked to
    /// close gracefully, hyper would wait for the rest of the head), and
    /// their slots go first to the connections waiting for one (the
    /// semaphore is fair), so freeing one per new connection would leave a
    /// fresh client queued behind a flood of them. Otherwise the oldest
    /// idle connection is closed: one whose write stalled at once, one
    /// without a request in flight gracefully.
    fn evict_oldest_idle(&self) -> bool {
        if self.close_half_heads(self.partial_head_idle_ms) {
            return true;
        }
        let now = self.now_ms();
        let older_than = |since: u64, ms: u64| since != 0 && now.saturating_sub(since - 1) >= ms;
        let idle = |conn: &Conn| conn.shared.in_flight.load(Ordering::Acquire) == 0;
        let mut conns = self.lock();
        for conn in conns.values_mut() {
            let stalled = older_than(
                conn.shared.stalled_since_ms.load(Ordering::Acquire),
                self.stalled_write_idle_ms,
            );
            if stalled && !conn.forced {
                force_close(conn);
                return true;
            }
            if !conn.closing && idle(conn) {
                conn.closing = true;
                conn.shared.close.notify_one();
                return true;
            }
        }
        false
    }

    /// Closes at once every connection whose request head has been
    /// arriving for `min_age_ms` (and is not complete, no request in
    /// flight); `false` if there is none.
    fn close_half_heads(&self, min_age_ms: u64) -> bool {
        let now = self.now_ms();
        let mut freed = false;
        for conn in self.lock().values_mut() {
            let since = conn.shared.head_since_ms.load(Ordering::Acquire);
            let half_head = since != 0
                && now.saturating_sub(since - 1) >= min_age_ms
                && conn.shared.in_flight.load(Ordering::Acquire) == 0;
            if half_head && !conn.forced {
                force_close(conn);
                freed = true;
            }
        }
        freed
    }

    /// Open connections, those asked to close included.
    fn open(&self) -> usize {
        self.lock().len()
    }

    fn close_all(&self) {
        for conn in self.lock().values_mut() {
            conn.closing = true;
            conn.shared.close.notify_one();
        }
    }
}

/// Asks `conn` to close at once (its task drops it, unanswered), and gives
/// its slot back now: the connection that evicted it takes that slot, not
/// a place in the admission queue behind a task that has yet to run.
fn force_close(conn: &mut Conn) {
    conn.forced = true;
    conn.closing = true;
    conn.permit = None;
    conn.shared.force.store(true, Ordering::Release);
    conn.shared.close.notify_one();
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request handler [`serve_handler`] serves: one call per request, its
/// body bounded by the body read timeout. An error closes the connection
/// without an answer (what `reqkey proxy`'s faults use).
pub trait Handler: Send + Sync + 'static {
    /// The response body.
    type Body: HttpBody<Data = Bytes, Error = Self::BodyError> + Send + Unpin + 'static;
    /// The response body's error.
    type BodyError: Into<Box<dyn std::error::Error + Send + Sync>>;
    /// Why a request is answered by closing the connection.
    type Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static;
    /// Answers one request.
    fn call(
        self: Arc<Self>,
        req: Request<DeadlineBody>,
    ) -> impl Future<Output = Result<Response<Self::Body>, Self::Error>> + Send + 'static;
}

/// An axum router as a [`Handler`].
#[derive(Debug, Clone)]
struct RouterHandler(Router);

impl Handler for RouterHandler {
    type Body = Body;
    type BodyError = axum::Error;
    type Error = Infallible;

    fn call(
        self: Arc<Self>,
        req: Request<DeadlineBody>,
    ) -> impl Future<Output = Result<Response<Body>, Infallible>> + Send + 'static {
        let inner = TowerToHyperService::new(self.0.clone());
        hyper::service::Service::call(&inner, req.map(Body::new))
    }
}

/// Serves `router` on `listener` under `limits` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_handler(listener, Arc::new(RouterHandler(router)), limits, shutdown).await
}

/// Rewrites, in place, each chunk read from a connection before the HTTP
/// parser sees it. Only deliberately broken variants set one (a server
/// whose own reading of the request head is wrong, which hyper's parser
/// would otherwise hide); a correct server reads the bytes as they came.
pub type ReadRewrite = fn(&mut [u8]);

/// [`serve`], every chunk read passed through `rewrite` first (see
/// [`ReadRewrite`]).
pub async fn serve_rewriting(
    listener: TcpListener,
    router: Router,
    limits: ServerLimits,
    rewrite: Option<ReadRewrite>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_handler_with(
        listener,
        Arc::new(RouterHandler(router)),
        limits,
        rewrite,
        shutdown,
    )
    .await
}

/// Everything a connection task needs, shared by the loop and the tasks
/// that wait for a slot.
struct Acceptor<H> {
    rewrite: Option<ReadRewrite>,
    handler: Arc<H>,
    table: Arc<Table>,
    builder: http1::Builder,
    limits: ServerLimits,
    slots: Arc<Semaphore>,
    /// Accepted connections waiting for a slot right now.
    waiting: Arc<AtomicUsize>,
}

/// Serves `handler` on `listener` under `limits` until `shutdown` completes.
///
/// Once `max_connections` are open, each new connection asks the oldest
/// idle one to close and is served at once: closing an idle connection
/// takes a moment, so up to [`EVICTION_SLACK`] more may be open while
/// those closes complete (the semaphore holds `max_connections +
/// EVICTION_SLACK` permits). Only when no permit is free does a new
/// connection wait, in a task of its own, at most
/// [`ServerLimits::admission_wait`], and is then closed unanswered.
pub async fn serve_handler<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_handler_with(listener, handler, limits, None, shutdown).await
}

async fn serve_handler_with<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    limits: ServerLimits,
    rewrite: Option<ReadRewrite>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = max + EVICTION_SLACK;
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    let acceptor = Arc::new(Acceptor {
        rewrite,
        handler,
        table: Arc::new(Table::new(&limits)),
        builder,
        limits,
        slots: Arc::new(Semaphore::new(permits)),
        waiting: Arc::new(AtomicUsize::new(0)),
    });
    let table = acceptor.table.clone();
    let slots = acceptor.slots.clone();
    let mut next_id: u64 = 0;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                // An answer's head and body (and each event of a stream)
                // go out as separate writes: without TCP_NODELAY the second
                // waits for the client's delayed ACK (about 40 ms a stream
                // answer, the stall `targets/latency.rs` warns targets of).
                let _ = stream.set_nodelay(true);
                stream
            }
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
        next_id += 1;
        let id = next_id;
        let mut acquired = slots.clone().try_acquire_owned();
        if acquired.is_err() {
            // No slot: this connection would wait (up to the admission
            // wait) or be closed unanswered. Rather every half-sent head,
            // however young (a flood of them reopened as fast as they are
            // closed keeps most of them younger than the grace): the slots
            // go to those waiting first, any left to this one.
            if table.close_half_heads(0) {
                acquired = slots.clone().try_acquire_owned();
            }
        }
        match acquired {
            Ok(permit) => spawn_connection(&acceptor, id, stream, permit),
            Err(_) => {
                // Bounded: at most EVICTION_SLACK connections wait at once;
                // beyond that a new one is closed unanswered at once.
                if acceptor.waiting.fetch_add(1, Ordering::AcqRel) >= EVICTION_SLACK {
                    acceptor.waiting.fetch_sub(1, Ordering::AcqRel);
                    continue;
                }
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let wait = acceptor.slots.clone().acquire_owned();
                    let got = tokio::time::timeout(acceptor.limits.admission_wait, wait).await;
                    acceptor.waiting.fetch_sub(1, Ordering::AcqRel);
                    // Every connection stayed busy: close this one unanswered.
                    if let Ok(Ok(permit)) = got {
                        spawn_connection(&acceptor, id, stream, permit);
                    }
                });
            }
        }
    }
    drop(listener);
    table.close_all();
    // Every permit back means every connection ended.
    let all = u32::try_from(permits).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(limits.shutdown_grace, slots.acquire_many(all)).await;
    Ok(())
}

fn spawn_connection<H: Handler>(
    acceptor: &Arc<Acceptor<H>>,
    id: u64,
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
) {
    let shared = Arc::new(ConnShared {
        in_flight: AtomicUsize::new(0),
        stalled_since_ms: AtomicU64::new(0),
        head_since_ms: AtomicU64::new(0),
        close: Notify::new(),
        force: AtomicBool::new(false),
    });
    let table = acceptor.table.clone();
    table.lock().insert(
        id,
        Conn {
            shared: shared.clone(),
            closing: false,
            forced: false,
            permit: Some(permit),
        },
    );
    let handler = acceptor.handler.clone();
    let body_read_timeout = acceptor.limits.body_read_timeout;
    let counter = shared.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let guard = InFlight::enter(&counter);
        // The head is complete (counted in flight first, so the evictor
        // never sees this connection as a half-sent head nor as idle).
        counter.head_since_ms.store(0, Ordering::Release);
        let req = req.map(|body| DeadlineBody::new(body, body_read_timeout));
        let answer = handler.clone().call(req);
        async move {
            let response = answer.await?;
            Ok::<_, H::Error>(response.map(|body| CountedBody {
                body,
                _guard: guard,
            }))
        }
    });
    let mut io = TimedIo::new(
        stream,
        acceptor.limits.write_timeout,
        shared.clone(),
        table.clone(),
    );
    io.rewrite = acceptor.rewrite;
    let conn = acceptor.builder.serve_connection(TokioIo::new(io), service);
    tokio::spawn(async move {
        tokio::pin!(conn);
        let mut draining = false;
        // Bounded: each round ends the connection or consumes one close
        // request; a drain ends with the request in flight, and a write
        // that makes no progress ends at the write timeout.
        loop {
            tokio::select! {
                _ = conn.as_mut() => break,
                () = shared.close.notified() => {
                    if shared.force.load(Ordering::Acquire) {
                        // A stalled write: the client does not read; drop it.
                        break;
                    }
                    if !draining {
                        // Closes at once when idle; otherwise after the
                        // request in flight is answered.
                        conn.as_mut().graceful_shutdown();
                        draining = true;
                    }
                }
            }
        }
        table.lock().remove(&id);
    });
}

/// The connection's socket, with the write timeout: a write that stays
/// pending past the deadline fails (hyper then closes the connection), and
/// the moment it became pending is published for the eviction policy.
struct TimedIo {
    stream: TcpStream,
    write_timeout: Duration,
    /// Armed while a write is pending without progress.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Bytes written since the deadline was armed.
    progress_bytes: usize,
    /// The write deadline passed: the socket is reset when dropped.
    expired: bool,
    shared: Arc<ConnShared>,
    table: Arc<Table>,
    /// Applied to every chunk read ([`ReadRewrite`]; broken variants only).
    rewrite: Option<ReadRewrite>,
}

impl TimedIo {
    fn new(
        stream: TcpStream,
        write_timeout: Duration,
        shared: Arc<ConnShared>,
        table: Arc<Table>,
    ) -> Self {
        Self {
            stream,
            write_timeout,
            deadline: None,
            progress_bytes: 0,
            expired: false,
            rewrite: None,
            shared,
            table,
        }
    }

    /// Bookkeeping around one write-side poll. A write that stays pending
    /// arms the deadline (once); the deadline is disarmed by real progress
    /// only: [`WRITE_PROGRESS_BYTES`] written since it was armed, or hyper
    /// flushing (which it does once its whole buffer is written). A client
    /// that lets a few bytes through now and then (the kernel collapses a
    /// full receive queue to take a little more) is still stalled.
    fn track<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<T>>,
        written: impl FnOnce(&T) -> Option<usize>,
    ) -> Poll<std::io::Result<T>> {
        let expired = || {
            Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client did not read its answer within the write timeout",
            )))
        };
        match polled {
            Poll::Pending => {
                if self.deadline.is_none() {
                    self.deadline = Some(Box::pin(tokio::time::sleep(self.write_timeout)));
                    self.progress_bytes = 0;
                    let since = self.table.now_ms().saturating_add(1);
                    self.shared.stalled_since_ms.store(since, Ordering::Release);
                }
                match self.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => {
                        self.expired = true;
                        expired()
                    }
                    _ => Poll::Pending,
                }
            }
            Poll::Ready(Ok(value)) => {
                let Some(deadline) = self.deadline.as_ref() else {
                    return Poll::Ready(Ok(value));
                };
                match written(&value) {
                    // A flush: hyper's buffer is written out.
                    None => self.progress_bytes = WRITE_PROGRESS_BYTES,
                    Some(n) => self.progress_bytes = self.progress_bytes.saturating_add(n),
                }
                if self.progress_bytes >= WRITE_PROGRESS_BYTES {
                    self.deadline = None;
                    self.shared.stalled_since_ms.store(0, Ordering::Release);
                } else if deadline.is_elapsed() {
                    self.expired = true;
                    return expired();
                }
                Poll::Ready(Ok(value))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl Drop for TimedIo {
    /// A connection closed for a stalled write (its deadline passed, or it
    /// was evicted as stalled) is reset, not closed gracefully: a graceful
    /// close would keep the unsent answer in the kernel's send buffer (up
    /// to megabytes) for as long as the client keeps not reading.
    fn drop(&mut self) {
        if self.expired || self.shared.force.load(Ordering::Acquire) {
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for TimedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if let (Some(rewrite), Poll::Ready(Ok(()))) = (self.rewrite, &polled) {
            rewrite(&mut buf.filled_mut()[before..]);
        }
        let read_some = matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before;
        if read_some
            && self.shared.in_flight.load(Ordering::Acquire) == 0
            && self.shared.head_since_ms.load(Ordering::Acquire) == 0
        {
            // The first bytes of a request head; the service, called once
            // the head is complete, clears the mark.
            let since = self.table.now_ms().saturating_add(1);
            self.shared.head_since_ms.store(since, Ordering::Release);
        }
        polled
    }
}

impl AsyncWrite for TimedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.track(cx, polled, |n| Some(*n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.track(cx, polled, |n| Some(*n))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        self.track(cx, polled, |()| None)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.track(cx, polled, |()| Some(0))
    }
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
struct InFlight(Arc<ConnShared>);

impl InFlight {
    fn enter(shared: &Arc<ConnShared>) -> Self {
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted in flight while it
/// streams (an SSE stream is not idle).
#[derive(Debug)]
struct CountedBody<B> {
    body: B,
    _guard: InFlight,
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for CountedBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
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
pub struct DeadlineBody {
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
