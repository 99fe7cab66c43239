//! Fault steps (`fault: {action, replica, after_ms}`): the harness kills,
//! pauses, resumes or restarts a process it started (`--start`), at the
//! point of the scenario where the step stands, as Jepsen and Maelstrom do
//! to the systems they own. A request key exists for the retry after such
//! a failure; these steps are how a scenario makes one happen.
//!
//! What a target offers a fault scenario ([`FaultSupport`]) is decided
//! once per run; a scenario that `requires: {faults: true}` is not
//! applicable, with the reason, where the harness did not start the
//! target. Nothing here signals a process: this crate is pure.

use std::fmt;

use serde_json::Value;

/// The longest `after_ms` of a fault step.
pub const MAX_FAULT_DELAY_MS: u64 = 60_000;

/// What a fault does to the process of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// SIGKILL to its process group: a crash; the replica stays down.
    Kill,
    /// SIGSTOP: the process is paused (it answers nothing, renews nothing).
    Stop,
    /// SIGCONT: a paused process comes back.
    Cont,
    /// A crash (SIGKILL, if it still runs) and a start of the same command
    /// on the same port; the step ends once it answers `/health` again.
    Restart,
}

impl FaultAction {
    pub const ALL: [FaultAction; 4] = [
        FaultAction::Kill,
        FaultAction::Stop,
        FaultAction::Cont,
        FaultAction::Restart,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultAction::Kill => "kill",
            FaultAction::Stop => "stop",
            FaultAction::Cont => "cont",
            FaultAction::Restart => "restart",
        }
    }

    pub fn parse(text: &str) -> Option<FaultAction> {
        FaultAction::ALL.into_iter().find(|a| a.name() == text)
    }
}

impl fmt::Display for FaultAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `fault` step, typed at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultStep {
    pub action: FaultAction,
    /// The `--start` command (replica) it is aimed at: the N-th command.
    pub replica: usize,
    /// How long the step waits before it strikes (inside a `parallel`
    /// group: while the group's other requests are in flight).
    pub after_ms: u64,
}

const FAULT_KEYS: [&str; 3] = ["action", "replica", "after_ms"];

impl FaultStep {
    /// Parses a `fault` step's map; a mistake is the message a load error
    /// carries (with the step's position).
    pub fn parse(spec: &Value) -> Result<FaultStep, String> {
        let Value::Object(map) = spec else {
            return Err(
                "`fault` takes a map: {action: kill|stop|cont|restart, replica: N, after_ms: N}"
                    .into(),
            );
        };
        if let Some(unknown) = map.keys().find(|k| !FAULT_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "`fault` has no field `{unknown}` (it takes {})",
                FAULT_KEYS.join(", ")
            ));
        }
        let action = match map.get("action") {
            Some(Value::String(s)) => FaultAction::parse(s).ok_or_else(|| {
                format!(
                    "fault.action `{s}` is not one of {}",
                    FaultAction::ALL.map(FaultAction::name).join(", ")
                )
            })?,
            Some(_) => return Err("fault.action is a string".into()),
            None => return Err("`fault` needs an action (kill, stop, cont or restart)".into()),
        };
        let number = |name: &str, max: u64| -> Result<u64, String> {
            match map.get(name) {
                None => Ok(0),
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n <= max)
                    .ok_or_else(|| format!("fault.{name} is a whole number from 0 to {max}")),
            }
        };
        let replica = number("replica", crate::agent_step::MAX_REPLICA_INDEX)?;
        let after_ms = number("after_ms", MAX_FAULT_DELAY_MS)?;
        Ok(FaultStep {
            action,
            replica: usize::try_from(replica).map_err(|_| "fault.replica is too large")?,
            after_ms,
        })
    }

    pub fn label(&self) -> String {
        format!("fault {} replica {}", self.action, self.replica)
    }
}

/// What a run offers fault scenarios: decided once, from how the target
/// was opened and what its `/health` declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultSupport {
    /// The harness started the target's processes (`--start`), so it can
    /// kill, pause and restart them.
    pub started: bool,
    /// How many processes it started (the replicas a fault can aim at).
    pub processes: usize,
    /// `/health`'s `durable`: whether the target's state survives a
    /// restart of its process (SPEC 6 and 7); `None`: not declared.
    pub durable: Option<bool>,
    /// `/health`'s `leaseMs` (SPEC 5, `[[lease.length]]`); `None`: not declared.
    pub lease_ms: Option<u64>,
    /// The database links the harness owns (`--db`), which link scenarios
    /// need.
    pub links: crate::link::OwnedLinks,
}

impl FaultSupport {
    /// What a run says about crash certification before it runs: without
    /// `--start` none; with it, the reports add what the crash scenarios
    /// showed (harness `report::crash::claim`).
    pub fn describe(&self) -> String {
        if self.started {
            format!(
                "the harness started the target ({} process{})",
                self.processes,
                if self.processes == 1 { "" } else { "es" }
            )
        } else {
            "the harness did not start the target (no --start): crash behaviour is NOT certified"
                .into()
        }
    }
}
