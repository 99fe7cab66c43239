//! Finding everything a `--start` command spawned, and who answers on a
//! port: the facts that let the harness verify its faults reach the
//! target and stop every process it started, on every way out.
//!
//! Why a marker in the environment: a process group is not enough. A
//! server that detaches (`setsid`, a double fork, a container runtime's
//! shim) leaves its group and its session, and then a kill aimed at the
//! group reaches a shell while the server keeps answering. Every started
//! command gets `REQKEY_OWNED_BY=<run>.<index>` in its environment, which
//! every descendant inherits whatever group or session it moves to, so
//! [`marked`] finds them all in `/proc` (Linux; the same way
//! `harness/tests/owned_targets.rs` checks that none is left).
//!
//! Why a watchdog: SIGKILL of the judge runs no code of the judge. A
//! parent-death signal (`PR_SET_PDEATHSIG`) reaches only the direct child
//! and is cleared by every fork, so it cannot stop a detached server; and
//! setting it needs code between fork and exec (unsafe, which the
//! workspace forbids). So the judge starts one watchdog (`reqkey` itself,
//! hidden subcommand `__watchdog`, in a process group of its own) that
//! blocks reading a pipe only the judge holds: when the judge ends by any
//! path, the pipe closes and the watchdog kills every process carrying the
//! run's marker, then exits. The judge is also a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so an orphaned descendant stays under it
//! while it lives instead of passing to init.
//!
//! Why the judge's descendants as well as the marker: a helper started
//! with `setsid env -i ...` sheds the marker with its environment, and one
//! that rewrites its environment in place (PostgreSQL, setproctitle,
//! perl's `$0`) erases it from `/proc/PID/environ`. Either is still a
//! descendant of the judge, or, once its parent died, an orphan the judge
//! took in as subreaper. So the `reqkey` process ([`own_every_descendant`],
//! set by the command line; a test process running many judges at once
//! does not) stops every live descendant but the watchdog on every way
//! out ([`stop_descendants`]), and the watchdog keeps a fresh list of
//! them (pid and start time, every [`WATCH_POLL_MS`]) to stop when the
//! judge is SIGKILLed: orphans are then re-parented to init, out of the
//! judge's tree, so only that list still names them. What no list can
//! hold: a process spawned less than a poll before the SIGKILL that shed
//! the marker, and a process the target had another service start for it
//! (systemd, a container runtime): neither is a descendant.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Is this process the judge (the `reqkey` binary), so that every
/// descendant is its own to stop?
static OWN_DESCENDANTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// How often the watchdog lists the judge's descendants.
pub const WATCH_POLL_MS: u64 = 100;

/// Makes every descendant of this process its own to stop on every way
/// out (the `reqkey` binary does; library tests, running many judges in
/// one process, do not).
pub fn own_every_descendant() {
    OWN_DESCENDANTS.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// A live process: its pid, parent and start time (clock ticks after
/// boot: with the pid, who it is, whatever pid reuse does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Proc {
    pid: i32,
    ppid: i32,
    start: u64,
}

/// Every live (not zombie) process of `/proc`, bounded.
fn processes() -> Vec<Proc> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's `)`: state, ppid, ..., starttime (field 22).
        let Some(rest) = stat.rfind(')').and_then(|i| stat.get(i + 2..)) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(state), Some(ppid), Some(start)) =
            (fields.first(), fields.get(1), fields.get(19))
        else {
            continue;
        };
        if *state == "Z" {
            continue;
        }
        if let (Ok(ppid), Ok(start)) = (ppid.parse(), start.parse()) {
            found.push(Proc { pid, ppid, start });
        }
        if found.len() >= 16 * MAX_MARKED {
            break;
        }
    }
    found
}

/// The live descendants of `roots` in `table` (not the roots).
fn descendants_of(table: &[Proc], roots: &[i32]) -> Vec<Proc> {
    let mut found: Vec<Proc> = Vec::new();
    let mut frontier: Vec<i32> = roots.to_vec();
    while let Some(parent) = frontier.pop() {
        for p in table.iter().filter(|p| p.ppid == parent) {
            if !found.contains(p) && !roots.contains(&p.pid) && found.len() < MAX_MARKED {
                found.push(*p);
                frontier.push(p.pid);
            }
        }
    }
    found
}

