//! The fuzzers' alphabets as data: for every parameter `spec/SPEC.md` (or
//! a profile a target declares) names, the dimension of a fuzzer that
//! generates it, the clauses it can break, and the broken variants only it
//! finds; or, where no request of the protocol can generate it, why.
//!
//! `reqkey coverage --fuzz` lists these tables ([`render`]); each row's
//! values are read from the generators' own lists ([`Dimension::values`]),
//! so the listing is what the programs draw from, not a description of
//! it. Each fuzzer owns one table; [`fuzzers`] gathers them, and a new
//! fuzzer (the idem level's) plugs in with one more entry there.
//! `harness/tests/fuzz_alphabet.rs` checks every clause named here is one
//! of SPEC's and every variant a built-in one recorded in
//! `scenarios/falsification.json`.

use std::fmt::Write as _;

use reqkey_model::vocab::Level;

use crate::run::fuzz::agent_program::{self as agent, Form, Wait, FORMS, ROUTES, SIZES, WAITS};
use crate::run::fuzz::inputs::{self, Spelling};
use crate::run::fuzz::program as store;

/// Whether a dimension is generated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generated {
    /// Generated: how, in a sentence.
    Yes(&'static str),
    /// Not generated through the protocol, and why.
    No(&'static str),
}

/// One dimension of a fuzzer's alphabet.
#[derive(Debug, Clone, Copy)]
pub struct Dimension {
    /// `level.area.name`: stable, named by docs and failure reports.
    pub id: &'static str,
    /// The parameter SPEC names, and where.
    pub parameter: &'static str,
    pub generated: Generated,
    /// The clauses a target can break in this dimension.
    pub clauses: &'static [&'static str],
    /// Built-in broken variants the suite passes and this dimension finds.
    pub teeth: &'static [&'static str],
    /// The values drawn, from the generator's own lists.
    pub values: Option<fn() -> Vec<String>>,
}

/// A fuzzer and its alphabet.
#[derive(Debug, Clone, Copy)]
pub struct Fuzzer {
    pub name: &'static str,
    pub level: Level,
    pub dimensions: &'static [Dimension],
}

/// Every fuzzer's alphabet (a new fuzzer adds its table here).
pub fn fuzzers() -> Vec<Fuzzer> {
    vec![
        Fuzzer {
            name: "store",
            level: Level::Store,
            dimensions: &STORE,
        },
        Fuzzer {
            name: "agent",
            level: Level::Agent,
            dimensions: &AGENT,
        },
    ]
}

const fn yes(
    id: &'static str,
    parameter: &'static str,
    how: &'static str,
    clauses: &'static [&'static str],
    teeth: &'static [&'static str],
    values: Option<fn() -> Vec<String>>,
) -> Dimension {
    Dimension {
        id,
        parameter,
        generated: Generated::Yes(how),
        clauses,
        teeth,
        values,
    }
}

const fn no(
    id: &'static str,
    parameter: &'static str,
    why: &'static str,
    clauses: &'static [&'static str],
) -> Dimension {
    Dimension {
        id,
        parameter,
        generated: Generated::No(why),
        clauses,
        teeth: &[],
        values: None,
    }
}

/// The operations of `reqkey-store/1`, from the model's list (the one the
/// scenario loader and the store protocol use).
fn store_ops() -> Vec<String> {
    reqkey_model::seq::STORE_OPS
        .iter()
        .map(|op| match *op {
            "commitRunStart" => format!("{op} (keyed, keyless; expecting no run or a run)"),
            _ => (*op).to_owned(),
        })
        .collect()
}

fn shapes() -> Vec<String> {
    inputs::SHAPES.iter().map(|s| (*s).to_owned()).collect()
}

fn texts() -> Vec<String> {
    (0..inputs::TEXT_KINDS)
        .map(|i| {
            let t = inputs::text(i);
            if t.chars().count() > 40 {
                format!("{} characters mixing ASCII and non-BMP", t.chars().count())
            } else {
                format!("{t:?}")
            }
        })
        .collect()
}

