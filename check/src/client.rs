//! The client verdict of `reqkey proxy` (SPEC 9): judges what the proxy saw
//! a client send, and the server's snapshots at the end, against the
//! `[[client.*]]` clauses. Pure: the same trace always gets the same
//! verdict, so a recorded run can be judged again.
//!
//! **User actions.** The judge cannot read a client's mind, so SPEC 9
//! defines an action over what the proxy observed, per session and in
//! arrival order: the entry request that follows a failed answer (a fault
//! the proxy injected, or a server that gave no whole answer) is a
//! **re-send** of the failed request's action; a request equal to an
//! earlier one of the session (route, key and body digest) is a re-send
//! too (a client's own timeout, which the proxy cannot see); every other
//! entry request starts a **new action**. A `DELETE` of a session forgets
//! it: the judge starts it afresh.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::trace::{Exchange, KeySent, SessionSnapshot};

/// A clause of SPEC 9 the verdict judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Rule {
    WellFormed,
    Keyed,
    RetrySameKey,
    RetrySameBody,
    FreshKey,
    OneRunPerAction,
    ClientCompletes,
}

impl Rule {
    pub const ALL: [Rule; 7] = [
        Rule::WellFormed,
        Rule::Keyed,
        Rule::RetrySameKey,
        Rule::RetrySameBody,
        Rule::FreshKey,
        Rule::OneRunPerAction,
        Rule::ClientCompletes,
    ];

    /// The clause id in SPEC 9.
    pub fn id(self) -> &'static str {
        match self {
            Rule::WellFormed => "client.key.well-formed",
            Rule::Keyed => "client.entry.keyed",
            Rule::RetrySameKey => "client.retry.same-key",
            Rule::RetrySameBody => "client.retry.same-body",
            Rule::FreshKey => "client.action.fresh-key",
            Rule::OneRunPerAction => "client.e2e.one-run-per-action",
            Rule::ClientCompletes => "client.run.exits-zero",
        }
    }

    /// What the clause asks, in one line.
    pub fn title(self) -> &'static str {
        match self {
            Rule::WellFormed => "every key the client sends is well-formed (SPEC 2)",
            Rule::Keyed => "every entry request carries a key (a tool-result chat send excepted)",
            Rule::RetrySameKey => "a re-send after a failed answer carries the same key",
            Rule::RetrySameBody => "a re-send after a failed answer carries the same route and body",
            Rule::FreshKey => "a new user action carries a key never used before in the session",
            Rule::OneRunPerAction => {
                "end to end, each user action the server accepted made exactly one run and one input"
            }
            Rule::ClientCompletes => "the client command exits 0 within the run time",
        }
    }
}

/// How the client command ended (command mode only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
pub enum ClientEnd {
    Exited { code: i32 },
    KilledBySignal,
    TimedOut { after_ms: u64 },
}

/// One clause judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleVerdict {
    pub id: &'static str,
    pub title: &'static str,
    pub passed: bool,
    /// Each violation, naming the requests (`#index`) it concerns.
    pub violations: Vec<String>,
}

/// Counts of what the proxy saw.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub requests: usize,
    pub entry_requests: usize,
    pub failed_answers: usize,
    /// `fault name -> count` over entry requests.
    pub faults: BTreeMap<String, usize>,
    pub sessions: usize,
    pub actions: usize,
}

/// Why no verdict could be reached (exit 2).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NoVerdict {
    pub reason: String,
}

/// The whole verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientVerdict {
    pub rules: Vec<RuleVerdict>,
    pub stats: Stats,
    pub indefinite: Option<NoVerdict>,
}