/// The judge's live descendants but the watchdog (and what it spawned).
fn judge_descendants() -> Vec<Proc> {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let watchdog = WATCHDOG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_ref()
        .and_then(|c| i32::try_from(c.id()).ok());
    let table = processes();
    let spared: Vec<i32> = watchdog
        .map(|w| {
            let mut ids = vec![w];
            ids.extend(descendants_of(&table, &[w]).iter().map(|p| p.pid));
            ids
        })
        .unwrap_or_default();
    descendants_of(&table, &[me])
        .into_iter()
        .filter(|p| !spared.contains(&p.pid))
        .collect()
}

/// When this process is the judge ([`own_every_descendant`]): stops every
/// live descendant but the watchdog, marked or not (SIGCONT and SIGTERM,
/// up to `grace_ms`, then SIGKILL), and reaps those that were its
/// children. Called once the started commands' own handles were waited
/// for. `false` if some survived SIGKILL.
pub fn stop_descendants(grace_ms: u64) -> bool {
    if !OWN_DESCENDANTS.load(std::sync::atomic::Ordering::SeqCst) {
        return true;
    }
    let signal_all = |signal: Signal| {
        for p in judge_descendants() {
            let _ = kill(Pid::from_raw(p.pid), signal);
        }
    };
    signal_all(Signal::SIGCONT);
    signal_all(Signal::SIGTERM);
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    loop {
        reap_orphans();
        if judge_descendants().is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    loop {
        signal_all(Signal::SIGKILL);
        reap_orphans();
        if judge_descendants().is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The environment variable that marks a started command and all it spawns.
pub const OWNED_ENV: &str = "REQKEY_OWNED_BY";
/// The most processes one scan acts on (a bound on a fork bomb's reach).
const MAX_MARKED: usize = 4_096;

/// This run's tag: the judge's pid and the instant it first asked.
fn run_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{}.{nanos}", std::process::id())
    })
}

/// The marker value of started command `index`.
pub fn marker(index: usize) -> String {
    format!("{}.{index}", run_tag())
}

/// Which processes a scan looks for.
#[derive(Debug, Clone, Copy)]
pub enum Scope {
    /// Those of started command `index`.
    One(usize),
    /// Those of every command this run started.
    All,
}

impl Scope {
    fn matches(self, value: &[u8]) -> bool {
        let tag = run_tag().as_bytes();
        match self {
            Scope::One(index) => value == marker(index).as_bytes(),
            Scope::All => {
                value.len() > tag.len() && value.starts_with(tag) && value[tag.len()] == b'.'
            }
        }
    }
}

/// Live (not zombie) processes carrying a marker of `scope`, other than
/// the judge itself. Bounded by [`MAX_MARKED`].
pub fn marked(scope: Scope) -> Vec<i32> {
    let me = std::process::id();
    let prefix = format!("{OWNED_ENV}=");
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == me || is_zombie(pid) {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let carries = env.split(|b| *b == 0).any(|var| {
            var.strip_prefix(prefix.as_bytes())
                .is_some_and(|value| scope.matches(value))
        });
        if carries {
            if let Ok(pid) = i32::try_from(pid) {
                found.push(pid);
            }
            if found.len() >= MAX_MARKED {
                break;
            }
        }
    }
    found
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
        .unwrap_or(true)
}

/// Sends `signal` to every process of `scope`; how many it reached.
pub fn signal_marked(scope: Scope, signal: Signal) -> usize {
    marked(scope)
        .into_iter()
        .filter(|pid| kill(Pid::from_raw(*pid), signal).is_ok())
        .count()
}

/// Kills (SIGKILL) every process of `scope` and waits, up to
/// `timeout_ms`, until none is left alive (a zombie counts as gone);
/// `false` if some still are. Nothing is reaped here: the judge's own
/// children are waited for by their handles, which must keep their
/// status ([`reap_orphans`] runs once they are).
pub fn kill_marked(scope: Scope, timeout_ms: u64) -> bool {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        signal_marked(scope, Signal::SIGKILL);
        if marked(scope).is_empty() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reaps any child of the judge that has exited (orphans re-parented to
/// it as subreaper included); never blocks. Called only once every
/// started command's own handle was waited for (it would take their
/// status otherwise).
pub fn reap_orphans() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    for _ in 0..MAX_MARKED {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The processes with a listening TCP socket on `port` (IPv4 or IPv6)
/// that the judge may inspect (its user's): `None` when no listener could
/// be placed (no such socket, or its owner is not readable: a container
/// runtime's proxy running as root).
pub fn listeners(port: u16) -> Option<Vec<i32>> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let listening = *state == "0A";
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|link| inodes.iter().any(|i| link.as_os_str() == i.as_str()))
        });
        if holds {
            pids.push(pid);
        }
    }
    (!pids.is_empty()).then_some(pids)
}

