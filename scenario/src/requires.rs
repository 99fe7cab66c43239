//! What a scenario needs of a target's declared profile (`requires:`)
//! or of the processes the harness started (faults).

use serde::Deserialize;

use crate::fault;
use reqkey_model::vocab::{ConcurrentEntry, Profile};

/// What a scenario needs of an agent server's profile; an absent field
/// admits either value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Requires {
    /// `true`: the server records keys; `false`: it ignores them.
    pub supports_request_key: Option<bool>,
    /// The server's `concurrentEntry`.
    pub concurrent_entry: Option<ConcurrentEntry>,
    /// The least `entryWaitMs` the server must declare (SPEC 7): the
    /// scenario's admissions are shorter than this.
    pub entry_wait_ms: Option<u64>,
    /// `true`: the scenario has `fault` steps; it applies only to a target
    /// the harness started (`--start`).
    pub faults: Option<bool>,
    /// The least number of processes the harness must have started (a
    /// fault scenario that needs a live replica beside a dead one).
    pub replicas: Option<u32>,
    /// `true`: the target must declare `durable: true` in `/health` (its
    /// state survives a restart of its process).
    pub durable: Option<bool>,
    /// The most `leaseMs` the server may declare (SPEC 5): the scenario
    /// waits longer than this for a lease to run out.
    pub lease_ms: Option<u64>,
    /// `true` (or `postgres`, `redis`): the scenario has `link` steps; it
    /// applies only where the harness owns the store's database link
    /// (`--start` with `--db URL`).
    pub link: Option<crate::link::LinkNeed>,
    /// An idem scenario's needs of the declared `Idempotency-Key`
    /// profile (SPEC 10; `idem.rs`).
    pub idem: Option<crate::idem::IdemRequires>,
}

impl Requires {
    /// Does it require anything at all?
    pub fn is_empty(&self) -> bool {
        self.supports_request_key.is_none()
            && self.concurrent_entry.is_none()
            && self.entry_wait_ms.is_none()
            && self.faults.is_none()
            && self.replicas.is_none()
            && self.durable.is_none()
            && self.lease_ms.is_none()
            && self.link.is_none()
            && self.idem.is_none()
    }

    /// What a run without the right [`fault::FaultSupport`] lacks, or
    /// `None` when the scenario applies.
    pub fn unmet_faults(&self, support: &fault::FaultSupport) -> Option<String> {
        if let Some(need) = self.link {
            if !need.met_by(support.links) {
                return Some(need.describe());
            }
        }
        let needs_start = self.faults == Some(true)
            || self.replicas.is_some()
            || self.durable.is_some()
            || self.lease_ms.is_some();
        if needs_start && !support.started {
            return Some(
                "faults: the harness did not start the target (`--start CMD` lets it kill, pause and restart it)".into(),
            );
        }
        let mut unmet = Vec::new();
        if let Some(least) = self.replicas {
            if support.processes < least as usize {
                unmet.push(format!("replicas: at least {least} started processes"));
            }
        }
        // Each reason says what the scenario needs and what the target
        // declared, so that it cannot be read as the target's declaration.
        if let Some(want) = self.durable {
            if support.durable != Some(want) {
                let declared = match support.durable {
                    Some(d) => format!("/health declares durable: {d}"),
                    None => "/health declares no durable".to_owned(),
                };
                unmet.push(format!("needs durable: {want}, but {declared}"));
            }
        }
        if let Some(most) = self.lease_ms {
            if support.lease_ms.is_none_or(|ms| ms > most) {
                let declared = match support.lease_ms {
                    Some(ms) => format!("/health declares leaseMs: {ms}"),
                    None => "/health declares no leaseMs".to_owned(),
                };
                unmet.push(format!("needs leaseMs: at most {most}, but {declared}"));
            }
        }
        (!unmet.is_empty()).then(|| unmet.join(", "))
    }

    /// What `profile` lacks, as the requirement it fails
    /// (`supportsRequestKey: true`), or `None` when the scenario applies.
    pub fn unmet(&self, profile: &Profile) -> Option<String> {
        let mut unmet = Vec::new();
        if let Some(want) = self.supports_request_key {
            if want != profile.supports_request_key {
                unmet.push(format!("supportsRequestKey: {want}"));
            }
        }
        if let Some(want) = self.concurrent_entry {
            if want != profile.concurrent_entry {
                unmet.push(format!("concurrentEntry: {}", want.name()));
            }
        }
        if let Some(least) = self.entry_wait_ms {
            if profile.entry_wait_ms < least {
                unmet.push(format!("entryWaitMs: at least {least}"));
            }
        }
        (!unmet.is_empty()).then(|| unmet.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn durable_lease(durable: Option<bool>, lease_ms: Option<u64>) -> fault::FaultSupport {
        fault::FaultSupport {
            started: true,
            processes: 1,
            durable,
            lease_ms,
            links: Default::default(),
        }
    }

    /// Issue 50: "no crash scenario applied (durable: true declared in
    /// /health)" read as if the target had declared `durable: true`.
    #[test]
    fn an_unmet_fault_requirement_says_what_is_needed_and_what_was_declared() {
        let needs: Requires =
            serde_yaml::from_str("{faults: true, durable: true, leaseMs: 3000}").expect("requires");
        let why = needs
            .unmet_faults(&durable_lease(Some(false), Some(60_000)))
            .expect("unmet");
        assert_eq!(
            why,
            "needs durable: true, but /health declares durable: false, \
             needs leaseMs: at most 3000, but /health declares leaseMs: 60000"
        );
        let why = needs
            .unmet_faults(&durable_lease(None, None))
            .expect("unmet");
        assert!(why.contains("/health declares no durable"), "{why}");
        assert!(why.contains("/health declares no leaseMs"), "{why}");
        assert_eq!(
            needs.unmet_faults(&durable_lease(Some(true), Some(3000))),
            None
        );
    }
}
