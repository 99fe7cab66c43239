//! The link nemesis's memory: the faults a scenario armed, which struck
//! (once each, the first time their point came on a link), and what the
//! proxies did; shared by every proxy of a run.
//!
//! A fault is armed by a `link` step and consumed by the first commit (or
//! open transaction) any proxied connection meets that it applies to; two
//! connections cannot both take it (one lock). `heal` ends the faults in
//! force (a stall lets its bytes go, a silenced connection is reset) and
//! hands back the armed ones that never struck: a trial whose fault never
//! struck judged nothing about it.

use std::sync::Mutex;
use std::time::Instant;

use reqkey_scenario::link::{LinkFault, LinkFaultKind, LinkPoint, LinkProtocol, LinkSqlState};
use tokio::sync::watch;

/// The most events kept between two reads of the log (older ones are
/// counted, not kept).
const MAX_EVENTS: usize = 256;

/// What a connection met on its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEvent {
    /// A commit about to be sent; `lone_query` when it is a Query holding
    /// that one statement (a ROLLBACK can go in its place).
    Commit {
        protocol: LinkProtocol,
        lone_query: bool,
    },
    /// The first statement sent while a transaction is open.
    InTransaction,
}

#[derive(Debug)]
struct Armed {
    fault: LinkFault,
}

#[derive(Debug, Default)]
struct State {
    armed: Vec<Armed>,
    /// Faults that struck and whose effect has not happened yet (an
    /// answer a fault waits for), by id.
    pending: Vec<(u64, LinkFault)>,
    next_id: u64,
    log: Vec<String>,
    dropped_events: usize,
    /// Every fault that struck, in this run (for the reports' claim).
    struck_kinds: Vec<String>,
    /// Connections the proxies could not read (opaque), in this run.
    opaque: usize,
    /// The links a `down` fault took down, until the next heal (`None`:
    /// every link).
    down: Vec<Option<usize>>,
}

/// What a heal found of the faults armed since the last one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Healed {
    /// Armed, never struck.
    pub unstruck: Vec<LinkFault>,
    /// Struck, their effect never seen.
    pub incomplete: Vec<LinkFault>,
}

impl Healed {
    pub fn is_whole(&self) -> bool {
        self.unstruck.is_empty() && self.incomplete.is_empty()
    }
}

/// Shared by every proxy of one run.
#[derive(Debug)]
pub struct Nemesis {
    state: Mutex<State>,
    /// Bumped by every heal: a stall or a silence waiting on it ends.
    heals: watch::Sender<u64>,
    started: Instant,
}

impl Default for Nemesis {
    fn default() -> Self {
        Nemesis {
            state: Mutex::new(State::default()),
            heals: watch::channel(0).0,
            started: Instant::now(),
        }
    }
}

/// Does a fault armed as `kind` strike at `event`?
fn strikes(kind: LinkFaultKind, event: LinkEvent) -> bool {
    match event {
        LinkEvent::InTransaction => kind == LinkFaultKind::Reset(LinkPoint::InTransaction),
        LinkEvent::Commit {
            protocol,
            lone_query,
        } => match kind {
            // At the commit of a write that opened no transaction (a
            // script) the transaction is the commit itself.
            LinkFaultKind::Reset(_)
            | LinkFaultKind::Delay { .. }
            | LinkFaultKind::Drop { .. }
            | LinkFaultKind::Down => true,
            LinkFaultKind::Error(state) => {
                protocol == LinkProtocol::Postgres
                    && (state == LinkSqlState::CompletionUnknown || lone_query)
            }
        },
    }
}

impl Nemesis {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves the state whole (pushes and removes).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Arms `fault`.
    pub fn arm(&self, fault: LinkFault) {
        self.lock().armed.push(Armed { fault });
    }

