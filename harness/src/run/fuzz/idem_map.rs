//! The idem fuzz pass through an API map (`--api`, issue 57): the battery
//! and the generated programs fitted to the routes and callers the map
//! has, what the fit leaves unjudged named against the profile field it
//! would have judged, and the requests the pass will send, counted from
//! its seed before it runs (what `--dry-run` prints).
//!
//! Why a fit and not a refusal: a map that lacks a route (an app with no
//! failing or slow route, one method, one path) still has everything
//! else judged. A program's request on a route the map lacks goes to the
//! create route instead (still a request the model judges); a probe that
//! needs the missing route (the failing bursts need `fail`, the duplicate
//! past the lock needs a `slow` route that takes a duration, `$sleepMs`) is
//! not sent, and every report says so with the field. A second caller
//! (`bob` of the programs) is the map's second caller; a map with one
//! caller gets programs with one.
//!
//! Through a map every group of requests sent at once (the battery's
//! bursts, the programs' bursts and batches) goes out together
//! (`targets/together.rs`): each on its own connection, the last bytes
//! released at once, so that a failing route that answers at once still
//! meets every duplicate of its burst before it answers.

use std::collections::BTreeMap;
use std::sync::Mutex;

use reqkey_model::idem_profile::{Errors, IdemProfile};

use crate::run::fuzz::cases::run_cases;
use crate::run::fuzz::idem_battery::{battery, JudgedField, ProbeKind};
use crate::run::fuzz::idem_program::{
    arb_program, requests_of, Req, Step, ALL_PAYLOADS, FIRST_TOP_LEVEL, ROUTES,
};
use crate::targets::api_map::{ApiMap, Role};
use crate::targets::api_plan::ContractRequests;

/// How a program is fitted to the target: identity unless the target is
/// an app played through an API map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fit {
    /// Per route of [`ROUTES`], the route the battery's probes send it on
    /// (each probe uses one route with keys of its own).
    battery: [usize; ROUTES.len()],
    /// The same for the generated programs, which mix routes under one
    /// key: two roles the map plays on one route of the app are one route.
    programs: [usize; ROUTES.len()],
    /// Whether the programs' second caller has a caller of its own.
    two_callers: bool,
    /// Whether the battery's duplicate past the lock is sent (a slow route
    /// that takes a duration), and the programs' (on a route of its own).
    past_lock: bool,
    programs_past_lock: bool,
    /// Whether the failing bursts can be sent (a failing route).
    failing_bursts: bool,
    /// Whether bodies that are not JSON objects are sent (the contract's
    /// handler refuses them with its own 4xx; an app's own routes take
    /// the body into a member of theirs, `$body`, so nothing says they
    /// refuse one).
    refused_bodies: bool,
    /// Whether the failing route answers at once (no `$sleepMs`): its
    /// bursts are sent together, not slowed.
    pub failing_at_once: bool,
    /// What the fit leaves unjudged, each naming its profile field.
    pub not_judged: Vec<String>,
    /// The declared fields the generated programs, and the battery's
    /// probes, no longer judge through the map (`JudgedField` names).
    unjudged_by_programs: Vec<&'static str>,
    unjudged_by_probes: Vec<&'static str>,
}

/// The contract route each role stands for, in the order a role keeps its
/// own route in the programs when the map plays two on one app route.
const ROLE_ROUTES: [(Role, usize); 5] = [
    (Role::Create, 0),
    (Role::Fail, 3),
    (Role::Slow, 4),
    (Role::OtherMethod, 1),
    (Role::OtherPath, 2),
];

impl Fit {
    /// The identity fit (a `reqkey-idem/1` app: every route, two callers).
    pub fn none() -> Fit {
        Fit {
            battery: [0, 1, 2, 3, 4, 5],
            programs: [0, 1, 2, 3, 4, 5],
            two_callers: true,
            past_lock: true,
            programs_past_lock: true,
            failing_bursts: true,
            refused_bodies: true,
            failing_at_once: false,
            not_judged: Vec::new(),
            unjudged_by_programs: Vec::new(),
            unjudged_by_probes: Vec::new(),
        }
    }

