//! The idem level at its own scale (issue 55): `expiryMs`, `lockMs` and
//! the number of keys an app keeps, tested where they can break, up to the
//! patience (`run/fuzz/patience.rs`).
//!
//! The fuzz pass's programs and its battery live in a world of a few
//! seconds and a few dozen keys: an app that forgets keys after 2 s while
//! declaring a day, whose lock lapses after 750 ms while declaring none, or
//! that keeps only its 1,000 most recent keys, passes them. So, beside the
//! programs:
//!
//! - **capacity** ([`seed`], before the programs): `keys` keys
//!   under one caller and route, then the first [`REASKED`] asked again
//!   (a key is kept until it expires however many others came after);
//!   under a numeric `expiryMs` the writes stop in time for the first key
//!   to be asked before it expires, and the count reached is stated;
//! - **expiry** ([`finish`]): a key retried at growing spans after its
//!   completion up to just before `min(expiryMs, patience)` (each retry a
//!   replay, which must not extend the key), a key whose slow handler makes
//!   its start and its completion a second apart retried just before
//!   expiry counted from completion, and, where it is within the patience,
//!   a burst past expiry and its margin (exactly one runs); under `null`,
//!   retries up to the patience;
//! - **lock**: a handler that outlives `min(lockMs, patience)` (`null`: the
//!   patience), its duplicates sent at growing intervals while it runs;
//!   none may run (SPEC 10 `[[idem.effect.at-most-once]]`: a lapsed lock
//!   counts as no expiry);
//! - **final reads** after a quiet period of the patience: every key the
//!   probes know asked again (the seeded ones, a success and a failure,
//!   written before the programs ran), and `/.reqkey/effects` held to the
//!   model for each.
//!
//! Every answer is judged by `IdemModel` from the request's window on one
//! clock, so a retry the machine sent too late to judge (its window
//! straddles expiry) allows both answers and shortens the reach stated,
//! never a verdict. Each key is a model of its own: keys never meet.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use reqkey_model::idem_batch::judge;
use reqkey_model::idem_model::{
    EffectKey, IdemAnswer, IdemModel, IdemRequest, Judged, Window, EXPIRY_MARGIN_MS, SLEEP_CAP_MS,
};
use reqkey_model::idem_profile::{key_of, IdemProfile};
use serde_json::Value;

use crate::run::fuzz::idem::{observe, parse_effects, ARRIVAL_SLACK_MS};
use crate::run::fuzz::idem_program::case_tag;
use crate::run::fuzz::patience::{duration, FieldReach, Finding};
use crate::targets::{HttpRequest, Target};
use reqkey_scenario::agent_step::Wire;

/// How many of the first keys are asked again right after.
pub const REASKED: usize = 64;
/// Requests in flight at once while writing and re-reading keys.
pub const IN_FLIGHT: usize = 8;
/// How long before expiry (counted from completion) the last retry leaves:
/// the arrival bound and a margin.
const BEFORE_EXPIRY_MS: u64 = ARRIVAL_SLACK_MS + 200;
/// How long past expiry and its margin the burst leaves.
const PAST_EXPIRY_EXTRA_MS: u64 = 150;
/// Copies in the burst past expiry.
const PAST_EXPIRY_COPIES: usize = 4;
/// The first retry's span after completion; each next one doubles it.
const FIRST_SPAN_MS: u64 = 100;
/// The slow handler whose start and completion are this far apart (a
/// store counting expiry from the start forgets this much earlier).
const FROM_START_SLEEP_MS: u64 = 1_000;
/// A lock probe's handler outlives a declared `lockMs` by this much: its
/// last duplicate leaves the arrival bound and a margin before the handler
/// ends, and still well after the lock would have lapsed.
const PAST_LOCK_MS: u64 = 800;
/// How long after `lockMs` a duplicate must have left to judge the lock
/// at its declared value.
const AFTER_LOCK_MS: u64 = 100;
/// The first duplicate's delay; each next one doubles it.
const FIRST_DUPLICATE_MS: u64 = 50;
/// The most duplicates of one lock probe.
const MAX_DUPLICATES: usize = 10;