    /// The first armed fault for link `db` that strikes at `event`, taken
    /// (it strikes once), with the id its effect is reported done by
    /// ([`Nemesis::done`]).
    pub fn strike(&self, db: usize, event: LinkEvent) -> Option<(u64, LinkFaultKind)> {
        let mut state = self.lock();
        let at = state
            .armed
            .iter()
            .position(|a| a.fault.db.is_none_or(|d| d == db) && strikes(a.fault.kind, event))?;
        let fault = state.armed.remove(at).fault;
        if fault.kind == LinkFaultKind::Down {
            state.down.push(fault.db);
        }
        state.struck_kinds.push(fault.kind.to_string());
        state.next_id += 1;
        let id = state.next_id;
        state.pending.push((id, fault));
        Some((id, fault.kind))
    }

    /// The effect of the fault `id` struck happened (the reset, the held
    /// answer, the refusal).
    pub fn done(&self, id: u64) {
        self.lock().pending.retain(|(p, _)| *p != id);
    }

    /// Records what a proxy did (for the trial's report).
    pub fn record(&self, at: &str, what: impl Into<String>) {
        let ms = self.started.elapsed().as_millis();
        let mut state = self.lock();
        if state.log.len() >= MAX_EVENTS {
            state.dropped_events += 1;
            return;
        }
        state.log.push(format!("{at} at {ms} ms: {}", what.into()));
    }

    /// Counts a connection the proxy could no longer read.
    pub fn opaque(&self, at: &str, why: &str) {
        self.lock().opaque += 1;
        self.record(
            at,
            format!("a connection turned opaque ({why}): no fault strikes it"),
        );
    }

    /// Ends every fault in force (a stall lets its bytes go, a silenced
    /// connection is reset) and disarms the rest: the armed ones that
    /// never struck. What struck and is still under way settles after
    /// ([`Nemesis::unsettled`]).
    pub fn heal(&self) -> Vec<LinkFault> {
        let unstruck = {
            let mut state = self.lock();
            state.down.clear();
            std::mem::take(&mut state.armed)
                .into_iter()
                .map(|a| a.fault)
                .collect()
        };
        self.heals.send_modify(|n| *n += 1);
        unstruck
    }

    /// Is link `db` down (a `down` fault struck, not healed yet)? Then
    /// the proxy refuses its new connections and resets its relayed ones
    /// at their next request.
    pub fn is_down(&self, db: usize) -> bool {
        self.lock().down.iter().any(|d| d.is_none_or(|d| d == db))
    }

    /// The struck faults whose effect has not happened yet (a released
    /// commit's answer not back, an answer a fault waits for not come).
    pub fn unsettled(&self) -> usize {
        self.lock().pending.len()
    }

    /// Takes the struck faults whose effect never happened.
    pub fn take_unsettled(&self) -> Vec<LinkFault> {
        std::mem::take(&mut self.lock().pending)
            .into_iter()
            .map(|(_, f)| f)
            .collect()
    }

    /// Waits on heals (a stall or a silence ends at the next one).
    pub fn heals(&self) -> watch::Receiver<u64> {
        self.heals.subscribe()
    }

    /// What the proxies did since the last call.
    pub fn take_log(&self) -> Vec<String> {
        let mut state = self.lock();
        let mut log = std::mem::take(&mut state.log);
        if state.dropped_events > 0 {
            log.push(format!("{} more events not kept", state.dropped_events));
            state.dropped_events = 0;
        }
        log
    }