    /// The fit to `map` (identity without one) under `profile`.
    pub fn of(map: Option<&ApiMap>, profile: &IdemProfile) -> Fit {
        let Some(map) = map else {
            return Fit::none();
        };
        let mut fit = Fit::none();
        fit.refused_bodies = false;
        let mut route = |i: usize, to: usize| {
            fit.battery[i] = to;
            fit.programs[i] = to;
        };
        let has = |role: Role| map.routes.contains_key(&role);
        let mut notes = vec![
            "errors (a handler's own 4xx): the app's routes take the body into a member of \
             theirs (`$body`), so no body they refuse is known and none that is not a JSON \
             object is sent; a retry after the failing route's error still judges errors"
                .to_owned(),
        ];
        let mut unjudged: Vec<&'static str> = Vec::new();
        if !has(Role::OtherMethod) {
            route(1, 0);
            unjudged.push("scope");
            notes.push(
                "scope (method): the map has no `other_method` route, so the programs send \
                 POST /orders for PUT /orders"
                    .to_owned(),
            );
        }
        if !has(Role::OtherPath) {
            route(2, 0);
            unjudged.push("scope");
            notes.push(
                "scope (path): the map has no `other_path` route, so the programs send POST \
                 /orders for POST /payments"
                    .to_owned(),
            );
        }
        let mut failing_bursts = true;
        match map.routes.get(&Role::Fail) {
            None => {
                route(3, 0);
                route(5, 0);
                failing_bursts = false;
                unjudged.push("errors");
                notes.push(
                    "errors: the map has no `fail` route, so no burst and no program meets a \
                     failing handler"
                        .to_owned(),
                );
            }
            Some(fail) if !fail.takes_duration() => {
                // At once: its bursts go out together, before its answer.
                route(5, 3);
                fit.failing_at_once = true;
                if profile.errors == Errors::Released {
                    unjudged.push("errors");
                    fit.unjudged_by_probes.push("errors");
                    notes.push(
                        "errors: released: the `fail` route answers at once (no $sleepMs), so \
                         a duplicate that ran after the key was released cannot be told from \
                         one that raced; a failing route with a duration judges it"
                            .to_owned(),
                    );
                }
            }
            Some(_) => {}
        }
        let mut past_lock = true;
        if !map
            .routes
            .get(&Role::Slow)
            .is_some_and(|r| r.takes_duration())
        {
            route(4, 0);
            past_lock = false;
            unjudged.push("lockMs");
            notes.push(
                "lockMs: the map has no `slow` route that takes a duration ($sleepMs), so no \
                 duplicate is sent past the lock"
                    .to_owned(),
            );
        }
        fit.failing_bursts = failing_bursts;
        fit.past_lock = past_lock;
        fit.programs_past_lock = past_lock;
        // Two roles on one route of the app are one key scope there, two
        // in the contract: the programs keep the first role's and send the
        // other's requests to the create route.
        let app = |role: Role| {
            map.routes.get(&role).map(|r| {
                (
                    r.method.clone(),
                    r.path.split('?').next().unwrap_or(&r.path).to_owned(),
                )
            })
        };
        let mut kept: Vec<(Role, (String, String))> = Vec::new();
        for (role, i) in ROLE_ROUTES {
            let Some(at) = app(role) else { continue };
            if fit.programs[i] != i {
                continue;
            }
            match kept.iter().find(|(_, k)| *k == at) {
                Some((first, _)) => {
                    fit.programs[i] = 0;
                    unjudged.push(judged_field_of(role));
                    if i == 3 {
                        fit.programs[5] = 0;
                    }
                    if i == 4 {
                        fit.programs_past_lock = false;
                    }
                    notes.push(format!(
                        "{}: the map plays `{}` on the route of `{}` ({} {}), so the programs \
                         send POST /orders for {} {}",
                        field_of(role),
                        role.name(),
                        first.name(),
                        at.0,
                        at.1,
                        role.contract().0,
                        role.contract().1
                    ));
                }
                None => kept.push((role, at)),
            }
        }
        if map.roles.len() < 2 {
            fit.two_callers = false;
            unjudged.push("scope");
            notes.push(
                "scope (caller): the map lists one caller, so the programs send every request \
                 as it"
                    .to_owned(),
            );
        }
        fit.not_judged = notes;
        fit.unjudged_by_programs = unjudged;
        fit
    }

    /// `fields` the generated programs judge, less what the fit takes away.
    pub fn judged(&self, fields: Vec<JudgedField>) -> Vec<JudgedField> {
        let gone = &self.unjudged_by_programs;
        fields
            .into_iter()
            .filter(|f| !gone.contains(&f.field.as_str()))
            .collect()
    }