/// One key the probes know: its request, the model's states for it, and
/// what it was for.
#[derive(Debug, Clone)]
struct Track {
    what: String,
    req: IdemRequest,
    states: Vec<IdemModel>,
    /// A violation was proved on it: it is not judged again.
    failed: bool,
    /// The clause its violations break beside the model's (a capacity
    /// key's: `[[idem.expiry.kept-at-scale]]`).
    blamed: Option<&'static str>,
    /// How long one of its calls may last: a slow handler's (which runs
    /// again once its key expired), past the call timeout.
    longer_ms: Option<u64>,
}

/// The clause a key forgotten among thousands breaks (SPEC 10).
pub const KEPT_AT_SCALE: &str = "idem.expiry.kept-at-scale";

/// The clause a probe's violation is charged to: the track's own
/// (`kept-at-scale`, `durable`) where the model found the key forgotten
/// (a retry that ran again, `[[idem.effect.at-most-once]]`), else the
/// model's: a capacity key replayed without its `X-Reqkey-Order` was
/// kept, and its fault is the replay's, not the scale's.
fn blamed_on(track: Option<&'static str>, model: &'static str) -> &'static str {
    match track {
        Some(t) if model == reqkey_model::idem_model::clause::AT_MOST_ONCE => t,
        _ => model,
    }
}

/// The probes' clock and their door to the target.
#[derive(Debug, Clone)]
struct Ctx {
    target: Arc<dyn Target>,
    profile: IdemProfile,
    start: Instant,
    call_timeout_ms: u64,
}

impl Ctx {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    async fn sleep_until(&self, at_ms: u64) {
        let now = self.now_ms();
        if at_ms > now {
            tokio::time::sleep(Duration::from_millis(at_ms - now)).await;
        }
    }

    /// Sends `req` (a call that may last `longer_ms` where the target can
    /// lengthen one) and answers it with its window on the probes' clock.
    async fn send(
        &self,
        req: &IdemRequest,
        longer_ms: Option<u64>,
    ) -> Result<(IdemAnswer, Window), String> {
        let request = http_request(req);
        let bound = longer_ms.unwrap_or(self.call_timeout_ms) + 1_000;
        let sent = self.now_ms();
        let exchange = async {
            match longer_ms {
                Some(ms) if self.target.long_calls() => self.target.http_within(request, ms).await,
                _ => self.target.http(request).await,
            }
        };
        let response = match tokio::time::timeout(Duration::from_millis(bound), exchange).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err(format!("no answer within {bound} ms")),
        };
        let answered = self.now_ms() + 1;
        Ok((
            observe(&response, &self.profile),
            Window {
                sent_ms: sent,
                arrived_by_ms: (sent + ARRIVAL_SLACK_MS).min(answered),
                answered_ms: answered,
            },
        ))
    }
}

