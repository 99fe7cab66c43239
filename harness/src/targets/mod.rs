//! Targets: the only way the harness reaches an implementation.
//!
//! A scenario never names a backend; it names operations. A [`Target`]
//! carries them to something real: an in-process reference store, a
//! `reqkey-store/1` adapter over HTTP, or a `reqkey-agent/1` server. Every
//! call is bounded by a timeout; a target that is down or hangs is a
//! [`TargetError`] (the harness cannot judge, exit 2), never a verdict.
//!
//! One file per kind of target, behind the one [`Target`] seam:
//!
//! - [`store`]: reference stores in this process (`memory`,
//!   `broken-memory:DEFECT`, `sqlite:`, `postgres://`, `redis://`);
//! - [`http_store`]: any store behind a `reqkey-store/1` adapter;
//! - [`http_agent`]: any `reqkey-agent/1` server over HTTP;
//! - [`reference_agent`]: the reference agent server, started in process;
//! - [`replicas`]: several endpoints of one agent deployment, round-robin;
//! - [`spec`]: a `--target` string parsed once into a [`spec::TargetSpec`]
//!   and opened; the only place that knows the forms;
//! - [`profile`]: what a target declares it does with keys (its `/health`
//!   profile), which decides the scenarios that apply to it.
//!
//! This file holds what they share and imports none of them.

pub mod access;
pub mod api_map;
pub mod api_plan;
pub mod connect_log;
pub mod http_agent;
pub mod http_store;
pub mod idem;
pub mod latency;
pub mod ledger;
pub mod link;
pub mod mapped;
pub mod owned;
pub mod profile;
pub mod reap;
pub mod reference_agent;
pub mod replicas;
pub mod request_log;
pub mod spec;
pub mod store;
pub mod suggest;
pub mod tls;
pub mod together;
pub mod transport;
pub mod user_agent;
pub mod wire;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
pub use reqkey_model::vocab::Level;
use reqkey_reference::store::OpenError;
pub use reqkey_scenario::agent_step::{HttpRequest, HttpResponse};
use reqkey_scenario::fault::FaultStep;
use reqkey_scenario::link::{LinkStep, OwnedLinks};
use serde_json::Value;

/// Why a call could not be judged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The target could not be reached (refused, reset, DNS, ...).
    #[error("target unreachable: {0}")]
    Unreachable(String),
    /// The target did not answer within the call timeout.
    #[error("target did not answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    /// The target answered something the protocol does not allow
    /// (a broken adapter: wrong status, not JSON, not `{ok}|{error}`).
    /// This is a conformance failure of the step, not a harness error.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The target cannot do this (for example a store op on an agent target).
    #[error("unsupported by this target: {0}")]
    Unsupported(String),
    /// The target specification itself is wrong.
    #[error("bad target: {0}")]
    BadSpec(String),
    /// The connection closed (or was reset) before the answer was whole:
    /// indefinite, since nothing the target meant was read.
    #[error("the connection closed before the answer was complete: {0}")]
    Closed(String),
    /// The answer is larger than the response cap: it was not read whole,
    /// so it cannot be judged.
    #[error(
        "the answer is larger than the response cap of {cap} bytes (raise it with --max-response-bytes)"
    )]
    TooLarge { cap: u64 },
    /// The answer's JSON holds more values than the judge parses
    /// ([`crate::run::agent_steps::MAX_ANSWER_JSON_VALUES`]): parsed, it
    /// would take tens of times its size, so it is not, and its step
    /// cannot be judged.
    #[error(
        "the answer's JSON holds about {values} values, more than the {bound} the judge parses \
         (MAX_ANSWER_JSON_VALUES): not parsed, so the step cannot be judged"
    )]
    TooManyValues { values: u64, bound: u64 },
    /// The harness's own memory reached its ceiling (`--max-memory-bytes`)
    /// while it read an answer: the answer was not read whole, so its step
    /// cannot be judged.
    #[error("the answer was not read whole: {0}")]
    OverMemory(String),
    /// The target's TLS certificate is not one the harness trusts (an
    /// unknown issuer, another host's name, expired): the message names the
    /// certificate and the reason. Never a verdict.
    #[error("the target's TLS certificate is refused: {0}")]
    Certificate(String),
    /// `--api` only: the API map's effect oracle cannot count what the
    /// step asks (an effect whose answer carried no id, with no read
    /// route): the step is not judged, never passed.
    #[error("not judged by the effect oracle: {0}")]
    Oracle(String),
    /// Before any scenario: what answered is not an HTTP server.
    #[error("not an HTTP server (is the address right?): {0}")]
    NotHttp(String),
    /// Before any scenario: `/health` names the other protocol than the
    /// `--target` scheme says (a wiring mistake).
    #[error("the target speaks {found}, not {expected}: {hint}")]
    WrongProtocol {
        expected: &'static str,
        found: &'static str,
        hint: String,
    },
    /// `--start`: the harness's faults would not reach the target (it
    /// uses none of the started ports, another process answers on them, a
    /// killed process's port still accepts, a restarted one died).
    #[error("the harness's faults do not reach the target: {0}")]
    Wiring(String),
}

