//! Running the checker on the system model and summarising the result, so
//! the CLI, the scenario exporter and the tests read one shape.

use std::time::{Duration, Instant};

use stateright::{Checker, Expectation, HasDiscoveries, Model, Path};

use crate::checker::system::{Action, Config, KeyedEntryModel, SystemState};

/// How to run the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    pub threads: usize,
    /// Depth-first search with symmetry reduction (clients with the same
    /// script are interchangeable).
    pub symmetry: bool,
    /// Stop at the first violated `always` property.
    pub stop_at_first_violation: bool,
    /// Stop as soon as this property has a discovery.
    pub until: Option<&'static str>,
    /// Replace each counterexample by a shortest one (a breadth-first
    /// search that stops at that property; DFS paths are long).
    pub shortest_counterexamples: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            threads: 1,
            symmetry: true,
            stop_at_first_violation: false,
            until: None,
            shortest_counterexamples: false,
        }
    }
}

/// A discovery: a property and the path that shows it.
pub type Discovery = (&'static str, Path<SystemState, Action>);

/// What one exhaustive check found.
#[derive(Debug)]
pub struct CheckSummary {
    pub unique_states: usize,
    pub total_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// `always` properties with a counterexample.
    pub violations: Vec<Discovery>,
    /// `sometimes` properties with an example (witness).
    pub examples: Vec<Discovery>,
    /// `sometimes` properties never seen: the model is vacuous there.
    pub unreached: Vec<&'static str>,
}

impl CheckSummary {
    /// Pass: no counterexample and every `sometimes` property reached.
    pub fn passed(&self) -> bool {
        self.violations.is_empty() && self.unreached.is_empty()
    }

    /// Distinct states found per second (what "states/s" of a model
    /// checker usually means, and what stateright's own examples report).
    pub fn unique_states_per_second(&self) -> f64 {
        per_second(self.unique_states, self.elapsed)
    }

    /// Generated states (every successor, duplicates included) per second.
    pub fn total_states_per_second(&self) -> f64 {
        per_second(self.total_states, self.elapsed)
    }

    pub fn violated(&self, property: &str) -> bool {
        self.violations.iter().any(|(name, _)| *name == property)
    }
}

fn per_second(n: usize, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        n as f64 / secs
    } else {
        n as f64
    }
}

/// Where a running check is, for a progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    pub elapsed: Duration,
    pub unique_states: usize,
    pub total_states: usize,
    pub max_depth: usize,
}

impl Progress {
    /// One line: elapsed time, counts and the unique-state rate so far.
    pub fn line(&self) -> String {
        format!(
            "{:>7.1} s: {} unique states, {} total, depth {}, {:.0} unique states/s",
            self.elapsed.as_secs_f64(),
            self.unique_states,
            self.total_states,
            self.max_depth,
            per_second(self.unique_states, self.elapsed)
        )
    }
}

/// Checks `config` exhaustively (DFS).
pub fn check(config: Config, opts: CheckOptions) -> CheckSummary {
    check_with_progress(config, opts, None, &mut |_| {})
}

