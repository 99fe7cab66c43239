//! `parallel` groups: requests prepared, released together behind a
//! barrier, recorded (invoke and return instants), judged as a group
//! (`expect_group`, `linearizable`), drawn as a timeline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::run::event::{FailingSubset, Failure, Span, TrialTimeline};
use crate::run::request::Request;
use crate::run::trial::{fail, target_stop, Recorded, Stop, Trial, GROUP_SPIN_US, MAX_HISTORY_OPS};
use crate::targets::TargetError;
use reqkey_check::lin::{self, CheckOptions};
use reqkey_scenario::pattern::matches;
use reqkey_scenario::{GroupCount, GroupRule, Step};

impl Trial<'_> {
    pub(super) async fn run_group(
        &mut self,
        path: &str,
        group: &Step,
        items: &[Step],
    ) -> Result<(), Stop> {
        // Expand copies and prepare every request before anything is sent.
        let mut prepared: Vec<(String, &Step, Request, Option<u32>)> = Vec::new();
        for (k, item) in items.iter().enumerate() {
            let copies = item.copies.map(|c| self.cfg.copies_override.unwrap_or(c));
            for copy in 0..copies.unwrap_or(1) {
                let index = copies.map(|_| copy);
                if let Some(i) = index {
                    self.vars.bind("i", json!(i));
                }
                let name = match (&item.name, index) {
                    (Some(n), Some(i)) => format!("{n}.{i}"),
                    (Some(n), None) => n.clone(),
                    (None, Some(i)) => format!("#{k}.{i}"),
                    (None, None) => format!("#{k}"),
                };
                let item_path = format!("{path}[{k}] {}", item.action.label());
                let request = self.request(&item_path, item)?;
                prepared.push((name, item, request, index));
            }
        }
        // A group of two or more requests is a race: whether they overlapped
        // is measured and reported (a group of one overlaps nothing by
        // construction, and claims nothing about races).
        // (A fault is not a request: a group of one request and a fault
        // races nothing.)
        self.had_group |= prepared
            .iter()
            .filter(|(_, _, request, _)| !matches!(request, Request::Fault(_)))
            .count()
            >= 2;
        let mut order: Vec<usize> = (0..prepared.len()).collect();
        order.shuffle(&mut self.rng);
        // A connection that opens a second late (a full listen queue) sends
        // its request after the others finished: see after the answers.
        let slow_connects_before = self.target.slow_connects();
        let barrier = Arc::new(Barrier::new(prepared.len()));
        // Each item runs on an OS thread of its own, driving its call with
        // the runtime's handle, so items really run at once: as tasks, the
        // ones a barrier wakes tend to queue behind each other on one
        // worker, and an in-process store answers faster than a task is
        // woken. All start together at the instant fixed by the first one
        // past the barrier. (Threads, not the blocking pool: a group may
        // hold more items than that pool has threads, and the stores'
        // own blocking calls need it.)
        let start_at = Arc::new(std::sync::OnceLock::<Instant>::new());
        let abort = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let runtime = tokio::runtime::Handle::current();
        type ItemOutcome = Option<(Instant, Instant, u64, Result<Value, TargetError>)>;
        let mut receivers: Vec<(usize, tokio::sync::oneshot::Receiver<ItemOutcome>)> =
            Vec::with_capacity(prepared.len());
        let mut spawn_error = None;
        for &k in &order {
            let target = Arc::clone(self.target);
            let barrier = Arc::clone(&barrier);
            let start_at = Arc::clone(&start_at);
            let abort = Arc::clone(&abort);
            let request = prepared[k].2.clone();
            let timeout_ms = self.cfg.call_timeout_ms;
            let lead_us = self.group_lead_us;
            let runtime = runtime.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("reqkey-parallel-item".into())
                .spawn(move || {
                    let outcome = runtime.block_on(async move {
                        barrier.wait().await;
                        if abort.load(std::sync::atomic::Ordering::SeqCst) {
                            return None;
                        }
                        let go = *start_at
                            .get_or_init(|| Instant::now() + Duration::from_micros(lead_us));
                        // Sleep most of the lead, then spin: bounded by the
                        // lead (at most MAX_GROUP_LEAD_US), spinning at most
                        // GROUP_SPIN_US.
                        let spin_from = go.checked_sub(Duration::from_micros(GROUP_SPIN_US));
                        if let Some(wake) = spin_from {
                            let now = Instant::now();
                            if wake > now {
                                std::thread::sleep(wake - now);
                            }
                        }
                        while Instant::now() < go {
                            std::hint::spin_loop();
                        }
                        // How late this item left (a busy machine schedules a
                        // thread late); then its lifetime at the target starts
                        // when it is sent: after its `delay_ms`, if any.
                        let left = Instant::now();
                        let late_us = u64::try_from(left.saturating_duration_since(go).as_micros())
                            .unwrap_or(u64::MAX);
                        let invoke = left + request.delay();
                        let answer = request.send(target.as_ref(), timeout_ms).await;
                        Some((invoke, Instant::now(), late_us, answer))
                    });
                    let _ = tx.send(outcome);
                });
            match spawned {
                Ok(_) => receivers.push((k, rx)),
                Err(e) => {
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = spawn_error {
            // Release the threads already waiting: fill the barrier, and
            // tell them not to call.
            abort.store(true, std::sync::atomic::Ordering::SeqCst);
            for _ in receivers.len()..prepared.len() {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                });
            }
            for (_, rx) in receivers {
                let _ = rx.await;
            }
            return Err(Stop::harness(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!("could not start a thread for a parallel item: {e}"),
                expected: None,
                actual: None,
                detail: None,
                clauses: Vec::new(),
            }));
        }
        let mut outcomes: Vec<Option<(Instant, Instant, Value)>> = vec![None; prepared.len()];
        let mut first_stop = None;
        for (k, rx) in receivers {
            let item_path = format!("{path}[{k}] {}", prepared[k].1.action.label());
            match rx.await {
                Ok(Some((invoke, ret, late_us, Ok(answer)))) => {
                    self.max_late_us = self.max_late_us.max(late_us);
                    outcomes[k] = Some((invoke, ret, answer));
                }
                // A fault cut it, as the scenario allows: nothing was
                // answered to judge.
                Ok(Some((_, _, _, Err(e)))) if prepared[k].1.may_be_cut && e.is_silence() => {}
                Ok(Some((_, _, _, Err(e)))) => {
                    first_stop.get_or_insert(target_stop(&item_path, &prepared[k].2, e));
                }
                Ok(None) | Err(_) => {
                    first_stop.get_or_insert(Stop::harness(Failure {
                        trial: 0,
                        step: item_path,
                        message: "the request's thread ended without an answer (it panicked)"
                            .into(),
                        expected: None,
                        actual: None,
                        detail: None,
                        clauses: Vec::new(),
                    }));
                }
            }
        }
        if let Some(stop) = first_stop {
            return Err(stop);
        }
        let slow = self
            .target
            .slow_connects()
            .saturating_sub(slow_connects_before);
        if slow > 0 && prepared.len() >= 2 {
            return Err(Stop::Harness(
                Box::new(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!(
                        "{slow} connection(s) of this group took {} ms or more to open: the target's listen queue was full and the kernel retried them, so their requests arrived after the others had finished. The group's answers are not concurrent, so its checks are not judged (warning[listen_queue] names the fix).",
                        crate::targets::connect_log::SLOW_CONNECT_MS
                    ),
                    expected: None,
                    actual: None,
                    detail: None,
                    clauses: Vec::new(),
                }),
                super::trial::LISTEN_QUEUE,
            ));
        }
        let invokes = outcomes.iter().flatten().map(|(invoke, _, _)| *invoke);
        if let (Some(first), Some(last)) = (invokes.clone().min(), invokes.max()) {
            let spread = u64::try_from(last.duration_since(first).as_micros()).unwrap_or(u64::MAX);
            self.max_send_spread_us = Some(self.max_send_spread_us.unwrap_or(0).max(spread));
        }
        // Faults are not operations of the history.
        let recorded: Vec<(Recorded, &Request)> = prepared
            .iter()
            .zip(outcomes)
            .filter(|((_, _, request, _), _)| !matches!(request, Request::Fault(_)))
            .filter_map(|((name, _, request, _), o)| {
                o.map(|(invoke, ret, answer)| {
                    (
                        Recorded {
                            name: name.clone(),
                            request: request.shown(),
                            invoke,
                            ret,
                            answer,
                        },
                        request,
                    )
                })
            })
            .collect();
        let (recorded, sent): (Vec<Recorded>, Vec<&Request>) = recorded.into_iter().unzip();
        self.overlapped |= overlapped(&recorded);
        self.spans
            .extend(recorded.iter().map(|r| (r.name.clone(), r.invoke, r.ret)));
        for (r, request) in recorded.iter().zip(sent) {
            let (invoke_ns, return_ns) = (self.clock.ns_at(r.invoke), self.clock.ns_at(r.ret));
            self.record(r.name.clone(), request, invoke_ns, return_ns, &r.answer);
        }
        if group.linearizable {
            self.check_linearizable(path)
                .map_err(|stop| stop.blaming(&group.judges))?;
            self.verdicts
                .pass(group.judges.iter().map(|c| c.0.as_str()));
        }
        // Per-item expectations, in declaration order.
        // (Cut items and faults were not recorded: each item finds its own.)
        for (k, (name, item, request, index)) in prepared.iter().enumerate() {
            let Some(rec) = recorded.iter().find(|r| &r.name == name) else {
                continue;
            };
            if let Some(i) = index {
                self.vars.bind("i", json!(i));
            }
            let item_path = format!("{path}[{k}] {}", item.action.label());
            let mut named = (*item).clone();
            named.name = Some(rec.name.clone());
            let judges = group.item_judges(item);
            self.check_answer(&item_path, &named, request, rec.answer.clone())
                .map_err(|stop| stop.blaming(judges))?;
            if item.checks_own_answer() {
                self.verdicts.pass(judges.iter().map(|c| c.0.as_str()));
            }
        }
        self.check_group_rules(path, group, &recorded)?;
        Ok(())
    }

    /// Appends one answered request to the trial's history (a raw request
    /// as what it says, when it is JSON: see [`Request::shown`]), and how
    /// its level shows it.
    pub(super) fn record(
        &mut self,
        client: String,
        request: &Request,
        invoke_ns: u64,
        return_ns: u64,
        answer: &Value,
    ) {
        if self.history.len() < MAX_HISTORY_OPS {
            self.shown.push(self.rules.shown(request, Some(answer)));
            self.history.push(lin::Operation {
                client,
                request: request.shown(),
                invoke_ns,
                return_ns,
                answer: Some(answer.clone()),
            });
        }
    }

    /// Checks the trial's history so far against the sequential spec.
    pub(super) fn check_linearizable(&mut self, path: &str) -> Result<(), Stop> {
        let opts = CheckOptions {
            budget_steps: self.cfg.lin_budget_steps,
            minimize: true,
            ..CheckOptions::default()
        };
        let report = lin::check_with(&self.history, opts);
        let failure = |message: String, detail: Option<String>| Failure {
            trial: 0,
            step: path.to_owned(),
            message,
            expected: None,
            actual: None,
            detail,
            clauses: Vec::new(),
        };
        match report.verdict {
            lin::Verdict::Linearizable => Ok(()),
            lin::Verdict::NotLinearizable(c) => {
                self.judged = Some(FailingSubset {
                    partition: c.partition.clone(),
                    minimal: c.minimal.clone(),
                    session: c.session.clone(),
                });
                Err(Stop::fail(failure(
                    format!(
                        "the history ({} operations) is not linearizable: {}",
                        self.history.len(),
                        c.reason
                    ),
                    Some(c.to_string()),
                )))
            }
            lin::Verdict::Unknown { reason } => Err(Stop::harness(failure(
                format!("linearizability could not be decided: {reason}"),
                None,
            ))),
        }
    }

    /// The `expect_group` rules of `group`, in order, each consuming the
    /// answers it matches; a rule that fails is evidence against its own
    /// clauses (`judges:`, or its step's).
    pub(super) fn check_group_rules(
        &mut self,
        path: &str,
        group: &Step,
        recorded: &[Recorded],
    ) -> Result<(), Stop> {
        let mut remaining: Vec<&Recorded> = recorded.iter().collect();
        let all: Value = Value::Object(
            recorded
                .iter()
                .map(|r| (r.name.clone(), r.answer.clone()))
                .collect(),
        );
        for (k, rule) in group.expect_group.iter().enumerate() {
            let judges = group.rule_judges(rule);
            remaining = self
                .check_group_rule(path, k, rule, remaining, &all)
                .map_err(|stop| stop.blaming(judges))?;
            self.verdicts.pass(judges.iter().map(|c| c.0.as_str()));
        }
        Ok(())
    }

    /// Rule `k` of a group over the answers the earlier rules left; the
    /// answers it leaves.
    fn check_group_rule<'r>(
        &mut self,
        path: &str,
        k: usize,
        rule: &GroupRule,
        remaining: Vec<&'r Recorded>,
        all: &Value,
    ) -> Result<Vec<&'r Recorded>, Stop> {
        let pattern = self.vars.substitute(&rule.pattern);
        let (hit, miss): (Vec<&Recorded>, Vec<&Recorded>) = remaining
            .iter()
            .partition(|r| matches(&pattern, &r.answer).is_ok());
        let ok = match rule.count {
            GroupCount::Exactly(n) => hit.len() == n as usize,
            GroupCount::Rest => miss.is_empty(),
        };
        if !ok {
            let want = match rule.count {
                GroupCount::Exactly(n) => format!("exactly {n}"),
                GroupCount::Rest => format!("all {} remaining", remaining.len()),
            };
            return Err(Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!(
                    "expect_group rule {k}: wanted {want} answers to match, {} did ({})",
                    hit.len(),
                    hit.iter()
                        .map(|r| r.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                expected: Some(pattern),
                actual: Some(all.clone()),
                detail: None,
                clauses: Vec::new(),
            }));
        }
        if let Some(first) = hit.first() {
            self.bind(path, &rule.bind, &first.answer)?;
        } else if !rule.bind.is_empty() {
            return Err(fail(
                path,
                format!("expect_group rule {k} matched nothing to bind from"),
            ));
        }
        Ok(miss)
    }
}