impl TargetError {
    /// Does this error mean the harness could not judge (exit 2), rather
    /// than that the target does not conform?
    pub fn is_harness_error(&self) -> bool {
        !matches!(self, TargetError::Protocol(_))
    }

    /// The typed reason, as reports write it (`docs/reports.md`).
    pub fn reason(&self) -> &'static str {
        match self {
            TargetError::Unreachable(_) => "unreachable",
            TargetError::Timeout { .. } => "timeout",
            TargetError::Protocol(_) => "protocol",
            TargetError::Unsupported(_) => "unsupported",
            TargetError::BadSpec(_) => "bad_target",
            TargetError::Closed(_) => "closed",
            TargetError::TooLarge { .. }
            | TargetError::TooManyValues { .. }
            | TargetError::OverMemory(_) => "too_large",
            TargetError::NotHttp(_) => "not_http",
            TargetError::Certificate(_) => "certificate",
            TargetError::Oracle(_) => "oracle",
            TargetError::WrongProtocol { .. } => "wrong_protocol",
            TargetError::Wiring(_) => "wiring",
        }
    }

    /// Does it say the target is not answering (down, hung, or closing
    /// connections)? A run stops early after a few of these in a row.
    pub fn is_silence(&self) -> bool {
        matches!(
            self,
            TargetError::Unreachable(_) | TargetError::Timeout { .. } | TargetError::Closed(_)
        )
    }
}

/// One request of a burst sent together ([`Target::http_together`]): its
/// answer, when its last byte left, when its answer was whole.
#[derive(Debug, Clone)]
pub struct Timed {
    pub response: HttpResponse,
    pub sent: std::time::Instant,
    pub answered: std::time::Instant,
}

/// Something the harness can certify.
#[async_trait]
pub trait Target: Send + Sync + fmt::Debug {
    /// The contract it speaks.
    fn level(&self) -> Level;

    /// How a report names it (`memory`, `store+http://127.0.0.1:7001`, ...).
    fn describe(&self) -> String;

    /// What the run saw of the target that every report should say
    /// without changing a verdict (an HTTP target's answers stalling in
    /// a Nagle shape, [`latency`]).
    fn warnings(&self) -> Vec<latency::TargetWarning> {
        Vec::new()
    }

    /// How many of its connections so far took a second or more to open
    /// (a full listen queue, [`connect_log`]): a parallel group during
    /// which this grew is not judged as concurrent.
    fn slow_connects(&self) -> u64 {
        0
    }

    /// The target's identity: `/health` for HTTP targets, a synthesized
    /// equivalent in process.
    async fn health(&self) -> Result<Value, TargetError>;

    /// One `reqkey-store/1` call: `request` is `{"op", "args"}` as the
    /// scenario wrote it (possibly malformed on purpose); the answer is the
    /// wire answer `{"ok": ...}` or `{"error": ...}`.
    async fn store_call(&self, request: &Value) -> Result<Value, TargetError> {
        let _ = request;
        Err(TargetError::Unsupported(format!(
            "{} does not take store operations",
            self.describe()
        )))
    }

    /// One `reqkey-store/1` call from its request text (a `raw:` step).
    /// An adapter over HTTP gets the text byte for byte. In process there
    /// is no wire: the text is parsed as JSON the way an adapter's parser
    /// would (key order does not survive, and a number's spelling does not
    /// either: `1.0` and `1` become one value, as SPEC 3 says they are),
    /// and text that is not JSON is answered `invalid_argument`, as SPEC 6
    /// answers a request that is not JSON.
    async fn store_call_raw(&self, text: &str) -> Result<Value, TargetError> {
        if self.level() != Level::Store {
            return Err(TargetError::Unsupported(format!(
                "{} does not take store operations",
                self.describe()
            )));
        }
        match serde_json::from_str::<Value>(text) {
            Ok(request) => self.store_call(&request).await,
            Err(e) => Ok(serde_json::json!({"error": {
                "kind": "invalid_argument",
                "message": format!("the request is not JSON: {e}"),
            }})),
        }
    }