fn store_args() -> Vec<String> {
    store::SPELLED
        .iter()
        .map(|s| s.name.to_owned())
        .chain(Spelling::ALL.iter().map(|s| format!("input {}", s.name())))
        .collect()
}

fn store_sizes() -> Vec<String> {
    store::SIZES
        .iter()
        .map(|s| {
            let kind = if s.multibyte { "multi-byte" } else { "ASCII" };
            match s.of {
                store::SizeOf::Text => format!("an input text of {} bytes, {kind}", s.bytes),
                store::SizeOf::Request => format!("a request of {} bytes, {kind}", s.bytes),
            }
        })
        .chain([
            format!(
                "session ids of {} characters (a whole program)",
                agent::ID_MAX
            ),
            format!(
                "a session id, run id, expected run id of {} characters",
                agent::ID_MAX + 1
            ),
            format!("a request key of {} characters", agent::KEY_MAX + 1),
        ])
        .collect()
}

fn routes() -> Vec<String> {
    ROUTES
        .iter()
        .map(|r| format!("{} {} -> {} {}", r.method, r.path, r.status, r.code))
        .chain(["GET /health -> the declared profile".to_owned()])
        .collect()
}

fn forms_where(keep: fn(&Form) -> bool) -> Vec<String> {
    FORMS
        .iter()
        .filter(|f| keep(f))
        .map(|f| match f {
            Form::ContentType(ct) => format!("Content-Type: {ct}"),
            Form::AcceptAny => "Accept: */*".into(),
            Form::AcceptRoute => {
                "Accept: application/json, text/plain, */* (text/event-stream on chat)".into()
            }
            Form::EventSource => {
                "Accept: text/event-stream, Cache-Control: no-cache, Last-Event-ID (a reconnect, and a chat send resent)"
                    .into()
            }
            Form::Conditional => {
                "If-None-Match: \"fz-0\", If-Modified-Since (a conditional read)".into()
            }
            Form::Revalidate => "Cache-Control: max-age=0, Pragma: no-cache".into(),
            Form::Proxied => "Via, X-Forwarded-For, Forwarded (through a proxy)".into(),
            Form::KeepAlive => "Connection: keep-alive".into(),
            Form::ExpectContinue => "Expect: 100-continue on a body".into(),
            Form::ConnectionClose => "Connection: close".into(),
            Form::Chunked => "Transfer-Encoding: chunked".into(),
            Form::KeyName(n) => format!("the key header spelt {n}"),
            Form::KeyBlanks => "blanks (SP, HTAB) around the key".into(),
            Form::KeyRepeated => "the key header twice (a malformed key)".into(),
            Form::Spelled(s) => format!("the body {}", s.name()),
            Form::Plain => "as the library writes it".into(),
        })
        .collect()
}

fn waits() -> Vec<String> {
    WAITS
        .iter()
        .map(|w| match w {
            Wait::Zero => "waitMs=0".to_owned(),
            Wait::Before => format!("{} ms before the run's end", agent::BEFORE_MS),
            Wait::At => "at the run's end".to_owned(),
            Wait::Past => format!("{} ms past the run's end", agent::PAST_MS),
            Wait::Bad(s) => format!("waitMs={s} (no integer)"),
        })
        .collect()
}

fn timers() -> Vec<String> {
    agent::MARKERS
        .iter()
        .filter(|m| m.contains("[sleep:"))
        .map(|m| format!("{m:?}"))
        .chain([
            "the next step at once".to_owned(),
            format!("{} ms before the latest run's end", agent::BEFORE_MS),
            "at it".to_owned(),
            format!("{} ms past it", agent::PAST_MS),
        ])
        .collect()
}

fn body_sizes() -> Vec<String> {
    SIZES
        .iter()
        .map(|s| {
            let kind = if s.multibyte {
                "multi-byte text"
            } else {
                "ASCII"
            };
            format!("{} bytes of {kind} (start, resume, chat)", s.bytes)
        })
        .collect()
}

