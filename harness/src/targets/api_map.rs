//! `--api FILE`: how an app at its own routes, with its own
//! authentication, plays the `reqkey-idem/1` contract (SPEC 10), so that
//! the idem suite runs against it unchanged. Parsed once, here, into an
//! [`ApiMap`] (every mistake `FILE:line:col`); `mapped.rs` plays it at the
//! target seam and `ledger.rs` keeps its effect oracle.
//!
//! What a map says (docs/idempotency-key.md, "Certifying your own API"):
//! the declared profile and identity (what `/.reqkey/health` would say);
//! which route and method of the app plays each role of the contract (a
//! create with a side effect, one that fails after its effect, a slow one,
//! another method, another path), each with a body template that carries
//! the scenario's body (`$body`, so that two payloads stay two payloads)
//! and the status it answers; the headers each caller authenticates with
//! (so that scope by caller is judged by the app's own identities); where
//! the created resource's id is in an answer; the effect oracle (the
//! contract's counter, else read routes that count the caller's
//! resources, else the ids the answers carry); and a delete route for
//! the clean-up.
//!
//! A scenario the map cannot play (a route it has no role for, two callers
//! it gives one credential, a replayed header it names none for) is not
//! applicable with the reason ([`ApiMap::plays`]), never run half.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use reqkey_scenario::agent_step::{HeaderTemplate, Wire};
use reqkey_scenario::step::{Action, Step};
use reqkey_scenario::Scenario;

/// The largest map file read.
const MAX_MAP_BYTES: u64 = 256 * 1024;
/// The contract's caller header (SPEC 10), which a map turns into the
/// caller's own credentials.
pub const CALLER_HEADER: &str = "x-reqkey-caller";
/// The contract's route of the effect counter.
pub const EFFECTS_PATH: &str = "/.reqkey/effects";

/// A role of the contract: the route of `reqkey-idem/1` it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// `POST /orders`: a side effect, then success.
    Create,
    /// `POST /orders/fail`: a side effect, then an error answer.
    Fail,
    /// `POST /orders/slow`: as create, slowly.
    Slow,
    /// `PUT /orders`: as create, on another method.
    OtherMethod,
    /// `POST /payments`: as create, on another path.
    OtherPath,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Create,
        Role::Fail,
        Role::Slow,
        Role::OtherMethod,
        Role::OtherPath,
    ];

    /// The contract's method and path.
    pub fn contract(self) -> (&'static str, &'static str) {
        match self {
            Role::Create => ("POST", "/orders"),
            Role::Fail => ("POST", "/orders/fail"),
            Role::Slow => ("POST", "/orders/slow"),
            Role::OtherMethod => ("PUT", "/orders"),
            Role::OtherPath => ("POST", "/payments"),
        }
    }

    /// The map's name of the role.
    pub fn name(self) -> &'static str {
        match self {
            Role::Create => "create",
            Role::Fail => "fail",
            Role::Slow => "slow",
            Role::OtherMethod => "other_method",
            Role::OtherPath => "other_path",
        }
    }

    /// The role a contract request plays (`None`: no role; the control
    /// routes are not roles).
    pub fn of(method: &str, path: &str) -> Option<Role> {
        let path = path.split('?').next().unwrap_or(path);
        Role::ALL
            .into_iter()
            .find(|r| r.contract() == (method, path))
    }

    /// The status the contract answers this role's success with.
    pub fn contract_status(self) -> u16 {
        match self {
            Role::Fail => 500,
            _ => 201,
        }
    }
}

/// One route of the app.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub method: String,
    /// Path and query, starting with `/`; a delete route's `{id}` is the id.
    pub path: String,
    /// The body template: JSON text with `"$body"` (and `"$sleepMs"`)
    /// where the scenario's body (and the slow role's duration) go;
    /// `None`: the scenario's body as it is.
    pub body: Option<String>,
    /// The status the app answers this role with (a create's success, a
    /// failing route's error).
    pub status: u16,
    /// Where the created resource's id is in its answer (a JSON pointer).
    pub id: String,
}

/// A read route of the app: how many resources the caller has.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub method: String,
    pub path: String,
    /// A JSON pointer to an array (its length) or a number.
    pub count: String,
}

