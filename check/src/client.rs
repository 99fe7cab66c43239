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
//!
//! **Tool-result sends** (SPEC 9, `client.tool-result.*`). The server
//! ignores their key, so nothing tells it a re-send from a new send; SPEC 9
//! asks for at least once, with a snapshot read before every re-send. The
//! proxy records the run each answer named (also the answers the client
//! lost) and the input runs of every snapshot read the client made, so the
//! judge knows what the client could see: a read after the failed answer
//! *shows* the send when it lists an input of one of the action's runs. A
//! re-send after a read that did not show it may add a run (the action's
//! `runs_allowed`: the first send's run could not be seen); a re-send with
//! no read, or after one that showed it, is a violation and its run is one
//! too many; moving on after a read that showed it is no re-send at all,
//! and moving on (or exiting 0) when no read showed it is giving up.
//!
//! **Naming.** Every violation names its requests by arrival number,
//! method and path (`#7 POST /sessions/s/chat`); an end-to-end violation
//! lists the accepted actions with their re-sends and each run held with
//! the requests whose answers named it, 24 items at most (`LISTED`).

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
    ToolAtLeastOnce,
    ToolRereadBeforeResend,
    OneRunPerAction,
    ClientCompletes,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::WellFormed,
        Rule::Keyed,
        Rule::RetrySameKey,
        Rule::RetrySameBody,
        Rule::FreshKey,
        Rule::ToolAtLeastOnce,
        Rule::ToolRereadBeforeResend,
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
            Rule::ToolAtLeastOnce => "client.tool-result.at-least-once",
            Rule::ToolRereadBeforeResend => "client.tool-result.reread-before-resend",
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
            Rule::ToolAtLeastOnce => {
                "a keyless tool result whose answer failed is re-sent until answered or shown recorded in the snapshot"
            }
            Rule::ToolRereadBeforeResend => {
                "a keyless tool result is re-sent only after a snapshot read that does not show it recorded"
            }
            Rule::OneRunPerAction => {
                "end to end, each user action the server accepted made exactly one run and one input (a tool result: one per justified re-send)"
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
struct Action<'a> {
    keys: BTreeSet<String>,
    /// The server answered one of its requests 2xx: it started or
    /// attached (a refusal, such as a 409, makes no run).
    committed: bool,
    first: u64,
    /// A keyless tool-result send (SPEC 9, `client.tool-result.*`).
    tool: bool,
    /// Every request of the action, in arrival order.
    requests: Vec<&'a Exchange>,
    /// The runs (and inputs) the action may hold end to end: one once it
    /// committed; for a tool-result send one more for each committed
    /// re-send the client made after a snapshot read that did not show it.
    runs_allowed: usize,
}

impl Action<'_> {
    /// `#0 POST /sessions/s/chat` (and its re-sends `#1, #2`).
    fn describe(&self) -> String {
        let mut out = self
            .requests
            .first()
            .map_or_else(|| format!("#{}", self.first), |e| e.label());
        if self.requests.len() > 1 {
            let rest: Vec<String> = self.requests[1..]
                .iter()
                .map(|e| format!("#{}", e.index))
                .collect();
            out.push_str(&format!(" (re-sent as {})", rest.join(", ")));
        }
        out
    }

    /// The first run the action's answers named that `read` shows an input of.
    fn shown_in<'r>(&self, read: &'r Exchange) -> Option<&'r str> {
        let inputs = read.snapshot_inputs.as_deref()?;
        inputs
            .iter()
            .find(|run| {
                self.requests
                    .iter()
                    .any(|e| e.run_ids.iter().any(|r| r == *run))
            })
            .map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct SessionState<'a> {
    /// The request whose answer failed, and its action.
    pending_failure: Option<(&'a Exchange, usize)>,
    /// The snapshot reads the client made since that failure.
    reads: Vec<&'a Exchange>,
    /// key -> (path, body digest, action) of its first use.
    seen: BTreeMap<&'a KeySent, (&'a str, &'a str, usize)>,
    actions: Vec<Action<'a>>,
}

/// The most items a violation lists; the rest are counted.
const LISTED: usize = 24;

/// `items` joined by `sep`, at most [`LISTED`] of them, then `… and N more`.
fn bounded(items: &[String], sep: &str) -> String {
    let mut out = items
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(sep);
    if items.len() > LISTED {
        out.push_str(&format!("{sep}… and {} more", items.len() - LISTED));
    }
    out
}

