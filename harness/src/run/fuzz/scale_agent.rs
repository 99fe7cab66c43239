//! The agent level at its own scale (issue 55): keys kept however many
//! there are, sessions and runs changed by nothing but requests, judged
//! seconds after the requests that could break them.
//!
//! The agent fuzzer's programs hold two sessions and two keys and last a
//! few hundred milliseconds each: state kept or dropped by a timer, a
//! clean-up job or a TTL shows only later, and a key index bounded to its
//! 1,000 most recent keys only past them. So, beside the programs:
//!
//! - **seeded state** ([`seed`], before the programs; chat sends, each
//!   keyed, answered with its run's whole stream): a session whose runs end
//!   `completed`, `failed` and `suspended_input`; a session deleted (its
//!   key must stay free, and no timer may start a run in it); a session
//!   deleted and sent to again with the same key (the key is the new
//!   run's);
//! - **capacity**: `keys` keyed runs in one session (`--capacity-keys`,
//!   2,000 by default), then the first [`REASKED`] keys sent again (each
//!   refused `state_request_already_completed` naming its holder), and
//!   half as many sessions of one keyed run each, the first [`REASKED`]
//!   sent again (each a replay of its run);
//! - **final reads** ([`finish`], at least the patience after the seeding;
//!   the programs ran meanwhile): every session's snapshot must show the
//!   runs it had, with their statuses, every key sent again must name its
//!   holder as SPEC 5 plans it, the deleted session must still be gone and
//!   its key free.
//!
//! What a key re-sent must answer follows SPEC 5's table from what the
//! probes saw: a finished holder that is the current run replays, a live
//! one attaches, one behind a later run is refused naming it. Under
//! `supportsRequestKey: false` no key promises anything: only the runs and
//! the deleted session are judged. A seeded send answered otherwise than
//! its script says is the suite's and the programs' to judge: that session
//! is left out and the record says so, never a verdict here.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqkey_model::vocab::Profile;
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::run::agent_steps::answer;
use crate::run::fuzz::patience::{duration, Finding};
use crate::targets::{HttpRequest, Target};
use reqkey_scenario::agent_step::Wire;

/// How many of the first keys (sessions) are sent again at once.
pub const REASKED: usize = 64;
/// Sessions sent to at once.
pub const IN_FLIGHT: usize = 8;
/// The request key header of SPEC 7.
const KEY_HEADER: &str = "X-Helix-Request-Key";
/// How often a seeded send meets its previous run still finishing
/// (`state_already_running` for a few ms after a stream's `finish`) before
/// the session is left out.
const BUSY_RETRIES: u32 = 20;

/// The clause a key forgotten at scale breaks (SPEC 7).
pub const KEPT_AT_SCALE: &str = "agent.keys.kept-at-scale";
/// The clause a change by a timer breaks (SPEC 7).
pub const CHANGES_ONLY_BY_REQUESTS: &str = "agent.state.changes-only-by-requests";

/// A run the probes saw start and end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    id: String,
    status: String,
    key: Option<String>,
    /// The message it was sent with (a key re-sent sends it again).
    text: String,
}

/// A session the probes know.
#[derive(Debug, Clone)]
struct Known {
    what: String,
    id: String,
    runs: Vec<Run>,
    /// Keys of its deleted life: free now.
    freed: Vec<(String, String)>,
    deleted: bool,
    failed: bool,
}

impl Known {
    fn new(what: impl Into<String>, id: String) -> Self {
        Self {
            what: what.into(),
            id,
            runs: Vec::new(),
            freed: Vec::new(),
            deleted: false,
            failed: false,
        }
    }
}

#[derive(Debug, Clone)]
struct Ctx {
    target: Arc<dyn Target>,
    profile: Profile,
    call_timeout_ms: u64,
}

impl Ctx {
    async fn exchange(&self, request: HttpRequest) -> Result<Value, String> {
        match tokio::time::timeout(
            Duration::from_millis(self.call_timeout_ms),
            self.target.http(request),
        )
        .await
        {
            Ok(Ok(r)) => Ok(answer(&r)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} ms", self.call_timeout_ms)),
        }
    }