/// The effect oracle the map gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Oracle {
    /// The contract's own counter, at this path of the app.
    Counter(String),
    /// Read routes, summed, as each caller: effects are the resources
    /// that appear, attributed by the ids the answers carried.
    Reads(Vec<Read>),
    /// Only the ids the answers carry: an identity whose every answer
    /// carried an id has as many effects as distinct ids; any other
    /// cannot be counted (not judged).
    AnswerIds,
}

impl fmt::Display for Oracle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Oracle::Counter(path) => write!(f, "the app's effect counter (GET {path})"),
            Oracle::Reads(reads) => {
                let routes: Vec<String> = reads
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                write!(
                    f,
                    "the app's read routes ({}), as each caller, with the ids the answers carry",
                    routes.join(", ")
                )
            }
            Oracle::AnswerIds => f.write_str(
                "the ids the answers carry (an effect whose answer carried no id is not judged)",
            ),
        }
    }
}

/// A parsed API map.
#[derive(Clone, PartialEq)]
pub struct ApiMap {
    /// The file, as given (for messages and reports).
    pub file: String,
    /// What `/.reqkey/health` would answer: protocol, implementation, profile.
    pub health: Value,
    /// The header the app reads keys from (`Idempotency-Key`).
    pub key_header: String,
    /// Each caller's headers (values resolved, registered as secrets).
    pub callers: BTreeMap<String, Vec<(String, Vec<u8>)>>,
    /// The caller a scenario's caller not named in `callers` uses.
    pub default_caller: String,
    pub routes: BTreeMap<Role, Route>,
    /// A response header the app's handler sets on an execution (kept in
    /// a replay); `None`: replayed headers cannot be judged.
    pub answer_header: Option<String>,
    pub oracle: Oracle,
    /// The app's liveness route, read when the target opens.
    pub health_route: Option<Route>,
    /// The delete route of the clean-up (`{id}` in its path; `{path}`,
    /// the route the resource was created on).
    pub cleanup: Option<Route>,
}

impl fmt::Debug for ApiMap {
    /// Names the callers and their headers, never the values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let callers: BTreeMap<&str, Vec<&str>> = self
            .callers
            .iter()
            .map(|(c, h)| (c.as_str(), h.iter().map(|(n, _)| n.as_str()).collect()))
            .collect();
        f.debug_struct("ApiMap")
            .field("file", &self.file)
            .field("callers", &callers)
            .field("routes", &self.routes)
            .field("oracle", &self.oracle)
            .finish()
    }
}

