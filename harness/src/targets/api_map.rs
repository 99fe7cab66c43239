//! `--api FILE`: how an app at its own routes, with its own
//! authentication, plays the `reqkey-idem/1` contract (SPEC 10), so that
//! the idem suite and the fuzz pass run against it unchanged. Parsed once,
//! here, into an [`ApiMap`] (every mistake `FILE:line:col`, the file read
//! bounded: [`MAX_MAP_BYTES`]); `mapped.rs` plays it at the target seam and
//! `ledger.rs` keeps its effect oracle.
//!
//! What a map says (docs/idempotency-key.md, "Certifying your own API"):
//! the declared profile and identity (what `/.reqkey/health` would say);
//! which route and method of the app plays each role of the contract (a
//! create with a side effect, one that fails after its effect, a slow one,
//! another method, another path), each with a body template that carries
//! the scenario's body (`$body`, so that two payloads stay two payloads)
//! and the status it answers; the callers, each with the headers it
//! authenticates with, who fill the scenarios' caller roles (so that scope
//! by caller is judged by the app's own identities); where the created
//! resource's id is in an answer; the effect oracle (the contract's
//! counter, else read routes that count the caller's resources, else the
//! ids the answers carry); and a delete route for the clean-up.
//!
//! **Roles, not names.** A scenario (or a fuzz program) names its callers
//! in the contract's words (`alice`, `bob-${c}`: a suffix after `-` is a
//! fresh tag); each plays a role by its place among the scenario's
//! callers: the first caller, another caller ([`CallerRoles`]). The map's
//! callers fill the roles in order, whatever their names: `default_caller`
//! (else the first listed) plays the first caller, the next one listed
//! another caller. Every profile's suite needs two callers.
//!
//! **Nothing leaves the origin.** Every path a map gives is origin-relative
//! ([`origin_path`]: one leading `/`, no `@`, `\`, scheme, authority,
//! `.`/`..` segment or an encoded form of them), refused at load with its
//! line otherwise, and kept as it is sent; an id an answer carries is
//! sent back as one path segment (`mapped.rs`).
//!
//! A scenario the map cannot play (a route it has no role for, a caller
//! role it has no caller for, a replayed header it names none for) is not
//! applicable with the reason ([`ApiMap::plays`]), never run half.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use reqkey_scenario::agent_step::{BodyTemplate, HeaderTemplate, Wire};
use reqkey_scenario::step::{Action, Step};
use reqkey_scenario::Scenario;

/// The largest map file read (bytes; a larger one is refused unread).
pub const MAX_MAP_BYTES: u64 = 256 * 1024;
/// The most callers a map lists.
const MAX_CALLERS: usize = 16;
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

impl Route {
    /// Does the app's route take a duration (`$sleepMs` in its body
    /// template), as the contract's slow and failing routes do?
    pub fn takes_duration(&self) -> bool {
        self.body
            .as_deref()
            .is_some_and(|b| b.contains("\"$sleepMs\""))
    }
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
    /// The callers in role order: the first caller (`default_caller`, else
    /// the first listed), then another caller, ... ([`CallerRoles`]).
    pub roles: Vec<String>,
    /// The caller playing the first caller (`roles[0]`).
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
            .field("roles", &self.roles)
            .field("routes", &self.routes)
            .field("oracle", &self.oracle)
            .finish()
    }
}

/// The roles a scenario's callers play, in the order a map's callers fill
/// them: the first caller, another caller, then a third, a fourth...
pub fn role_name(role: usize) -> String {
    match role {
        0 => "the first caller".to_owned(),
        1 => "another caller".to_owned(),
        n => format!("caller number {}", n + 1),
    }
}

/// A caller's name as roles know it: the contract caller up to its first
/// `-` (what follows is a fresh tag: `alice-${c}` is `alice`).
fn stem(caller: &str) -> &str {
    caller.split(['-', '$']).next().unwrap_or(caller)
}

/// The fuzz programs' callers (`run/fuzz/idem_program.rs` `CALLERS`): the
/// first caller and another caller.
pub const PROGRAM_CALLERS: [&str; 2] = ["alice", "bob"];