    async fn chat(&self, session: &str, key: Option<&str>, text: &str) -> Result<Value, String> {
        // A stream's events are small writes: on a reused connection a
        // server that leaves Nagle on stalls each by a delayed ACK (40 ms),
        // which thousands of sends would add up; a fresh connection each
        // does not (SPEC 7: `Connection` changes nothing in the answer).
        let mut headers = vec![
            ("Content-Type".to_owned(), b"application/json".to_vec()),
            ("Connection".to_owned(), b"close".to_vec()),
        ];
        if let Some(k) = key {
            headers.push((KEY_HEADER.to_owned(), k.as_bytes().to_vec()));
        }
        let body = json!({"messages": [{"role": "user", "content": text}]});
        self.exchange(HttpRequest {
            method: "POST".into(),
            path: format!("/sessions/{session}/chat"),
            headers,
            body: Some(body.to_string().into_bytes()),
            replica: None,
            wire: Wire::Library,
        })
        .await
    }

    async fn get_or_delete(&self, method: &str, session: &str) -> Result<Value, String> {
        self.exchange(HttpRequest {
            method: method.into(),
            path: format!("/sessions/{session}"),
            headers: Vec::new(),
            body: None,
            replica: None,
            wire: Wire::Library,
        })
        .await
    }
}

fn cut(v: &Value) -> String {
    if let Some((run, attached, status)) = stream_of(v) {
        return format!("a stream of run {run} (attached: {attached}, finish: {status:?})");
    }
    let s = v
        .get("json")
        .or_else(|| v.get("body"))
        .unwrap_or(v)
        .to_string();
    if s.len() <= 400 {
        return s;
    }
    let end = (0..=400)
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &s[..end])
}

/// What a stream answer shows: its run, whether it attached, how it ended.
fn stream_of(a: &Value) -> Option<(String, bool, String)> {
    let sse = a.get("sse")?;
    let run = sse["runIds"].as_array()?.first()?.as_str()?.to_owned();
    Some((
        run,
        sse["attached"].as_bool()?,
        sse["status"].as_str().unwrap_or("").to_owned(),
    ))
}

/// The status the test agent ends a run of `text` with.
fn scripted_end(text: &str) -> &'static str {
    if text.contains("[fail]") {
        "failed"
    } else if text.contains("[suspend]") {
        "suspended_input"
    } else {
        "completed"
    }
}