/// The requests whose answers named `run`, as `#3, #5`, or `no answer`.
fn made_by(st: &SessionState, run: &str) -> String {
    let by: Vec<String> = st
        .actions
        .iter()
        .flat_map(|a| a.requests.iter())
        .filter(|e| e.run_ids.iter().any(|r| r == run))
        .map(|e| format!("#{}", e.index))
        .collect();
    if by.is_empty() {
        format!("{run} (named by no answer)")
    } else {
        format!("{run} (answer to {})", by.join(", "))
    }
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
            if e.is_snapshot_read() {
                if let Some(st) = sessions.get_mut(session) {
                    if st.pending_failure.is_some() {
                        st.reads.push(e);
                    }
                }
            }
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
                    "{} on session `{session}`: the key is malformed ({reason})",
                    e.label()
                ),
            );
        }
        let exempt = e.tool_result;
        let mut pending = st.pending_failure.take();
        let reads = std::mem::take(&mut st.reads);
        // A keyless tool-result send whose answer failed (SPEC 9,
        // `client.tool-result.*`): the client re-reads the snapshot and
        // re-sends only when the result is not recorded there.
        let mut justified = false;
        if let Some((p, pa)) = pending.filter(|(p, _)| p.tool_result) {
            let last_read = reads.last().copied();
            let shown = last_read.and_then(|g| st.actions.get(pa).and_then(|a| a.shown_in(g)));
            let same = (e.path.as_str(), e.body_digest.as_str())
                == (p.path.as_str(), p.body_digest.as_str());
            if !same {
                if shown.is_none() {
                    add(
                        Rule::ToolAtLeastOnce,
                        format!(
                            "{} moves on from the tool result {} after its failed answer without re-sending it, and {}",
                            e.label(),
                            p.label(),
                            match last_read {
                                Some(g) => format!("the snapshot read {} did not show it recorded", g.label()),
                                None => "no snapshot read showed it recorded".to_owned(),
                            }
                        ),
                    );
                }
                pending = None;
            } else {
                match (last_read, shown) {
                    (None, _) => add(
                        Rule::ToolRereadBeforeResend,
                        format!(
                            "{} re-sends the tool result {} after its failed answer without reading the session's snapshot (GET /sessions/{session}) first",
                            e.label(),
                            p.label()
                        ),
                    ),
                    (Some(g), Some(run)) => add(
                        Rule::ToolRereadBeforeResend,
                        format!(
                            "{} re-sends the tool result {} although the snapshot read {} showed it recorded (the input of run {run})",
                            e.label(),
                            p.label(),
                            g.label()
                        ),
                    ),
                    (Some(_), None) => justified = true,
                }
            }
        }
        let action = if let Some((p, pa)) = pending {
            let why = match p.fault.fails_answer() {
                true => format!("the {} of #{}", p.fault, p.index),
                false => format!("the failed answer of #{}", p.index),
            };
            if e.key.is_absent() && !exempt {
                add(
                    Rule::Keyed,
                    format!(
                        "{} re-sends {} after {why} without a key (#{} carried {})",
                        e.label(),
                        p.label(),
                        p.index,
                        p.key.describe()
                    ),
                );
            } else if e.key != p.key && !exempt {
                add(
                    Rule::RetrySameKey,
                    format!(
                        "{} re-sends {} after {why} with {} instead of {}",
                        e.label(),
                        p.label(),
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
                        "{} re-sends {} after {why} with {}",
                        e.label(),
                        p.label(),
                        if e.path != p.path {
                            format!("another route ({} instead of {})", e.path, p.path)
                        } else {
                            "another body (its digest differs)".to_owned()
                        }
                    ),
                );
            }
            pa
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
                    let first = st
                        .actions
                        .get(*a)
                        .map_or_else(String::new, |x| x.describe());
                    add(
                        Rule::FreshKey,
                        format!(
                            "{} starts a new action with {}, the key of the action of {first}{}",
                            e.label(),
                            e.key.describe(),
                            if *path == e.path {
                                " (another body)"
                            } else {
                                ""
                            }
                        ),
                    );
                    st.actions.push(Action {
                        first: e.index,
                        tool: exempt,
                        ..Action::default()
                    });
                    st.actions.len() - 1
                }
                None => {
                    if e.key.is_absent() && !exempt {
                        add(
                            Rule::Keyed,
                            format!("{} starts a new action without a key", e.label()),
                        );
                    }
                    st.actions.push(Action {
                        first: e.index,
                        tool: exempt,
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
            a.requests.push(e);
            if let KeySent::Valid { key } = &e.key {
                if !exempt {
                    a.keys.insert(key.clone());
                }
            }
            if e.committed() {
                if !a.tool {
                    a.runs_allowed = 1;
                } else if a.runs_allowed == 0 || justified {
                    a.runs_allowed += 1;
                }
            }
            a.committed |= e.committed();
        }
        if e.answer_failed() {
            st.pending_failure = Some((e, action));
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
        // A tool result whose answer failed last, neither re-sent nor
        // shown recorded, by a client that says every action got its answer.
        if let (Some((p, pa)), Some(ClientEnd::Exited { code: 0 })) = (st.pending_failure, client) {
            let last_read = st.reads.last().copied();
            let shown = last_read.and_then(|g| st.actions.get(pa).and_then(|a| a.shown_in(g)));
            if p.tool_result && shown.is_none() {
                add(
                    Rule::ToolAtLeastOnce,
                    format!(
                        "the client exited 0 after the failed answer of the tool result {} without re-sending it, and {}",
                        p.label(),
                        match last_read {
                            Some(g) => format!("the snapshot read {} did not show it recorded", g.label()),
                            None => "no snapshot read showed it recorded".to_owned(),
                        }
                    ),
                );
            }
        }
        let reached = st.actions.iter().filter(|a| a.committed).count();
        let allowed: usize = st.actions.iter().map(|a| a.runs_allowed).sum();
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
        if runs.len() != allowed || inputs != allowed {
            let accepted: Vec<String> = st
                .actions
                .iter()
                .filter(|a| a.committed)
                .map(|a| a.describe())
                .collect();
            let held: Vec<String> = runs.iter().map(|r| made_by(st, &r.run_id)).collect();
            add(
                Rule::OneRunPerAction,
                format!(
                    "session `{session}`: the server accepted {reached} user actions [{}], which may hold {allowed} runs and inputs; it holds {} runs [{}] and {inputs} inputs",
                    bounded(&accepted, "; "),
                    runs.len(),
                    bounded(&held, ", ")
                ),
            );
        }
        for a in st.actions.iter().filter(|a| a.committed) {
            let made: Vec<&str> = runs
                .iter()
                .map(|r| r.run_id.as_str())
                .filter(|run| {
                    a.requests
                        .iter()
                        .any(|e| e.run_ids.iter().any(|r| r == run))
                        || runs.iter().any(|r| {
                            r.run_id == *run
                                && r.request_key.as_ref().is_some_and(|k| a.keys.contains(k))
                        })
                })
                .collect();
            if made.len() > a.runs_allowed.max(1) {
                let named: Vec<String> = made.iter().map(|r| made_by(st, r)).collect();
                add(
                    Rule::OneRunPerAction,
                    format!(
                        "session `{session}`: the action of {} made {} runs: {}",
                        a.describe(),
                        made.len(),
                        bounded(&named, ", ")
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
            run_ids: Vec::new(),
            snapshot_inputs: None,
        }
    }

    /// A keyless tool-result send; `run` is the run its forward made.
    fn tool(index: u64, fault: Fault, run: Option<&str>) -> Exchange {
        let mut e = ex(index, None, "tool-42", fault);
        e.tool_result = true;
        e.run_ids = run.map(str::to_owned).into_iter().collect();
        if run.is_none() {
            e.upstream_statuses.clear();
            e.forwarded = 0;
        }
        e
    }

    /// The client's `GET /sessions/s`, showing the inputs of `runs`.
    fn read(index: u64, runs: &[&str]) -> Exchange {
        let mut e = ex(index, None, "", Fault::None);
        e.method = "GET".into();
        e.path = "/sessions/s".into();
        e.entry = None;
        e.snapshot_inputs = Some(runs.iter().map(|r| (*r).to_owned()).collect());
        e
    }

    /// A keyed send that made `run`.
    fn keyed(index: u64, key: &str, run: &str) -> Exchange {
        let mut e = ex(index, Some(key), key, Fault::None);
        e.run_ids = vec![run.to_owned()];
        e
    }

    /// The snapshot holding `runs` (run id, key), one input each.
    fn holding(runs: &[(&str, Option<&str>)]) -> BTreeMap<String, SessionSnapshot> {
        let runs: Vec<RunSeen> = runs
            .iter()
            .map(|(id, k)| RunSeen {
                run_id: (*id).to_owned(),
                request_key: k.map(str::to_owned),
            })
            .collect();
        let inputs = runs.len();
        BTreeMap::from([("s".to_owned(), SessionSnapshot::Found { runs, inputs })])
    }

    const OK: Option<&ClientEnd> = Some(&ClientEnd::Exited { code: 0 });

    #[test]
    fn long_lists_are_bounded() {
        let items: Vec<String> = (0..30).map(|i| format!("#{i}")).collect();
        let shown = bounded(&items, ", ");
        assert!(shown.starts_with("#0, #1") && shown.contains("#23, … and 6 more"));
        assert!(!shown.contains("#24"));
        assert_eq!(bounded(&items[..2], ", "), "#0, #1");
    }

    #[test]
    fn a_tool_result_confirmed_by_a_reread_is_not_resent() {
        // Dropped after commit; the snapshot shows run t; the client moves on.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::DropAfterCommit, Some("t")),
            read(2, &["r0", "t"]),
            keyed(3, "b", "r1"),
        ];
        let snap = holding(&[("r0", Some("a")), ("t", None), ("r1", Some("b"))]);
        let v = judge(&trace, &snap, OK);
        assert_eq!(v.exit_code(), 0, "{v:#?}");
        assert_eq!(v.stats.actions, 3);
    }

    #[test]
    fn a_tool_result_resent_after_a_reread_that_did_not_show_it_may_run_twice() {
        // Not forwarded (503): the reread shows nothing, the re-send runs once.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::Status503, None),
            read(2, &["r0"]),
            tool(3, Fault::None, Some("t")),
        ];
        let snap = holding(&[("r0", Some("a")), ("t", None)]);
        assert_eq!(judge(&trace, &snap, OK).exit_code(), 0);
        // A server that committed after the reread (the client could not
        // see run t1): two runs, and the client is not to blame.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::DropAfterCommit, Some("t1")),
            read(2, &["r0"]),
            tool(3, Fault::None, Some("t2")),
        ];
        let snap = holding(&[("r0", Some("a")), ("t1", None), ("t2", None)]);
        let v = judge(&trace, &snap, OK);
        assert_eq!(v.exit_code(), 0, "{v:#?}");
        // The same without the excuse: one run too many.
        let lost = judge(&trace, &holding(&[("r0", Some("a")), ("t2", None)]), OK);
        assert_eq!(failed(&lost), ["client.e2e.one-run-per-action"]);
    }

    #[test]
    fn a_tool_result_resent_without_a_reread_is_caught_and_named() {
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::DropAfterCommit, Some("t1")),
            tool(2, Fault::None, Some("t2")),
        ];
        let snap = holding(&[("r0", Some("a")), ("t1", None), ("t2", None)]);
        let v = judge(&trace, &snap, OK);
        assert_eq!(
            failed(&v),
            [
                "client.tool-result.reread-before-resend",
                "client.e2e.one-run-per-action"
            ]
        );
        let reread = v.rule("client.tool-result.reread-before-resend");
        let msg = reread
            .map(|r| {
                r.violations.join(
                    "
",
                )
            })
            .unwrap_or_default();
        assert!(
            msg.contains("#2 POST /sessions/s/chat") && msg.contains("#1 POST /sessions/s/chat"),
            "{msg}"
        );
        let e2e = v.rule("client.e2e.one-run-per-action");
        let msg = e2e
            .map(|r| {
                r.violations.join(
                    "
",
                )
            })
            .unwrap_or_default();
        assert!(
            msg.contains("#1 POST /sessions/s/chat (re-sent as #2)")
                && msg.contains("t1 (answer to #1)")
                && msg.contains("t2 (answer to #2)"),
            "{msg}"
        );
        // Re-read, shown recorded, re-sent anyway.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::DropAfterCommit, Some("t1")),
            read(2, &["r0", "t1"]),
            tool(3, Fault::None, Some("t2")),
        ];
        let v = judge(&trace, &snap, OK);
        assert_eq!(
            failed(&v),
            [
                "client.tool-result.reread-before-resend",
                "client.e2e.one-run-per-action"
            ]
        );
    }

    #[test]
    fn a_lost_tool_result_neither_resent_nor_confirmed_breaks_at_least_once() {
        // Moved on without re-reading.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::Status502, None),
            keyed(2, "b", "r1"),
        ];
        let snap = holding(&[("r0", Some("a")), ("r1", Some("b"))]);
        let v = judge(&trace, &snap, OK);
        assert_eq!(failed(&v), ["client.tool-result.at-least-once"]);
        // Re-read (not there) and still moved on; then exited 0 after one.
        let trace = [
            keyed(0, "a", "r0"),
            tool(1, Fault::Status502, None),
            read(2, &["r0"]),
            keyed(3, "b", "r1"),
            tool(4, Fault::Status503, None),
        ];
        let v = judge(&trace, &snap, OK);
        assert_eq!(failed(&v), ["client.tool-result.at-least-once"]);
        assert_eq!(
            v.rule("client.tool-result.at-least-once")
                .map_or(0, |r| r.violations.len()),
            2
        );
        // Exiting non-zero reports the last failure (moving on mid-way is
        // still a violation).
        let v = judge(&trace, &snap, Some(&ClientEnd::Exited { code: 1 }));
        assert_eq!(
            failed(&v),
            ["client.tool-result.at-least-once", "client.run.exits-zero"]
        );
        assert_eq!(
            v.rule("client.tool-result.at-least-once")
                .map_or(0, |r| r.violations.len()),
            1
        );
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
