//! The fault-injecting TCP proxies of the database links: one listener on
//! 127.0.0.1 per database node, each connection relayed to its node and
//! framed by its protocol ([`super::pg_wire`], [`super::resp`]), so that
//! an armed fault ([`super::nemesis`]) strikes at the commit or the open
//! transaction it names. A Redis Cluster's announced node addresses are
//! rewritten to proxies made on demand ([`Registry::local_for`]), so a
//! cluster client reaches every node through one.
//!
//! Every wait is bounded: the connect to a node ([`CONNECT_TIMEOUT`]), a
//! write to either side ([`WRITE_TIMEOUT`]), an answer a fault waits for
//! ([`MAX_ANSWER_WAIT`]), a stall (the fault's `ms`, at most 60 s). Every
//! buffer is bounded: a frame by its protocol's cap (past it the
//! connection turns opaque: relayed unread, struck by no fault), the held
//! answer by [`MAX_HELD_BYTES`], the connections by [`MAX_CONNECTIONS`]
//! per node and the nodes by [`MAX_PROXIES`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqkey_scenario::link::{LinkFaultKind, LinkPoint, LinkProtocol, LinkSqlState};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::nemesis::{LinkEvent, Nemesis};
use super::pg_wire::{self, PgWire};
use super::resp::{self, RequestKind, RespWire};

/// Bound on connecting to a database node.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one write to either side.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on waiting for the answer a fault acts on.
pub const MAX_ANSWER_WAIT: Duration = Duration::from_secs(60);
/// Bound on the bytes of an answer held back.
pub const MAX_HELD_BYTES: usize = 16 << 20;
/// Connections relayed at once per node; more are closed at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Nodes proxied in one run (a cluster's announced nodes included).
pub const MAX_PROXIES: usize = 64;
/// How long a connection whose store went away still waits for its
/// node to close.
const LINGER: Duration = Duration::from_secs(5);
const READ_CHUNK: usize = 64 * 1024;

/// One proxied node.
#[derive(Debug)]
struct Proxy {
    host: String,
    port: u16,
    local: u16,
    task: tokio::task::JoinHandle<()>,
}

/// Every proxy of a run, by the node it fronts.
#[derive(Debug)]
pub struct Registry {
    handle: tokio::runtime::Handle,
    nemesis: Arc<Nemesis>,
    proxies: Mutex<Vec<Proxy>>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        for p in self
            .proxies
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            p.task.abort();
        }
    }
}

impl Registry {
    pub fn new(handle: tokio::runtime::Handle, nemesis: Arc<Nemesis>) -> Arc<Registry> {
        Arc::new(Registry {
            handle,
            nemesis,
            proxies: Mutex::new(Vec::new()),
        })
    }

    pub fn nemesis(&self) -> &Arc<Nemesis> {
        &self.nemesis
    }

    /// The local port of the proxy in front of `host:port` (link `db`,
    /// speaking `protocol`), started if there is none yet.
    pub fn local_for(
        self: &Arc<Self>,
        host: &str,
        port: u16,
        db: usize,
        protocol: LinkProtocol,
    ) -> Result<u16, String> {
        let mut proxies = self
            .proxies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(p) = proxies.iter().find(|p| p.host == host && p.port == port) {
            return Ok(p.local);
        }
        if proxies.len() >= MAX_PROXIES {
            return Err(format!(
                "more than {MAX_PROXIES} database nodes: {host}:{port} is not proxied"
            ));
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("no port for the link proxy: {e}"))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("no port for the link proxy: {e}"))?
            .port();
        let listener = {
            let _entered = self.handle.enter();
            TcpListener::from_std(listener).map_err(|e| format!("the link proxy: {e}"))?
        };
        let node = Node {
            host: host.to_owned(),
            port,
            db,
            protocol,
            label: format!("db {db} ({host}:{port})"),
        };
        let task = self
            .handle
            .spawn(accept_loop(listener, node, Arc::downgrade(self)));
        proxies.push(Proxy {
            host: host.to_owned(),
            port,
            local,
            task,
        });
        Ok(local)
    }

    /// How many nodes are proxied.
    pub fn len(&self) -> usize {
        self.proxies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The node a proxy fronts.
#[derive(Debug, Clone)]
struct Node {
    host: String,
    port: u16,
    db: usize,
    protocol: LinkProtocol,
    /// How the log names it: `db 0 (127.0.0.1:7101)`.
    label: String,
}

async fn accept_loop(listener: TcpListener, node: Node, registry: std::sync::Weak<Registry>) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors, most likely: wait, bounded, and go on.
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Some(registry) = registry.upgrade() else {
            return;
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            registry.nemesis.record(
                &node.label,
                format!("a connection refused: {MAX_CONNECTIONS} already relayed to this node"),
            );
            continue;
        };
        let node = node.clone();
        tokio::spawn(async move {
            relay(client, node, registry).await;
            drop(permit);
        });
    }
}