/// A trial's group requests as bars, relative to its first invoke.
pub(super) fn timeline(
    trial: u32,
    failed: bool,
    spans: &[(String, Instant, Instant)],
) -> TrialTimeline {
    let origin = spans.iter().map(|s| s.1).min();
    let us = |t: Instant| {
        origin.map_or(0, |o| {
            u64::try_from(t.saturating_duration_since(o).as_micros()).unwrap_or(u64::MAX)
        })
    };
    TrialTimeline {
        trial,
        failed,
        spans: spans
            .iter()
            .map(|(name, invoke, ret)| Span {
                name: name.clone(),
                start_us: us(*invoke),
                end_us: us(*ret),
            })
            .collect(),
    }
}

/// Did some two operations of the group overlap in time (one invoked
/// before the other returned)?
pub fn overlapped(recorded: &[Recorded]) -> bool {
    let mut spans: Vec<(Instant, Instant)> = recorded.iter().map(|r| (r.invoke, r.ret)).collect();
    spans.sort_unstable();
    let mut latest_return: Option<Instant> = None;
    for (invoke, ret) in spans {
        if latest_return.is_some_and(|r| invoke < r) {
            return true;
        }
        latest_return = Some(latest_return.map_or(ret, |r| r.max(ret)));
    }
    false
}