// The file's form, read by serde (unknown keys refused).

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    implementation: Value,
    profile: Value,
    #[serde(default)]
    key_header: Option<String>,
    callers: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    default_caller: Option<String>,
    routes: RoutesFile,
    id: String,
    #[serde(default)]
    answer_header: Option<String>,
    #[serde(default)]
    effects: EffectsFile,
    #[serde(default)]
    health: Option<RouteFile>,
    #[serde(default)]
    cleanup: Option<RouteFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RoutesFile {
    create: RouteFile,
    #[serde(default)]
    fail: Option<RouteFile>,
    #[serde(default)]
    slow: Option<RouteFile>,
    #[serde(default)]
    other_method: Option<RouteFile>,
    #[serde(default)]
    other_path: Option<RouteFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteFile {
    method: String,
    path: String,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct EffectsFile {
    #[serde(default)]
    counter: Option<String>,
    #[serde(default)]
    read: Vec<ReadFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadFile {
    #[serde(default)]
    method: Option<String>,
    path: String,
    count: String,
}

/// The line and column (1-based) where `key:` first stands in `text`, for
/// a mistake found after parsing.
fn locate(text: &str, key: &str) -> (usize, usize) {
    let wanted = format!("{key}:");
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with(&wanted) {
            return (i + 1, line.len() - trimmed.len() + 1);
        }
    }
    (1, 1)
}

impl ApiMap {
    /// Reads and parses `path` (bounded); every mistake is `FILE:line:col:
    /// what`. Caller header values written `env:VAR` are read from the
    /// environment, and every caller header value is registered as a secret.
    pub fn load(path: &Path) -> Result<ApiMap, String> {
        use std::io::Read as _;
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        let mut text = String::new();
        file.take(MAX_MAP_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| format!("{shown}: {e}"))?;
        if text.len() as u64 > MAX_MAP_BYTES {
            return Err(format!("{shown}: larger than {MAX_MAP_BYTES} bytes"));
        }
        ApiMap::parse(&shown, &text)
    }

    /// Parses a map's text; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<ApiMap, String> {
        let raw: MapFile = serde_yaml::from_str(text).map_err(|e| match e.location() {
            Some(l) => format!("{file}:{}:{}: {e}", l.line(), l.column()),
            None => format!("{file}: {e}"),
        })?;
        let at = |key: &str, what: String| {
            let (line, col) = locate(text, key);
            format!("{file}:{line}:{col}: {key}: {what}")
        };
        let health = serde_json::json!({
            "protocol": "reqkey-idem/1",
            "implementation": raw.implementation,
            "profile": raw.profile,
        });
        reqkey_model::idem_profile::parse_health(&health)
            .map_err(|e| at("profile", format!("the declared profile: {e}")))?;
        if raw.callers.is_empty() {
            return Err(at("callers", "at least one caller".into()));
        }
        let mut callers = BTreeMap::new();
        for (name, headers) in &raw.callers {
            let mut resolved = Vec::new();
            for (header, value) in headers {
                reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| at(name, format!("`{header}` is not a header name")))?;
                let value = crate::targets::access::resolve_value(header, value)
                    .map_err(|e| at(name, e))?;
                reqwest::header::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
                    at(
                        name,
                        format!("the value of {header} cannot be sent in HTTP/1.1"),
                    )
                })?;
                crate::targets::access::register_credential(&value);
                resolved.push((header.clone(), value.into_bytes()));
            }
            callers.insert(name.clone(), resolved);
        }
        let default_caller = match raw.default_caller {
            Some(c) if callers.contains_key(&c) => c,
            Some(c) => {
                return Err(at(
                    "default_caller",
                    format!("`{c}` is not one of the callers"),
                ))
            }
            None => callers.keys().next().cloned().unwrap_or_default(),
        };
        let pointer = |key: &str, p: &str| -> Result<String, String> {
            if p.is_empty() || p.starts_with('/') {
                Ok(p.to_owned())
            } else {
                Err(at(
                    key,
                    format!("`{p}` is not a JSON pointer (it starts with `/`)"),
                ))
            }
        };
        let id = pointer("id", &raw.id)?;
        let route = |role: &str, r: RouteFile, with_body: bool| -> Result<Route, String> {
            let method = r.method.to_ascii_uppercase();
            reqwest::Method::from_bytes(method.as_bytes())
                .map_err(|_| at(role, format!("`{}` is not a method", r.method)))?;
            if !(r.path.starts_with('/') || (role == "cleanup" && r.path.starts_with("{path}"))) {
                return Err(at(
                    role,
                    format!("the path `{}` does not start with /", r.path),
                ));
            }
            let body = match r.body {
                None => None,
                Some(_) if !with_body => {
                    return Err(at(role, "this route takes no body".into()));
                }
                Some(template) => {
                    let text = serde_json::to_string(&template)
                        .map_err(|e| at(role, format!("the body template: {e}")))?;
                    if text.matches("\"$body\"").count() != 1 {
                        return Err(at(
                            role,
                            "the body template carries the scenario's body exactly once \
                             (`$body`), so that two payloads stay two payloads"
                                .into(),
                        ));
                    }
                    Some(text)
                }
            };
            Ok(Route {
                method,
                path: r.path,
                body,
                status: r.status.unwrap_or(200),
                id: match r.id {
                    Some(p) => pointer(role, &p)?,
                    None => id.clone(),
                },
            })
        };
        let mut routes = BTreeMap::new();
        routes.insert(Role::Create, route("create", raw.routes.create, true)?);
        for (role, r) in [
            (Role::Fail, raw.routes.fail),
            (Role::Slow, raw.routes.slow),
            (Role::OtherMethod, raw.routes.other_method),
            (Role::OtherPath, raw.routes.other_path),
        ] {
            if let Some(r) = r {
                routes.insert(role, route(role.name(), r, true)?);
            }
        }
        let oracle = match (raw.effects.counter, raw.effects.read.is_empty()) {
            (Some(_), false) => {
                return Err(at(
                    "effects",
                    "give the contract's `counter` or `read` routes, not both".into(),
                ))
            }
            (Some(path), true) if path.starts_with('/') => Oracle::Counter(path),
            (Some(path), true) => {
                return Err(at(
                    "counter",
                    format!("the path `{path}` does not start with /"),
                ))
            }
            (None, false) => Oracle::Reads(
                raw.effects
                    .read
                    .into_iter()
                    .map(|r| {
                        Ok(Read {
                            method: r
                                .method
                                .unwrap_or_else(|| "GET".into())
                                .to_ascii_uppercase(),
                            count: pointer("count", &r.count)?,
                            path: r.path,
                        })
                    })
                    .collect::<Result<_, String>>()?,
            ),
            (None, true) => Oracle::AnswerIds,
        };
        let health_route = raw.health.map(|r| route("health", r, false)).transpose()?;
        let cleanup = raw
            .cleanup
            .map(|r| {
                if !r.path.contains("{id}") {
                    return Err(at("cleanup", "the delete route's path holds `{id}`".into()));
                }
                route("cleanup", r, false)
            })
            .transpose()?;
        let key_header = raw
            .key_header
            .unwrap_or_else(|| "Idempotency-Key".to_owned());
        reqwest::header::HeaderName::from_bytes(key_header.as_bytes())
            .map_err(|_| at("key_header", format!("`{key_header}` is not a header name")))?;
        if let Some(h) = &raw.answer_header {
            reqwest::header::HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| at("answer_header", format!("`{h}` is not a header name")))?;
        }
        Ok(ApiMap {
            file: file.to_owned(),
            health,
            key_header,
            callers,
            default_caller,
            routes,
            answer_header: raw.answer_header,
            oracle,
            health_route,
            cleanup,
        })
    }

    /// The declared profile and identity, as `/.reqkey/health` answers them.
    pub fn health(&self) -> &Value {
        &self.health
    }

    /// The credential a scenario's caller uses: its own name's, else the
    /// default caller's.
    pub fn credential_of(&self, caller: Option<&str>) -> &str {
        caller
            .and_then(|c| self.callers.get_key_value(c))
            .map_or(self.default_caller.as_str(), |(name, _)| name.as_str())
    }

    /// Why the map cannot play `scenario`, if it cannot: a contract route
    /// it has no role for, a `wire:` spelling, a replayed header it names
    /// none for, or callers it gives one credential.
    pub fn plays(&self, scenario: &Scenario) -> Result<(), String> {
        let mut callers = std::collections::BTreeSet::new();
        for step in flat_steps(&scenario.steps) {
            let Action::Http(http) = &step.action else {
                continue;
            };
            if http.wire != Wire::Library {
                return Err("the API map does not carry `wire:` spellings".into());
            }
            let control = http.method == "GET"
                && (http.path == EFFECTS_PATH
                    || http.path == crate::targets::profile::IDEM_HEALTH_PATH);
            if !control {
                let role = Role::of(&http.method, &http.path).ok_or_else(|| {
                    format!("the API map plays no route {} {}", http.method, http.path)
                })?;
                if !self.routes.contains_key(&role) {
                    return Err(format!(
                        "the API map has no `{}` route ({} {})",
                        role.name(),
                        role.contract().0,
                        role.contract().1
                    ));
                }
            }
            for (name, value) in &http.headers {
                if name.eq_ignore_ascii_case(CALLER_HEADER) {
                    if let HeaderTemplate::Text(t) = value {
                        callers.insert(t.clone());
                    }
                }
            }
            let names_replayed_header = step
                .expect
                .as_ref()
                .and_then(|e| e.get("headers"))
                .and_then(Value::as_object)
                .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case("x-reqkey-order")));
            if names_replayed_header && self.answer_header.is_none() {
                return Err(
                    "the API map names no `answer_header` (a header the app's handler sets, \
                     which a replay must keep)"
                        .into(),
                );
            }
        }
        let credentials: std::collections::BTreeSet<&str> = callers
            .iter()
            .map(|c| {
                let literal = (!c.contains("${")).then_some(c.as_str());
                self.credential_of(literal)
            })
            .collect();
        if credentials.len() < callers.len() {
            let shown: Vec<&str> = callers.iter().map(String::as_str).collect();
            return Err(format!(
                "the API map gives the callers {} fewer credentials than callers",
                shown.join(", ")
            ));
        }
        Ok(())
    }

    /// The requests a certification of `scenarios` through this map sends,
    /// stated before it starts (and all `--dry-run` prints): each
    /// scenario's `repeat` trials at least, `extra_trials_factor + 1` times
    /// as many at most (a race that did not overlap earns more).
    pub fn plan(
        &self,
        scenarios: &[Scenario],
        fuzz_cases: u32,
        extra_trials_factor: u32,
    ) -> String {
        let mut per_route: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        let mut effect_queries = (0u64, 0u64);
        for s in scenarios {
            let trials = u64::from(s.repeat.max(1));
            let races = s
                .steps
                .iter()
                .any(|st| matches!(st.action, Action::Parallel(_)));
            let most = if races {
                trials * u64::from(extra_trials_factor + 1)
            } else {
                trials
            };
            for step in flat_steps(&s.steps) {
                let Action::Http(http) = &step.action else {
                    continue;
                };
                let copies = u64::from(step.copies.unwrap_or(1));
                if http.path == EFFECTS_PATH {
                    effect_queries.0 += trials;
                    effect_queries.1 += most;
                    continue;
                }
                let Some(route) =
                    Role::of(&http.method, &http.path).and_then(|r| self.routes.get(&r))
                else {
                    continue;
                };
                let e = per_route
                    .entry(format!("{} {}", route.method, route.path))
                    .or_default();
                e.0 += trials * copies;
                e.1 += most * copies;
            }
        }
        let reads_per_query = match &self.oracle {
            Oracle::Counter(_) => 1,
            Oracle::Reads(reads) => (reads.len() * self.callers.len()) as u64,
            Oracle::AnswerIds => 0,
        };
        let mut lines = vec![format!(
            "reqkey: the API map {} plays {} scenarios; effect oracle: {}",
            self.file,
            scenarios.len(),
            self.oracle
        )];
        let (mut least, mut most) = (0u64, 0u64);
        for (route, (l, m)) in &per_route {
            lines.push(format!("reqkey:   {route}: {l} to {m} requests"));
            least += l;
            most += m;
        }
        match &self.oracle {
            Oracle::Counter(path) => lines.push(format!(
                "reqkey:   GET {path}: {} to {} requests",
                effect_queries.0, effect_queries.1
            )),
            Oracle::Reads(reads) => {
                for r in reads {
                    lines.push(format!(
                        "reqkey:   {} {}: {} to {} requests (once per caller at each effect query, and once at the start)",
                        r.method,
                        r.path,
                        (effect_queries.0 + 1) * self.callers.len() as u64,
                        (effect_queries.1 + 1) * self.callers.len() as u64
                    ));
                }
            }
            Oracle::AnswerIds => {}
        }
        least += (effect_queries.0 + 1) * reads_per_query;
        most += (effect_queries.1 + 1) * reads_per_query;
        if let Some(h) = &self.health_route {
            lines.push(format!("reqkey:   {} {}: 1 request", h.method, h.path));
            least += 1;
            most += 1;
        }
        if let Some(c) = &self.cleanup {
            let created: u64 = per_route.values().map(|(_, m)| m).sum();
            lines.push(format!(
                "reqkey:   {} {}: at most {created} requests (the clean-up of what the run created)",
                c.method, c.path
            ));
            most += created;
        }
        if fuzz_cases > 0 {
            lines.push(format!(
                "reqkey:   and the requests of the fuzz pass's {fuzz_cases} programs, if the level has one"
            ));
        }
        lines.push(format!(
            "reqkey: in all {least} to {most} requests (more trials when a race does not overlap)"
        ));
        lines.join("\n")
    }
}