fn agent_inputs() -> Vec<String> {
    agent::MARKERS
        .iter()
        .map(|m| format!("{{\"text\": {m:?}}}"))
        .chain(
            texts()
                .into_iter()
                .skip(2)
                .map(|t| format!("{{\"text\": {t}}}")),
        )
        .chain(shapes())
        .collect()
}

/// The store fuzzer's alphabet (`run::fuzz::store`, `run::fuzz::program`).
pub static STORE: [Dimension; 13] = [
    yes(
        "store.ops",
        "every operation of reqkey-store/1 (SPEC 6 op table)",
        "every op on a tiny domain (two sessions, two keys, three run ids, four statuses), so that a key taken twice, a run id reused, a stale CAS and a delete between two commits are common",
        &[
            "wire.store.op.commit-run-start",
            "wire.store.op.get-run",
            "wire.store.op.get-current-run",
            "wire.store.op.list-runs",
            "wire.store.op.get-run-by-request-key",
            "wire.store.op.list-inputs",
            "wire.store.op.set-run-status",
            "wire.store.op.delete-session",
            "store.commit.order",
            "store.commit.replay",
            "store.commit.run-id-conflict",
            "store.commit.key-holder",
            "store.commit.cas",
            "store.commit.write-run",
            "store.commit.started-answer",
            "store.commit.replay-current-state",
            "store.commit.refused-no-session",
            "store.write.status-live-changes",
            "store.write.status-finished-refuses",
            "store.write.status-not-found",
            "store.delete.answer",
            "store.delete.fresh-session",
            "store.delete.key-reusable",
            "store.key.per-session",
            "store.session.isolation",
        ],
        &[],
        Some(store_ops),
    ),
    yes(
        "store.reads",
        "every read, by other clients, after every write (SPEC 4 Reads)",
        "derived, not drawn: after each write every read of its session; beside each batch one racing reader per session written",
        &[
            "store.reads.get-run",
            "store.reads.current-run",
            "store.reads.list-runs-order",
            "store.reads.by-key",
            "store.reads.by-key-own-session",
            "store.reads.list-inputs",
            "store.reads.unknown-session",
            "store.delete.removes-all",
            "store.commit.write-current",
            "store.commit.write-input",
        ],
        &[],
        None,
    ),
    yes(
        "store.inputs",
        "`input`, any JSON value (SPEC 4 `[[store.input.numbers-exact]]`)",
        "inputs of every JSON shape, kind of text and type, `a` and `b` two commits in three",
        &[
            "store.input.numbers-exact",
            "certify.match.input-exact",
            "store.commit.start-digest-canonical",
        ],
        &[],
        Some(shapes),
    ),
    yes(
        "store.args.type-and-spelling",
        "the arguments' JSON types and spellings (SPEC 6 `[[wire.store.invalid-argument]]`; SPEC 3)",
        "an argument of another JSON type or spelling (judged by the spec's own parser), and a commit's input in every spelling of its value (one start digest)",
        &[
            "wire.store.invalid-argument",
            "wire.store.malformed-request",
            "wire.store.invalid-id",
            "store.fields.key-digest-together",
            "store.commit.start-digest-canonical",
            "store.commit.replay",
        ],
        &["broken-memory:status-case-folded"],
        Some(store_args),
    ),
    yes(
        "store.limits.sizes",
        "size limits: ids (SPEC 1), keys (SPEC 2), a request body (SPEC 6: 1 MiB), and the columns stores keep text in",
        "inputs at common column limits and requests at 1 MiB and one byte past, ASCII and multi-byte; the longest ids for a whole program, and one past",
        &[
            "wire.store.invalid-id",
            "wire.store.invalid-run-id",
            "wire.store.no-internal",
            "certify.match.input-exact",
            "terms.session-id.syntax",
            "terms.run-id.syntax",
            "key.parse.length",
        ],
        &["broken-memory:inputs-in-a-64k-column"],
        Some(store_sizes),
    ),
    yes(
        "store.concurrency",
        "every write under any concurrency (SPEC 4 atomic steps; SPEC 6 `[[wire.store.concurrent]]`)",
        "batches of two to four operations released behind a barrier, with a racing reader, every history checked for linearizability",
        &[
            "store.commit.atomic",
            "store.key.one-run-per-key",
            "store.set-run-status.atomic",
            "store.delete-session.atomic",
            "store.delete-session.once",
            "wire.store.concurrent",
            "store.key.backstop-answer",
        ],
        &[],
        None,
    ),
    no(
        "store.timers",
        "timers, TTLs, leases, expiries",
        "SPEC 4 and 6 name no timer of the store protocol: leases are the executor's (SPEC 5), kept through trait methods reqkey-store/1 does not carry, and [S6-limits]'s timeouts are SHOULDs on a server's resources (`server.limits`, certified nowhere; reference-impl/tests/http_limits.rs)",
        &["server.limits", "server.limits.write"],
    ),
    no(
        "store.headers",
        "headers and body framing of POST /rpc",
        "SPEC 6 names no header but the JSON body's, and a reqkey-store/1 client is an executor's adapter the harness stands in for; an in-process store has no wire at all, and the suite's `raw` steps judge the wire's spelling (members, numbers as written)",
        &["wire.store.envelope", "wire.store.strict-json"],
    ),
    no(
        "store.routes",
        "routes and methods besides POST /rpc and GET /health",
        "SPEC 6 defines two routes and says nothing of others, so no answer to another is a violation",
        &["wire.store.health"],
    ),
    no(
        "store.streams",
        "stream events",
        "reqkey-store/1 has no stream: every answer is one JSON body",
        &[],
    ),
    no(
        "store.profiles",
        "profiles",
        "a store has one profile (`[[store.profile.fixed]]`): every store records keys",
        &["store.profile.fixed"],
    ),
    no(
        "store.durability",
        "`durable: true` across a restart, and replicas",
        "no request of the protocol restarts a store; the crash scenarios (`--start`) and scripts/pg-replica.sh judge them",
        &["wire.store.durable"],
    ),
    no(
        "store.upgrade",
        "runs written through a store's first schema version (SPEC 4 [S4-upgrade])",
        "no request writes through an older schema: `reqkey certify --seed-legacy N` and harness/tests/upgrade.rs judge them",
        &["store.upgrade.legacy-runs-read", "store.upgrade.legacy-runs-behave"],
    ),
];