impl ClientVerdict {
    pub fn passed(&self) -> usize {
        self.rules.iter().filter(|r| r.passed).count()
    }
    pub fn failed(&self) -> usize {
        self.rules.iter().filter(|r| !r.passed).count()
    }
    /// 1 a rule did not hold (a proven violation outranks everything
    /// else: whatever could not be judged beside it, the client is shown
    /// not to conform); 2 no violation and no verdict; 0 every rule held.
    pub fn exit_code(&self) -> u8 {
        if self.failed() > 0 {
            1
        } else if self.indefinite.is_some() {
            2
        } else {
            0
        }
    }
    pub fn rule(&self, id: &str) -> Option<&RuleVerdict> {
        self.rules.iter().find(|r| r.id == id)
    }
}

#[derive(Debug, Default)]
struct Action {
    keys: BTreeSet<String>,
    /// The server answered one of its requests 2xx: it started or
    /// attached (a refusal, such as a 409, makes no run).
    committed: bool,
    first: u64,
}

#[derive(Debug, Default)]
struct SessionState<'a> {
    pending_failure: Option<&'a Exchange>,
    /// key -> (path, body digest, action) of its first use.
    seen: BTreeMap<&'a KeySent, (&'a str, &'a str, usize)>,
    actions: Vec<Action>,
}