/// Sends a new keyed run into `k`: it must start (not attach) and end as
/// its script says; anything else leaves the session out (`Ok(false)`).
async fn start(ctx: &Ctx, k: &mut Known, key: &str, text: &str) -> Result<bool, String> {
    for _ in 0..BUSY_RETRIES {
        let a = ctx.chat(&k.id, Some(key), text).await?;
        if a["status"] == 409 && a["json"]["code"] == "state_already_running" {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        let Some((run, attached, status)) = stream_of(&a).filter(|_| a["status"] == 200) else {
            return Ok(false);
        };
        if attached || status != scripted_end(text) {
            return Ok(false);
        }
        // A new run completes the suspended one before it (SPEC 7).
        if let Some(last) = k.runs.last_mut() {
            if last.status == "suspended_input" {
                last.status = "completed".into();
            }
        }
        k.runs.push(Run {
            id: run,
            status,
            key: Some(key.to_owned()),
            text: text.to_owned(),
        });
        return Ok(true);
    }
    Ok(false)
}

/// Sends `run`'s key and message again: SPEC 5 plans it from the holder.
async fn resend(
    ctx: &Ctx,
    k: &mut Known,
    i: usize,
    clause: &str,
) -> Result<Option<Finding>, String> {
    if k.failed || !ctx.profile.supports_request_key {
        return Ok(None);
    }
    let run = k.runs[i].clone();
    let Some(key) = run.key.as_deref() else {
        return Ok(None);
    };
    let a = ctx.chat(&k.id, Some(key), &run.text).await?;
    let current = i + 1 == k.runs.len();
    let (ok, wanted) = if current {
        let ok = a["status"] == 200
            && stream_of(&a).is_some_and(|(r, attached, _)| r == run.id && attached);
        (
            ok,
            format!(
                "the holder {} attached or replayed (SPEC 5: it is the current run)",
                run.id
            ),
        )
    } else {
        let ok = a["status"] == 409
            && a["json"]["code"] == "state_request_already_completed"
            && a["json"]["runId"] == run.id.as_str();
        (
            ok,
            format!(
                "409 state_request_already_completed naming {} (SPEC 5: a later run exists)",
                run.id
            ),
        )
    };
    if ok {
        return Ok(None);
    }
    k.failed = true;
    Ok(Some(Finding {
        clause: clause.into(),
        probe: k.what.clone(),
        message: format!(
            "{}: POST /sessions/{}/chat with key {key:?} again (run {} of {}): the spec answers {wanted}; the target answered {} {}",
            k.what,
            k.id,
            i + 1,
            k.runs.len(),
            a["status"],
            cut(&a)
        ),
        scenario_yaml: None,
    }))
}

/// The snapshot must show exactly the runs the probes saw, with their
/// statuses (a deleted session: 404, nothing started in it by a timer).
async fn snapshot(ctx: &Ctx, k: &mut Known, clause: &str) -> Result<Option<Finding>, String> {
    if k.failed {
        return Ok(None);
    }
    let a = ctx.get_or_delete("GET", &k.id).await?;
    let problem = if k.deleted {
        (a["status"] != 404)
            .then(|| "404 (it was deleted, and nothing started in it since)".to_owned())
    } else {
        let seen: Vec<(String, String)> = a["json"]["runs"]
            .as_array()
            .map(|runs| {
                runs.iter()
                    .map(|r| {
                        (
                            r["runId"].as_str().unwrap_or("").to_owned(),
                            r["status"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let want: Vec<(String, String)> = k
            .runs
            .iter()
            .map(|r| (r.id.clone(), r.status.clone()))
            .collect();
        (a["status"] != 200 || seen != want).then(|| {
            let shown: Vec<String> = want
                .iter()
                .take(6)
                .map(|(r, s)| format!("{r} {s}"))
                .collect();
            format!(
                "200 with its {} runs as they ended ({}{})",
                want.len(),
                shown.join(", "),
                if want.len() > 6 { ", ..." } else { "" }
            )
        })
    };
    let Some(wanted) = problem else {
        return Ok(None);
    };
    k.failed = true;
    Ok(Some(Finding {
        clause: clause.into(),
        probe: k.what.clone(),
        message: format!(
            "{}: GET /sessions/{}: the spec answers {wanted}; the target answered {} {}",
            k.what,
            k.id,
            a["status"],
            cut(&a)
        ),
        scenario_yaml: None,
    }))
}

/// `f` of every item, [`IN_FLIGHT`] at a time, each in a task of its own;
/// the answers in the items' order.
async fn bounded<T, R, F, Fut>(items: Vec<T>, f: F) -> Result<Vec<R>, String>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut set = JoinSet::new();
    let count = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let slot = Arc::clone(&slots)
            .acquire_owned()
            .await
            .map_err(|e| format!("a probe's slot: {e}"))?;
        let fut = f(item);
        set.spawn(async move {
            let r = fut.await;
            drop(slot);
            (i, r)
        });
    }
    let mut out: Vec<(usize, R)> = Vec::with_capacity(count);
    while let Some(joined) = set.join_next().await {
        out.push(joined.map_err(|e| format!("a probe's task: {e}"))?);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// What [`seed`] sent, for [`finish`] to read again.
#[derive(Debug, Clone)]
pub struct Seeded {
    ctx: Ctx,
    known: Vec<Known>,
    across: Vec<Known>,
    pub capacity: Vec<String>,
    pub findings: Vec<Finding>,
    pub not_judged: Vec<String>,
    started: Instant,
}

/// Sends the seeded sessions and the capacity, sending the first keys
/// again (before the fuzz programs run).
pub async fn seed(
    target: Arc<dyn Target>,
    profile: Profile,
    namespace: &str,
    call_timeout_ms: u64,
    keys: usize,
) -> Result<Seeded, String> {
    let ctx = Ctx {
        target,
        profile,
        call_timeout_ms,
    };
    let ns = format!("{namespace}.scale");
    let mut known = Vec::new();
    let mut not_judged = Vec::new();
    let mut findings = Vec::new();
    let left_out = |k: &Known, not_judged: &mut Vec<String>| {
        not_judged.push(format!(
            "{}: a seeded send was not answered as its script says (the suite and the programs judge entries); the session is left out",
            k.what
        ));
    };
    let mut live = Known::new("the seeded session of finished runs", format!("{ns}.live"));
    let mut ok = true;
    for (key, text) in [("k-1", "a"), ("k-2", "[fail]"), ("k-3", "[suspend]")] {
        ok = ok && start(&ctx, &mut live, key, text).await?;
    }
    if ok {
        known.push(live);
    } else {
        left_out(&live, &mut not_judged);
    }
    let mut deleted = Known::new("the seeded deleted session", format!("{ns}.deleted"));
    if start(&ctx, &mut deleted, "k-d", "[suspend]").await? {
        let d = ctx.get_or_delete("DELETE", &deleted.id).await?;
        if d["status"] == 204 {
            deleted.freed = vec![("k-d".into(), "[suspend]".into())];
            deleted.runs.clear();
            deleted.deleted = true;
            known.push(deleted);
        } else {
            left_out(&deleted, &mut not_judged);
        }
    } else {
        left_out(&deleted, &mut not_judged);
    }
    let mut again = Known::new(
        "the seeded session deleted and sent to again",
        format!("{ns}.again"),
    );
    if start(&ctx, &mut again, "k-a", "a").await?
        && ctx.get_or_delete("DELETE", &again.id).await?["status"] == 204
    {
        again.runs.clear();
        if start(&ctx, &mut again, "k-a", "a").await? {
            known.push(again);
        } else {
            left_out(&again, &mut not_judged);
        }
    } else {
        left_out(&again, &mut not_judged);
    }
    // Capacity in one session.
    let mut wide = Known::new("the capacity session", format!("{ns}.wide"));
    let mut sent = 0;
    for i in 0..keys {
        if !start(&ctx, &mut wide, &format!("kw{i}"), "a").await? {
            break;
        }
        sent += 1;
    }
    let mut capacity = Vec::new();
    if sent == keys {
        for i in 0..REASKED.min(sent) {
            findings.extend(resend(&ctx, &mut wide, i, KEPT_AT_SCALE).await?);
        }
        capacity.push(format!(
            "{keys} keyed runs in one session (chat sends) before its first {} keys were sent again",
            REASKED.min(keys)
        ));
        known.push(wide);
    } else {
        left_out(&wide, &mut not_judged);
    }
    // Capacity across sessions.
    let sessions = keys.div_ceil(2);
    let across: Vec<Known> = (0..sessions)
        .map(|i| Known::new(format!("capacity session {i}"), format!("{ns}.x{i}")))
        .collect();
    let written = bounded(across, |mut k| {
        let ctx = ctx.clone();
        async move {
            let ok = start(&ctx, &mut k, "kx", "a").await?;
            Ok::<_, String>((ok, k))
        }
    })
    .await?;
    let mut across = Vec::with_capacity(sessions);
    let mut lost = 0;
    for w in written {
        let (ok, k) = w?;
        if ok {
            across.push(k);
        } else {
            lost += 1;
        }
    }
    for k in across.iter_mut().take(REASKED) {
        findings.extend(resend(&ctx, k, 0, KEPT_AT_SCALE).await?);
    }
    if lost > 0 {
        not_judged.push(format!(
            "{lost} capacity sessions: a send was not answered as its script says; left out"
        ));
    }
    capacity.push(format!(
        "{} sessions of one keyed run each, {IN_FLIGHT} at a time, before the first {} were sent again",
        across.len(),
        REASKED.min(across.len())
    ));
    if !ctx.profile.supports_request_key {
        capacity.push(
            "keys are ignored under the declared supportsRequestKey: false: no key was judged, only runs".into(),
        );
    }
    Ok(Seeded {
        ctx,
        known,
        across,
        capacity,
        findings,
        not_judged,
        started: Instant::now(),
    })
}

/// What the final reads read: read again after a restart, then deleted.
#[derive(Debug)]
pub struct Reads {
    ctx: Ctx,
    all: Vec<Known>,
}

/// The clause a server that loses state in a restart it declared it
/// survives breaks (SPEC 7).
pub const DURABLE: &str = "agent.durable";

/// Reads every session again at least `patience_ms` after the seeding
/// ended (the programs ran meanwhile), sends every key again, and takes
/// the deleted session's key anew.
pub async fn finish(
    seeded: Seeded,
    patience_ms: u64,
) -> Result<(Reads, Vec<String>, Vec<Finding>), String> {
    let Seeded {
        ctx,
        known,
        across,
        started,
        ..
    } = seeded;
    let waited = started.elapsed().as_millis() as u64;
    if waited < patience_ms {
        tokio::time::sleep(Duration::from_millis(patience_ms - waited)).await;
    }
    let seeded = known.len();
    let all: Vec<Known> = known.into_iter().chain(across).collect();
    let count = all.len();
    let (all, findings) = reread(&ctx, all, CHANGES_ONLY_BY_REQUESTS).await?;
    let lines = vec![format!(
        "at least the patience ({}) after they were written, the programs run meanwhile: {seeded} seeded sessions and {} sessions of one key read again (every run and its status in the snapshot, every key sent again, the deleted session still gone and its key free)",
        duration(patience_ms),
        count - seeded
    )];
    Ok((Reads { ctx, all }, lines, findings))
}

/// The final reads once more (after a restart of a server that declared
/// itself durable).
pub async fn read_again(reads: &mut Reads) -> Result<Vec<Finding>, String> {
    let all = std::mem::take(&mut reads.all);
    let (all, findings) = reread(&reads.ctx, all, DURABLE).await?;
    reads.all = all;
    Ok(findings)
}

/// Deletes every session the probes wrote (best effort).
pub async fn clean(reads: Reads) {
    let Reads { ctx, all } = reads;
    let _ = bounded(all, |k| {
        let ctx = ctx.clone();
        async move {
            let _ = ctx.get_or_delete("DELETE", &k.id).await;
        }
    })
    .await;
}

/// Every session's snapshot and keys, judged; a mismatch is `clause`'s.
async fn reread(
    ctx: &Ctx,
    all: Vec<Known>,
    clause: &'static str,
) -> Result<(Vec<Known>, Vec<Finding>), String> {
    let count = all.len();
    let read = bounded(all, |mut k| {
        let ctx = ctx.clone();
        async move {
            let mut found = Vec::new();
            found.extend(snapshot(&ctx, &mut k, clause).await?);
            for i in 0..k.runs.len() {
                found.extend(resend(&ctx, &mut k, i, clause).await?);
            }
            // The deleted life's keys are free: a send with one starts anew
            // (and the session lives again, with that run).
            if ctx.profile.supports_request_key && !k.failed {
                for (key, text) in std::mem::take(&mut k.freed) {
                    let a = ctx.chat(&k.id, Some(&key), &text).await?;
                    match stream_of(&a).filter(|(_, attached, _)| a["status"] == 200 && !attached) {
                        Some((run, _, status)) => {
                            k.deleted = false;
                            k.runs.push(Run {
                                id: run,
                                status,
                                key: Some(key.clone()),
                                text: text.clone(),
                            });
                        }
                        None => {
                            k.failed = true;
                            found.push(Finding {
                                clause: "agent.route.delete".into(),
                                probe: k.what.clone(),
                                message: format!(
                                    "{}: POST /sessions/{}/chat with the deleted session's key {key:?}: the spec answers a new run (200, attached: false: the key died with its session); the target answered {} {}",
                                    k.what, k.id, a["status"], cut(&a)
                                ),
                                scenario_yaml: None,
                            });
                        }
                    }
                }
            }
            Ok::<_, String>((found, k))
        }
    })
    .await?;
    let mut findings = Vec::new();
    let mut out = Vec::with_capacity(count);
    for r in read {
        let (found, k) = r?;
        findings.extend(found);
        out.push(k);
    }
    Ok((out, findings))
}