    /// One HTTP exchange with an agent server.
    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let _ = request;
        Err(TargetError::Unsupported(format!(
            "{} does not take HTTP requests",
            self.describe()
        )))
    }

    /// One HTTP exchange that may last up to `timeout_ms`, longer than the
    /// call timeout: a probe's handler that outlives a declared lock
    /// (`run/fuzz/scale.rs`). Targets that cannot lengthen one call answer
    /// `false` from [`Target::long_calls`] and are sent `http` instead.
    async fn http_within(
        &self,
        request: HttpRequest,
        timeout_ms: u64,
    ) -> Result<HttpResponse, TargetError> {
        let _ = timeout_ms;
        self.http(request).await
    }

    /// Whether [`Target::http_within`] lengthens a call past the call timeout.
    fn long_calls(&self) -> bool {
        false
    }

    /// Can it send several HTTP requests so that they arrive together
    /// ([`Target::http_together`])? Groups of the fuzzers go behind a
    /// barrier otherwise.
    fn sends_together(&self) -> bool {
        false
    }

    /// Sends `requests` so that they arrive together (`together.rs`: each
    /// on its own connection, their last bytes released at once), each
    /// answered with its window; in the order given.
    async fn http_together(&self, requests: Vec<HttpRequest>) -> Vec<Result<Timed, TargetError>> {
        requests
            .iter()
            .map(|_| {
                Err(TargetError::Unsupported(format!(
                    "{} does not send requests together",
                    self.describe()
                )))
            })
            .collect()
    }

    /// The requests it sent so far, per route as sent (`METHOD /path`, a
    /// path's ids as `{id}`): an app played through an API map counts what
    /// `--dry-run` planned. `None` elsewhere.
    fn sent_requests(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        None
    }

    /// Must its scenarios run one at a time? (An app played through an API
    /// map whose effect oracle attributes effects by window.)
    fn sequential(&self) -> bool {
        false
    }

    /// Why this target cannot play `scenario`, if it cannot (an API map
    /// without the route the scenario needs): it is then not applicable.
    fn plays(&self, scenario: &reqkey_scenario::Scenario) -> Result<(), String> {
        let _ = scenario;
        Ok(())
    }

    /// The API map it is played through (`--api`), if any.
    fn api_map(&self) -> Option<&api_map::ApiMap> {
        None
    }

    /// After the run: clean up what it created, where the target can
    /// (an API map's delete route); a line saying what was done.
    async fn finish(&self) -> Option<String> {
        None
    }

    /// How many processes of this target the harness started (`--start`):
    /// the replicas a `fault` step can aim at. 0: none, faults unsupported.
    fn started_processes(&self) -> usize {
        0
    }

    /// Does a `fault` step to one of the processes the harness started.
    async fn fault(&self, step: &FaultStep) -> Result<(), TargetError> {
        Err(TargetError::Unsupported(format!(
            "{}: the harness did not start {}, so it cannot {} it",
            step.label(),
            self.describe(),
            step.action
        )))
    }
    /// The database links the harness owns for this target (`--start`
    /// with `--db`): what `link` scenarios need. None by default.
    fn owned_links(&self) -> OwnedLinks {
        OwnedLinks::default()
    }

    /// Arms a fault on the database links the harness owns, or heals them
    /// (`link: {action: heal}`: a fault that never struck is an error:
    /// the trial judged nothing about it).
    async fn link(&self, step: &LinkStep) -> Result<(), TargetError> {
        Err(TargetError::Unsupported(format!(
            "{}: the harness owns no database link of {} (`--start` with `--db URL`)",
            step.label(),
            self.describe()
        )))
    }

    /// What the link proxies did since this was last asked (a trial's
    /// note in the reports); empty without links.
    fn link_log(&self) -> Vec<String> {
        Vec::new()
    }

    /// The links, for the reports: one line of setup, every fault that
    /// struck in the run, the connections no fault could strike
    /// (opaque), the nodes proxied. `None` without links.
    fn link_summary(&self) -> Option<LinkSummary> {
        None
    }

    /// After a trial that struck processes: every process the harness
    /// started runs again (a paused one resumed, a dead one started on its
    /// port and awaited), so that a scenario which failed before its own
    /// `cont` or `restart` leaves the next scenario a whole deployment.
    async fn heal(&self) -> Result<(), TargetError> {
        Ok(())
    }
}

/// What the harness's database links saw in a run (`Target::link_summary`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkSummary {
    /// Which databases' links the harness owns.
    pub setup: String,
    /// Every fault that struck, in order (`reset after-commit`, ...).
    pub struck: Vec<String>,
    /// Connections relayed unread (no fault could strike them).
    pub opaque: usize,
    /// Database nodes proxied (a cluster's announced nodes included).
    pub nodes: usize,
}

/// A store that cannot be opened: a bad specification, or a backend that
/// does not answer (exit 2 either way).
pub fn open_error(e: OpenError) -> TargetError {
    match e {
        OpenError::UnknownSpec(_) | OpenError::NotBuilt(_) => TargetError::BadSpec(e.to_string()),
        OpenError::Backend { .. } | OpenError::Migration { .. } => {
            TargetError::Unreachable(e.to_string())
        }
    }
}

/// The default bound on one answer's body (`--max-response-bytes`).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 16 * 1024 * 1024;

/// Options every target shares.
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// The bound on every single call.
    pub call_timeout_ms: u64,
    /// The bound on every answer's body, in bytes.
    pub max_response_bytes: u64,
    /// TLS trust, credentials and pace of every request (`access.rs`).
    pub link: access::Access,
    /// `--api`: the map an idem app at its own routes is played through.
    pub api: Option<std::sync::Arc<api_map::ApiMap>>,
}

impl Default for TargetOptions {
    fn default() -> Self {
        Self {
            call_timeout_ms: 10_000,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            link: access::Access::default(),
            api: None,
        }
    }
}

impl TargetOptions {
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }
}