/// [`check`], calling `report` every `every` while the search runs (never
/// when `every` is `None`). The caller decides where a report goes; this
/// crate does no IO.
pub fn check_with_progress(
    config: Config,
    opts: CheckOptions,
    every: Option<Duration>,
    report: &mut dyn FnMut(Progress),
) -> CheckSummary {
    let model = KeyedEntryModel::new(config.clone());
    let properties = model.properties();
    // Without twins every client is distinguishable: the representative
    // would be the state itself, so skip its cost.
    let symmetric = opts.symmetry && model.has_twins();
    let mut builder = model.checker().threads(opts.threads.max(1));
    if symmetric {
        builder = builder.symmetry();
    }
    if let Some(name) = opts.until {
        builder = builder.finish_when(HasDiscoveries::AnyOf([name].into_iter().collect()));
    } else if opts.stop_at_first_violation {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let started = Instant::now();
    let running = builder.spawn_dfs();
    if let Some(every) = every {
        // Poll often enough to notice the end quickly, report every `every`.
        let tick = every.min(Duration::from_millis(50));
        let mut next = every;
        while !running.is_done() {
            std::thread::sleep(tick);
            let elapsed = started.elapsed();
            if elapsed >= next && !running.is_done() {
                report(Progress {
                    elapsed,
                    unique_states: running.unique_state_count(),
                    total_states: running.state_count(),
                    max_depth: running.max_depth(),
                });
                next = elapsed + every;
            }
        }
    }
    let checker = running.join();
    let elapsed = started.elapsed();
    let mut discoveries = checker.discoveries();
    let mut violations = Vec::new();
    let mut examples = Vec::new();
    let mut unreached = Vec::new();
    for p in &properties {
        match (p.expectation.clone(), discoveries.remove(p.name)) {
            (Expectation::Sometimes, Some(path)) => examples.push((p.name, path)),
            (Expectation::Sometimes, None) => unreached.push(p.name),
            (_, Some(path)) => violations.push((p.name, path)),
            (_, None) => {}
        }
    }
    if opts.shortest_counterexamples {
        for (name, path) in &mut violations {
            if let Some(shorter) = shortest_path(&config, name) {
                *path = shorter;
            }
        }
    }
    CheckSummary {
        unique_states: checker.unique_state_count(),
        total_states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
        examples,
        unreached,
    }
}

/// The most states [`shortest_path`] visits before giving up.
pub const SHORTEST_PATH_STATE_LIMIT: usize = 2_000_000;

/// A shortest path to a discovery of `property` (a counterexample of an
/// `always` property, an example of a `sometimes` one), by a plain
/// breadth-first search. stateright's own BFS hands work out in blocks
/// across threads and so does not promise shortest paths; scenarios and
/// counterexamples read best when they are. `None` when there is no such
/// path within [`SHORTEST_PATH_STATE_LIMIT`] states.
pub fn shortest_path(config: &Config, property: &str) -> Option<Path<SystemState, Action>> {
    use std::collections::hash_map::{DefaultHasher, Entry};
    use std::collections::{HashMap, VecDeque};
    use std::hash::{Hash, Hasher};

    let model = KeyedEntryModel::new(config.clone());
    let prop = model
        .properties()
        .into_iter()
        .find(|p| p.name == property)?;
    let is_discovery = |st: &SystemState| match prop.expectation {
        Expectation::Always => !(prop.condition)(&model, st),
        Expectation::Sometimes => (prop.condition)(&model, st),
        Expectation::Eventually => false,
    };
    let fp = |st: &SystemState| {
        let mut h = DefaultHasher::new();
        st.hash(&mut h);
        h.finish()
    };
    let init = model.init_states().into_iter().next()?;
    // Per visited state: its parent's index and the action from it.
    let mut parents: Vec<Option<(usize, Action)>> = vec![None];
    let mut seen: HashMap<u64, usize> = HashMap::from([(fp(&init), 0)]);
    let mut queue = VecDeque::from([(init.clone(), 0usize)]);
    let mut found = None;
    while let Some((state, index)) = queue.pop_front() {
        if is_discovery(&state) {
            found = Some(index);
            break;
        }
        if parents.len() > SHORTEST_PATH_STATE_LIMIT {
            return None;
        }
        for (action, next) in model.next_steps(&state) {
            if let Entry::Vacant(slot) = seen.entry(fp(&next)) {
                slot.insert(parents.len());
                parents.push(Some((index, action)));
                queue.push_back((next, parents.len() - 1));
            }
        }
    }
    let mut actions = Vec::new();
    let mut at = found?;
    while let Some((parent, action)) = &parents[at] {
        actions.push(*action);
        at = *parent;
    }
    actions.reverse();
    Path::from_actions(&model, init, actions.iter())
}

/// A path as a numbered list of actions, one per line.
pub fn format_path(model: &KeyedEntryModel, path: &Path<SystemState, Action>) -> String {
    let mut out = String::new();
    for (i, (state, action)) in path.clone().into_vec().into_iter().enumerate() {
        if let Some(action) = action {
            out.push_str(&format!(
                "{:>3}. {}\n",
                i + 1,
                model.describe_step(&state, &action)
            ));
        }
    }
    out
}
