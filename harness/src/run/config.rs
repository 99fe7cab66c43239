//! How a run is configured: the seed, the namespace of fresh values, the
//! bounds and what the command line overrides.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::run::event::Finished;
use crate::run::export::HistorySink;
use reqkey_check::lin;

/// How a run is configured.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed every random choice flows from.
    pub seed: u64,
    /// Prefix of every fresh value; unique per run so shared backends are
    /// never clobbered.
    pub namespace: String,
    /// Overrides every scenario's `repeat`.
    pub repeat_override: Option<u32>,
    /// Stop after the first scenario that does not pass.
    pub fail_fast: bool,
    /// The bound on every single call.
    pub call_timeout_ms: u64,
    /// The bound on each linearizability check (search steps).
    pub lin_budget_steps: u64,
    /// Overrides `copies:` of every parallel item that has one (the
    /// concurrency of the race scenarios).
    pub copies_override: Option<u32>,
    /// Scenario ids known to fail on this target (`--expected-failures`).
    pub expected_failures: BTreeSet<String>,
    /// Leave the sessions of passing trials in the target
    /// (`--keep-sessions`); by default they are deleted (see [`Trial::clean_up`]).
    pub keep_sessions: bool,
    /// How many scenarios run at once (see [`run_concurrently`]); 1 runs
    /// them one after the other. A fail-fast run is always sequential.
    pub concurrency: usize,
    /// Where the histories of race, `linearizable` and `mixed_histories`
    /// trials go (`--export-histories`); `None`: nowhere.
    pub export_histories: Option<Arc<HistorySink>>,
    /// Where each scenario's result goes as soon as it is known, before it
    /// is reported in order: what a signal keeps (`cmd::interrupt_reports`).
    pub finished: Option<Arc<Finished>>,
    /// The declared profile's fields by name, bound to `$profile.FIELD` in
    /// every trial (`reqkey_scenario::vars`); empty until a profile is read.
    pub profile_fields: serde_json::Map<String, serde_json::Value>,
    /// `${key.NAME}` is written bare: the declared `keySyntax` is `token`.
    pub bare_keys: bool,
}

impl RunConfig {
    /// A config with a fresh namespace (from the seed and the clock: two runs
    /// with one seed against one backend must not collide).
    pub fn new(seed: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let nonce = nanos ^ u64::from(std::process::id()).rotate_left(32);
        Self {
            seed,
            namespace: format!("rk{:08x}", (nonce ^ seed.rotate_left(17)) as u32),
            repeat_override: None,
            fail_fast: false,
            call_timeout_ms: 10_000,
            lin_budget_steps: lin::DEFAULT_BUDGET_STEPS,
            copies_override: None,
            expected_failures: BTreeSet::new(),
            keep_sessions: false,
            concurrency: DEFAULT_CONCURRENCY,
            export_histories: None,
            finished: None,
            profile_fields: serde_json::Map::new(),
            bare_keys: false,
        }
    }

    /// The config with `profile` declared: its fields bound in every
    /// trial, keys written as its `keySyntax` admits them.
    pub fn declaring(&self, profile: &crate::targets::profile::ProfileInfo) -> Self {
        let mut cfg = self.clone();
        cfg.profile_fields = match &profile.idem {
            Some(idem) => idem.to_json().as_object().cloned().unwrap_or_default(),
            None if profile.source == crate::targets::profile::ProfileSource::Fixed => {
                serde_json::Map::new()
            }
            None => profile.profile.fields(),
        };
        cfg.bare_keys = profile
            .idem
            .as_ref()
            .is_some_and(|i| i.key_syntax.bare_keys());
        cfg
    }
}

/// Scenarios run at once by default: they mostly wait (on an agent's
/// scripted runs, on long polls), so this is about latency, not cores.
pub const DEFAULT_CONCURRENCY: usize = 8;