/// Which role each contract caller plays, by its name ([`stem`]): a
/// caller's role is its place among the callers of the scenario it
/// appears in (first seen, first), learned as the map's scenarios are
/// chosen ([`ApiMap::plays`]) and kept across the suite, so that one name
/// is one identity of the app in every scenario; the fuzz programs'
/// callers ([`PROGRAM_CALLERS`]) are known from the start. A name never
/// seen is the first caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerRoles(BTreeMap<String, usize>);

impl Default for CallerRoles {
    fn default() -> Self {
        CallerRoles(
            PROGRAM_CALLERS
                .iter()
                .enumerate()
                .map(|(i, c)| ((*c).to_owned(), i))
                .collect(),
        )
    }
}

impl CallerRoles {
    /// The role `caller` plays.
    pub fn role_of(&self, caller: &str) -> usize {
        self.0.get(stem(caller)).copied().unwrap_or(0)
    }

    /// The roles of a scenario's callers, given in the order they first
    /// appear, if one name keeps one role: learned when they fit.
    fn learn(&mut self, callers: &[String]) -> Result<Vec<usize>, String> {
        let mut stems: Vec<(&str, &str)> = Vec::new();
        for caller in callers {
            let s = stem(caller);
            match stems.iter().find(|(known, _)| *known == s) {
                Some((_, first)) => {
                    return Err(format!(
                        "its callers `{first}` and `{caller}` are one name, which one \
                         credential cannot tell apart"
                    ))
                }
                None => stems.push((s, caller)),
            }
        }
        let stems: Vec<&str> = stems.into_iter().map(|(s, _)| s).collect();
        for (place, s) in stems.iter().enumerate() {
            if let Some(known) = self.0.get(*s).filter(|k| **k != place) {
                return Err(format!(
                    "its caller `{s}` is {} here and {} elsewhere in the suite: one name is one \
                     identity of the app",
                    role_name(place),
                    role_name(*known)
                ));
            }
        }
        for (place, s) in stems.iter().enumerate() {
            self.0.insert((*s).to_owned(), place);
        }
        Ok((0..stems.len()).collect())
    }
}

/// `written` as it is sent, if it is a path at the target's origin: one
/// leading `/`; no `@`, backslash, scheme (`://`), fragment, blank or
/// control character; no `.` or `..` segment; and none of them once
/// percent-decoded (up to three times: `%2e%2e`, `%252e`). `placeholders`:
/// the clean-up's `{path}` and `{id}` may stand in it (checked as a path
/// and an id would fill them). Anything else says why it is refused.
pub fn origin_path(written: &str, placeholders: bool) -> Result<String, String> {
    const PATH_MARK: &str = "/reqkey-path-placeholder";
    const ID_MARK: &str = "reqkey-id-placeholder";
    let probe = if placeholders {
        written
            .replace("{path}", PATH_MARK)
            .replace("{id}", ID_MARK)
    } else {
        written.to_owned()
    };
    let mut text = probe.clone();
    // Bounded: three decodings at most.
    for level in 0..4 {
        let encoded = if level == 0 { "" } else { " (percent-encoded)" };
        if !text.starts_with('/') {
            return Err(format!(
                "it does not start with `/`{encoded}: a map's paths are relative to the target's origin"
            ));
        }
        if text.starts_with("//") {
            return Err(format!(
                "it starts with `//`{encoded}, which names another host"
            ));
        }
        for (needle, what) in [
            ("@", "an `@`, which names another authority"),
            ("\\", "a backslash, which some clients read as `/`"),
            ("://", "a scheme"),
            ("#", "a fragment"),
        ] {
            if text.contains(needle) {
                return Err(format!("it holds {what}{encoded}"));
            }
        }
        if text.chars().any(|c| c.is_control() || c == ' ') {
            return Err(format!("it holds a blank or a control character{encoded}"));
        }
        let path = text.split('?').next().unwrap_or(&text);
        if path.split('/').any(|seg| seg == "." || seg == "..") {
            return Err(format!(
                "it holds a `.` or `..` segment{encoded}, which a client resolves to another path"
            ));
        }
        let decoded = percent_decode(&text);
        if decoded == text {
            break;
        }
        if level == 3 {
            return Err("it is percent-encoded more than three times over".into());
        }
        text = decoded;
    }
    let url = reqwest::Url::parse(&format!("http://origin.invalid{probe}"))
        .map_err(|e| format!("it is not a path of a URL: {e}"))?;
    if url.host_str() != Some("origin.invalid")
        || url.port().is_some()
        || !url.username().is_empty()
    {
        return Err("it names another authority".into());
    }
    let mut sent = url.path().to_owned();
    if let Some(q) = url.query() {
        sent.push('?');
        sent.push_str(q);
    }
    Ok(if placeholders {
        sent.replace(PATH_MARK, "{path}").replace(ID_MARK, "{id}")
    } else {
        sent
    })
}

