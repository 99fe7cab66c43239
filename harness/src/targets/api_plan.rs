//! The requests a certification through an API map sends (issue 57),
//! stated before it sends any and compared with what it sent: each
//! scenario's steps at its trials, the fuzz pass's requests counted from
//! its seed (`run/fuzz/idem_map.rs`), the liveness read and the oracle's
//! baseline when the target opens, the effect queries as the oracle makes
//! them, and at most one delete per request that can create. Route by
//! route as sent (`METHOD /path`, an id as `{id}`): what `--dry-run`
//! prints, what a run prints first, and what it compares at its end with
//! what `mapped.rs` counted.

use std::collections::BTreeMap;

use reqkey_scenario::step::Action;
use reqkey_scenario::Scenario;

use crate::targets::api_map::{flat_steps, ApiMap, Oracle, Role, EFFECTS_PATH};

/// The requests of a fuzz pass in the contract's words, counted from its
/// seed before it runs (`run/fuzz/idem_map.rs`): each request by method
/// and contract path, and the reads of `/.reqkey/effects`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContractRequests {
    pub requests: BTreeMap<(String, String), u64>,
    pub effect_queries: u64,
}

/// What a certification through a map sends, per route as sent (`METHOD
/// /path`): the least and the most requests (the most when every race
/// earns its extra trials), and at most how many the clean-up deletes
/// (one per id the answers carry).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub routes: BTreeMap<String, (u64, u64)>,
    pub cleanup: BTreeMap<String, u64>,
}

impl Plan {
    fn add(&mut self, route: String, least: u64, most: u64) {
        let e = self.routes.entry(route).or_default();
        e.0 += least;
        e.1 += most;
    }

    /// Every request, least and most, the clean-up left out.
    pub fn total(&self) -> (u64, u64) {
        self.routes
            .values()
            .fold((0, 0), |(l, m), (a, b)| (l + a, m + b))
    }
}

impl ApiMap {
    /// `METHOD /path` of the route playing a contract request, as sent.
    fn label(&self, method: &str, path: &str) -> Option<String> {
        Role::of(method, path)
            .and_then(|r| self.routes.get(&r))
            .map(|r| format!("{} {}", r.method, r.path))
    }

    /// The requests behind `n` reads of `/.reqkey/effects`.
    fn effect_queries(&self, plan: &mut Plan, least: u64, most: u64) {
        let callers = self.callers.len() as u64;
        match &self.oracle {
            Oracle::Counter(path) => plan.add(format!("GET {path}"), least, most),
            Oracle::Reads(reads) => {
                for r in reads {
                    plan.add(
                        format!("{} {}", r.method, r.path),
                        least * callers,
                        most * callers,
                    );
                }
            }
            Oracle::AnswerIds => {}
        }
    }

    /// The trials `scenario` runs: `repeat` at least, and at most
    /// `extra_trials_factor` plus one times as many when it races (a race
    /// that did not overlap earns more).
    pub fn trials(scenario: &Scenario, extra_trials_factor: u32) -> (u64, u64) {
        let trials = u64::from(scenario.repeat.max(1));
        let races = scenario
            .steps
            .iter()
            .any(|st| matches!(st.action, Action::Parallel(_)));
        if races {
            (trials, trials * u64::from(extra_trials_factor + 1))
        } else {
            (trials, trials)
        }
    }