/// The agent fuzzer's alphabet (`run::fuzz::agent`, `run::fuzz::agent_program`).
pub static AGENT: [Dimension; 22] = [
    yes(
        "agent.routes.entries",
        "POST /sessions/{id}/start, resume, retry, chat (a send and a tool-result send) (SPEC 7 route table; SPEC 5)",
        "every entry on two sessions, keyless and keyed, and a client's retry of one of the last three requests, in the same or another form",
        &[
            "agent.route.start",
            "agent.route.resume",
            "agent.route.retry",
            "agent.route.chat",
            "agent.chat.tool-send-keyless",
            "agent.chat.input-entry",
            "agent.keys.read",
            "agent.keys.attached-answer",
            "agent.keys.skip-refusals",
            "agent.keys.conflict-run-id",
            "agent.error.run-id-only-keyed",
            "plan.lookup-before-policy",
            "plan.row.new",
            "plan.row.attach",
            "plan.row.replay",
            "plan.row.key-conflict",
            "plan.row.already-completed",
            "plan.keyless-unchanged",
            "plan.new-meets-policy",
            "store.delete.key-reusable",
            "store.key.per-session",
        ],
        &[],
        None,
    ),
    yes(
        "agent.routes.reads",
        "GET /sessions/{id}, GET .../runs/{runId}, GET .../chat (a reconnect), DELETE /sessions/{id} (SPEC 7 route table)",
        "snapshots, run reads of a run of this session, of the other, of a deleted one or unknown, reconnects, deletes and re-creations",
        &[
            "agent.route.snapshot",
            "agent.route.run",
            "agent.route.chat-reconnect",
            "agent.route.delete",
            "agent.refusal.not-found",
            "agent.chat.reconnect.streams-current",
            "agent.chat.reconnect.starts-nothing",
            "store.delete.removes-all",
            "store.delete.fresh-session",
            "terms.session.lifetime",
        ],
        &[],
        None,
    ),
    yes(
        "agent.routes.other",
        "methods a route does not take, unknown routes, GET /health (SPEC 7)",
        "each request below once in a while, alone or in a batch; /health must declare again the profile it declared",
        &[
            "agent.refusal.method",
            "agent.refusal.unknown-route",
            "agent.refusal.bad-body",
            "agent.error.shape",
            "agent.route.health",
            "agent.profile.declared-in-health",
        ],
        &["reference-agent:delete-matches-sub-routes"],
        Some(routes),
    ),
    yes(
        "agent.keys.values",
        "the request key (SPEC 1, 2): absent, valid, malformed",
        "no key, two keys both sessions share, a key malformed by a blank inside, one of 128 characters and one of 129",
        &[
            "key.parse.charset",
            "key.parse.length",
            "key.parse.invalid-400",
            "key.parse.before-lookup",
            "key.parse.not-echoed",
            "key.compare.byte-exact",
            "agent.keys.malformed-400",
            "agent.keys.malformed-on-tool-send",
            "agent.profile.malformed-key-refused-everywhere",
            "agent.chat.reconnect.ignores-key",
            "plan.parse-first",
        ],
        &[],
        None,
    ),
    yes(
        "agent.wire.spellings",
        "the key header as HTTP lets a client write it (SPEC 7 `[[agent.keys.wire-forms]]`, `[[agent.keys.repeated-header]]`)",
        "on every entry and reconnect: the header's name in other letter cases and blanks around its value (written byte for byte), the header twice",
        &[
            "agent.keys.wire-forms",
            "agent.keys.repeated-header",
            "agent.chat.reconnect.ignores-key",
        ],
        &["reference-agent:key-spelling-ignored-on-resume-and-retry"],
        Some(|| forms_where(|f| matches!(f, Form::KeyName(_) | Form::KeyBlanks | Form::KeyRepeated))),
    ),
    yes(
        "agent.headers.http",
        "the headers HTTP lets a client add (SPEC 7 `[[agent.wire.http-semantics]]`)",
        "on every request, one at a time: Content-Type spellings, Accept, Connection",
        &["agent.wire.http-semantics", "agent.route.start", "agent.route.chat"],
        &["reference-agent:content-type-compared-exactly"],
        Some(|| {
            forms_where(|f| {
                matches!(
                    f,
                    Form::ContentType(_) | Form::AcceptAny | Form::AcceptRoute | Form::ConnectionClose
                )
            })
        }),
    ),
    yes(
        "agent.headers.sse",
        "the headers Server-Sent Events' clients send (SPEC 7 `[[agent.wire.http-semantics]]`, `[[agent.wire.last-event-id-on-entry]]`, chat reconnect)",
        "what EventSource sends on a reconnect, and on a chat send a client resends after its stream broke",
        &[
            "agent.wire.http-semantics",
            "agent.wire.last-event-id-on-entry",
            "agent.chat.reconnect.streams-current",
            "agent.chat.sse-events",
        ],
        &[
            "reference-agent:last-event-id-resumes-live",
            "reference-agent:last-event-id-send-is-new",
        ],
        Some(|| forms_where(|f| matches!(f, Form::EventSource))),
    ),
    yes(
        "agent.headers.caches",
        "what caches and proxies add (SPEC 7 `[[agent.wire.conditional-ignored]]`, `[[agent.wire.cache-directives]]`, `[[agent.wire.proxy-headers]]`, `[[agent.wire.expect-continue]]`)",
        "on every request, one set at a time (a keyed retry in any of them too): conditional headers, cache directives, a proxy's headers, keep-alive, Expect: 100-continue on a body; each answered as the request without it",
        &[
            "agent.wire.conditional-ignored",
            "agent.wire.cache-directives",
            "agent.wire.proxy-headers",
            "agent.wire.expect-continue",
            "agent.keys.attached-answer",
        ],
        &["reference-agent:conditional-entry-not-modified"],
        Some(|| {
            forms_where(|f| {
                matches!(
                    f,
                    Form::Conditional
                        | Form::Revalidate
                        | Form::Proxied
                        | Form::KeepAlive
                        | Form::ExpectContinue
                )
            })
        }),
    ),
    yes(
        "agent.body.chunked",
        "the body's framing (RFC 9112 section 7.1; SPEC 7 `[[agent.wire.http-semantics]]`)",
        "every body of a request in this form sent chunked, in chunks of 7,001 bytes that cut tokens and characters",
        &["agent.wire.http-semantics", "agent.route.start", "agent.route.chat"],
        &["reference-agent:chunked-body-unread"],
        Some(|| forms_where(|f| matches!(f, Form::Chunked))),
    ),
    yes(
        "agent.json.type-and-spelling",
        "a body's JSON value: its spellings (SPEC 3, SPEC 7) and values that differ only in type",
        "every body in every spelling of its value, a client's retry in another spelling (one digest: attached), and inputs that differ only in JSON type (another digest: a conflict)",
        &[
            "agent.wire.http-semantics",
            "agent.keys.digest-input",
            "digest.numbers",
            "digest.black-box",
            "plan.row.attach",
            "plan.row.key-conflict",
            "certify.match.input-exact",
        ],
        &["reference-agent:digest-keeps-string-escapes"],
        Some(|| {
            forms_where(|f| matches!(f, Form::Spelled(_)))
                .into_iter()
                .chain(inputs::SHAPES.iter().skip(20).map(|s| format!("the input {s}")))
                .collect()
        }),
    ),
    yes(
        "agent.inputs",
        "`input` of start and resume, chat's last message `content` (SPEC 7 bodies, test agent)",
        "the test agent's markers and every kind of text, and values of every JSON shape",
        &[
            "certify.match.input-exact",
            "agent.chat.input-entry",
            "agent.test-agent.suspend",
            "agent.test-agent.fail",
            "agent.test-agent.complete",
            "agent.test-agent.combine",
        ],
        &[],
        Some(agent_inputs),
    ),
    yes(
        "agent.limits.body",
        "the body limit (SPEC 7 `[[agent.refusal.too-large]]`: 413 over 1 MiB)",
        "keyless entries whose body is exactly at the limit and one byte past, in ASCII and in multi-byte text (a third as many characters as bytes)",
        &[
            "agent.refusal.too-large",
            "agent.route.start",
            "agent.route.resume",
            "agent.route.chat",
            "certify.match.input-exact",
        ],
        &["reference-agent:body-limit-in-characters"],
        Some(body_sizes),
    ),
    yes(
        "agent.limits.ids",
        "id limits (SPEC 1: session and run ids of 1 to 256 characters; SPEC 2: keys of 1 to 128)",
        "one program in eight with session ids of 256 characters on every route; ids of 257 in the path (400) and keys of 128 and 129",
        &[
            "agent.refusal.bad-body",
            "agent.route.start",
            "agent.route.snapshot",
            "key.parse.length",
        ],
        &["reference-agent:session-id-limit-255"],
        None,
    ),
    yes(
        "agent.timers.run-end",
        "the test agent's timer `[sleep:N]` (SPEC 7 `[[agent.test-agent.sleep]]`)",
        "runs of 40, 80 and 150 ms (ending completed, suspended, failed); after a step the next one sent at once, just before, at or past the latest run's end, so entries, reads and deletes meet running runs; a run seen ended before its sleep is a violation",
        &[
            "agent.test-agent.sleep",
            "agent.route.delete",
            "agent.route.resume",
            "agent.route.retry",
            "plan.row.attach",
            "agent.keys.skip-refusals",
            "agent.interrupt-previous.entry-interrupts",
        ],
        &["reference-agent:sleep-cut-short"],
        Some(timers),
    ),
    yes(
        "agent.timers.wait-ms",
        "`waitMs` of a run read (SPEC 7 route table, `[[agent.run.wait-capped]]`)",
        "polls placed against the run's end, and spellings that are no integer; a poll answered `running` before its waitMs while no other poll waited is a violation",
        &[
            "agent.route.run",
            "agent.run.wait-not-running",
            "agent.run.wait-capped",
            "agent.refusal.bad-body",
        ],
        &["reference-agent:wait-drops-key-fields"],
        Some(waits),
    ),
    no(
        "agent.timers.lease",
        "leases and orphan expiry (SPEC 5 [S5-orphaned], `leaseMs`)",
        "a lease runs out only when its owner stopped (SIGKILL, SIGSTOP) or through another replica, leaseMs (3 s by default) later; no request of the protocol stops an owner, and the fuzzer controls no process. The crash scenarios (`--start`: harness/tests/crash.rs) judge leases on the target's own clock, and `reqkey model check --expiries 1` every interleaving of an expiry",
        &[
            "lease.taken-before-commit",
            "lease.length",
            "lease.renew.owner-only",
            "lease.expire.any-reader",
            "lease.expire.compare",
            "plan.orphaned.not-running-forever",
            "plan.orphaned.retry-replays",
            "agent.orphaned-interrupted",
        ],
    ),
    no(
        "agent.timers.admission",
        "`entryWaitMs` and the test agent's `[admit:N]` (SPEC 7 Profiles)",
        "whether an entry met another's admission depends on when the server decided each, which only its clock knows; the fuzzer sends no batch to a server that declares entryWaitMs (its entries are sequential there) and the entry-wait scenarios judge the wait",
        &[
            "agent.admission.keyed-waits",
            "agent.admission.keyless-busy-at-once",
            "agent.admission.busy-answer",
            "agent.test-agent.admit",
        ],
    ),
    no(
        "agent.timers.upper-bounds",
        "upper bounds in time: a plain run completes within 50 ms, an interrupted run's stream ends within 3 s, [S6-limits]'s timeouts",
        "judged from below only: on a loaded machine a conforming server misses an upper bound, and the same target must get the same verdict there; [S6-limits] are SHOULDs (reference-impl/tests/http_limits.rs, `reqkey bench soak`)",
        &[
            "agent.test-agent.complete",
            "agent.interrupt-previous.own-stream",
            "server.limits",
            "server.limits.write",
        ],
    ),
    yes(
        "agent.stream.events",
        "every event of a chat stream (SPEC 7 `[[agent.chat.sse-events]]`, test agent)",
        "every stream of a send, an attach and a reconnect judged whole: run-start first, the run's one text event with its echo, finish last and nothing after it, one run",
        &[
            "agent.chat.sse-events",
            "agent.chat.one-run-per-stream",
            "agent.test-agent.echo",
            "agent.chat.attach-from-start",
        ],
        &["reference-agent:stream-text-drops-non-bmp"],
        None,
    ),
    yes(
        "agent.concurrency",
        "every route under concurrency (SPEC 4, 5, 7)",
        "batches of two or three requests on any route, keyless ones and refused ones included, released behind a barrier and judged by every order; no snapshot in a batch (`[[agent.snapshot.not-one-read]]`), none on a server that declares entryWaitMs",
        &[
            "store.key.one-run-per-key",
            "plan.replan-once",
            "agent.entry.cas-redecide",
            "agent.run.wait-deleted",
            "agent.interrupt-previous.concurrent-one-current",
        ],
        &[],
        None,
    ),
    yes(
        "agent.profiles",
        "the profile the target declares (SPEC 7 Profiles)",
        "the model judges under the declared (or stated) profile: supportsRequestKey true or false, concurrentEntry reject or interrupt_previous, entryWaitMs",
        &[
            "agent.keys-ignored.keyed-behaves-as-keyless",
            "agent.keys-ignored.never-attached",
            "agent.keys-ignored.no-key-fields",
            "agent.interrupt-previous.key-before-policy",
            "agent.interrupt-previous.entry-interrupts",
            "agent.interrupt-previous.keyless-chat-refused",
            "agent.interrupt-previous.interrupted-key-completed",
        ],
        &[],
        None,
    ),
    no(
        "agent.faults",
        "crashes, restarts, replicas, sends whose run cannot be identified (SPEC 7 `durable`, 8.2; `[lose-run]`)",
        "no request of the protocol kills or restarts a server, and `[lose-run]` asks a 500 by design; the crash and replica scenarios (`--start`) and the transport-error scenarios judge them",
        &[
            "agent.durable",
            "agent.chat.transport-error.when",
            "agent.chat.transport-error.input-committed",
            "agent.chat.transport-error.never-streams",
            "agent.test-agent.lose-run",
        ],
    ),
];