/// `text` with every `%HH` decoded (bytes that are not UTF-8 read lossily).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes.get(i + 1).copied(), bytes.get(i + 2).copied()) {
            (Some(h), Some(l)) if bytes[i] == b'%' => match (hex(h), hex(l)) {
                (Some(h), Some(l)) => {
                    out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                    i += 3;
                    continue;
                }
                _ => out.push(bytes[i]),
            },
            _ => out.push(bytes[i]),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// The file's form, read by serde (unknown keys refused).

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    implementation: Value,
    profile: Value,
    #[serde(default)]
    key_header: Option<String>,
    /// In order: the order is the callers' roles.
    callers: serde_yaml::Mapping,
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

/// The line and column (1-based) where `needle` first stands in `text`
/// (a path refused: its own line, whatever key holds it).
fn locate_text(text: &str, needle: &str) -> Option<(usize, usize)> {
    if needle.is_empty() {
        return None;
    }
    text.lines().enumerate().find_map(|(i, line)| {
        line.find(needle)
            .map(|at| (i + 1, line[..at].chars().count() + 1))
    })
}

impl ApiMap {
    /// Reads and parses `path` (bounded: [`MAX_MAP_BYTES`]); every mistake
    /// is `FILE:line:col: what`. Caller header values written `env:VAR`
    /// are read from the environment, and every caller header value is
    /// registered as a secret.
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
        // A path refused names the line it is written on.
        let path_at = |key: &str, written: &str, placeholders: bool| {
            origin_path(written, placeholders).map_err(|why| {
                let (line, col) = locate_text(text, written).unwrap_or_else(|| locate(text, key));
                format!(
                    "{file}:{line}:{col}: {key}: the path `{written}` is refused: {why} \
                     (nothing was sent)"
                )
            })
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
        if raw.callers.len() > MAX_CALLERS {
            return Err(at(
                "callers",
                format!("at most {MAX_CALLERS} callers (the suite needs two)"),
            ));
        }
        let mut callers = BTreeMap::new();
        let mut listed = Vec::new();
        for (name, headers) in &raw.callers {
            let name = name
                .as_str()
                .ok_or_else(|| at("callers", "a caller's name is text".into()))?
                .to_owned();
            let headers: BTreeMap<String, String> = serde_yaml::from_value(headers.clone())
                .map_err(|e| at(&name, format!("its headers (NAME: VALUE): {e}")))?;
            let mut resolved = Vec::new();
            for (header, value) in &headers {
                reqwest::header::HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| at(&name, format!("`{header}` is not a header name")))?;
                let value = crate::targets::access::resolve_value(header, value)
                    .map_err(|e| at(&name, e))?;
                reqwest::header::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
                    at(
                        &name,
                        format!("the value of {header} cannot be sent in HTTP/1.1"),
                    )
                })?;
                crate::targets::access::register_credential(&value);
                resolved.push((header.clone(), value.into_bytes()));
            }
            callers.insert(name.clone(), resolved);
            listed.push(name);
        }
        let default_caller = match raw.default_caller {
            Some(c) if callers.contains_key(&c) => c,
            Some(c) => {
                return Err(at(
                    "default_caller",
                    format!("`{c}` is not one of the callers"),
                ))
            }
            None => listed.first().cloned().unwrap_or_default(),
        };
        let roles: Vec<String> = std::iter::once(default_caller.clone())
            .chain(listed.into_iter().filter(|c| *c != default_caller))
            .collect();
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
            let path = path_at(role, &r.path, role == "cleanup")?;
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
                path,
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
            (Some(path), true) => Oracle::Counter(path_at("counter", &path, false)?),
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
                            path: path_at("read", &r.path, false)?,
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
            roles,
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

    /// The map's caller a contract caller's requests go as: the one filling
    /// its role in `roles`, the first caller without one.
    pub fn credential_of(&self, caller: Option<&str>, roles: &CallerRoles) -> &str {
        let role = caller.map_or(0, |c| roles.role_of(c));
        self.roles
            .get(role)
            .or(self.roles.first())
            .map_or(self.default_caller.as_str(), String::as_str)
    }

    /// Why the map cannot play `scenario`, if it cannot: a contract route
    /// it has no role for, a `wire:` spelling, a replayed header it names
    /// none for, a caller role it has no caller for, or callers whose roles
    /// `roles` cannot keep apart. Its callers' roles are learned into
    /// `roles` when it can.
    pub fn plays(&self, scenario: &Scenario, roles: &mut CallerRoles) -> Result<(), String> {
        let mut callers: Vec<String> = Vec::new();
        let mut used = std::collections::BTreeSet::new();
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
                used.insert(role);
                if refused_by_the_contract(&http.method, &http.path, http.body.as_ref()) {
                    return Err(
                        "the scenario sends a body that is not a JSON object, which the \
                         contract's handler refuses with its own 4xx; the app's routes take \
                         the body into a member of theirs (`$body`), so nothing says they \
                         refuse it"
                            .into(),
                    );
                }
            }
            for (name, value) in &http.headers {
                if name.eq_ignore_ascii_case(CALLER_HEADER) {
                    if let HeaderTemplate::Text(t) = value {
                        if !callers.contains(t) {
                            callers.push(t.clone());
                        }
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
        // Two roles on one route of the app are one key scope there and two
        // in the contract: a scenario that sends both cannot be judged.
        let app = |role: &Role| {
            self.routes.get(role).map(|r| {
                (
                    r.method.as_str(),
                    r.path.split('?').next().unwrap_or(&r.path),
                )
            })
        };
        for a in &used {
            for b in used.range(..*a) {
                if let (Some(x), Some(y)) = (app(a), app(b)) {
                    if x == y {
                        return Err(format!(
                            "the API map plays `{}` and `{}` on one route of the app ({} {}), \
                             which the contract's scope by method and path tells apart",
                            b.name(),
                            a.name(),
                            x.0,
                            x.1
                        ));
                    }
                }
            }
        }
        let mut learned = roles.clone();
        let places = learned.learn(&callers)?;
        if let Some(needed) = places.last().filter(|p| **p >= self.roles.len()) {
            return Err(format!(
                "its caller `{}` is {}, and the API map lists {} caller{} (each role needs a \
                 caller of its own: list another with its credentials)",
                callers
                    .iter()
                    .find(|c| learned.role_of(c) == *needed)
                    .map_or("", String::as_str),
                role_name(*needed),
                self.roles.len(),
                if self.roles.len() == 1 { "" } else { "s" }
            ));
        }
        *roles = learned;
        Ok(())
    }
}

/// Every step of `steps`, a parallel group's items included.
pub(crate) fn flat_steps(steps: &[Step]) -> Vec<&Step> {
    let mut out = Vec::new();
    for step in steps {
        out.push(step);
        if let Action::Parallel(items) = &step.action {
            out.extend(flat_steps(items));
        }
    }
    out
}

/// The app's body for a contract request playing `role`: the template
/// with the scenario's body (its bytes as sent; `null` without one) and
/// its duration spliced in (the body's `sleepMs`, else the contract's
/// default for the role: 1000 ms slow, 0 failing), or the scenario's body
/// as it is.
pub fn render_body(role: Role, route: &Route, body: Option<&[u8]>) -> Option<Vec<u8>> {
    let Some(template) = &route.body else {
        return body.map(<[u8]>::to_vec);
    };
    let default_ms = if role == Role::Slow { 1000 } else { 0 };
    let sleep_ms = body
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| v.get("sleepMs").and_then(Value::as_u64))
        .unwrap_or(default_ms)
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

/// Whether the contract's handler of `method path` refuses `body` with
/// its own 4xx (SPEC 10, as `reqkey_model::idem_model::handler_of` reads
/// it): a text body counts when it is JSON as written (a template that is
/// not may fill in to anything).
fn refused_by_the_contract(method: &str, path: &str, body: Option<&BodyTemplate>) -> bool {
    let bytes = match body {
        Some(BodyTemplate::Json(v)) => v.to_string().into_bytes(),
        Some(BodyTemplate::Text(t)) if serde_json::from_str::<Value>(t).is_ok() => {
            t.as_bytes().to_vec()
        }
        _ => return false,
    };
    reqkey_model::idem_model::handler_of(method, path, &bytes)
        .is_some_and(|h| h.status() == reqkey_model::idem_model::REFUSED_BODY_STATUS)
}

#[cfg(test)]
pub(crate) mod tests {
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
        let roles = CallerRoles::default();
        assert_eq!(map.credential_of(Some("bob"), &roles), "bob");
        assert_eq!(map.credential_of(Some("nokey-123"), &roles), "alice");
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
        let sent = render_body(Role::Create, create, Some(br#"{ "b": 2, "a": 1 }"#)).unwrap();
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            r#"{"metadata":{ "b": 2, "a": 1 },"sku":"w"}"#
        );
        let slow = &map.routes[&Role::Slow];
        let sent = render_body(Role::Slow, slow, Some(br#"{"sleepMs":600}"#)).unwrap();
        assert_eq!(
            String::from_utf8(sent).unwrap(),
            r#"{"metadata":{"sleepMs":600},"ms":600}"#
        );
        assert_eq!(
            render_body(Role::Create, create, None).unwrap(),
            br#"{"metadata":null,"sku":"w"}"#
        );
    }

    /// Issue 57: a path that would take a request, and the credentials it
    /// carries, to another authority or another path is refused at load,
    /// naming its line.
    #[test]
    fn a_path_off_the_origin_is_refused_at_its_line() {
        for (bad, why) in [
            ("@127.0.0.1:9/v1/orders", "does not start with `/`"),
            ("//evil.example/v1/orders", "another host"),
            ("/v1/@evil/orders", "an `@`"),
            ("/v1/orders/../admin", "`..` segment"),
            ("/v1/orders/%2e%2E/admin", "`..` segment (percent-encoded)"),
            (
                "/v1/orders/%252e%252e/admin",
                "`..` segment (percent-encoded)",
            ),
            ("/v1/%40evil", "an `@`"),
            ("/v1\\evil", "a backslash"),
            ("/v1/orders/./x", "`.` or `..` segment"),
            ("http://evil/v1", "does not start with `/`"),
        ] {
            let text = EXAMPLE.replace(
                "effects:\n  read: [{path: /v1/orders, count: /data}]",
                &format!("effects:\n  read: [{{path: '{bad}', count: /data}}]"),
            );
            let e = ApiMap::parse("api.yaml", &text).unwrap_err();
            assert!(e.starts_with("api.yaml:26:"), "{bad}: {e}");
            assert!(e.contains(why), "{bad}: {e}");
            assert!(e.contains("nothing was sent"), "{e}");
        }
        let e = ApiMap::parse(
            "api.yaml",
            &EXAMPLE.replace("path: \"/v1/orders/{id}\"", "path: \"{path}/../{id}\""),
        )
        .unwrap_err();
        assert!(e.contains("cleanup") && e.contains("`..`"), "{e}");
        // A path is kept as it is sent.
        assert_eq!(origin_path("/v1/caf\u{e9}s?a=b c", false).ok(), None);
        assert_eq!(
            origin_path("/v1/caf\u{e9}s?a=b", false).unwrap(),
            "/v1/caf%C3%A9s?a=b"
        );
        assert_eq!(origin_path("{path}/{id}", true).unwrap(), "{path}/{id}");
    }

    /// A body the contract's handler refuses (JSON, not an object) has no
    /// refusal at an app's own routes: such a scenario is not played, an
    /// object body is, whichever way it is written.
    #[test]
    fn a_body_that_is_not_an_object_is_not_played_through_a_map() {
        let map = ApiMap::parse("api.yaml", EXAMPLE).unwrap();
        let scenario = |body: &str| {
            reqkey_scenario::load::parse_scenario(
                Path::new("s.yaml"),
                &format!("id: x.body\nlevel: idem\nsummary: a body\nchecks: [idem.replay.errors]\nsteps:\n  - http: {{method: POST, path: /orders, headers: [[X-Reqkey-Caller, alice]], {body}}}\n    expect: {{status: 201}}\n    judges: [idem.replay.errors]\n"),
            )
            .unwrap()
        };
        for refused in [
            "json: [doomed]",
            "json: 1",
            "json: null",
            "body: '[1, 2]'",
            "body: '\"a\"'",
        ] {
            let e = map
                .plays(&scenario(refused), &mut CallerRoles::default())
                .unwrap_err();
            assert!(e.contains("not a JSON object"), "{refused}: {e}");
        }
        for played in ["json: {a: 1}", "body: '{\"a\": 1}'", "body: 'not json'"] {
            assert_eq!(
                map.plays(&scenario(played), &mut CallerRoles::default()),
                Ok(()),
                "{played}"
            );
        }
    }

    /// Issue 57: the callers fill roles in order, whatever their names.
    #[test]
    fn callers_fill_roles_not_names() {
        let text = EXAMPLE
            .replace("alice:", "ops-user:")
            .replace("bob:", "billing-user:")
            .replace("default_caller: alice", "default_caller: ops-user");
        let map = ApiMap::parse("api.yaml", &text).unwrap();
        assert_eq!(map.roles, ["ops-user", "billing-user"]);
        let mut roles = CallerRoles::default();
        assert_eq!(map.credential_of(Some("alice-3f2a"), &roles), "ops-user");
        assert_eq!(map.credential_of(Some("bob-3f2a"), &roles), "billing-user");
        assert_eq!(map.credential_of(Some("nokey-9"), &roles), "ops-user");
        assert_eq!(map.credential_of(None, &roles), "ops-user");
        // One caller: a scenario needing another is not played, and says why.
        let one = text.replace(
            "  billing-user: {Authorization: \"Bearer bob-token-5678\"}\n",
            "",
        );
        let map = ApiMap::parse("api.yaml", &one).unwrap();
        assert_eq!(map.roles, ["ops-user"]);
        let scenario = reqkey_scenario::load::parse_scenario(
            Path::new("s.yaml"),
            "id: x.two-callers\nlevel: idem\nsummary: two callers\nchecks: [idem.scope.no-leak]\nsteps:\n  - http: {method: POST, path: /orders, headers: [[X-Reqkey-Caller, 'alice-${c}']], json: {a: 1}}\n    expect: any\n  - http: {method: POST, path: /orders, headers: [[X-Reqkey-Caller, mallory]], json: {a: 1}}\n    expect: {status: 201}\n    judges: [idem.scope.no-leak]\n",
        );
        let scenario = scenario.unwrap();
        let e = map.plays(&scenario, &mut roles).unwrap_err();
        assert!(e.contains("`mallory` is another caller"), "{e}");
        let two = ApiMap::parse("api.yaml", &text).unwrap();
        assert_eq!(two.plays(&scenario, &mut roles), Ok(()));
        // Learned: mallory is another caller from now on.
        assert_eq!(two.credential_of(Some("mallory"), &roles), "billing-user");
        // A name keeps its role: mallory first elsewhere is refused.
        let first = reqkey_scenario::load::parse_scenario(
            Path::new("f.yaml"),
            "id: x.mallory-first\nlevel: idem\nsummary: m\nchecks: [idem.scope.no-leak]\nsteps:\n  - http: {method: POST, path: /orders, headers: [[X-Reqkey-Caller, mallory]], json: {a: 1}}\n    expect: {status: 201}\n    judges: [idem.scope.no-leak]\n",
        )
        .unwrap();
        let e = two.plays(&first, &mut roles).unwrap_err();
        assert!(
            e.contains("the first caller here and another caller elsewhere"),
            "{e}"
        );
    }
}