/// Every step of `steps`, a parallel group's items included.
fn flat_steps(steps: &[Step]) -> Vec<&Step> {
    let mut out = Vec::new();
    for step in steps {
        out.push(step);
        if let Action::Parallel(items) = &step.action {
            out.extend(flat_steps(items));
        }
    }
    out
}

/// The app's body for a contract request: the template with the
/// scenario's body (its bytes as sent; `null` without one) and the slow
/// role's duration spliced in, or the scenario's body as it is.
pub fn render_body(route: &Route, body: Option<&[u8]>) -> Option<Vec<u8>> {
    let Some(template) = &route.body else {
        return body.map(<[u8]>::to_vec);
    };
    let sleep_ms = body
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v.get("sleepMs").and_then(Value::as_u64))
        .unwrap_or(1000)
        .min(10_000);
    let with_sleep = template.replace("\"$sleepMs\"", &sleep_ms.to_string());
    let (before, after) = with_sleep.split_once("\"$body\"")?;
    let mut out = before.as_bytes().to_vec();
    match body {
        Some(b) if !b.is_empty() => out.extend_from_slice(b),
        _ => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(after.as_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    pub const EXAMPLE: &str = r#"
implementation: {name: orders, version: "1", storage: memory}
profile:
  keyRequired: true
  keySyntax: any
  invalidKeyStatus: 400
  fingerprint: json
  mismatchStatus: 422
  concurrent: conflict
  concurrentStatus: 409
  errors: stored
  scope: [caller]
  expiryMs: null
  lockMs: null
  replayHeader: null
  durable: false
callers:
  alice: {Authorization: "Bearer alice-token-1234"}
  bob: {Authorization: "Bearer bob-token-5678"}
default_caller: alice
routes:
  create: {method: post, path: /v1/orders, body: {sku: w, metadata: $body}, status: 201}
  slow: {method: POST, path: /v1/orders, body: {ms: $sleepMs, metadata: $body}, status: 201}
id: /id
effects:
  read: [{path: /v1/orders, count: /data}]
cleanup: {method: DELETE, path: "/v1/orders/{id}"}
"#;

    #[test]
    fn a_map_parses_into_roles_callers_and_its_oracle() {
        let map = ApiMap::parse("api.yaml", EXAMPLE).unwrap();
        assert_eq!(map.routes[&Role::Create].method, "POST");
        assert_eq!(map.routes[&Role::Create].id, "/id");
        assert!(!map.routes.contains_key(&Role::Fail));
        assert_eq!(map.credential_of(Some("bob")), "bob");
        assert_eq!(map.credential_of(Some("nokey-123")), "alice");
        assert!(matches!(map.oracle, Oracle::Reads(_)));
        assert!(!format!("{map:?}").contains("alice-token"));
        assert_eq!(crate::secrets::scrub("Bearer bob-token-5678"), "***");
    }

    #[test]
    fn mistakes_are_located_in_the_file() {
        let e = ApiMap::parse(
            "api.yaml",
            &EXAMPLE.replace("status: 201}", "statuss: 201}"),
        )
        .unwrap_err();
        assert!(e.starts_with("api.yaml:2"), "{e}");
        assert!(e.contains("statuss"), "{e}");
        let e = ApiMap::parse(
            "api.yaml",
            &EXAMPLE.replace("keySyntax: any", "keySyntax: 3"),
        )
        .unwrap_err();
        assert!(e.starts_with("api.yaml:3:1: profile:"), "{e}");
        let e = ApiMap::parse(
            "api.yaml",
            &EXAMPLE.replace("metadata: $body}, status", "x: 1}, status"),
        )
        .unwrap_err();
        assert!(e.contains("exactly once"), "{e}");
        let e = ApiMap::parse(
            "api.yaml",
            &EXAMPLE.replace("default_caller: alice", "default_caller: eve"),
        )
        .unwrap_err();
        assert!(e.starts_with("api.yaml:20:1: default_caller"), "{e}");
    }

    #[test]
    fn bodies_carry_the_scenarios_bytes_as_sent() {
        let map = ApiMap::parse("api.yaml", EXAMPLE).unwrap();
        let create = &map.routes[&Role::Create];
        let sent = render_body(create, Some(br#"{ "b": 2, "a": 1 }"#)).unwrap();
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            r#"{"metadata":{ "b": 2, "a": 1 },"sku":"w"}"#
        );
        let slow = &map.routes[&Role::Slow];
        let sent = render_body(slow, Some(br#"{"sleepMs":600}"#)).unwrap();
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            r#"{"metadata":{"sleepMs":600},"ms":600}"#
        );
        assert_eq!(
            render_body(create, None).unwrap(),
            br#"{"metadata":null,"sku":"w"}"#
        );
    }
}