/// What a fault does to the answer of one group (PostgreSQL: the
/// messages up to a `ReadyForQuery`; Redis: one reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Swallow it, then reset the connection.
    ResetAfter,
    /// Hold it, stall `ms` (or until healed), then deliver it.
    HoldAfter(u64),
    /// Drop it and everything after; reset after `ms` (or when healed).
    Silence(u64),
    /// Swallow it and answer the error (with an idle `ReadyForQuery`).
    Refuse(LinkSqlState),
    /// Deliver it: the answer to a commit held and let go.
    Released,
}

/// The protocol state of a connection; `None` once opaque.
#[derive(Debug)]
enum Wire {
    Pg(PgWire),
    /// The framer, and what each pending reply answers.
    Redis(RespWire, VecDeque<RequestKind>),
}

/// The most requests a Redis connection may have unanswered before it is
/// relayed unread (its replies could no longer be matched).
const MAX_PENDING_REPLIES: usize = 100_000;

/// One request, protocol aside.
struct Outgoing {
    bytes: Vec<u8>,
    opens_group: bool,
    commit: bool,
    lone_commit_query: bool,
    kind: RequestKind,
}

/// One reply, protocol aside.
struct Incoming {
    bytes: Vec<u8>,
    /// Ends a group (`None`: a push or a message inside a group).
    ends_group: bool,
    /// PostgreSQL's transaction status after it.
    ready: Option<u8>,
}

/// How a connection ends.
enum End {
    /// Close both sides (FIN).
    Close,
    /// Reset both sides (RST): what a fault does.
    Reset,
}

struct Conn {
    client: TcpStream,
    server: TcpStream,
    node: Node,
    registry: Arc<Registry>,
    wire: Option<Wire>,
    /// Groups the forwarded requests opened, and groups answered.
    sent: u64,
    done: u64,
    tx_open: bool,
    /// What faults do to the answers of groups: group, fault id, effect.
    effects: Vec<(u64, u64, Effect)>,
    held: Vec<u8>,
    /// A fault waits for an answer, or a silence for its reset, until then.
    deadline: Option<Instant>,
    silenced: bool,
    heals: tokio::sync::watch::Receiver<u64>,
}