/// Judges a trace. `snapshots` holds the server's snapshot of every
/// session the trace names; `client` is how the client command ended
/// (`None` when the proxy ran without one: the rule is then not judged).
pub fn judge(
    exchanges: &[Exchange],
    snapshots: &BTreeMap<String, SessionSnapshot>,
    client: Option<&ClientEnd>,
) -> ClientVerdict {
    let mut v: BTreeMap<Rule, Vec<String>> = Rule::ALL.iter().map(|r| (*r, Vec::new())).collect();
    let mut add = |rule: Rule, msg: String| {
        if let Some(list) = v.get_mut(&rule) {
            list.push(msg);
        }
    };
    let mut stats = Stats {
        requests: exchanges.len(),
        ..Stats::default()
    };
    let mut sessions: BTreeMap<&str, SessionState> = BTreeMap::new();
    let mut ordered: Vec<&Exchange> = exchanges.iter().collect();
    ordered.sort_by_key(|e| e.index);
    for e in ordered {
        let Some(session) = e.session.as_deref() else {
            continue;
        };
        if e.method == "DELETE" && e.entry.is_none() && e.path.split('/').count() == 3 {
            // `DELETE /sessions/{id}` frees the session's keys (SPEC 7).
            if e.client_status.is_some_and(|s| s == 204) {
                sessions.insert(session, SessionState::default());
            }
            continue;
        }
        if e.entry.is_none() {
            continue;
        }
        stats.entry_requests += 1;
        *stats.faults.entry(e.fault.name().to_owned()).or_default() += 1;
        if e.answer_failed() {
            stats.failed_answers += 1;
        }
        let st = sessions.entry(session).or_default();
        if let KeySent::Malformed { reason, .. } = &e.key {
            add(
                Rule::WellFormed,
                format!(
                    "#{} {} on session `{session}`: the key is malformed ({reason})",
                    e.index, e.path
                ),
            );
        }
        let exempt = e.tool_result;
        let action = if let Some(p) = st.pending_failure.take() {
            let why = match p.fault.fails_answer() {
                true => format!("the {} of #{}", p.fault, p.index),
                false => format!("the failed answer of #{}", p.index),
            };
            if e.key.is_absent() && !exempt {
                add(
                    Rule::Keyed,
                    format!(
                        "#{} re-sends #{} after {why} without a key (#{} carried {})",
                        e.index,
                        p.index,
                        p.index,
                        p.key.describe()
                    ),
                );
            } else if e.key != p.key && !exempt {
                add(
                    Rule::RetrySameKey,
                    format!(
                        "#{} re-sends #{} after {why} with {} instead of {}",
                        e.index,
                        p.index,
                        e.key.describe(),
                        p.key.describe()
                    ),
                );
            }
            if (e.path.as_str(), e.body_digest.as_str())
                != (p.path.as_str(), p.body_digest.as_str())
            {
                add(
                    Rule::RetrySameBody,
                    format!(
                        "#{} re-sends #{} after {why} with {}",
                        e.index,
                        p.index,
                        if e.path != p.path {
                            format!("another route ({} instead of {})", e.path, p.path)
                        } else {
                            "another body (its digest differs)".to_owned()
                        }
                    ),
                );
            }
            st.seen
                .get(&p.key)
                .map(|(_, _, a)| *a)
                .unwrap_or(st.actions.len().saturating_sub(1))
        } else {
            match st
                .seen
                .get(&e.key)
                .filter(|_| !e.key.is_absent() && !exempt)
            {
                Some((path, digest, a))
                    if (*path, *digest) == (e.path.as_str(), e.body_digest.as_str()) =>
                {
                    *a
                }
                Some((path, _, a)) => {
                    let first = st.actions.get(*a).map_or(0, |x| x.first);
                    add(
                        Rule::FreshKey,
                        format!(
                            "#{} starts a new action ({}) with {}, the key of #{}'s action ({}{})",
                            e.index,
                            e.path,
                            e.key.describe(),
                            first,
                            path,
                            if *path == e.path {
                                ", another body"
                            } else {
                                ""
                            }
                        ),
                    );
                    st.actions.push(Action {
                        first: e.index,
                        ..Action::default()
                    });
                    st.actions.len() - 1
                }
                None => {
                    if e.key.is_absent() && !exempt {
                        add(
                            Rule::Keyed,
                            format!("#{} {} starts a new action without a key", e.index, e.path),
                        );
                    }
                    st.actions.push(Action {
                        first: e.index,
                        ..Action::default()
                    });
                    st.actions.len() - 1
                }
            }
        };
        if !e.key.is_absent() && !exempt {
            st.seen
                .entry(&e.key)
                .or_insert((e.path.as_str(), e.body_digest.as_str(), action));
        }
        if let Some(a) = st.actions.get_mut(action) {
            if let KeySent::Valid { key } = &e.key {
                if !exempt {
                    a.keys.insert(key.clone());
                }
            }
            a.committed |= e.upstream_statuses.iter().any(|s| (200..300).contains(s));
        }
        if e.answer_failed() {
            st.pending_failure = Some(e);
        }
    }
    stats.sessions = sessions.len();
    stats.actions = sessions.values().map(|s| s.actions.len()).sum();
    let mut indefinite = None;
    if stats.entry_requests == 0 {
        indefinite = Some(NoVerdict {
            reason:
                "the client sent no entry request (start, resume, retry, chat) through the proxy"
                    .to_owned(),
        });
    }
    for (session, st) in &sessions {
        let reached = st.actions.iter().filter(|a| a.committed).count();
        let (runs, inputs) = match snapshots.get(*session) {
            Some(SessionSnapshot::Found { runs, inputs }) => (runs.as_slice(), *inputs),
            Some(SessionSnapshot::Missing) => (&[][..], 0),
            Some(SessionSnapshot::Unreadable { reason }) => {
                indefinite.get_or_insert(NoVerdict {
                    reason: format!(
                        "the snapshot of session `{session}` could not be read: {reason}"
                    ),
                });
                continue;
            }
            None => {
                indefinite.get_or_insert(NoVerdict {
                    reason: format!("no snapshot of session `{session}` was read"),
                });
                continue;
            }
        };
        if runs.len() != reached || inputs != reached {
            add(
                Rule::OneRunPerAction,
                format!(
                    "session `{session}`: the server accepted {reached} user actions, it holds {} runs and {inputs} inputs",
                    runs.len()
                ),
            );
        }
        for a in st
            .actions
            .iter()
            .filter(|a| a.committed && !a.keys.is_empty())
        {
            let holders: Vec<&str> = runs
                .iter()
                .filter(|r| r.request_key.as_ref().is_some_and(|k| a.keys.contains(k)))
                .map(|r| r.run_id.as_str())
                .collect();
            if holders.len() > 1 {
                add(
                    Rule::OneRunPerAction,
                    format!(
                        "session `{session}`: the action of #{} made {} runs ({})",
                        a.first,
                        holders.len(),
                        holders.join(", ")
                    ),
                );
            }
        }
    }
    let judged_client = client.is_some();
    match client {
        Some(ClientEnd::Exited { code: 0 }) | None => {}
        Some(ClientEnd::Exited { code }) => {
            add(Rule::ClientCompletes, format!("the client exited {code}"))
        }
        Some(ClientEnd::KilledBySignal) => add(
            Rule::ClientCompletes,
            "the client was killed by a signal".to_owned(),
        ),
        Some(ClientEnd::TimedOut { after_ms }) => add(
            Rule::ClientCompletes,
            format!("the client did not exit within {after_ms} ms and was stopped"),
        ),
    }
    let rules = Rule::ALL
        .iter()
        .filter(|r| judged_client || **r != Rule::ClientCompletes)
        .map(|r| {
            let violations = v.remove(r).unwrap_or_default();
            RuleVerdict {
                id: r.id(),
                title: r.title(),
                passed: violations.is_empty(),
                violations,
            }
        })
        .collect();
    ClientVerdict {
        rules,
        stats,
        indefinite,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Fault;
    use crate::trace::{Entry, RunSeen};

    fn ex(index: u64, key: Option<&str>, body: &str, fault: Fault) -> Exchange {
        let answered = !fault.fails_answer() || !fault.forwards();
        Exchange {
            index,
            at_ms: index,
            method: "POST".into(),
            path: "/sessions/s/chat".into(),
            session: Some("s".into()),
            entry: Some(Entry::Chat),
            key: key.map_or(KeySent::Absent, |k| KeySent::Valid { key: k.into() }),
            body_digest: body.into(),
            tool_result: false,
            fault,
            forwarded: u32::from(fault.forwards()),
            upstream_statuses: if fault.forwards() { vec![200] } else { vec![] },
            upstream_error: None,
            client_status: match fault {
                Fault::Status502 => Some(502),
                Fault::Status503 => Some(503),
                _ if answered => Some(200),
                _ => None,
            },
        }
    }

    fn found(runs: &[&str]) -> BTreeMap<String, SessionSnapshot> {
        let runs: Vec<RunSeen> = runs
            .iter()
            .enumerate()
            .map(|(i, k)| RunSeen {
                run_id: format!("r{i}"),
                request_key: Some((*k).to_owned()),
            })
            .collect();
        let inputs = runs.len();
        BTreeMap::from([("s".to_owned(), SessionSnapshot::Found { runs, inputs })])
    }

    fn failed(v: &ClientVerdict) -> Vec<&'static str> {
        v.rules.iter().filter(|r| !r.passed).map(|r| r.id).collect()
    }

    #[test]
    fn a_correct_trace_passes_and_an_equal_request_is_a_resend() {
        let trace = [
            ex(0, Some("a"), "m1", Fault::DropAfterCommit),
            ex(1, Some("a"), "m1", Fault::Status503),
            ex(2, Some("a"), "m1", Fault::None),
            // The client's own timeout: the same request again.
            ex(3, Some("a"), "m1", Fault::None),
            ex(4, Some("b"), "m2", Fault::Duplicate),
        ];
        let v = judge(
            &trace,
            &found(&["a", "b"]),
            Some(&ClientEnd::Exited { code: 0 }),
        );
        assert_eq!(v.exit_code(), 0, "{v:#?}");
        assert_eq!(v.stats.actions, 2);
        assert_eq!(v.stats.failed_answers, 2);
    }

    #[test]
    fn each_broken_trace_names_its_clause() {
        let new_key = [
            ex(0, Some("a"), "m1", Fault::DropAfterCommit),
            ex(1, Some("a2"), "m1", Fault::None),
        ];
        let v = judge(&new_key, &found(&["a", "a2"]), None);
        assert_eq!(
            failed(&v),
            ["client.retry.same-key", "client.e2e.one-run-per-action"]
        );
        let other_body = [
            ex(0, Some("a"), "m1", Fault::Status502),
            ex(1, Some("a"), "m1-edited", Fault::None),
        ];
        assert_eq!(
            failed(&judge(&other_body, &found(&["a"]), None)),
            ["client.retry.same-body"]
        );
        let mut refused = ex(1, Some("a"), "m2", Fault::None);
        refused.upstream_statuses = vec![409];
        refused.client_status = Some(409);
        let reused = [ex(0, Some("a"), "m1", Fault::None), refused];
        assert_eq!(
            failed(&judge(&reused, &found(&["a"]), None)),
            ["client.action.fresh-key"]
        );
        let keyless = [
            ex(0, Some("a"), "m1", Fault::Status503),
            ex(1, None, "m1", Fault::None),
        ];
        let v = judge(
            &keyless,
            &found(&["a"]),
            Some(&ClientEnd::Exited { code: 3 }),
        );
        assert_eq!(failed(&v), ["client.entry.keyed", "client.run.exits-zero"]);
        let mut malformed = ex(0, None, "m1", Fault::None);
        malformed.key = KeySent::Malformed {
            fingerprint: "f".into(),
            reason: "r".into(),
        };
        malformed.upstream_statuses = vec![400];
        assert_eq!(
            failed(&judge(&[malformed], &found(&[]), None)),
            ["client.key.well-formed"]
        );
    }

    #[test]
    fn a_delete_frees_keys_and_a_tool_result_is_exempt_and_no_snapshot_is_no_verdict() {
        let mut delete = ex(1, None, "", Fault::None);
        delete.method = "DELETE".into();
        delete.path = "/sessions/s".into();
        delete.entry = None;
        delete.client_status = Some(204);
        let mut tool = ex(3, None, "t", Fault::None);
        tool.tool_result = true;
        tool.upstream_statuses = vec![200];
        let trace = [
            ex(0, Some("a"), "m1", Fault::None),
            delete,
            ex(2, Some("a"), "m2", Fault::None),
            tool,
        ];
        let snap = BTreeMap::from([(
            "s".to_owned(),
            SessionSnapshot::Found {
                runs: vec![
                    RunSeen {
                        run_id: "r1".into(),
                        request_key: Some("a".into()),
                    },
                    RunSeen {
                        run_id: "r2".into(),
                        request_key: None,
                    },
                ],
                inputs: 2,
            },
        )]);
        let v = judge(&trace, &snap, None);
        assert_eq!(v.exit_code(), 0, "{v:#?}");
        let v = judge(&trace, &BTreeMap::new(), None);
        assert_eq!(v.exit_code(), 2);
        assert_eq!(judge(&[], &BTreeMap::new(), None).exit_code(), 2);
    }
}

#[cfg(test)]
mod precedence {
    use super::*;

    fn verdict(failed: bool, indefinite: bool) -> ClientVerdict {
        ClientVerdict {
            rules: vec![RuleVerdict {
                id: "client.e2e.one-run-per-action",
                title: "one run per action",
                passed: !failed,
                violations: Vec::new(),
            }],
            stats: Stats::default(),
            indefinite: indefinite.then(|| NoVerdict {
                reason: "only 1 of 10 entry answers failed".into(),
            }),
        }
    }

    #[test]
    fn a_proven_violation_outranks_no_verdict() {
        assert_eq!(verdict(true, true).exit_code(), 1);
        assert_eq!(verdict(true, false).exit_code(), 1);
        assert_eq!(verdict(false, true).exit_code(), 2);
        assert_eq!(verdict(false, false).exit_code(), 0);
    }
}