    /// `fields` a probe of the battery judges, less what the fit takes away.
    pub fn probe_judged(&self, fields: Vec<JudgedField>) -> Vec<JudgedField> {
        let gone = &self.unjudged_by_probes;
        fields
            .into_iter()
            .filter(|f| !gone.contains(&f.field.as_str()))
            .collect()
    }

    /// Whether the battery sends a probe of `kind`.
    pub fn sends(&self, kind: ProbeKind) -> bool {
        match kind {
            ProbeKind::FailingBurst => self.failing_bursts,
            ProbeKind::PastLock => self.past_lock,
            ProbeKind::HandlerRefusal => self.refused_bodies,
            ProbeKind::SucceedingBurst
            | ProbeKind::Expiry
            | ProbeKind::KeyForms
            | ProbeKind::Fingerprint => true,
        }
    }

    fn req(&self, table: &[usize; ROUTES.len()], r: &Req) -> Req {
        let payload = r.payload % ALL_PAYLOADS;
        Req {
            route: table[r.route % ROUTES.len()],
            caller: if self.two_callers { r.caller } else { 0 },
            // A body that is not an object stands in as the object of the
            // same index among the others.
            payload: if self.refused_bodies || payload < FIRST_TOP_LEVEL {
                payload
            } else {
                payload % FIRST_TOP_LEVEL
            },
            ..r.clone()
        }
    }

    fn fitted(
        &self,
        program: &[Step],
        table: &[usize; ROUTES.len()],
        past_lock: bool,
    ) -> Vec<Step> {
        program
            .iter()
            .map(|step| match step {
                Step::Send(r) => Step::Send(self.req(table, r)),
                Step::Burst { req, copies } => Step::Burst {
                    req: self.req(table, req),
                    copies: *copies,
                },
                Step::Batch(reqs) => Step::Batch(reqs.iter().map(|r| self.req(table, r)).collect()),
                Step::PastLock(r) if past_lock => Step::PastLock(self.req(table, r)),
                Step::PastLock(r) => Step::Send(self.req(table, r)),
                other => other.clone(),
            })
            .collect()
    }

    /// A generated `program` as it is sent to the target.
    pub fn program(&self, program: &[Step]) -> Vec<Step> {
        self.fitted(program, &self.programs, self.programs_past_lock)
    }

    /// A probe of the battery as it is sent (one route, its own keys).
    pub fn probe(&self, program: &[Step]) -> Vec<Step> {
        self.fitted(program, &self.battery, self.past_lock)
    }

    /// What the fit leaves unjudged, one line for every report (`None`:
    /// nothing).
    pub fn note(&self) -> Option<String> {
        (!self.not_judged.is_empty()).then(|| {
            format!(
                "not judged through the API map: {}",
                self.not_judged.join("; ")
            )
        })
    }
}

/// The declared field (a `JudgedField` name) the programs' requests of
/// `role` judge apart from the create route's.
fn judged_field_of(role: Role) -> &'static str {
    match role {
        Role::Create => "keySyntax",
        Role::Fail => "errors",
        Role::Slow => "lockMs",
        Role::OtherMethod | Role::OtherPath => "scope",
    }
}

/// The profile field the programs' requests of `role` judge.
fn field_of(role: Role) -> &'static str {
    match role {
        Role::Create => "every field",
        Role::Fail => "errors",
        Role::Slow => "lockMs and concurrent",
        Role::OtherMethod => "scope (method)",
        Role::OtherPath => "scope (path)",
    }
}

/// Counts the requests of `program` (resolved under `profile`) into `out`:
/// each request by method and contract path, and its reads of the effects
/// oracle (each `Effects` step and the one after the program).
fn count_program(program: &[Step], profile: &IdemProfile, out: &mut ContractRequests) {
    let mut sent: Vec<Req> = Vec::new();
    for step in program {
        match step {
            Step::Pause(_) => continue,
            Step::Effects => {
                out.effect_queries += 1;
                continue;
            }
            _ => {}
        }
        let group = requests_of(step, &sent, profile, "plan");
        sent.extend(group.iter().map(|s| s.req.clone()));
        for s in group {
            *out.requests
                .entry((s.request.method, s.request.path))
                .or_default() += 1;
        }
    }
    out.effect_queries += 1;
}