async fn relay(client: TcpStream, node: Node, registry: Arc<Registry>) {
    let nemesis = Arc::clone(&registry.nemesis);
    if nemesis.is_down(node.db) {
        // Refused: reset at once, never relayed to the database.
        nemesis.record(
            &node.label,
            "the link is down: a new connection refused (reset)",
        );
        let _ = client.set_zero_linger();
        return;
    }
    let server = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect((node.host.as_str(), node.port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            nemesis.record(
                &node.label,
                format!("the node did not take a connection: {e}"),
            );
            return;
        }
        Err(_) => {
            nemesis.record(
                &node.label,
                format!(
                    "the node did not take a connection within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ),
            );
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let wire = match node.protocol {
        LinkProtocol::Postgres => Wire::Pg(PgWire::new()),
        LinkProtocol::Redis => Wire::Redis(RespWire::new(), VecDeque::new()),
    };
    let mut conn = Conn {
        client,
        server,
        heals: nemesis.heals(),
        node,
        registry,
        wire: Some(wire),
        sent: 0,
        done: 0,
        tx_open: false,
        effects: Vec::new(),
        held: Vec::new(),
        deadline: None,
        silenced: false,
    };
    let end = conn.run().await;
    if let End::Reset = end {
        let _ = conn.client.set_zero_linger();
        let _ = conn.server.set_zero_linger();
    }
}

impl Conn {
    fn nemesis(&self) -> &Nemesis {
        &self.registry.nemesis
    }

    async fn run(&mut self) -> End {
        let mut from_client = vec![0u8; READ_CHUNK];
        let mut from_server = vec![0u8; READ_CHUNK];
        loop {
            let deadline = self.deadline;
            tokio::select! {
                read = self.client.read(&mut from_client) => match read {
                    Ok(0) | Err(_) => return self.client_gone().await,
                    Ok(n) => {
                        if let Some(end) = self.on_client_bytes(&from_client[..n]).await {
                            return end;
                        }
                    }
                },
                read = self.server.read(&mut from_server) => match read {
                    Ok(0) | Err(_) => {
                        let _ = tokio::time::timeout(WRITE_TIMEOUT, self.client.shutdown()).await;
                        return End::Close;
                    }
                    Ok(n) => {
                        if let Some(end) = self.on_server_bytes(&from_server[..n]).await {
                            return end;
                        }
                    }
                },
                changed = self.heals.changed() => {
                    if changed.is_err() || self.silenced {
                        if self.silenced {
                            self.nemesis().record(&self.node.label, "healed: the silenced connection reset");
                        }
                        return End::Reset;
                    }
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    let what = if self.silenced {
                        "the silenced connection reset after its ms"
                    } else {
                        "the answer a fault waited for did not come within 60 s: the connection reset"
                    };
                    self.nemesis().record(&self.node.label, what);
                    return End::Reset;
                }
            }
        }
    }

    /// The store closed its end: the node hears it, and the connection
    /// ends once the node closes (bounded). What the node still answers is
    /// framed (a fault waiting for an answer sees it come), then dropped.
    async fn client_gone(&mut self) -> End {
        let _ = tokio::time::timeout(WRITE_TIMEOUT, self.server.shutdown()).await;
        let mut from_server = vec![0u8; READ_CHUNK];
        let until = Instant::now() + LINGER;
        while let Ok(Ok(n)) =
            tokio::time::timeout_at(until, self.server.read(&mut from_server)).await
        {
            if n == 0 {
                break;
            }
            // The store is gone: its writes fail, and nothing waits on them.
            let _ = self.on_server_bytes(&from_server[..n]).await;
        }
        End::Close
    }

    async fn write_server(&mut self, bytes: &[u8]) -> Option<End> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.server.write_all(bytes)).await {
            Ok(Ok(())) => None,
            _ => Some(End::Reset),
        }
    }

    async fn write_client(&mut self, bytes: &[u8]) -> Option<End> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.client.write_all(bytes)).await {
            Ok(Ok(())) => None,
            _ => Some(End::Reset),
        }
    }

    /// Stalls the connection `ms` (both ways), or until a heal.
    async fn stall(&mut self, ms: u64) {
        let mut heals = self.heals.clone();
        heals.borrow_and_update();
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            _ = heals.changed() => {}
        }
        self.heals.borrow_and_update();
    }

    async fn on_client_bytes(&mut self, data: &[u8]) -> Option<End> {
        let (requests, opaque) = match &mut self.wire {
            None => return self.write_server(data).await,
            Some(Wire::Pg(wire)) => {
                let (frames, opaque) = wire.client_bytes(data);
                let opaque = opaque.map(|e| e.to_string());
                let out = frames
                    .into_iter()
                    .map(|f| Outgoing {
                        opens_group: f.opens_group,
                        commit: f.commit,
                        lone_commit_query: f.lone_commit_query,
                        kind: RequestKind::Other,
                        bytes: f.bytes,
                    })
                    .collect::<Vec<_>>();
                (out, opaque)
            }
            Some(Wire::Redis(wire, _)) => {
                let (frames, opaque) = wire.client_bytes(data);
                let opaque = opaque.map(|e| e.to_string());
                let out = frames
                    .into_iter()
                    .map(|r| Outgoing {
                        opens_group: true,
                        commit: r.kind == RequestKind::Commit,
                        lone_commit_query: false,
                        kind: r.kind,
                        bytes: r.bytes,
                    })
                    .collect::<Vec<_>>();
                (out, opaque)
            }
        };
        for request in requests {
            if let Some(end) = self.request(request).await {
                return Some(end);
            }
        }
        match opaque {
            Some(why) => self.turn_opaque(&why).await,
            None => None,
        }
    }

    /// Stops framing: what is buffered goes on as it is, and so does
    /// everything after.
    async fn turn_opaque(&mut self, why: &str) -> Option<End> {
        let (to_server, to_client) = match self.wire.take() {
            Some(Wire::Pg(mut w)) => w.take_unframed(),
            Some(Wire::Redis(mut w, _)) => w.take_unframed(),
            None => (Vec::new(), Vec::new()),
        };
        self.registry.nemesis.opaque(&self.node.label, why);
        if let Some(end) = self.write_server(&to_server).await {
            return Some(end);
        }
        self.write_client(&to_client).await
    }

    async fn request(&mut self, request: Outgoing) -> Option<End> {
        let db = self.node.db;
        if self.nemesis().is_down(db) {
            self.nemesis().record(
                &self.node.label,
                "the link is down: a request never reached the database; the connection reset",
            );
            return Some(End::Reset);
        }
        if self.tx_open {
            if let Some((id, _)) = self.nemesis().strike(db, LinkEvent::InTransaction) {
                self.nemesis().record(
                    &self.node.label,
                    "reset in-transaction: a statement sent inside the open transaction never reached the database; the connection reset",
                );
                self.nemesis().done(id);
                return Some(End::Reset);
            }
        }
        let group = self.sent + 1;
        if request.commit {
            let event = LinkEvent::Commit {
                protocol: self.node.protocol,
                lone_query: request.lone_commit_query,
            };
            if let Some((id, kind)) = self.nemesis().strike(db, event) {
                match self.commit_fault(id, kind, group).await {
                    Struck::Forward => {}
                    Struck::Replaced => return None,
                    Struck::End(end) => return Some(end),
                }
            }
        }
        if let Some(Wire::Redis(_, pending)) = &mut self.wire {
            pending.push_back(request.kind);
            if pending.len() > MAX_PENDING_REPLIES {
                if let Some(end) = self.write_server(&request.bytes).await {
                    return Some(end);
                }
                self.sent += 1;
                return self
                    .turn_opaque("more requests unanswered than the proxy matches")
                    .await;
            }
        }
        match request.kind {
            RequestKind::Multi => self.tx_open = true,
            RequestKind::Commit | RequestKind::Discard
                if self.node.protocol == LinkProtocol::Redis =>
            {
                self.tx_open = false;
            }
            _ => {}
        }
        if request.opens_group {
            self.sent += 1;
        }
        self.write_server(&request.bytes).await
    }

    /// What a fault that struck at a commit does; `group` is the group
    /// that answers the commit.
    async fn commit_fault(&mut self, id: u64, kind: LinkFaultKind, group: u64) -> Struck {
        let mut answer = |effect: Effect, what: String| {
            self.effects.push((group, id, effect));
            self.deadline = Some(Instant::now() + MAX_ANSWER_WAIT);
            self.registry.nemesis.record(&self.node.label, what);
            Struck::Forward
        };
        match kind {
            LinkFaultKind::Reset(LinkPoint::BeforeCommit | LinkPoint::InTransaction) => {
                self.nemesis().record(
                    &self.node.label,
                    format!("{kind}: the commit never reached the database; the connection reset"),
                );
                self.nemesis().done(id);
                Struck::End(End::Reset)
            }
            LinkFaultKind::Down => {
                self.nemesis().record(
                    &self.node.label,
                    format!("{kind}: the commit never reached the database; the connection reset, and the link refuses every connection until healed"),
                );
                self.nemesis().done(id);
                Struck::End(End::Reset)
            }
            LinkFaultKind::Reset(LinkPoint::AfterCommit) => answer(
                Effect::ResetAfter,
                format!("{kind}: the commit reached the database; its answer is dropped and the connection reset"),
            ),
            LinkFaultKind::Delay {
                at: LinkPoint::AfterCommit,
                ms,
            } => answer(
                Effect::HoldAfter(ms),
                format!("{kind}: the commit reached the database; its answer is held {ms} ms"),
            ),
            LinkFaultKind::Delay { ms, .. } => {
                self.nemesis()
                    .record(&self.node.label, format!("{kind}: the commit is held {ms} ms before it is sent"));
                self.stall(ms).await;
                // Let go: the fault has settled once the database answered.
                self.effects.push((group, id, Effect::Released));
                self.deadline = Some(Instant::now() + MAX_ANSWER_WAIT);
                Struck::Forward
            }
            LinkFaultKind::Drop { ms } => {
                let what = format!(
                    "{kind}: the commit reached the database; nothing it sends reaches the store, and the connection is reset after {ms} ms"
                );
                answer(Effect::Silence(ms), what)
            }
            LinkFaultKind::Error(state) if state.point() == LinkPoint::AfterCommit => answer(
                Effect::Refuse(state),
                format!("{kind}: the commit reached the database; the store is answered SQLSTATE {state}"),
            ),
            LinkFaultKind::Error(state) => {
                self.nemesis().record(
                    &self.node.label,
                    format!("{kind}: ROLLBACK sent in place of the commit; the store is answered SQLSTATE {state}"),
                );
                self.effects.push((group, id, Effect::Refuse(state)));
                self.deadline = Some(Instant::now() + MAX_ANSWER_WAIT);
                self.sent += 1;
                match self.write_server(&pg_wire::query("ROLLBACK")).await {
                    Some(end) => Struck::End(end),
                    None => Struck::Replaced,
                }
            }
        }
    }

    async fn on_server_bytes(&mut self, data: &[u8]) -> Option<End> {
        let (replies, opaque) = match &mut self.wire {
            None => return self.write_client(data).await,
            Some(Wire::Pg(wire)) => {
                let (frames, opaque) = wire.server_bytes(data);
                let opaque = opaque.map(|e| e.to_string());
                let out = frames
                    .into_iter()
                    .map(|m| Incoming {
                        ends_group: m.ready.is_some(),
                        ready: m.ready,
                        bytes: m.bytes,
                    })
                    .collect::<Vec<_>>();
                (out, opaque)
            }
            Some(Wire::Redis(wire, pending)) => {
                let (frames, opaque) = wire.server_bytes(data);
                let opaque = opaque.map(|e| e.to_string());
                let mut out = Vec::with_capacity(frames.len());
                for frame in frames {
                    if resp::is_push(&frame) {
                        out.push(Incoming {
                            bytes: frame,
                            ends_group: false,
                            ready: None,
                        });
                        continue;
                    }
                    let kind = pending.pop_front().unwrap_or(RequestKind::Other);
                    out.push(Incoming {
                        bytes: rewrite(&frame, kind, &self.node, &self.registry).unwrap_or(frame),
                        ends_group: true,
                        ready: None,
                    });
                }
                (out, opaque)
            }
        };
        for reply in replies {
            if let Some(end) = self.reply(reply).await {
                return Some(end);
            }
        }
        match opaque {
            Some(why) => self.turn_opaque(&why).await,
            None => None,
        }
    }

    async fn reply(&mut self, reply: Incoming) -> Option<End> {
        if let Some(status) = reply.ready {
            self.tx_open = matches!(status, b'T' | b'E');
        }
        if self.silenced {
            return None;
        }
        let group = self.done + 1;
        if reply.ends_group {
            self.done += 1;
        }
        let Some(at) = self.effects.iter().position(|(g, _, _)| *g == group) else {
            return self.write_client(&reply.bytes).await;
        };
        let (_, id, effect) = self.effects[at];
        if let Effect::Silence(ms) = effect {
            self.silenced = true;
            self.effects.clear();
            self.deadline = Some(Instant::now() + Duration::from_millis(ms));
            self.nemesis().done(id);
            return None;
        }
        if let Effect::HoldAfter(_) = effect {
            self.held.extend_from_slice(&reply.bytes);
            if self.held.len() > MAX_HELD_BYTES {
                self.nemesis().record(
                    &self.node.label,
                    "the held answer grew past 16 MiB: the connection reset",
                );
                return Some(End::Reset);
            }
        }
        if !reply.ends_group {
            return None;
        }
        self.effects.remove(at);
        self.deadline = None;
        // The answer the fault waited for came: its effect happens now.
        self.nemesis().done(id);
        match effect {
            Effect::ResetAfter => Some(End::Reset),
            Effect::HoldAfter(ms) => {
                self.stall(ms).await;
                let held = std::mem::take(&mut self.held);
                self.nemesis()
                    .record(&self.node.label, "the held answer delivered");
                self.write_client(&held).await
            }
            Effect::Refuse(state) => {
                if self.node.protocol == LinkProtocol::Postgres {
                    self.tx_open = false;
                }
                let message = match state {
                    LinkSqlState::CompletionUnknown => {
                        "reqkey link fault: the completion of the commit is unknown"
                    }
                    LinkSqlState::SerializationFailure => {
                        "reqkey link fault: could not serialize access; the transaction was rolled back"
                    }
                    LinkSqlState::DeadlockDetected => {
                        "reqkey link fault: deadlock detected; the transaction was rolled back"
                    }
                };
                self.write_client(&pg_wire::refusal(state.code(), message))
                    .await
            }
            Effect::Released => self.write_client(&reply.bytes).await,
            Effect::Silence(_) => None,
        }
    }
}

/// What the proxy does with a commit after a fault struck it.
enum Struck {
    /// Send it on.
    Forward,
    /// Something else was sent in its place.
    Replaced,
    /// The connection ends.
    End(End),
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A Redis reply naming cluster nodes, rewritten to name their proxies.
fn rewrite(
    frame: &[u8],
    kind: RequestKind,
    node: &Node,
    registry: &Arc<Registry>,
) -> Option<Vec<u8>> {
    let mut map =
        |host: &str, port: u16| match registry.local_for(host, port, node.db, node.protocol) {
            Ok(local) => Some(local),
            Err(e) => {
                registry.nemesis.record(&node.label, e);
                None
            }
        };
    if frame.first() == Some(&b'-') {
        return resp::rewrite_redirect(frame, &node.host, &mut map);
    }
    if kind == RequestKind::ClusterSlots {
        let mut unmapped = 0;
        let out = resp::rewrite_cluster_slots(frame, &node.host, &mut map, &mut unmapped);
        if unmapped > 0 {
            registry.nemesis.record(
                &node.label,
                format!("CLUSTER SLOTS named {unmapped} nodes that are not proxied"),
            );
        }
        return out;
    }
    None
}
