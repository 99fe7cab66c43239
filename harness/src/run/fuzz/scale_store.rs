//! The store level at its own scale (issue 55): keys kept however many
//! there are, and nothing changed by a timer, judged by `SeqStore`.
//!
//! The store fuzzer's programs hold two sessions, two keys and at most
//! twelve steps, and delete their sessions at once: a store that keeps its
//! 1,000 most recent keys, puts a TTL on its key index or reaps runs left
//! `running` passes them. So, beside the programs:
//!
//! - **seeded state** ([`seed`], before the programs): a session whose runs
//!   end `completed`, `failed`, `interrupted` and one left `running`, each
//!   keyed; a session deleted (its key must stay free); a session deleted
//!   and written again with the same key (the key is the new run's);
//! - **capacity**: `keys` keyed runs in one session (`--capacity-keys`,
//!   2,000 by default), then the first [`REASKED`] keys read again and the
//!   first key's commit sent again under a new run id (`request_key_taken`
//!   naming its holder); and as many sessions of one keyed run each, the
//!   first [`REASKED`] read again;
//! - **final reads** ([`finish`], after the programs and a quiet period of
//!   the patience): every session, run and key read again, the deleted
//!   session's key taken by a new commit, and every answer the spec's.
//!
//! Each session is judged by a `SeqStore` of its own (sessions never
//! meet), sequentially within it; [`IN_FLIGHT`] sessions at a time. Every
//! session is deleted at the end, so a shared backend keeps nothing.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqkey_check::lin;
use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp};
use serde_json::{json, Value};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::run::fuzz::patience::{duration, Finding};
use crate::targets::Target;

/// How many of the first keys (sessions) are read again at once.
pub const REASKED: usize = 64;
/// Sessions written or read at once.
pub const IN_FLIGHT: usize = 8;

/// The clause a key forgotten at scale breaks (SPEC 4).
pub const KEPT_AT_SCALE: &str = "store.keys.kept-at-scale";
/// The clause a change by a timer breaks (SPEC 4).
pub const CHANGES_ONLY_BY_OPERATIONS: &str = "store.state.changes-only-by-operations";

/// One session the probes know, with the spec's state for it.
#[derive(Debug, Clone)]
struct Known {
    what: String,
    id: String,
    spec: SeqStore,
    /// Its keys (present or deleted with it) and runs, in order.
    keys: Vec<String>,
    runs: Vec<String>,
    deleted: bool,
    failed: bool,
}

impl Known {
    fn new(what: impl Into<String>, id: String) -> Self {
        Self {
            what: what.into(),
            id,
            spec: SeqStore::new(),
            keys: Vec::new(),
            runs: Vec::new(),
            deleted: false,
            failed: false,
        }
    }
}

#[derive(Debug, Clone)]
struct Ctx {
    target: Arc<dyn Target>,
    call_timeout_ms: u64,
}

fn cut(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 600 {
        return s;
    }
    let end = (0..=600)
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    format!("{}…", &s[..end])
}

/// Sends `request` and judges its answer by the session's spec; a
/// mismatch is a finding of `clause`.
async fn judged(
    ctx: &Ctx,
    k: &mut Known,
    request: Value,
    clause: &str,
) -> Result<Option<Finding>, String> {
    if k.failed {
        return Ok(None);
    }
    let answer = match tokio::time::timeout(
        Duration::from_millis(ctx.call_timeout_ms),
        ctx.target.store_call(&request),
    )
    .await
    {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return Err(format!("{}: {e}", k.what)),
        Err(_) => {
            return Err(format!(
                "{}: no answer within {} ms",
                k.what, ctx.call_timeout_ms
            ))
        }
    };
    let expected = match StoreOp::from_wire(&request) {
        Ok(op) => k.spec.apply(&op),
        Err(e) => Err(e),
    };
    if lin::answer_conforms(&request, &expected, &answer) {
        return Ok(None);
    }
    k.failed = true;
    Ok(Some(Finding {
        clause: clause.to_owned(),
        probe: k.what.clone(),
        message: format!(
            "{}: {}\n  the spec answers  {}\n  the target answered {}",
            k.what,
            lin::summarize_request(&request),
            cut(&answer_to_wire(&expected)),
            cut(&answer)
        ),
        scenario_yaml: None,
    }))
}

fn commit(session: &str, run: &str, expected: Option<&str>, key: Option<&str>) -> Value {
    let mut start = json!({
        "sessionId": session,
        "runId": run,
        "expectedCurrentRunId": expected,
        "input": {"text": "a"},
    });
    if let Some(k) = key {
        start["requestKey"] = json!(k);
        start["requestDigest"] = json!("d-a");
    }
    json!({"op": "commitRunStart", "args": {"startRun": start}})
}

