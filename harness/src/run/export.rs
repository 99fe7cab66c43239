//! The histories a run hands out (`--export-histories DIR`).
//!
//! A race, `linearizable: true` or `mixed_histories` scenario judges each
//! trial's recorded history; kept only inside the run, nobody could judge
//! it again, with reqkey or with another checker. So when asked, the
//! runner offers each such trial's history (the operations it recorded,
//! up to where the trial stopped: what the run judged) to a
//! [`HistorySink`], and the command writes them as files in reqkey's JSON
//! form ([`reqkey_check::history`]) once the run is over. The runner does
//! no IO for it; the sink only keeps.
//!
//! Bounded: at most [`MAX_EXPORTED_PER_SCENARIO`] trials of a scenario are
//! kept, the failing trial always among them (a failing trial ends its
//! scenario, so there is at most one), each history at most the runner's
//! own bound on recorded operations. A trial the harness could not judge
//! (a timeout, an unreachable target) is not kept: its history is not one
//! the run judged.

use std::sync::Mutex;

use reqkey_check::lin::Operation;

/// The most trials of one scenario whose histories are kept.
pub const MAX_EXPORTED_PER_SCENARIO: usize = 20;

/// One trial's history, as the run recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialHistory {
    pub scenario: String,
    /// 0-based trial index.
    pub trial: u32,
    /// Did the trial fail (the scenario's failure)?
    pub failed: bool,
    pub operations: Vec<Operation>,
}

impl TrialHistory {
    /// `<scenario-id>.trial-<n>.json` (`n` 1-based), any character of the id outside
    /// `[A-Za-z0-9._-]` written `_` (an id from a user's file names no
    /// directory).
    pub fn file_name(&self) -> String {
        let id: String = self
            .scenario
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        // 1-based, as the reports number trials.
        format!("{id}.trial-{}.json", self.trial + 1)
    }
}

/// Where the runner offers the histories it judged.
#[derive(Debug, Default)]
pub struct HistorySink {
    kept: Mutex<Vec<TrialHistory>>,
}

impl HistorySink {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `history` if its scenario has room: the first
    /// `MAX_EXPORTED_PER_SCENARIO - 1` trials, and the failing one.
    pub fn offer(&self, history: TrialHistory) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        let of_scenario = kept
            .iter()
            .filter(|h| h.scenario == history.scenario)
            .count();
        let room = if history.failed {
            MAX_EXPORTED_PER_SCENARIO
        } else {
            MAX_EXPORTED_PER_SCENARIO - 1
        };
        if of_scenario < room {
            kept.push(history);
        }
    }

    /// Everything kept, in the order offered; the sink is left empty.
    pub fn take(&self) -> Vec<TrialHistory> {
        std::mem::take(&mut *self.kept.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial(scenario: &str, trial: u32, failed: bool) -> TrialHistory {
        TrialHistory {
            scenario: scenario.into(),
            trial,
            failed,
            operations: Vec::new(),
        }
    }

    #[test]
    fn a_scenario_keeps_a_bounded_number_and_always_its_failure() {
        let sink = HistorySink::new();
        for n in 0..50 {
            sink.offer(trial("a", n, false));
        }
        sink.offer(trial("a", 50, true));
        sink.offer(trial("b", 0, false));
        let kept = sink.take();
        let of_a: Vec<&TrialHistory> = kept.iter().filter(|h| h.scenario == "a").collect();
        assert_eq!(of_a.len(), MAX_EXPORTED_PER_SCENARIO);
        assert!(of_a.last().is_some_and(|h| h.failed && h.trial == 50));
        assert_eq!(kept.iter().filter(|h| h.scenario == "b").count(), 1);
        assert!(sink.take().is_empty());
    }

    #[test]
    fn file_names_name_no_directory() {
        assert_eq!(
            trial("store.race", 3, false).file_name(),
            "store.race.trial-4.json"
        );
        assert_eq!(
            trial("../x/y z", 0, false).file_name(),
            ".._x_y_z.trial-1.json"
        );
    }
}