/// A process's command name, for a message.
pub fn command_name(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| {
            c.trim()
                .chars()
                .map(|ch| if ch.is_control() { '?' } else { ch })
                .collect()
        })
        .unwrap_or_else(|_| "?".to_owned())
}

/// Does the listener on `port` belong to started command `index` (or,
/// with [`Scope::All`], to any)? `Ok(())` when it does or cannot be
/// placed; otherwise who holds it.
pub fn answered_by_started(port: u16, scope: Scope) -> Result<(), String> {
    let Some(holders) = listeners(port) else {
        return Ok(());
    };
    let ours = marked(scope);
    if holders.iter().any(|p| ours.contains(p)) {
        return Ok(());
    }
    let named: Vec<String> = holders
        .iter()
        .map(|p| format!("pid {p} ({})", command_name(*p)))
        .collect();
    Err(format!(
        "port {port} is held by {}, which the harness did not start",
        named.join(", ")
    ))
}

/// Does anything accept a connection on 127.0.0.1:`port`?
pub fn accepts(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// The watchdog's end of the pipe, held (never written) for the judge's
/// life: when the judge ends, the watchdog reads end of file.
static WATCHDOG: Mutex<Option<std::process::Child>> = Mutex::new(None);

/// Makes the judge a child subreaper and starts the watchdog, once.
/// A failure is reported, not fatal: the run still stops what it started
/// on every path but SIGKILL of the judge.
pub fn guard_the_judge() -> Result<(), String> {
    let mut slot = WATCHDOG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_some() {
        return Ok(());
    }
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new(exe);
    command.arg("__watchdog").arg(run_tag());
    if OWN_DESCENDANTS.load(std::sync::atomic::Ordering::SeqCst) {
        command.arg(std::process::id().to_string());
    }
    let child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .env_remove(OWNED_ENV)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot start the watchdog: {e}"))?;
    *slot = Some(child);
    Ok(())
}

/// The watchdog (`reqkey __watchdog TAG [JUDGE]`): waits for its stdin to
/// close (the judge ended), then kills every process carrying the judge's
/// marker and, given the judge's pid, every process that was the judge's
/// descendant at the last look (listed every [`WATCH_POLL_MS`] while the
/// judge lived, by pid and start time) and all they spawned since, for
/// up to 5 s.
pub fn watchdog_main(tag: &str, judge: Option<i32>) -> std::process::ExitCode {
    use std::io::Read;
    let (closed_tx, closed) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = [0u8; 64];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
        let _ = closed_tx.send(());
    });
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let mut seen: Vec<Proc> = Vec::new();
    loop {
        if let Some(judge) = judge {
            let table = processes();
            if table.iter().any(|p| p.pid == judge) {
                seen = descendants_of(&table, &[judge])
                    .into_iter()
                    .filter(|p| p.pid != me)
                    .collect();
            }
        }
        match closed.recv_timeout(Duration::from_millis(WATCH_POLL_MS)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    }
    let prefix = format!("{OWNED_ENV}={tag}.");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut left = 0;
        let table = processes();
        // Those seen, if still the same processes, and all they spawned.
        let alive: Vec<i32> = seen
            .iter()
            .filter(|s| table.iter().any(|p| p.pid == s.pid && p.start == s.start))
            .map(|s| s.pid)
            .collect();
        let mut doomed: Vec<i32> = alive.clone();
        doomed.extend(descendants_of(&table, &alive).iter().map(|p| p.pid));
        for p in &table {
            if p.pid == me || doomed.contains(&p.pid) {
                continue;
            }
            let Ok(env) = std::fs::read(format!("/proc/{}/environ", p.pid)) else {
                continue;
            };
            if env
                .split(|b| *b == 0)
                .any(|var| var.starts_with(prefix.as_bytes()))
            {
                doomed.push(p.pid);
            }
        }
        for pid in doomed {
            if pid != me && kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                left += 1;
            }
        }
        if left == 0 || Instant::now() >= deadline {
            return std::process::ExitCode::SUCCESS;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
