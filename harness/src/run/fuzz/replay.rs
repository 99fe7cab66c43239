//! A reproduction proved before it is written (issue 54): the shrunk
//! scenario is run through the ordinary scenario runner against the same
//! target, and it counts as reproduced only where it fails there on a
//! clause the fuzz pass blamed. A scenario that passes, fails only other
//! clauses or cannot be judged is still reported, marked not reproduced,
//! with why: a reader never takes a scenario that cannot fail for proof.
//!
//! A race is replayed as many trials as its scenario's `repeat:` (5, or
//! what the battery sent of its kind: at most a few dozen), stopping at the
//! first failing trial; a sequential reproduction once.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use crate::run::config::RunConfig;
use crate::run::event::Verdict;
use crate::targets::Target;

/// Whether a reproduction replayed red on its clauses, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub reproduced: bool,
    pub not_reproduced: Option<String>,
}

impl Replayed {
    fn no(why: String) -> Self {
        Self {
            reproduced: false,
            not_reproduced: Some(why),
        }
    }
}

/// Replays `yaml` against `target` (blocking: call it outside any async
/// context) and judges it against `clauses`, the clauses the fuzz pass
/// blamed.
pub fn replay(
    runtime: &tokio::runtime::Runtime,
    target: &Arc<dyn Target>,
    yaml: &str,
    clauses: &[String],
    seed: u64,
    call_timeout_ms: u64,
) -> Replayed {
    let scenario = match reqkey_scenario::parse_scenario(Path::new("reproduction.yaml"), yaml) {
        Ok(s) => s,
        Err(e) => return Replayed::no(format!("the reproduction does not load: {e}")),
    };
    let mut cfg = RunConfig::new(seed);
    cfg.call_timeout_ms = call_timeout_ms;
    cfg.concurrency = 1;
    let summary = runtime.block_on(crate::run::runner::run(
        Arc::clone(target),
        std::slice::from_ref(&scenario),
        &cfg,
        &mut [],
    ));
    let Some(result) = summary.results.first() else {
        return Replayed::no("the runner returned no result".into());
    };
    match result.verdict {
        Verdict::Fail | Verdict::ExpectedFail => {
            let failed: BTreeSet<&str> = result
                .failure
                .iter()
                .chain(&result.later_failures)
                .flat_map(|f| f.clauses.iter().map(String::as_str))
                .collect();
            if clauses.iter().any(|c| failed.contains(c.as_str())) {
                Replayed {
                    reproduced: true,
                    not_reproduced: None,
                }
            } else {
                let failed: Vec<&str> = failed.into_iter().collect();
                let step = result
                    .failure
                    .as_ref()
                    .map(|f| format!(" at {}", f.step))
                    .unwrap_or_default();
                Replayed::no(format!(
                    "it failed another clause: [{}]{step}, not [{}]",
                    failed.join(", "),
                    clauses.join(", ")
                ))
            }
        }
        Verdict::Pass | Verdict::Indefinite => Replayed::no(format!(
            "it passed {0} of {0} replays: what the program met (timing, load, a race) did not recur",
            result.trials_run
        )),
        _ => Replayed::no(format!(
            "the replay could not be judged: {}",
            result
                .failure
                .as_ref()
                .map_or_else(|| "no failure recorded".to_owned(), |f| f.message.clone())
        )),
    }
}