/// The requests a fuzz pass of `cases` programs with `seed` (after the
/// battery, when `with_battery`) sends through `fit`, if every program
/// passes (a failing one is shrunk, which sends more). The programs are
/// drawn exactly as `run/fuzz/idem.rs` draws them.
pub fn planned_requests(
    profile: &IdemProfile,
    cases: u32,
    seed: u64,
    long_pauses: u32,
    max_shrink_iters: u32,
    with_battery: bool,
    fit: &Fit,
) -> ContractRequests {
    let mut out = ContractRequests::default();
    if with_battery {
        for probe in battery(profile) {
            if fit.sends(probe.kind) {
                count_program(&fit.probe(&probe.program), profile, &mut out);
            }
        }
    }
    if cases == 0 {
        return out;
    }
    let drawn: Mutex<ContractRequests> = Mutex::new(out);
    let strategy = arb_program(long_pauses);
    let _ = run_cases(cases, seed, max_shrink_iters, &strategy, |_, program| {
        let mut d = drawn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        count_program(&fit.program(program), profile, &mut d);
        Ok(())
    });
    drawn
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Per contract request of `planned`, how many: for a report line.
pub fn describe(planned: &ContractRequests) -> String {
    let mut by: BTreeMap<String, u64> = BTreeMap::new();
    for ((m, p), n) in &planned.requests {
        *by.entry(format!("{m} {p}")).or_default() += n;
    }
    by.into_iter()
        .map(|(r, n)| format!("{r}: {n}"))
        .chain(std::iter::once(format!(
            "GET /.reqkey/effects: {}",
            planned.effect_queries
        )))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_identity_fit_changes_nothing_and_the_plan_is_the_seeds() {
        let profile = IdemProfile::draft_default();
        let fit = Fit::none();
        let program = vec![
            Step::Burst {
                req: Req {
                    route: 5,
                    caller: 1,
                    key: 1,
                    payload: 0,
                    style: 0,
                    spelling: 0,
                },
                copies: 3,
            },
            Step::PastLock(Req {
                route: 1,
                caller: 0,
                key: 1,
                payload: 0,
                style: 0,
                spelling: 0,
            }),
        ];
        assert_eq!(fit.program(&program), program);
        let a = planned_requests(&profile, 5, 7, 0, 128, true, &fit);
        assert_eq!(a, planned_requests(&profile, 5, 7, 0, 128, true, &fit));
        assert_ne!(a, planned_requests(&profile, 5, 8, 0, 128, true, &fit));
        // The battery alone: its bursts of 8, then its probes.
        let battery_only = planned_requests(&profile, 0, 7, 0, 128, true, &fit);
        let creates = battery_only.requests[&("POST".to_owned(), "/orders".to_owned())];
        assert!(creates >= u64::from(crate::run::fuzz::idem_battery::succeeding_bursts()) * 8);
    }

    /// Through a map no body that is not a JSON object goes out (the app's
    /// routes take the body into a member of theirs, so nothing says they
    /// refuse one), and every report says so; without one the battery
    /// sends its refused bodies.
    #[test]
    fn through_a_map_no_body_that_is_not_an_object_is_sent_and_the_report_says_so() {
        use crate::run::fuzz::idem_program::FIRST_TOP_LEVEL;
        let profile = IdemProfile::draft_default();
        assert!(Fit::none().sends(ProbeKind::HandlerRefusal));
        let map = ApiMap::parse("api.yaml", crate::targets::api_map::tests::EXAMPLE).unwrap();
        let fit = Fit::of(Some(&map), &profile);
        assert!(!fit.sends(ProbeKind::HandlerRefusal));
        assert!(fit.note().unwrap().contains("errors (a handler's own 4xx)"));
        let top = Req {
            route: 0,
            caller: 0,
            key: 1,
            payload: FIRST_TOP_LEVEL + 2,
            style: 0,
            spelling: 0,
        };
        let sent = fit.program(&[Step::Send(top.clone()), Step::Batch(vec![top.clone()])]);
        for step in &sent {
            let reqs = match step {
                Step::Send(r) => vec![r.clone()],
                Step::Batch(rs) => rs.clone(),
                other => panic!("{other:?}"),
            };
            assert!(reqs.iter().all(|r| r.payload < FIRST_TOP_LEVEL), "{sent:?}");
        }
        assert_eq!(
            Fit::none().program(&[Step::Send(top.clone())]),
            vec![Step::Send(top)]
        );
    }

    /// The seam of roles: the programs' callers are the ones an API map
    /// knows as the first caller and another caller.
    #[test]
    fn the_programs_callers_are_the_maps_program_callers() {
        assert_eq!(
            crate::run::fuzz::idem_program::CALLERS,
            crate::targets::api_map::PROGRAM_CALLERS
        );
    }
}