/// What is wrong with the tables: a clause `is_clause` does not know, a
/// variant `is_variant` does not know (at the fuzzer's level), a
/// dimension id used twice or outside its fuzzer's level, a generated
/// dimension that names no clause. Empty: every row is checked.
pub fn problems(
    fuzzers: &[Fuzzer],
    is_clause: &dyn Fn(&str) -> bool,
    is_variant: &dyn Fn(Level, &str) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    for f in fuzzers {
        for d in f.dimensions {
            if !ids.insert(d.id) {
                out.push(format!("{}: listed twice", d.id));
            }
            if !d.id.starts_with(&format!("{}.", f.name)) {
                out.push(format!("{}: not under its fuzzer `{}`", d.id, f.name));
            }
            if matches!(d.generated, Generated::Yes(_)) && d.clauses.is_empty() {
                out.push(format!(
                    "{}: generated, and names no clause it can break",
                    d.id
                ));
            }
            for c in d.clauses.iter().filter(|c| !is_clause(c)) {
                out.push(format!("{}: `{c}` is no clause of spec/SPEC.md", d.id));
            }
            for v in d.teeth.iter().filter(|v| !is_variant(f.level, v)) {
                out.push(format!(
                    "{}: `{v}` is no built-in {} variant",
                    d.id,
                    f.level.name()
                ));
            }
        }
    }
    out
}