fn read(op: &str, session: &str) -> Value {
    json!({"op": op, "args": {"sessionId": session}})
}

fn by_key(session: &str, key: &str) -> Value {
    json!({"op": "getRunByRequestKey", "args": {"sessionId": session, "requestKey": key}})
}

fn status(session: &str, run: &str, status: &str) -> Value {
    json!({"op": "setRunStatus", "args": {"sessionId": session, "runId": run, "status": status}})
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

/// What [`seed`] wrote, for [`finish`] to read again.
#[derive(Debug, Clone)]
pub struct Seeded {
    ctx: Ctx,
    known: Vec<Known>,
    /// The sessions of one key each (kept apart: read by key only).
    across: Vec<Known>,
    pub capacity: Vec<String>,
    pub findings: Vec<Finding>,
    started: Instant,
}

/// Writes the seeded sessions and the capacity, reading the first keys
/// again (before the fuzz programs run).
pub async fn seed(
    target: Arc<dyn Target>,
    namespace: &str,
    call_timeout_ms: u64,
    keys: usize,
) -> Result<Seeded, String> {
    let ctx = Ctx {
        target,
        call_timeout_ms,
    };
    let ns = format!("{namespace}.scale");
    let mut findings = Vec::new();
    let mut known = Vec::new();
    // Runs of every end, each keyed; the last left running.
    let mut live = Known::new("the seeded session of finished runs", format!("{ns}.live"));
    let ends = [
        ("r1", "completed"),
        ("r2", "failed"),
        ("r3", "interrupted"),
        ("r4", ""),
    ];
    let mut previous: Option<&str> = None;
    for (run, end) in ends {
        let id = live.id.clone();
        let key = format!("k-{run}");
        findings.extend(
            judged(
                &ctx,
                &mut live,
                commit(&id, run, previous, Some(&key)),
                CHANGES_ONLY_BY_OPERATIONS,
            )
            .await?,
        );
        if !end.is_empty() {
            findings.extend(
                judged(
                    &ctx,
                    &mut live,
                    status(&id, run, end),
                    CHANGES_ONLY_BY_OPERATIONS,
                )
                .await?,
            );
        }
        live.keys.push(key);
        live.runs.push(run.to_owned());
        previous = Some(run);
    }
    known.push(live);
    let mut deleted = Known::new("the seeded deleted session", format!("{ns}.deleted"));
    let id = deleted.id.clone();
    findings.extend(
        judged(
            &ctx,
            &mut deleted,
            commit(&id, "r1", None, Some("k-d")),
            CHANGES_ONLY_BY_OPERATIONS,
        )
        .await?,
    );
    findings.extend(
        judged(
            &ctx,
            &mut deleted,
            read("deleteSession", &id),
            CHANGES_ONLY_BY_OPERATIONS,
        )
        .await?,
    );
    deleted.keys.push("k-d".into());
    deleted.deleted = true;
    known.push(deleted);
    let mut again = Known::new(
        "the seeded session deleted and written again",
        format!("{ns}.again"),
    );
    let id = again.id.clone();
    for request in [
        commit(&id, "r1", None, Some("k-a")),
        read("deleteSession", &id),
        commit(&id, "r1b", None, Some("k-a")),
    ] {
        findings.extend(judged(&ctx, &mut again, request, CHANGES_ONLY_BY_OPERATIONS).await?);
    }
    again.keys.push("k-a".into());
    again.runs.push("r1b".into());
    known.push(again);
    // Capacity in one session: a chain of keyed runs.
    let mut wide = Known::new("the capacity session", format!("{ns}.wide"));
    let id = wide.id.clone();
    let mut previous: Option<String> = None;
    for i in 0..keys {
        let (run, key) = (format!("w{i}"), format!("kw{i}"));
        findings.extend(
            judged(
                &ctx,
                &mut wide,
                commit(&id, &run, previous.as_deref(), Some(&key)),
                KEPT_AT_SCALE,
            )
            .await?,
        );
        wide.keys.push(key);
        wide.runs.push(run.clone());
        previous = Some(run);
    }
    let first_keys: Vec<String> = wide.keys.iter().take(REASKED).cloned().collect();
    for key in &first_keys {
        findings.extend(judged(&ctx, &mut wide, by_key(&id, key), KEPT_AT_SCALE).await?);
    }
    // The first key taken again by another run: refused, naming its holder.
    findings.extend(
        judged(
            &ctx,
            &mut wide,
            commit(&id, "w-again", previous.as_deref(), Some("kw0")),
            KEPT_AT_SCALE,
        )
        .await?,
    );
    known.push(wide);
    // Capacity across sessions: one keyed run each.
    let across: Vec<Known> = (0..keys)
        .map(|i| {
            let mut k = Known::new(format!("capacity session {i}"), format!("{ns}.x{i}"));
            k.keys.push("kx".into());
            k.runs.push("x".into());
            k
        })
        .collect();
    let written = bounded(across, |mut k| {
        let ctx = ctx.clone();
        async move {
            let id = k.id.clone();
            let f = judged(
                &ctx,
                &mut k,
                commit(&id, "x", None, Some("kx")),
                KEPT_AT_SCALE,
            )
            .await?;
            Ok::<_, String>((f, k))
        }
    })
    .await?;
    let mut across = Vec::with_capacity(keys);
    for w in written {
        let (f, k) = w?;
        findings.extend(f);
        across.push(k);
    }
    for k in across.iter_mut().take(REASKED) {
        let id = k.id.clone();
        findings.extend(judged(&ctx, k, by_key(&id, "kx"), KEPT_AT_SCALE).await?);
    }
    let reasked = REASKED.min(keys);
    let capacity = vec![
        format!(
            "{keys} keyed runs in one session before its first {reasked} keys were read again and the first taken by another run"
        ),
        format!(
            "{keys} sessions of one keyed run each, {IN_FLIGHT} at a time, before the first {reasked} were read again"
        ),
    ];
    Ok(Seeded {
        ctx,
        known,
        across,
        capacity,
        findings,
        started: Instant::now(),
    })
}

/// Every read of `k` the final reads send, then the writes that show its
/// keys are as they must be.
fn final_requests(k: &Known) -> Vec<Value> {
    let id = &k.id;
    let mut out = vec![
        read("getCurrentRun", id),
        read("listRuns", id),
        read("listInputs", id),
    ];
    out.extend(k.keys.iter().map(|key| by_key(id, key)));
    if k.runs.len() <= REASKED {
        out.extend(
            k.runs
                .iter()
                .map(|run| json!({"op": "getRun", "args": {"sessionId": id, "runId": run}})),
        );
    }
    if k.deleted {
        // Its key stays free: a new session takes it.
        out.extend(
            k.keys
                .iter()
                .map(|key| commit(id, "r-new", None, Some(key))),
        );
    } else if let Some(key) = k.keys.first() {
        // Its first key still held: another run is refused, naming it.
        out.push(commit(
            id,
            "r-other",
            k.runs.last().map(String::as_str),
            Some(key),
        ));
    }
    out
}

/// What the final reads read: read again after a restart, then deleted.
#[derive(Debug)]
pub struct Reads {
    ctx: Ctx,
    all: Vec<Known>,
}

/// The clause a store that loses state in a restart it declared it
/// survives breaks (SPEC 6).
pub const DURABLE: &str = "wire.store.durable";

/// Reads every session, run and key again at least `patience_ms` after
/// the seeding ended (the programs ran meanwhile).
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
    let reads = known.len();
    let all: Vec<Known> = known.into_iter().chain(across).collect();
    let count = all.len();
    let (all, findings) = reread(&ctx, all, CHANGES_ONLY_BY_OPERATIONS).await?;
    let lines = vec![format!(
        "at least the patience ({}) after they were written, the programs run meanwhile: {reads} seeded sessions and {} sessions of one key read whole again (current run, runs, inputs, every key), the deleted session's key taken anew, each session's first key refused to another run",
        duration(patience_ms),
        count - reads
    )];
    Ok((Reads { ctx, all }, lines, findings))
}

/// The final reads once more (after a restart of a store that declared
/// itself durable): every answer still the spec's.
pub async fn read_again(reads: &mut Reads) -> Result<Vec<Finding>, String> {
    let all = std::mem::take(&mut reads.all);
    let (all, findings) = reread(&reads.ctx, all, DURABLE).await?;
    reads.all = all;
    Ok(findings)
}

/// Deletes every session the probes wrote (best effort: a shared
/// backend keeps nothing).
pub async fn clean(reads: Reads) {
    let Reads { ctx, all } = reads;
    let _ = bounded(all, |k| {
        let ctx = ctx.clone();
        async move {
            let _ = tokio::time::timeout(
                Duration::from_millis(ctx.call_timeout_ms),
                ctx.target.store_call(&read("deleteSession", &k.id)),
            )
            .await;
        }
    })
    .await;
}

/// Every session's final requests, judged; a mismatch is `clause`'s.
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
            for request in final_requests(&k) {
                found.extend(judged(&ctx, &mut k, request, clause).await?);
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
