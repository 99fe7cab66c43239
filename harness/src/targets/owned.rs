//! Targets the harness starts and owns (`--start CMD`, issue 26): it
//! starts each command in a process group of its own, waits a bounded
//! time for the target to answer, and stops every group it started on
//! every way out: a verdict, an error, a panic (the guard's `Drop`), and
//! Ctrl-C or SIGTERM (the command's future is dropped, so the guard is).
//! Jepsen and Maelstrom own the processes they test the same way; owning
//! them is what lets a later fault step kill, pause or restart one.
//!
//! `{port}` in a command is a free loopback port chosen for it, and
//! `{replica}` its index; the `--target` string may name the ports as
//! `{port}` (the first command's) or `{port0}`, `{port1}`...
//!
//! With `--db URL` (issue 49) the harness also owns the started store's
//! database link: `{db}` (`{dbN}`) in a command is the address of the
//! harness's own proxy in front of that database
//! ([`crate::targets::link`]), which `link` steps fault; a `--db` that no
//! command names is a wiring error.
//!
//! The harness does not trust that what it started is what it judges
//! (issue 38): a `--target` naming none of the started ports is a wiring
//! error before any scenario; a kill reaches every process the command
//! spawned (new group or session included, found by their marker,
//! [`crate::targets::reap`]) and is followed by the port refusing
//! connections; a restarted process must still be alive after the same
//! settle as the first start and hold its port. Each failure is
//! [`TargetError::Wiring`] (exit 2), never a verdict.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use reqkey_scenario::fault::{FaultAction, FaultStep};
use serde_json::Value;

use reqkey_scenario::link::{LinkStep, OwnedLinks};

use crate::targets::link::links::Links;
use crate::targets::{HttpRequest, HttpResponse, Level, LinkSummary, Target, TargetError};

/// The longest a `--start` target may take to answer (`--start-timeout-ms`
/// defaults to 30 s and may not exceed this).
pub const MAX_START_TIMEOUT_MS: u64 = 600_000;
/// How long a stopped group gets to exit on SIGTERM before SIGKILL.
const STOP_GRACE_MS: u64 = 2_000;
/// The most commands one run may start.
pub const MAX_STARTED: usize = 16;
/// How long a started (or restarted) target's processes must stay up
/// after it first answered, before the run trusts that the answer was
/// theirs.
pub const SETTLE_MS: u64 = 500;

/// One started command.
#[derive(Debug)]
struct Started {
    /// The command line as run.
    line: String,
    /// How every output names it ([`crate::secrets::redact_command`]).
    command: String,
    child: std::process::Child,
}

/// The processes the harness started; stopped (whole process groups) when
/// dropped.
#[derive(Debug, Default)]
pub struct Owned {
    started: Vec<Started>,
    /// The port chosen for each command, by index.
    pub ports: Vec<u16>,
    /// Whether `--target` names each command's port (set by
    /// [`Owned::wire_to`]): only a named port is checked after a fault.
    used: Vec<bool>,
    /// The database links the harness owns (`--db`), given to the
    /// commands as `{db}`; stopped after the processes.
    pub links: Option<Arc<Links>>,
}