/// `reqkey coverage --fuzz`: each fuzzer's dimensions, with their clauses
/// and values, then what is not generated and why.
pub fn render(fuzzers: &[Fuzzer]) -> String {
    let mut out = String::new();
    for f in fuzzers {
        let generated = f
            .dimensions
            .iter()
            .filter(|d| matches!(d.generated, Generated::Yes(_)))
            .count();
        let _ = writeln!(
            out,
            "{} fuzzer ({} level): {generated} of {} dimensions generated",
            f.name,
            f.level.name(),
            f.dimensions.len()
        );
        for d in f
            .dimensions
            .iter()
            .filter(|d| matches!(d.generated, Generated::Yes(_)))
        {
            let Generated::Yes(how) = d.generated else {
                continue;
            };
            let _ = writeln!(out, "  {}  {}", d.id, d.parameter);
            let _ = writeln!(out, "      generates: {how}");
            if let Some(values) = d.values {
                for v in values() {
                    let _ = writeln!(out, "        - {v}");
                }
            }
            let _ = writeln!(out, "      can break: {}", d.clauses.join(", "));
            if !d.teeth.is_empty() {
                let _ = writeln!(
                    out,
                    "      only it finds (the suite passes them): {}",
                    d.teeth.join(", ")
                );
            }
        }
        let _ = writeln!(out, "  not generated:");
        for d in f.dimensions {
            if let Generated::No(why) = d.generated {
                let _ = writeln!(out, "  {}  {}", d.id, d.parameter);
                let _ = writeln!(out, "      why: {why}");
                if !d.clauses.is_empty() {
                    let _ = writeln!(out, "      clauses: {}", d.clauses.join(", "));
                }
            }
        }
        out.push('\n');
    }
    out
}