    /// The requests a certification through this map sends: `scenarios`
    /// each with its least and most trials, the fuzz pass's requests
    /// (`fuzz`, counted from its seed), the liveness read and the oracle's
    /// baseline when the target opens, and at most one delete per request
    /// that can create (the clean-up). Paths as sent.
    pub fn plan(&self, scenarios: &[(&Scenario, u64, u64)], fuzz: &ContractRequests) -> Plan {
        let mut plan = Plan::default();
        if let Some(h) = &self.health_route {
            plan.add(format!("{} {}", h.method, h.path), 1, 1);
        }
        // The oracle's baseline, when the target opens.
        if matches!(self.oracle, Oracle::Reads(_)) {
            self.effect_queries(&mut plan, 1, 1);
        }
        let mut created: BTreeMap<String, u64> = BTreeMap::new();
        let mut creates = |plan: &mut Plan, route: &str, least: u64, most: u64| {
            plan.add(route.to_owned(), least, most);
            *created.entry(route.to_owned()).or_default() += most;
        };
        for (s, least, most) in scenarios {
            for step in flat_steps(&s.steps) {
                let Action::Http(http) = &step.action else {
                    continue;
                };
                let copies = u64::from(step.copies.unwrap_or(1));
                if http.method == "GET" && http.path == EFFECTS_PATH {
                    self.effect_queries(&mut plan, *least, *most);
                    continue;
                }
                if let Some(route) = self.label(&http.method, &http.path) {
                    creates(&mut plan, &route, least * copies, most * copies);
                }
            }
        }
        for ((method, path), n) in &fuzz.requests {
            if let Some(route) = self.label(method, path) {
                creates(&mut plan, &route, *n, *n);
            }
        }
        self.effect_queries(&mut plan, fuzz.effect_queries, fuzz.effect_queries);
        if let Some(delete) = &self.cleanup {
            for (route, most) in created {
                let app_path = route
                    .split_once(' ')
                    .map_or(route.as_str(), |(_, p)| p)
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                let shown = format!(
                    "{} {}",
                    delete.method,
                    delete.path.replace("{path}", &app_path)
                );
                *plan.cleanup.entry(shown).or_default() += most;
            }
        }
        plan
    }

    /// The plan as the lines a run prints before it sends anything (and
    /// all `--dry-run` prints): `what` says what it covers.
    pub fn plan_lines(&self, plan: &Plan, what: &str) -> String {
        let mut lines = vec![format!(
            "reqkey: the API map {} plays {what}; effect oracle: {}",
            self.file, self.oracle
        )];
        for (route, (l, m)) in &plan.routes {
            if l == m {
                lines.push(format!("reqkey:   {route}: {}", requests(*l)));
            } else {
                lines.push(format!("reqkey:   {route}: {l} to {m} requests"));
            }
        }
        let mut deletes = 0;
        for (route, most) in &plan.cleanup {
            lines.push(format!(
                "reqkey:   {route}: at most {most} requests (the clean-up: one per id the answers carry)"
            ));
            deletes += most;
        }
        let (least, most) = plan.total();
        lines.push(format!(
            "reqkey: in all {least} to {most} requests and at most {deletes} deletes (more \
             trials when a race does not overlap)"
        ));
        lines.join("\n")
    }

    /// After a run: what was sent beside what was planned for the trials
    /// that ran (`plan`, each scenario at its trials run), route by route;
    /// the clean-up against its most. Empty lines never: one line a route.
    pub fn compare(&self, plan: &Plan, sent: &BTreeMap<String, u64>) -> Vec<String> {
        let mut routes: std::collections::BTreeSet<&String> = plan.routes.keys().collect();
        routes.extend(sent.keys().filter(|r| !plan.cleanup.contains_key(*r)));
        let mut lines = Vec::new();
        for route in routes {
            let planned = plan.routes.get(route).map_or(0, |(l, _)| *l);
            let got = sent.get(route).copied().unwrap_or(0);
            lines.push(if planned == got {
                format!("reqkey: sent {route}: {}, as planned", requests(got))
            } else {
                format!(
                    "reqkey: sent {route}: {}, NOT as planned ({planned})",
                    requests(got)
                )
            });
        }
        for (route, most) in &plan.cleanup {
            let got = sent.get(route).copied().unwrap_or(0);
            lines.push(format!(
                "reqkey: sent {route}: {} (the clean-up, planned at most {most})",
                requests(got)
            ));
        }
        lines
    }
}

/// `n requests`, one `request`.
fn requests(n: u64) -> String {
    if n == 1 {
        "1 request".to_owned()
    } else {
        format!("{n} requests")
    }
}