    /// Every fault that struck in this run, and the connections no fault
    /// could strike (opaque).
    pub fn summary(&self) -> (Vec<String>, usize) {
        let state = self.lock();
        (state.struck_kinds.clone(), state.opaque)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn fault(kind: LinkFaultKind, db: Option<usize>) -> LinkFault {
        LinkFault { kind, db }
    }

    const PG_COMMIT: LinkEvent = LinkEvent::Commit {
        protocol: LinkProtocol::Postgres,
        lone_query: true,
    };

    #[test]
    fn a_fault_strikes_once_where_it_applies() {
        let n = Nemesis::default();
        n.arm(fault(
            LinkFaultKind::Reset(LinkPoint::InTransaction),
            Some(1),
        ));
        assert_eq!(n.strike(0, LinkEvent::InTransaction), None, "another db");
        assert_eq!(
            n.strike(1, LinkEvent::InTransaction).map(|s| s.1),
            Some(LinkFaultKind::Reset(LinkPoint::InTransaction))
        );
        assert_eq!(n.strike(1, LinkEvent::InTransaction), None, "once");
        n.arm(fault(LinkFaultKind::Reset(LinkPoint::AfterCommit), None));
        assert_eq!(n.strike(3, LinkEvent::InTransaction), None);
        assert!(n.strike(3, PG_COMMIT).is_some());
    }

    #[test]
    fn a_refusal_strikes_only_where_it_can_be_true() {
        let n = Nemesis::default();
        let rollback = LinkFaultKind::Error(LinkSqlState::DeadlockDetected);
        n.arm(fault(rollback, None));
        let redis = LinkEvent::Commit {
            protocol: LinkProtocol::Redis,
            lone_query: false,
        };
        assert_eq!(n.strike(0, redis), None);
        let parsed = LinkEvent::Commit {
            protocol: LinkProtocol::Postgres,
            lone_query: false,
        };
        assert_eq!(n.strike(0, parsed), None, "no ROLLBACK can replace it");
        assert_eq!(n.strike(0, PG_COMMIT).map(|s| s.1), Some(rollback));
        let unknown = LinkFaultKind::Error(LinkSqlState::CompletionUnknown);
        n.arm(fault(unknown, None));
        assert_eq!(n.strike(0, parsed).map(|s| s.1), Some(unknown));
    }

    #[test]
    fn heal_hands_back_what_never_struck_and_wakes_the_stalls() {
        let n = Nemesis::default();
        let heals = n.heals();
        n.arm(fault(LinkFaultKind::Drop { ms: 5 }, None));
        n.arm(fault(LinkFaultKind::Reset(LinkPoint::BeforeCommit), None));
        n.arm(fault(LinkFaultKind::Reset(LinkPoint::AfterCommit), None));
        let (dropped, _) = n.strike(0, PG_COMMIT).unwrap();
        let (reset, _) = n.strike(0, PG_COMMIT).unwrap();
        n.done(dropped);
        let unstruck = n.heal();
        assert_eq!(unstruck.len(), 1);
        assert_eq!(
            unstruck[0].kind,
            LinkFaultKind::Reset(LinkPoint::AfterCommit)
        );
        assert_eq!(n.unsettled(), 1, "struck, its effect not seen yet");
        n.done(reset);
        assert_eq!(n.unsettled(), 0);
        assert!(heals.has_changed().unwrap());
        assert!(n.heal().is_empty());
        n.arm(fault(LinkFaultKind::Drop { ms: 5 }, None));
        n.strike(0, PG_COMMIT).unwrap();
        assert_eq!(n.take_unsettled().len(), 1);
        assert_eq!(n.unsettled(), 0);
        assert_eq!(n.summary().0.len(), 3);
    }

    #[test]
    fn a_down_link_stays_down_until_healed() {
        let n = Nemesis::default();
        n.arm(fault(LinkFaultKind::Down, Some(1)));
        assert!(!n.is_down(1), "armed, not struck");
        assert_eq!(n.strike(0, PG_COMMIT), None, "another db");
        let (id, kind) = n.strike(1, PG_COMMIT).unwrap();
        assert_eq!(kind, LinkFaultKind::Down);
        n.done(id);
        assert!(n.is_down(1));
        assert!(!n.is_down(0));
        assert!(n.heal().is_empty());
        assert!(!n.is_down(1), "healed");
        n.arm(fault(LinkFaultKind::Down, None));
        n.strike(4, PG_COMMIT).unwrap();
        assert!(n.is_down(0) && n.is_down(4), "every link");
    }

    #[test]
    fn the_log_is_bounded() {
        let n = Nemesis::default();
        for i in 0..(MAX_EVENTS + 5) {
            n.record("db 0", format!("e{i}"));
        }
        let log = n.take_log();
        assert_eq!(log.len(), MAX_EVENTS + 1);
        assert!(log[MAX_EVENTS].starts_with("5 more"));
        assert!(n.take_log().is_empty());
    }
}