/// The lowest port a started command is given: below it are the ports
/// services commonly take.
const FIRST_CHOSEN_PORT: u16 = 10_000;
/// How many random ports are tried before falling back to one the kernel
/// picks.
const PORT_TRIES: usize = 64;

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`;
/// Linux's default when it cannot be read).
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut bounds = text.split_whitespace().map(str::parse::<u16>);
            Some((bounds.next()?.ok()?, bounds.next()?.ok()?))
        })
        .unwrap_or((32_768, 60_999))
}

/// A free loopback port for a started command (bound, then released for
/// the command to take), chosen at random BELOW the kernel's ephemeral
/// range: the kernel never hands such a port to a `bind(0)` or an
/// outgoing connection, so between its choice and the command's bind (and
/// while a restarted replica is down) no other process is given it by
/// chance - only one that asks for that very port. (A port from `bind(0)`
/// was taken that way by a concurrent run and answered for the target.)
/// Not a test decision, so not from the run's seed.
fn free_port() -> std::io::Result<u16> {
    use rand::{RngExt, SeedableRng};
    let (low, _) = ephemeral_range();
    if low > FIRST_CHOSEN_PORT + 1_000 {
        let mut rng = rand::rngs::SmallRng::from_rng(&mut rand::rng());
        for _ in 0..PORT_TRIES {
            let port = rng.random_range(FIRST_CHOSEN_PORT..low);
            if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                return Ok(listener.local_addr()?.port());
            }
        }
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// `text` with `{port}` (the first port), `{portN}` and `{replica}` filled in.
pub fn fill(text: &str, ports: &[u16], replica: Option<usize>) -> String {
    let mut out = text.to_owned();
    for (i, p) in ports.iter().enumerate() {
        out = out.replace(&format!("{{port{i}}}"), &p.to_string());
    }
    if let Some(r) = replica {
        out = out.replace("{replica}", &r.to_string());
        if let Some(p) = ports.get(r) {
            out = out.replace("{port}", &p.to_string());
        }
    } else if let Some(p) = ports.first() {
        out = out.replace("{port}", &p.to_string());
    }
    out
}

impl Owned {
    /// Starts every command (`sh -c`, in a process group of its own, its
    /// output passed through to the harness's stderr).
    pub fn start(commands: &[String]) -> Result<Owned, String> {
        Owned::start_linked(commands, None)
    }

    /// Starts every command with `links` (`--db`) filled in as `{db}`;
    /// links that no command names are a wiring error.
    pub fn start_linked(commands: &[String], links: Option<Links>) -> Result<Owned, String> {
        if commands.len() > MAX_STARTED {
            return Err(format!("at most {MAX_STARTED} --start commands"));
        }
        // Before anything starts (issue 50: a command without `{port}`
        // listened elsewhere, and the run waited --start-timeout-ms).
        for (i, command) in commands.iter().enumerate() {
            names_a_port_placeholder(command, commands.len()).map_err(|why| {
                format!(
                    "--start command {} (`{}`) {why}: write `{{port}}` where it listens \
                     (the harness chooses a free port for each command and fills it in), \
                     and name the same `{{port}}` in --target",
                    i + 1,
                    crate::secrets::redact_command(command)
                )
            })?;
        }
        if let Some(links) = &links {
            if !commands.iter().any(|c| links.named_in(c)) {
                return Err(
                    "--db puts the harness's proxy in front of the database, but no --start command \
                     names `{db}` (or `{db0}`, `{db1}`...): the store would reach the database \
                     past the proxy, where no link fault strikes"
                        .into(),
                );
            }
        }
        // Before anything starts: a SIGKILL of the judge from here on
        // still stops what it starts (the watchdog).
        crate::targets::reap::guard_the_judge()?;
        let mut owned = Owned::default();
        owned.links = links.map(Arc::new);
        for _ in commands {
            owned
                .ports
                .push(free_port().map_err(|e| format!("no free port for --start: {e}"))?);
        }
        for (i, command) in commands.iter().enumerate() {
            let mut line = fill(command, &owned.ports, Some(i));
            if let Some(links) = &owned.links {
                line = links.fill(&line);
            }
            let command = crate::secrets::redact_command(&line);
            let child = start_one(&line, &command, i)?;
            owned.started.push(Started {
                line,
                command,
                child,
            });
        }
        Ok(owned)
    }

    /// Records which started ports `target` (the filled `--target` text)
    /// names; naming none is a wiring error: the faults would reach
    /// processes that are not the target.
    pub fn wire_to(&mut self, target: &str) -> Result<(), String> {
        self.used = self.ports.iter().map(|p| names_port(target, *p)).collect();
        if self.used.iter().any(|u| *u) {
            return Ok(());
        }
        Err(format!(
            "--target names none of the ports the harness chose for --start ({}): \
             write `{{port}}` (or `{{port0}}`, `{{port1}}`...) where the target listens, \
             so that the faults reach the processes that were started",
            self.ports
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// Is each port the target names held by the command it was chosen
    /// for (when the holder can be placed)? The first that is not.
    pub fn verify_answering(&self) -> Result<(), String> {
        for (index, port) in self.ports.iter().enumerate() {
            if self.used.get(index).copied().unwrap_or(false) {
                crate::targets::reap::answered_by_started(
                    *port,
                    crate::targets::reap::Scope::One(index),
                )
                .map_err(|e| {
                    format!("{e} (`{}` was started for it)", self.started[index].command)
                })?;
            }
        }
        Ok(())
    }

    /// Has a started command already exited? Its command and status.
    pub fn exited(&mut self) -> Option<String> {
        self.started
            .iter_mut()
            .find_map(|s| match s.child.try_wait() {
                Ok(Some(status)) => Some(format!("`{}` exited ({status})", s.command)),
                _ => None,
            })
    }

    /// The process ids of the groups started (each group's leader).
    pub fn pids(&self) -> Vec<u32> {
        self.started.iter().map(|s| s.child.id()).collect()
    }

    /// How many commands were started.
    pub fn len(&self) -> usize {
        self.started.len()
    }

    pub fn is_empty(&self) -> bool {
        self.started.is_empty()
    }

    fn group(&self, index: usize) -> Result<(Pid, &str), String> {
        let s = self.started.get(index).ok_or_else(|| {
            format!(
                "a fault aims at replica {index}, but the harness started {} command{}",
                self.started.len(),
                if self.started.len() == 1 { "" } else { "s" }
            )
        })?;
        let pid =
            i32::try_from(s.child.id()).map_err(|_| "a process id out of range".to_owned())?;
        Ok((Pid::from_raw(pid), &s.command))
    }

    /// Sends `signal` to the process group of command `index`.
    pub fn signal(&mut self, index: usize, signal: Signal) -> Result<(), String> {
        let (pid, command) = self.group(index)?;
        let sent =
            killpg(pid, signal).map_err(|e| format!("cannot send {signal} to `{command}`: {e}"));
        // Those that left the group (a new session) get it too.
        crate::targets::reap::signal_marked(crate::targets::reap::Scope::One(index), signal);
        sent
    }

    /// Kills command `index`'s group (SIGKILL: a crash) and reaps its
    /// leader, within [`STOP_GRACE_MS`]. A group already gone is no error.
    /// Every process the command spawned dies with it (found by its
    /// marker, whatever group or session it moved to), and the port the
    /// target names for it must then refuse connections: a port that
    /// still accepts is held by a process the kill did not reach.
    pub fn kill(&mut self, index: usize) -> Result<(), String> {
        let (pid, _) = self.group(index)?;
        let _ = killpg(pid, Signal::SIGKILL);
        let all_dead = crate::targets::reap::kill_marked(
            crate::targets::reap::Scope::One(index),
            STOP_GRACE_MS,
        );
        let s = &mut self.started[index];
        let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
        let mut reaped = false;
        while Instant::now() < deadline {
            match s.child.try_wait() {
                Ok(Some(_)) | Err(_) => {
                    reaped = true;
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        if !reaped || !all_dead {
            return Err(format!(
                "`{}` did not die within {STOP_GRACE_MS} ms of SIGKILL",
                s.command
            ));
        }
        if self.used.get(index).copied().unwrap_or(false) {
            let port = self.ports[index];
            let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
            while crate::targets::reap::accepts(port) {
                if Instant::now() >= deadline {
                    return Err(format!(
                        "after SIGKILL of `{}` and everything it started, port {port} still \
                         accepts connections: the process answering there is not one the \
                         harness started (a server that detached from its environment, or \
                         another process on the port)",
                        self.started[index].command
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Kills command `index` if it runs, and starts the same command line
    /// again (the same port): a crash and a restart.
    pub fn restart(&mut self, index: usize) -> Result<(), String> {
        self.kill(index)?;
        let s = &self.started[index];
        let child = start_one(&s.line, &s.command, index)?;
        self.started[index].child = child;
        Ok(())
    }

    /// Resumes every group (SIGCONT: harmless to a running one) and starts
    /// again each command that exited; the indices started again.
    pub fn heal(&mut self) -> Result<Vec<usize>, String> {
        let mut restarted = Vec::new();
        for index in 0..self.started.len() {
            if self.exited_one(index).is_some() {
                self.restart(index)?;
                restarted.push(index);
            } else {
                self.signal(index, Signal::SIGCONT)?;
            }
        }
        Ok(restarted)
    }

    /// Has command `index` exited? Its command and status.
    pub fn exited_one(&mut self, index: usize) -> Option<String> {
        let s = self.started.get_mut(index)?;
        match s.child.try_wait() {
            Ok(Some(status)) => Some(format!("`{}` exited ({status})", s.command)),
            _ => None,
        }
    }

    /// Stops every group: SIGTERM, up to [`STOP_GRACE_MS`] to exit, then
    /// SIGKILL. Bounded; idempotent. A paused group is resumed first, so
    /// that it can hear SIGTERM.
    pub fn stop(&mut self) {
        use crate::targets::reap::{kill_marked, signal_marked, Scope};
        for (index, s) in self.started.iter().enumerate() {
            if let Ok(pid) = i32::try_from(s.child.id()) {
                let _ = killpg(Pid::from_raw(pid), Signal::SIGCONT);
                let _ = killpg(Pid::from_raw(pid), Signal::SIGTERM);
            }
            // Those that left the group (a new session) hear it too.
            signal_marked(Scope::One(index), Signal::SIGCONT);
            signal_marked(Scope::One(index), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_millis(STOP_GRACE_MS);
        for s in &mut self.started {
            while Instant::now() < deadline {
                match s.child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
            if let Ok(pid) = i32::try_from(s.child.id()) {
                // The group may hold children that outlived their leader.
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
        for index in 0..self.started.len() {
            kill_marked(Scope::One(index), STOP_GRACE_MS);
        }
        // Every started handle was waited for: what is left to reap are
        // orphans the judge took in as subreaper.
        crate::targets::reap::reap_orphans();
        // And those that shed the marker (`setsid env -i`, an environment
        // rewritten in place): still the judge's descendants.
        crate::targets::reap::stop_descendants(STOP_GRACE_MS);
        self.started.clear();
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A target whose processes the harness started (`--start`): every call
/// goes to the target as opened; [`Target::fault`] kills, pauses, resumes
/// or restarts one of the processes. Dropping the last handle stops them
/// all ([`Owned`]'s `Drop`).
#[derive(Debug)]
pub struct OwnedTarget {
    inner: Arc<dyn Target>,
    owned: Arc<Mutex<Owned>>,
    processes: usize,
    /// The database links the harness owns (`--db`).
    links: Option<Arc<Links>>,
    /// The bound on a restarted process's return (`--start-timeout-ms`).
    start_timeout_ms: u64,
}

impl OwnedTarget {
    pub fn new(inner: Arc<dyn Target>, owned: Owned, start_timeout_ms: u64) -> OwnedTarget {
        let processes = owned.len();
        let links = owned.links.clone();
        OwnedTarget {
            inner,
            owned: Arc::new(Mutex::new(owned)),
            processes,
            links,
            start_timeout_ms,
        }
    }

    /// Runs `f` on the processes off the async workers (a kill reaps its
    /// process, a bounded wait).
    async fn with_owned<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Owned) -> T + Send + 'static,
    ) -> Result<T, TargetError> {
        let owned = Arc::clone(&self.owned);
        tokio::task::spawn_blocking(move || {
            let mut guard = owned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            f(&mut guard)
        })
        .await
        .map_err(|e| TargetError::Unreachable(format!("a fault's task failed: {e}")))
    }

    /// A restarted process is trusted as the first start was: still alive
    /// after [`SETTLE_MS`], and holding the port the target names for it
    /// (a copy that failed to bind exits, and an old process that kept
    /// answering is not the one started).
    async fn settled(&self, index: usize) -> Result<(), TargetError> {
        tokio::time::sleep(Duration::from_millis(SETTLE_MS)).await;
        self.with_owned(move |o| match o.exited_one(index) {
            Some(exited) => Err(format!(
                "the restarted target stopped within {SETTLE_MS} ms of answering: {exited}"
            )),
            None => o.verify_answering(),
        })
        .await?
        .map_err(TargetError::Wiring)
    }

    /// Waits, within `--start-timeout-ms`, until restarted process `index`
    /// answers `/health` again (its replica's, for an agent deployment).
    async fn await_health(&self, index: usize) -> Result<(), TargetError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(self.start_timeout_ms);
        loop {
            let answered = match self.inner.level() {
                Level::Agent => self
                    .inner
                    .http(HttpRequest {
                        method: "GET".into(),
                        path: "/health".into(),
                        replica: Some(index),
                        ..HttpRequest::default()
                    })
                    .await
                    .map(|r| r.status == 200),
                Level::Store => self.inner.health().await.map(|_| true),
                Level::Idem => self
                    .inner
                    .http(HttpRequest {
                        method: "GET".into(),
                        path: "/.reqkey/health".into(),
                        ..HttpRequest::default()
                    })
                    .await
                    .map(|r| r.status == 200),
            };
            if matches!(answered, Ok(true)) {
                return Ok(());
            }
            if let Some(exited) = self.with_owned(move |o| o.exited_one(index)).await? {
                return Err(TargetError::Unreachable(format!(
                    "the restarted target stopped before it answered: {exited}"
                )));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(TargetError::Unreachable(format!(
                    "the restarted target did not answer /health within --start-timeout-ms {}",
                    self.start_timeout_ms
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[async_trait]
impl Target for OwnedTarget {
    fn level(&self) -> Level {
        self.inner.level()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn warnings(&self) -> Vec<crate::targets::latency::TargetWarning> {
        self.inner.warnings()
    }

    fn slow_connects(&self) -> u64 {
        self.inner.slow_connects()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        self.inner.health().await
    }

    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        self.inner.store_call(request).await
    }

    async fn store_call_raw(&self, text: &str) -> Result<Value, TargetError> {
        self.inner.store_call_raw(text).await
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        self.inner.http(request).await
    }

    async fn http_within(
        &self,
        request: HttpRequest,
        timeout_ms: u64,
    ) -> Result<HttpResponse, TargetError> {
        self.inner.http_within(request, timeout_ms).await
    }

    fn long_calls(&self) -> bool {
        self.inner.long_calls()
    }

    fn sends_together(&self) -> bool {
        self.inner.sends_together()
    }

    async fn http_together(
        &self,
        requests: Vec<HttpRequest>,
    ) -> Vec<Result<crate::targets::Timed, TargetError>> {
        self.inner.http_together(requests).await
    }

    fn sent_requests(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        self.inner.sent_requests()
    }

    fn sequential(&self) -> bool {
        self.inner.sequential()
    }

    fn plays(&self, scenario: &reqkey_scenario::Scenario) -> Result<(), String> {
        self.inner.plays(scenario)
    }

    fn api_map(&self) -> Option<&crate::targets::api_map::ApiMap> {
        self.inner.api_map()
    }

    async fn finish(&self) -> Option<String> {
        self.inner.finish().await
    }

    fn started_processes(&self) -> usize {
        self.processes
    }

    async fn fault(&self, step: &FaultStep) -> Result<(), TargetError> {
        if step.after_ms > 0 {
            tokio::time::sleep(Duration::from_millis(step.after_ms)).await;
        }
        let (action, index) = (step.action, step.replica);
        self.with_owned(move |o| match action {
            FaultAction::Kill => o.kill(index),
            FaultAction::Stop => o.signal(index, Signal::SIGSTOP),
            FaultAction::Cont => o.signal(index, Signal::SIGCONT),
            FaultAction::Restart => o.restart(index),
        })
        .await?
        .map_err(TargetError::Wiring)?;
        if action == FaultAction::Restart {
            self.await_health(index).await?;
            self.settled(index).await?;
        }
        Ok(())
    }

    async fn heal(&self) -> Result<(), TargetError> {
        // The links first: a stalled link must not keep a process that
        // is started again from answering.
        let healed = match &self.links {
            Some(links) => links.heal().await,
            None => Default::default(),
        };
        let restarted = self
            .with_owned(Owned::heal)
            .await?
            .map_err(TargetError::Unreachable)?;
        for index in restarted {
            self.await_health(index).await?;
            self.settled(index).await?;
        }
        unstruck_error(&healed)
    }

    fn owned_links(&self) -> OwnedLinks {
        self.links.as_ref().map(|l| l.owned()).unwrap_or_default()
    }

    async fn link(&self, step: &LinkStep) -> Result<(), TargetError> {
        let Some(links) = &self.links else {
            return Err(TargetError::Unsupported(format!(
                "{}: the harness owns no database link (`--db URL` with `--start`)",
                step.label()
            )));
        };
        match step {
            LinkStep::Fault(fault) => {
                links.arm(*fault);
                Ok(())
            }
            LinkStep::Heal => unstruck_error(&links.heal().await),
        }
    }

    fn link_log(&self) -> Vec<String> {
        self.links
            .as_ref()
            .map(|l| l.take_log())
            .unwrap_or_default()
    }

    fn link_summary(&self) -> Option<LinkSummary> {
        let links = self.links.as_ref()?;
        let (struck, opaque, nodes) = links.summary();
        Some(LinkSummary {
            setup: links.describe(),
            struck,
            opaque,
            nodes,
        })
    }
}

/// A link fault armed and never struck, or struck without its effect
/// (the answer it waited for never came): the trial judged nothing about
/// it, so it is not judged (exit 2), never passed.
fn unstruck_error(healed: &crate::targets::link::nemesis::Healed) -> Result<(), TargetError> {
    let list = |faults: &[reqkey_scenario::link::LinkFault]| {
        faults
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut why = Vec::new();
    if !healed.unstruck.is_empty() {
        why.push(format!(
            "never struck: {} (the store sent no commit the harness's proxy recognises, \
             docs/link-faults.md, or sent it past the proxy)",
            list(&healed.unstruck)
        ));
    }
    if !healed.incomplete.is_empty() {
        why.push(format!(
            "struck, but the answer it acts on never came: {} (the connection closed first)",
            list(&healed.incomplete)
        ));
    }
    if why.is_empty() {
        return Ok(());
    }
    Err(TargetError::Wiring(format!(
        "link fault {}",
        why.join("; ")
    )))
}

/// Does `target` name `port` (`:PORT` not followed by another digit)?
/// Does a `--start` command name a port the harness fills in: `{port}`,
/// or `{portN}` with N one of the `count` commands'? Why not, if not.
fn names_a_port_placeholder(command: &str, count: usize) -> Result<(), String> {
    if command.contains("{port}") || (0..count).any(|i| command.contains(&format!("{{port{i}}}"))) {
        return Ok(());
    }
    match command.find("{port") {
        Some(_) => Err(format!(
            "names a `{{portN}}` beyond the {count} command(s) started"
        )),
        None => Err("names no port".to_owned()),
    }
}

fn names_port(target: &str, port: u16) -> bool {
    let needle = format!(":{port}");
    target.match_indices(&needle).any(|(at, _)| {
        !target[at + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// Starts one command line, marked as command `index`'s (its every
/// descendant inherits the marker); an error names it by its redacted
/// display.
fn start_one(line: &str, shown: &str, index: usize) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(line)
        .env(
            crate::targets::reap::OWNED_ENV,
            crate::targets::reap::marker(index),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start `{shown}`: {e}"))?;
    // What the command prints reaches the harness's stderr scrubbed of
    // the secrets its command line carried (a shell's complaint quotes it).
    if let Some(out) = child.stdout.take() {
        crate::secrets::forward_scrubbed(out);
    }
    if let Some(err) = child.stderr.take() {
        crate::secrets::forward_scrubbed(err);
    }
    Ok(child)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_chosen_port_is_free_and_below_the_ephemeral_range() {
        let (low, _) = ephemeral_range();
        for _ in 0..20 {
            let port = free_port().unwrap();
            if low > FIRST_CHOSEN_PORT + 1_000 {
                assert!(
                    (FIRST_CHOSEN_PORT..low).contains(&port),
                    "{port} is not in {FIRST_CHOSEN_PORT}..{low}"
                );
            }
            // Free: the command can bind it.
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
    }

    #[test]
    fn ports_and_replicas_are_filled_in() {
        let ports = [7001, 7002];
        assert_eq!(
            fill("x --port {port} -r {replica}", &ports, Some(1)),
            "x --port 7002 -r 1"
        );
        assert_eq!(
            fill(
                "http://127.0.0.1:{port0},http://127.0.0.1:{port1}",
                &ports,
                None
            ),
            "http://127.0.0.1:7001,http://127.0.0.1:7002"
        );
        assert_eq!(
            fill("store+http://127.0.0.1:{port}", &ports, None),
            "store+http://127.0.0.1:7001"
        );
    }

    #[test]
    fn a_started_group_is_gone_after_stop_children_included() {
        let mut owned =
            Owned::start(&[": {port}; sleep 300 & sleep 300; wait".to_owned()]).unwrap();
        let pid = owned.pids()[0];
        std::thread::sleep(Duration::from_millis(200));
        assert!(owned.exited().is_none());
        owned.stop();
        // Neither the shell nor its children are left running in the group
        // (a killed child may linger as a zombie until init reaps it).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !live_in_group(pid).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(live_in_group(pid), Vec::<u32>::new(), "group {pid}");
    }

    /// The fields of `/proc/PID/stat` after `pid (comm)` (comm may hold
    /// spaces): state, ppid, pgrp, ...
    fn stat_fields(proc_dir: &std::path::Path) -> Option<Vec<String>> {
        let stat = std::fs::read_to_string(proc_dir.join("stat")).ok()?;
        let after = stat.rfind(')').map(|i| &stat[i + 2..])?;
        Some(after.split_whitespace().map(str::to_owned).collect())
    }

    /// The state letter of process `pid` (`S`, `T` stopped, `Z`...).
    fn state(pid: u32) -> String {
        stat_fields(std::path::Path::new(&format!("/proc/{pid}")))
            .and_then(|f| f.into_iter().next())
            .unwrap_or_else(|| "?".into())
    }

    #[test]
    fn heal_resumes_a_paused_process_and_starts_a_killed_one_again() {
        let mut owned = Owned::start(&[
            ": {port}; sleep 300".to_owned(),
            ": {port}; sleep 300".to_owned(),
        ])
        .unwrap();
        let (paused, killed) = (owned.pids()[0], owned.pids()[1]);
        // Once it sleeps (a process stopped while it still execs may read `D`).
        let deadline = Instant::now() + Duration::from_secs(10);
        while state(paused) != "S" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        owned.signal(0, Signal::SIGSTOP).unwrap();
        owned.kill(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(paused) != "T" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(state(paused), "T");
        assert_eq!(owned.heal().unwrap(), vec![1]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(paused) == "T" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_ne!(state(paused), "T", "still paused");
        assert_eq!(owned.pids()[0], paused);
        assert_ne!(
            owned.pids()[1],
            killed,
            "the killed one runs again, as a new process"
        );
        assert!(owned.exited_one(1).is_none());
        owned.stop();
    }

    /// The processes of process group `pgid` that are not zombies.
    fn live_in_group(pgid: u32) -> Vec<u32> {
        let mut live = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Some(fields) = stat_fields(&entry.path()) else {
                continue;
            };
            if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
                live.push(entry.file_name().to_string_lossy().parse().unwrap_or(0));
            }
        }
        live
    }
}