fn http_request(r: &IdemRequest) -> HttpRequest {
    let mut headers = vec![
        ("Content-Type".to_owned(), b"application/json".to_vec()),
        ("X-Reqkey-Caller".to_owned(), r.caller.clone().into_bytes()),
    ];
    if let Some(k) = &r.key {
        headers.push(("Idempotency-Key".to_owned(), k.clone()));
    }
    HttpRequest {
        method: r.method.clone(),
        path: r.path.clone(),
        headers,
        body: Some(r.body.clone()),
        replica: None,
        wire: Wire::Library,
    }
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

/// `f` of every item at once, each in a task of its own (a handler and
/// its duplicates, which must all be in flight together); the answers in
/// the items' order.
async fn bounded_all<T, R, F, Fut>(items: Vec<T>, f: F) -> Result<Vec<R>, String>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
{
    let mut set = JoinSet::new();
    let count = items.len();
    for (i, item) in items.into_iter().enumerate() {
        let fut = f(item);
        set.spawn(async move { (i, fut.await) });
    }
    let mut out: Vec<(usize, R)> = Vec::with_capacity(count);
    while let Some(joined) = set.join_next().await {
        out.push(joined.map_err(|e| format!("a probe's task: {e}"))?);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// The key named `name` (a UUID made from it, `key_forms::client_key`:
/// nothing of the name goes out) as a header the declared syntax admits
/// (quoted where it takes quotes): hex digits and `-` are a key in every
/// syntax.
fn key_header(name: &str, profile: &IdemProfile) -> Vec<u8> {
    let name = crate::run::fuzz::key_forms::client_key(name);
    let quoted = format!("\"{name}\"");
    if key_of(quoted.as_bytes(), profile.key_syntax).is_some() {
        quoted.into_bytes()
    } else {
        name.as_bytes().to_vec()
    }
}

/// A keyed request to `path` (a succeeding, failing or slow route).
fn request(
    profile: &IdemProfile,
    path: &str,
    caller: &str,
    key: &str,
    sleep_ms: Option<u64>,
) -> IdemRequest {
    let body = match sleep_ms {
        Some(ms) => format!("{{\"item\":\"a\",\"sleepMs\":{ms}}}"),
        None => "{\"item\":\"a\"}".to_owned(),
    };
    IdemRequest {
        method: "POST".into(),
        path: path.into(),
        caller: caller.into(),
        key: Some(key_header(key, profile)),
        body: body.into_bytes(),
    }
}

impl Track {
    fn new(profile: &IdemProfile, what: impl Into<String>, req: IdemRequest) -> Self {
        Self {
            what: what.into(),
            req,
            states: vec![IdemModel::new(profile)],
            failed: false,
            blamed: None,
            longer_ms: None,
        }
    }

    /// Judges answers to this track's request sent together (one, or a
    /// burst); a violation becomes a finding, no verdict an error.
    fn judge(&mut self, answers: &[(IdemAnswer, Window)]) -> Result<Option<Finding>, String> {
        if self.failed {
            return Ok(None);
        }
        let items: Vec<_> = answers
            .iter()
            .map(|(a, w)| (self.req.clone(), a.clone(), *w))
            .collect();
        match judge(&self.states, &items) {
            Ok(next) => {
                self.states = next;
                Ok(None)
            }
            Err(Judged::Violation(v)) => {
                self.failed = true;
                Ok(Some(Finding {
                    clause: blamed_on(self.blamed, v.clause).to_owned(),
                    probe: self.what.clone(),
                    message: format!("{}: {v}", self.what),
                    scenario_yaml: None,
                }))
            }
            Err(Judged::NoVerdict(why)) => Err(format!("{}: the model: {why}", self.what)),
        }
    }

    /// The raw key header, as `/.reqkey/effects` lists it.
    fn effect_key(&self) -> Option<String> {
        self.req
            .key
            .as_ref()
            .map(|k| String::from_utf8_lossy(k).into_owned())
    }
}

/// What [`seed`] wrote, for [`finish`] to read again.
#[derive(Debug, Clone)]
pub struct Seeded {
    ctx: Ctx,
    tag: String,
    tracks: Vec<Track>,
    pub capacity: Vec<String>,
    pub findings: Vec<Finding>,
    pub not_judged: Vec<String>,
}

/// What [`finish`] found and reached.
#[derive(Debug, Clone, Default)]
pub struct Finished {
    pub reach: Vec<FieldReach>,
    pub final_reads: Vec<String>,
    pub findings: Vec<Finding>,
    pub not_judged: Vec<String>,
    /// The keys the final reads asked, for [`read_again`] after a restart.
    pub reads: Option<Reads>,
}

/// The keys the final reads asked.
#[derive(Debug, Clone)]
pub struct Reads {
    ctx: Ctx,
    tracks: Vec<Track>,
}

/// The clause an app that loses its keys in a restart it declared they
/// survive breaks (SPEC 10).
pub const DURABLE: &str = "idem.durable.restart";

/// Every key asked again (after a restart of an app that declared
/// `durable: true`): each still replayed where the model keeps it. The
/// effects oracle is the app's own counter, which a restart resets: not
/// read.
pub async fn read_again(reads: &mut Reads) -> Result<Vec<Finding>, String> {
    let tracks = std::mem::take(&mut reads.tracks);
    let ctx = reads.ctx.clone();
    let asked = bounded(tracks, |mut t| {
        let ctx = ctx.clone();
        async move {
            t.blamed = Some(DURABLE);
            let f = if t.failed {
                None
            } else {
                ask(&ctx, &mut t).await?.0
            };
            Ok::<_, String>((f, t))
        }
    })
    .await?;
    let mut findings = Vec::new();
    for r in asked {
        let (f, t) = r?;
        findings.extend(f);
        reads.tracks.push(t);
    }
    Ok(findings)
}

/// Sends `req` alone and judges it on `track`.
async fn ask(ctx: &Ctx, track: &mut Track) -> Result<(Option<Finding>, Window), String> {
    let (answer, w) = ctx.send(&track.req, track.longer_ms).await?;
    Ok((track.judge(&[(answer, w)])?, w))
}

/// Writes the seeded keys and the capacity keys, asking the first ones
/// again (before the fuzz programs run). `mapped`: an app played through
/// an API map, whose callers and routes are the map's: nothing is sent.
pub async fn seed(
    target: Arc<dyn Target>,
    profile: &IdemProfile,
    namespace: &str,
    call_timeout_ms: u64,
    mapped: bool,
    keys: usize,
) -> Result<Seeded, String> {
    let ctx = Ctx {
        target,
        profile: profile.clone(),
        start: Instant::now(),
        call_timeout_ms,
    };
    let tag = case_tag(&format!("{namespace}.scale"), 0);
    let mut out = Seeded {
        ctx: ctx.clone(),
        tag: tag.clone(),
        tracks: Vec::new(),
        capacity: Vec::new(),
        findings: Vec::new(),
        not_judged: Vec::new(),
    };
    if mapped {
        out.not_judged.push(
            "the probes at scale (capacity, expiry, lock, final reads): not sent through an API map, whose callers and routes are the map's".into(),
        );
        return Ok(out);
    }
    let caller = format!("scale-{tag}");
    for (what, path) in [
        ("a seeded success", "/orders"),
        ("a seeded failure", "/orders/fail"),
    ] {
        let key = if path == "/orders" {
            "seed-ok"
        } else {
            "seed-fail"
        };
        let mut t = Track::new(
            profile,
            what,
            request(profile, path, &caller, &format!("{key}-{tag}"), None),
        );
        if let (Some(f), _) = ask(&ctx, &mut t).await? {
            out.findings.push(f);
        }
        out.tracks.push(t);
    }
    let (tracks, line, findings) = capacity(&ctx, &caller, &tag, keys.max(1)).await?;
    out.tracks.extend(tracks);
    out.capacity.push(line);
    out.findings.extend(findings);
    Ok(out)
}

/// `keys` keys under one caller and route, [`IN_FLIGHT`] at a
/// time (under a numeric `expiryMs`, stopped at half of it after the first
/// completed), then the first [`REASKED`] asked again in order.
async fn capacity(
    ctx: &Ctx,
    caller: &str,
    tag: &str,
    keys: usize,
) -> Result<(Vec<Track>, String, Vec<Finding>), String> {
    let profile = &ctx.profile;
    let mut tracks: Vec<Track> = (0..keys)
        .map(|i| Track {
            blamed: Some(KEPT_AT_SCALE),
            ..Track::new(
                profile,
                format!("capacity key {i}"),
                request(profile, "/orders", caller, &format!("cap{i}-{tag}"), None),
            )
        })
        .collect();
    let mut findings = Vec::new();
    // The first key alone: its completion starts the count.
    let (f, first) = ask(ctx, &mut tracks[0]).await?;
    findings.extend(f);
    let deadline = ctx
        .profile
        .expiry_ms
        .map(|e| first.sent_ms.saturating_add(e / 2));
    let mut written = 1;
    let mut rest: Vec<Track> = tracks.split_off(1);
    rest.reverse();
    while written < keys {
        if deadline.is_some_and(|d| ctx.now_ms() >= d) {
            break;
        }
        let chunk: Vec<Track> = (0..IN_FLIGHT * 8).map_while(|_| rest.pop()).collect();
        if chunk.is_empty() {
            break;
        }
        let answered = bounded(chunk, |mut t| {
            let ctx = ctx.clone();
            async move { ask(&ctx, &mut t).await.map(|(f, _)| (f, t)) }
        })
        .await?;
        for a in answered {
            let (f, t) = a?;
            findings.extend(f);
            tracks.push(t);
            written += 1;
        }
    }
    // The first keys again, oldest first: each must still be kept.
    let reasked = REASKED.min(written);
    let mut kept = 0;
    for t in tracks.iter_mut().take(reasked) {
        let (f, w) = ask(ctx, t).await?;
        findings.extend(f);
        if ctx
            .profile
            .expiry_ms
            .is_none_or(|e| w.arrived_by_ms < first.sent_ms.saturating_add(e))
        {
            kept += 1;
        }
    }
    let mut line = format!(
        "{written} keys under one caller and route (POST /orders), {IN_FLIGHT} at a time, before the first {reasked} were asked again"
    );
    if written < keys {
        line.push_str(&format!(
            " (of {keys}: the writes stopped at half of expiryMs {} so that the first key was asked before it expired)",
            ctx.profile.expiry_ms.unwrap_or_default()
        ));
    }
    if kept < reasked {
        line.push_str(&format!(
            "; {} of them were asked too late to judge (past expiryMs)",
            reasked - kept
        ));
    }
    Ok((tracks, line, findings))
}

/// The probes after the programs: expiry, lock and the quiet period side
/// by side, then the final reads.
pub async fn finish(seeded: Seeded, patience_ms: u64) -> Result<Finished, String> {
    let Seeded {
        ctx,
        tag,
        mut tracks,
        not_judged,
        ..
    } = seeded;
    let mut out = Finished {
        not_judged,
        ..Finished::default()
    };
    if tracks.is_empty() {
        for field in ["expiryMs", "lockMs"] {
            out.reach.push(FieldReach {
                field: field.into(),
                declared: if field == "expiryMs" {
                    ctx.profile.expiry_ms
                } else {
                    ctx.profile.lock_ms
                },
                judged_up_to_ms: None,
                at_declared: false,
                how: "no probe sent through an API map".into(),
            });
        }
        return Ok(out);
    }
    let caller = format!("scale-{tag}");
    let quiet_from = ctx.now_ms();
    let (expiry, lock, ()) = tokio::join!(
        expiry_probe(&ctx, &caller, &tag, patience_ms),
        lock_probe(&ctx, &caller, &tag, patience_ms),
        ctx.sleep_until(quiet_from + patience_ms),
    );
    for probe in [expiry?, lock?] {
        out.reach.push(probe.reach);
        out.findings.extend(probe.findings);
        tracks.extend(probe.tracks);
    }
    // Final reads: every key asked again, then the effects of each.
    let count = tracks.len();
    let reread = bounded(tracks, |mut t| {
        let ctx = ctx.clone();
        async move {
            let f = if t.failed {
                None
            } else {
                ask(&ctx, &mut t).await?.0
            };
            Ok::<_, String>((f, t))
        }
    })
    .await?;
    let mut tracks = Vec::with_capacity(count);
    for r in reread {
        let (f, t) = r?;
        out.findings.extend(f);
        tracks.push(t);
    }
    out.findings
        .extend(judge_effects(&ctx, &tracks, &caller).await?);
    out.final_reads.push(format!(
        "after a quiet period of the patience ({}; no request on these keys): {count} keys asked again (2 seeded before the programs, the capacity keys, the expiry and lock probes' keys), /.reqkey/effects held to each",
        duration(patience_ms)
    ));
    out.reads = Some(Reads { ctx, tracks });
    Ok(out)
}

/// `/.reqkey/effects` judged for every track (its entries only).
async fn judge_effects(ctx: &Ctx, tracks: &[Track], caller: &str) -> Result<Vec<Finding>, String> {
    let request = HttpRequest {
        method: "GET".into(),
        path: "/.reqkey/effects".into(),
        headers: Vec::new(),
        body: None,
        replica: None,
        wire: Wire::Library,
    };
    let response = tokio::time::timeout(
        Duration::from_millis(ctx.call_timeout_ms + 1_000),
        ctx.target.http(request),
    )
    .await
    .map_err(|_| {
        format!(
            "/.reqkey/effects: no answer within {} ms",
            ctx.call_timeout_ms
        )
    })?
    .map_err(|e| format!("/.reqkey/effects: {e}"))?;
    let listed = match serde_json::from_slice::<Value>(&response.body)
        .map_err(|e| e.to_string())
        .and_then(|v| parse_effects(&v))
    {
        Ok(l) => l,
        Err(e) => {
            return Ok(vec![Finding {
                clause: reqkey_model::idem_model::clause::RECORDED.into(),
                probe: "the final reads".into(),
                message: format!(
                    "the final reads: GET /.reqkey/effects answered {} that is not the effects list: {e}",
                    response.status
                ),
                scenario_yaml: None,
            }])
        }
    };
    let mut by_key: HashMap<String, Vec<(EffectKey, u64)>> = HashMap::new();
    for (k, n) in listed {
        if k.caller == caller {
            if let Some(key) = k.key.clone() {
                by_key.entry(key).or_default().push((k, n));
            }
        }
    }
    let mut out = Vec::new();
    for t in tracks.iter().filter(|t| !t.failed) {
        let Some(key) = t.effect_key() else { continue };
        let listed = by_key.remove(&key).unwrap_or_default();
        let mut why = None;
        let ok = t
            .states
            .iter()
            .any(|s| match s.check_effects(&listed, |c| c == caller) {
                Ok(()) => true,
                Err(v) => {
                    why.get_or_insert(v);
                    false
                }
            });
        if !ok {
            if let Some(v) = why {
                out.push(Finding {
                    clause: blamed_on(t.blamed, v.clause).to_owned(),
                    probe: t.what.clone(),
                    message: format!("{} (the final reads' effects): {v}", t.what),
                    scenario_yaml: None,
                });
            }
        }
    }
    Ok(out)
}

/// What one timing probe sent, judged and reached.
struct Probe {
    reach: FieldReach,
    findings: Vec<Finding>,
    tracks: Vec<Track>,
}

/// Retries of a key from just after its completion to just before
/// `min(expiryMs, patience)` and a burst past expiry, beside a slow
/// handler's key retried just before expiry counted from its completion.
async fn expiry_probe(
    ctx: &Ctx,
    caller: &str,
    tag: &str,
    patience_ms: u64,
) -> Result<Probe, String> {
    let p = &ctx.profile;
    let declared = p.expiry_ms;
    // Expiry, its margin and the burst past it, within the patience.
    let within = declared
        .filter(|e| e.saturating_add(EXPIRY_MARGIN_MS + PAST_EXPIRY_EXTRA_MS) <= patience_ms);
    let (main, slow) = tokio::join!(retried(ctx, caller, tag, patience_ms, within), async {
        match within {
            Some(e) => from_start(ctx, caller, tag, e).await.map(Some),
            None => Ok(None),
        }
    });
    let (mut probe, reach_ok, past) = main?;
    if let Some(e) = declared {
        match (within, slow?) {
            (Some(_), Some((track, findings, judged))) => {
                probe.tracks.push(track);
                probe.findings.extend(findings);
                probe.reach.how.push_str(&format!(
                    "; a key of a {} handler retried {} after it completed (a store counting from the start forgets it); a burst of {PAST_EXPIRY_COPIES} past expiry and its {EXPIRY_MARGIN_MS} ms margin",
                    duration(FROM_START_SLEEP_MS),
                    duration(e.saturating_sub(BEFORE_EXPIRY_MS))
                ));
                probe.reach.at_declared = past && judged && reach_ok;
            }
            _ => probe.reach.how.push_str(&format!(
                "; expiry and its margin are past the patience of {}",
                duration(patience_ms)
            )),
        }
    }
    Ok(probe)
}

/// The main key of the expiry probe: retried at growing spans after it
/// completed, then (`within`: the declared expiry, when it and its margin
/// are within the patience) a burst past expiry. Answers the probe, whether
/// the last retry reached just before expiry, and whether the burst was
/// surely past it.
async fn retried(
    ctx: &Ctx,
    caller: &str,
    tag: &str,
    patience_ms: u64,
    within: Option<u64>,
) -> Result<(Probe, bool, bool), String> {
    let p = &ctx.profile;
    let declared = p.expiry_ms;
    let horizon = declared.map_or(patience_ms, |e| e.min(patience_ms));
    let mut findings = Vec::new();
    let mut t = Track::new(
        p,
        "the expiry probe's key",
        request(p, "/orders", caller, &format!("exp-{tag}"), None),
    );
    let (f, first) = ask(ctx, &mut t).await?;
    findings.extend(f);
    let done = first.answered_ms;
    let mut spans = Vec::new();
    let last = horizon.saturating_sub(BEFORE_EXPIRY_MS);
    let mut d = FIRST_SPAN_MS;
    while d < last {
        spans.push(d);
        d *= 2;
    }
    if last > 0 {
        spans.push(last);
    }
    // The longest span after completion at which a retry was surely
    // before expiry (a retry the machine sent late is no verdict).
    let mut reach: Option<u64> = None;
    for span in &spans {
        ctx.sleep_until(done + span).await;
        let (f, w) = ask(ctx, &mut t).await?;
        findings.extend(f);
        if declared.is_none_or(|e| w.arrived_by_ms < first.sent_ms.saturating_add(e)) {
            reach = Some(reach.unwrap_or(0).max(w.sent_ms.saturating_sub(done)));
        }
    }
    let how = format!(
        "a key retried {} times, from {} to {} after it completed",
        spans.len(),
        duration(FIRST_SPAN_MS.min(last)),
        duration(last)
    );
    let mut past = false;
    if let Some(e) = within {
        // Past expiry and its margin: a burst, of which exactly one runs
        // (the retries above, replays, extended nothing).
        ctx.sleep_until(done + e + EXPIRY_MARGIN_MS + PAST_EXPIRY_EXTRA_MS)
            .await;
        let req = t.req.clone();
        let answers: Vec<(IdemAnswer, Window)> = bounded(vec![req; PAST_EXPIRY_COPIES], |req| {
            let ctx = ctx.clone();
            async move { ctx.send(&req, None).await }
        })
        .await?
        .into_iter()
        .collect::<Result<_, _>>()?;
        past = answers
            .iter()
            .all(|(_, w)| w.sent_ms > done + e + EXPIRY_MARGIN_MS);
        findings.extend(t.judge(&answers)?);
    }
    let reach_ok = match within {
        Some(e) => reach.is_some_and(|r| r + BEFORE_EXPIRY_MS + 300 >= e),
        None => false,
    };
    Ok((
        Probe {
            reach: FieldReach {
                field: "expiryMs".into(),
                declared,
                judged_up_to_ms: reach,
                at_declared: false,
                how,
            },
            findings,
            tracks: vec![t],
        },
        reach_ok,
        past,
    ))
}

/// A key of a slow handler (its start and completion
/// [`FROM_START_SLEEP_MS`] apart) retried just before `expiry_ms` counted
/// from its completion: a store counting from the start forgot it. Answers
/// its track, findings, and whether the retry surely came before expiry.
async fn from_start(
    ctx: &Ctx,
    caller: &str,
    tag: &str,
    expiry_ms: u64,
) -> Result<(Track, Vec<Finding>, bool), String> {
    let p = &ctx.profile;
    let mut findings = Vec::new();
    let mut slow = Track::new(
        p,
        "the expiry probe's slow key",
        request(
            p,
            "/orders/slow",
            caller,
            &format!("exps-{tag}"),
            Some(FROM_START_SLEEP_MS),
        ),
    );
    slow.longer_ms = Some(FROM_START_SLEEP_MS + ctx.call_timeout_ms);
    let (f, w0) = ask(ctx, &mut slow).await?;
    findings.extend(f);
    ctx.sleep_until(w0.answered_ms + expiry_ms.saturating_sub(BEFORE_EXPIRY_MS))
        .await;
    let (f, w1) = ask(ctx, &mut slow).await?;
    findings.extend(f);
    let judged = w1.arrived_by_ms < w0.sent_ms + FROM_START_SLEEP_MS + expiry_ms;
    Ok((slow, findings, judged))
}

/// A handler outliving `min(lockMs, patience)` and its duplicates at
/// growing intervals while it runs: none may run.
async fn lock_probe(ctx: &Ctx, caller: &str, tag: &str, patience_ms: u64) -> Result<Probe, String> {
    let p = &ctx.profile;
    let declared = p.lock_ms;
    let longest = if ctx.target.long_calls() {
        SLEEP_CAP_MS
    } else {
        ctx.call_timeout_ms.saturating_sub(1_000)
    };
    let want = declared.map_or(patience_ms, |l| (l + PAST_LOCK_MS).min(patience_ms));
    let handler_ms = want.min(longest);
    let last = handler_ms.saturating_sub(ARRIVAL_SLACK_MS + 100);
    if last < FIRST_DUPLICATE_MS {
        return Ok(Probe {
            reach: FieldReach {
                field: "lockMs".into(),
                declared,
                judged_up_to_ms: None,
                at_declared: false,
                how: format!(
                    "a handler of {} is too short to send a duplicate into (the patience or --timeout-ms)",
                    duration(handler_ms)
                ),
            },
            findings: Vec::new(),
            tracks: Vec::new(),
        });
    }
    let mut t = Track::new(
        p,
        "the lock probe's key",
        request(
            p,
            "/orders/slow",
            caller,
            &format!("lock-{tag}"),
            Some(handler_ms),
        ),
    );
    let mut delays = Vec::new();
    let mut d = FIRST_DUPLICATE_MS;
    while d < last {
        delays.push(d);
        d *= 2;
    }
    if let Some(l) = declared {
        delays.extend(
            [l.saturating_sub(100), l + 150]
                .into_iter()
                .filter(|x| *x > 0 && *x < last),
        );
    }
    delays.push(last);
    delays.sort_unstable();
    delays.dedup();
    // Keep the longest ones when there are too many.
    let excess = delays.len().saturating_sub(MAX_DUPLICATES);
    delays.drain(..excess);
    let longer = Some(handler_ms + ctx.call_timeout_ms);
    t.longer_ms = longer;
    let origin = ctx.now_ms();
    // The handler first, then each duplicate at its delay, all at once.
    let sends: Vec<u64> = std::iter::once(0).chain(delays.iter().copied()).collect();
    let req = t.req.clone();
    let answers: Vec<(IdemAnswer, Window)> = bounded_all(sends, |d| {
        let (ctx, req) = (ctx.clone(), req.clone());
        async move {
            ctx.sleep_until(origin + d).await;
            ctx.send(&req, longer).await
        }
    })
    .await?
    .into_iter()
    .collect::<Result<_, _>>()?;
    let first = answers[0].clone();
    // The longest delay at which a duplicate surely arrived while the
    // handler ran (it was sent after the first, arrived before its answer).
    let reach = answers[1..]
        .iter()
        .filter(|(_, w)| w.arrived_by_ms < first.1.answered_ms)
        .map(|(_, w)| w.sent_ms.saturating_sub(first.1.sent_ms))
        .max();
    let findings: Vec<Finding> = t.judge(&answers)?.into_iter().collect();
    let at_declared = declared.is_some_and(|l| {
        handler_ms >= l + PAST_LOCK_MS && reach.is_some_and(|r| r >= l + AFTER_LOCK_MS)
    });
    let mut how = format!(
        "a handler of {}, {} duplicates sent from {} to {} after it",
        duration(handler_ms),
        delays.len(),
        duration(delays.first().copied().unwrap_or(0)),
        duration(last)
    );
    if want > handler_ms {
        how.push_str(&format!(
            " (bounded by --timeout-ms {}: this target cannot lengthen one call)",
            ctx.call_timeout_ms
        ));
    }
    Ok(Probe {
        reach: FieldReach {
            field: "lockMs".into(),
            declared,
            judged_up_to_ms: reach,
            at_declared,
            how,
        },
        findings,
        tracks: vec![t],
    })
}
