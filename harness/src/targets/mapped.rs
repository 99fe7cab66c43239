//! An app at its own routes, with its own authentication, played through
//! an API map (`--api`, `api_map.rs`) at the target seam: the idem suite's
//! scenarios run unchanged, their contract requests translated here.
//!
//! A contract request (`POST /orders`, `X-Reqkey-Caller: alice`, a JSON
//! body) goes to the route playing its role, with the caller's own
//! credentials instead of the caller header and the body put into the
//! route's template; the app's answer comes back in the contract's words:
//! the role's status as the contract's (201, or 500 for the failing
//! route), `order` the created resource's id, `caller` and `echo` those of
//! the request the id was first answered to (so an answer replayed to
//! another caller names its owner, and `expect_not_echoed` sees the
//! leak), `x-reqkey-order` the id while the app's own `answer_header` is
//! the one its first answer carried. Any other answer (a refusal, a
//! validation error) is passed on as the app gave it.
//! `GET /.reqkey/health` answers the map's declared profile;
//! `GET /.reqkey/effects` the oracle's document (`ledger.rs`).
//!
//! Every request goes through one `HttpAgentTarget`: the same bounded
//! client, TLS, `--header` credentials and `--max-rps` as any target.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::targets::api_map::{
    origin_path, render_body, ApiMap, CallerRoles, Oracle, Read, Role, Route, CALLER_HEADER,
    EFFECTS_PATH,
};
use crate::targets::http_agent::HttpAgentTarget;
use crate::targets::latency::TargetWarning;
use crate::targets::ledger::{Identity, Ledger};
use crate::targets::{HttpRequest, HttpResponse, Level, Target, TargetError};

/// An app played through an API map.
#[derive(Debug)]
pub struct MappedTarget {
    name: String,
    map: ApiMap,
    inner: HttpAgentTarget,
    ledger: Mutex<Ledger>,
    /// Per (app path, id): the `answer_header` value of its first answer.
    first_header: Mutex<BTreeMap<CreatedId, Option<Vec<u8>>>>,
    /// The requests sent, per route as sent (`METHOD /path`).
    sent: Mutex<BTreeMap<String, u64>>,
    /// The role each contract caller plays, learned from the scenarios.
    roles: Mutex<CallerRoles>,
    /// The declared profile's `replayHeader`: an answer carrying it is a
    /// replay, which owns no id.
    replay_header: Option<String>,
}

/// A resource the app created: the app path it was created on, its id.
type CreatedId = (String, String);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MappedTarget {
    /// The app behind `inner`, played through `map`. Reads the app's
    /// liveness route and the read routes' counts (the oracle's baseline)
    /// before any scenario: an app that does not answer them is no verdict.
    pub async fn open(
        name: String,
        map: ApiMap,
        inner: HttpAgentTarget,
    ) -> Result<MappedTarget, TargetError> {
        let replay_header = reqkey_model::idem_profile::parse_health(map.health())
            .ok()
            .and_then(|h| h.profile.replay_header);
        let target = MappedTarget {
            name,
            map,
            inner,
            ledger: Mutex::new(Ledger::default()),
            first_header: Mutex::new(BTreeMap::new()),
            sent: Mutex::new(BTreeMap::new()),
            roles: Mutex::new(CallerRoles::default()),
            replay_header,
        };
        if let Some(route) = &target.map.health_route {
            let caller = target.map.default_caller.clone();
            let answer = target.send(route, &caller, None, None).await?;
            if !(200..300).contains(&answer.status) {
                return Err(TargetError::Protocol(format!(
                    "the API map's health route {} {} answered {}",
                    route.method, route.path, answer.status
                )));
            }
        }
        if let Oracle::Reads(reads) = &target.map.oracle {
            let counts = target.counts(reads).await?;
            lock(&target.ledger).set_baseline(counts);
        }
        Ok(target)
    }

    /// One request to the app as `caller` (the map's caller name), counted
    /// under `route`'s method and path (its template: a clean-up's path
    /// with `{id}`); `path` is what is sent, checked to stay at the origin.
    async fn send(
        &self,
        route: &Route,
        caller: &str,
        headers: Option<Vec<(String, Vec<u8>)>>,
        body: Option<Vec<u8>>,
    ) -> Result<HttpResponse, TargetError> {
        self.send_at(route, &route.path, caller, headers, body)
            .await
    }

    async fn send_at(
        &self,
        route: &Route,
        path: &str,
        caller: &str,
        headers: Option<Vec<(String, Vec<u8>)>>,
        body: Option<Vec<u8>>,
    ) -> Result<HttpResponse, TargetError> {
        let request = self.app_request(route, path, caller, headers, body)?;
        self.count(route);
        self.inner.http(request).await
    }

    /// The app's request: the caller's credentials added, a JSON body
    /// typed, the path checked once more to be origin-relative (it was at
    /// load; a clean-up's is built from an id since).
    fn app_request(
        &self,
        route: &Route,
        path: &str,
        caller: &str,
        headers: Option<Vec<(String, Vec<u8>)>>,
        body: Option<Vec<u8>>,
    ) -> Result<HttpRequest, TargetError> {
        origin_path(path, false).map_err(|why| {
            TargetError::BadSpec(format!(
                "{} {}: the path `{}` is refused ({why}): not sent",
                route.method,
                route.path,
                path.chars().take(200).collect::<String>()
            ))
        })?;
        let mut all = headers.unwrap_or_default();
        if body.is_some()
            && !all
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            all.push(("content-type".into(), b"application/json".to_vec()));
        }
        all.extend(self.map.callers.get(caller).cloned().unwrap_or_default());
        Ok(HttpRequest {
            method: route.method.clone(),
            path: path.to_owned(),
            headers: all,
            body,
            ..HttpRequest::default()
        })
    }

    /// Counts one request to `route` (for the comparison with the plan).
    fn count(&self, route: &Route) {
        *lock(&self.sent)
            .entry(format!("{} {}", route.method, route.path))
            .or_default() += 1;
    }

    /// The read routes' counts, summed, as each of the map's callers.
    async fn counts(&self, reads: &[Read]) -> Result<BTreeMap<String, u64>, TargetError> {
        let mut counts = BTreeMap::new();
        for caller in self.map.callers.keys() {
            let mut total = 0u64;
            for read in reads {
                let route = Route {
                    method: read.method.clone(),
                    path: read.path.clone(),
                    body: None,
                    status: 200,
                    id: String::new(),
                };
                let answer = self.send(&route, caller, None, None).await?;
                refused_credentials(&answer, caller, &route)?;
                let counted = (answer.status == 200)
                    .then(|| serde_json::from_slice::<Value>(&answer.body).ok())
                    .flatten()
                    .and_then(|v| match v.pointer(&read.count) {
                        Some(Value::Array(items)) => Some(items.len() as u64),
                        Some(n) => n.as_u64(),
                        None => None,
                    })
                    .ok_or_else(|| {
                        TargetError::Oracle(format!(
                            "the read route {} {} as {caller} answered {} without a count at {}",
                            read.method, read.path, answer.status, read.count
                        ))
                    })?;
                total += counted;
            }
            counts.insert(caller.clone(), total);
        }
        Ok(counts)
    }

    /// `GET /.reqkey/effects`, by the map's oracle.
    async fn effects(&self) -> Result<HttpResponse, TargetError> {
        let document = match &self.map.oracle {
            Oracle::Counter(path) => {
                let route = Route {
                    method: "GET".into(),
                    path: path.clone(),
                    body: None,
                    status: 200,
                    id: String::new(),
                };
                let caller = self.map.default_caller.clone();
                return self.send(&route, &caller, None, None).await;
            }
            Oracle::Reads(reads) => {
                let counts = self.counts(reads).await?;
                lock(&self.ledger).by_reads(&counts)
            }
            Oracle::AnswerIds => lock(&self.ledger).by_answer_ids(),
        }
        .map_err(|why| TargetError::Oracle(format!("{} ({})", why, self.map.oracle)))?;
        Ok(json_answer(200, &document, Vec::new()))
    }

    /// A contract request playing `role`, translated into the app's
    /// request and recorded in the ledger (its ticket).
    fn prepare(&self, role: Role, request: &HttpRequest) -> Result<Prepared, TargetError> {
        let route = self.map.routes.get(&role).ok_or_else(|| {
            TargetError::Unsupported(format!("the API map has no `{}` route", role.name()))
        })?;
        let scenario_caller = request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(CALLER_HEADER))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        let key = request
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("idempotency-key"))
            .map(|(_, v)| v.clone());
        let credential = self
            .map
            .credential_of(scenario_caller.as_deref(), &lock(&self.roles))
            .to_owned();
        // The app's own counter records the contract's caller header; any
        // other app gets its callers' credentials only.
        let keep_caller = matches!(self.map.oracle, Oracle::Counter(_));
        let headers: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .filter(|(n, _)| keep_caller || !n.eq_ignore_ascii_case(CALLER_HEADER))
            .map(|(n, v)| {
                if n.eq_ignore_ascii_case("idempotency-key") {
                    (self.map.key_header.clone(), v.clone())
                } else {
                    (n.clone(), v.clone())
                }
            })
            .collect();
        let body = render_body(role, route, request.body.as_deref());
        let app = self.app_request(route, &route.path, &credential, Some(headers), body)?;
        let identity = Identity::new(
            &request.method,
            &request.path,
            scenario_caller.clone(),
            key,
            request.body.as_deref(),
        );
        let ticket = lock(&self.ledger).sent(identity, &credential, request.body.as_deref());
        Ok(Prepared {
            role,
            route: route.clone(),
            credential,
            scenario_caller,
            body: request.body.clone(),
            app,
            ticket,
        })
    }

    /// The app's answer to a prepared request, in the contract's words.
    fn complete(
        &self,
        p: Prepared,
        answer: Result<HttpResponse, TargetError>,
    ) -> Result<HttpResponse, TargetError> {
        let Prepared {
            role,
            route,
            credential,
            scenario_caller,
            body: request_body,
            ticket,
            ..
        } = p;
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                lock(&self.ledger).lost(ticket);
                return Err(e);
            }
        };
        if let Err(e) = refused_credentials(&answer, &credential, &route) {
            lock(&self.ledger).answered(ticket, None);
            return Err(e);
        }
        if answer.status != route.status {
            lock(&self.ledger).answered(ticket, None);
            return Ok(answer);
        }
        let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
        let id = parsed
            .as_ref()
            .and_then(|v| v.pointer(&route.id))
            .and_then(|id| match id {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            });
        let app_path = route
            .path
            .split('?')
            .next()
            .unwrap_or(&route.path)
            .to_owned();
        // A replay the app marks (the declared `replayHeader`) never owns
        // the id it carries, whichever answer the harness read first.
        let replayed = self.replay_header.as_deref().is_some_and(|h| {
            answer
                .headers
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case(h))
        });
        let owner = match (&id, replayed) {
            (Some(id), true) => {
                lock(&self.ledger).answered_replay(ticket, (app_path.clone(), id.clone()))
            }
            _ => lock(&self.ledger).answered(ticket, id.clone().map(|i| (app_path.clone(), i))),
        };
        let mut headers = answer.headers.clone();
        if let (Some(id), Some(name)) = (&id, &self.map.answer_header) {
            let value = answer
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_bytes().to_vec());
            let first = lock(&self.first_header)
                .entry((app_path, id.clone()))
                .or_insert_with(|| value.clone())
                .clone();
            // The id while the app's own header is its first answer's
            // (both absent included: an app that sets none on this kind of
            // answer, an error, keeps none on its replay either); else what
            // the app sent, so that the scenario sees it differ.
            let shown = if value == first {
                id.clone()
            } else {
                value.map_or_else(
                    || "(absent)".to_owned(),
                    |v| {
                        format!(
                            "(the app's {name} changed: {})",
                            String::from_utf8_lossy(&v)
                        )
                    },
                )
            };
            headers.push(("x-reqkey-order".into(), shown));
        }
        let (caller, echo) = match owner {
            Some(o) => (o.caller, o.body),
            None => (
                scenario_caller,
                request_body
                    .as_deref()
                    .and_then(|b| serde_json::from_slice(b).ok())
                    .unwrap_or(Value::Null),
            ),
        };
        let order = id.map_or(Value::Null, Value::String);
        let body = if role == Role::Fail {
            json!({"error": parsed.unwrap_or(Value::Null), "order": order, "caller": caller})
        } else {
            json!({"order": order, "caller": caller, "echo": echo, "answer": parsed})
        };
        Ok(json_answer(role.contract_status(), &body, headers))
    }

    /// A contract request playing `role`.
    async fn play(&self, role: Role, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let p = self.prepare(role, &request)?;
        self.count(&p.route);
        let answer = self.inner.http(p.app.clone()).await;
        self.complete(p, answer)
    }
}

/// A contract request translated for the app, waiting for its answer.
struct Prepared {
    role: Role,
    route: Route,
    credential: String,
    scenario_caller: Option<String>,
    body: Option<Vec<u8>>,
    app: HttpRequest,
    ticket: crate::targets::ledger::Ticket,
}

/// A 401 or 403 is the app refusing a caller's credentials: a wiring
/// mistake in the map or the environment (exit 2), never an answer of the
/// idempotency layer to judge.
fn refused_credentials(
    answer: &HttpResponse,
    caller: &str,
    route: &Route,
) -> Result<(), TargetError> {
    if matches!(answer.status, 401 | 403) {
        return Err(TargetError::BadSpec(format!(
            "the app answered {} {} for the API map's caller {caller} with {}: its credentials \
             are refused (check the map's callers and their environment variables)",
            route.method, route.path, answer.status
        )));
    }
    Ok(())
}

/// A JSON answer the target makes (the app's headers kept, its
/// content type replaced).
fn json_answer(status: u16, body: &Value, headers: Vec<(String, String)>) -> HttpResponse {
    let mut headers: Vec<(String, String)> = headers
        .into_iter()
        .filter(|(n, _)| {
            !n.eq_ignore_ascii_case("content-type") && !n.eq_ignore_ascii_case("content-length")
        })
        .collect();
    headers.push(("content-type".into(), "application/json".into()));
    HttpResponse {
        status,
        headers,
        body: body.to_string().into_bytes(),
    }
}

#[async_trait]
impl Target for MappedTarget {
    fn level(&self) -> Level {
        Level::Idem
    }

    fn describe(&self) -> String {
        self.name.clone()
    }

    fn warnings(&self) -> Vec<TargetWarning> {
        self.inner.warnings()
    }

    async fn health(&self) -> Result<Value, TargetError> {
        let mut health = self.map.health().clone();
        health["apiMap"] = json!({"file": self.map.file, "oracle": self.map.oracle.to_string()});
        Ok(health)
    }

    async fn http(&self, request: HttpRequest) -> Result<HttpResponse, TargetError> {
        let path = request.path.split('?').next().unwrap_or(&request.path);
        if request.method == "GET" && path == crate::targets::profile::IDEM_HEALTH_PATH {
            let health = self.health().await?;
            return Ok(json_answer(200, &health, Vec::new()));
        }
        if request.method == "GET" && path == EFFECTS_PATH {
            return self.effects().await;
        }
        match Role::of(&request.method, &request.path) {
            Some(role) => self.play(role, request).await,
            None => Err(TargetError::Unsupported(format!(
                "the API map plays no route {} {}",
                request.method, path
            ))),
        }
    }

    fn sequential(&self) -> bool {
        // Reads and answer ids are attributed by window: one scenario at a time.
        !matches!(self.map.oracle, Oracle::Counter(_))
    }

    fn plays(&self, scenario: &reqkey_scenario::Scenario) -> Result<(), String> {
        self.map.plays(scenario, &mut lock(&self.roles))
    }

    fn api_map(&self) -> Option<&ApiMap> {
        Some(&self.map)
    }

    async fn finish(&self) -> Option<String> {
        let created = lock(&self.ledger).created();
        let Some(delete) = &self.map.cleanup else {
            return Some(format!(
                "the run created {} resources the answers named; the API map gives no delete \
                 route, so they were left",
                created.len()
            ));
        };
        let (mut deleted, mut failed, mut refused) = (0usize, Vec::new(), 0usize);
        for (caller, created_on, id) in &created {
            // Counted as the plan names it: the route it was created on.
            let route = Route {
                path: delete.path.replace("{path}", created_on),
                ..delete.clone()
            };
            let Some(segment) = id_segment(id) else {
                refused += 1;
                continue;
            };
            let path = route.path.replace("{id}", &segment);
            match self.send_at(&route, &path, caller, None, None).await {
                Ok(a) if (200..300).contains(&a.status) || a.status == 404 => deleted += 1,
                Ok(a) => failed.push(format!("{id}: {}", a.status)),
                Err(e) => failed.push(format!("{id}: {}", e.reason())),
            }
        }
        let mut line = format!(
            "clean-up: deleted {deleted} of the {} resources the answers named ({} {})",
            created.len(),
            delete.method,
            delete.path
        );
        if let Some(first) = failed.first() {
            line.push_str(&format!(
                "; {} could not be deleted, first {first}",
                failed.len()
            ));
        }
        if refused > 0 {
            line.push_str(&format!(
                "; {refused} not sent: their ids (empty, `.` or `..`) would make another path"
            ));
        }
        Some(line)
    }

    fn sends_together(&self) -> bool {
        true
    }

    async fn http_together(
        &self,
        requests: Vec<HttpRequest>,
    ) -> Vec<Result<crate::targets::Timed, TargetError>> {
        let mut prepared = Vec::with_capacity(requests.len());
        for request in &requests {
            let role = Role::of(&request.method, &request.path).ok_or_else(|| {
                TargetError::Unsupported(format!(
                    "the API map plays no route {} {} together",
                    request.method, request.path
                ))
            });
            match role.and_then(|role| self.prepare(role, request)) {
                Ok(p) => prepared.push(p),
                Err(e) => {
                    for p in prepared {
                        lock(&self.ledger).lost(p.ticket);
                    }
                    return requests.iter().map(|_| Err(e.clone())).collect();
                }
            }
        }
        for p in &prepared {
            self.count(&p.route);
        }
        let apps: Vec<HttpRequest> = prepared.iter().map(|p| p.app.clone()).collect();
        let answers = self.inner.send_together(apps).await;
        if answers.len() != prepared.len() {
            // The sender refused the burst whole (a path off the origin).
            let e = answers
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_else(|| TargetError::Closed("the burst was not sent".into()));
            for p in prepared {
                lock(&self.ledger).lost(p.ticket);
            }
            return requests.iter().map(|_| Err(e.clone())).collect();
        }
        prepared
            .into_iter()
            .zip(answers)
            .map(|(p, answer)| match answer {
                Ok(t) => self
                    .complete(p, Ok(t.response))
                    .map(|response| crate::targets::Timed {
                        response,
                        sent: t.sent,
                        answered: t.answered,
                    }),
                Err(e) => {
                    lock(&self.ledger).lost(p.ticket);
                    Err(e)
                }
            })
            .collect()
    }

    fn sent_requests(&self) -> Option<BTreeMap<String, u64>> {
        Some(lock(&self.sent).clone())
    }
}

/// An id an answer carried, as one path segment: every byte outside the
/// unreserved set percent-encoded (an id is the app's text, sent back in
/// a path); `None` for an id that would still make another path once a
/// client resolves it (empty, `.`, `..`), which is then not sent.
fn id_segment(id: &str) -> Option<String> {
    if id.is_empty() || id == "." || id == ".." {
        return None;
    }
    Some(
        id.bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 57: an id answered as `..` made the clean-up send `DELETE` to
    /// the parent path with the owner's credentials.
    #[test]
    fn an_id_is_one_path_segment_or_is_not_sent() {
        for id in ["", ".", ".."] {
            assert_eq!(id_segment(id), None, "{id:?}");
        }
        assert_eq!(id_segment("ord_1").as_deref(), Some("ord_1"));
        assert_eq!(id_segment("a/../b").as_deref(), Some("a%2F..%2Fb"));
        assert_eq!(id_segment("%2e%2e").as_deref(), Some("%252e%252e"));
        assert_eq!(id_segment("@h:1").as_deref(), Some("%40h%3A1"));
        // One that a server decoding `%2F` would still read as `..` is
        // refused by the last check before sending.
        let path = format!("/v1/orders/{}", id_segment("../x").unwrap_or_default());
        assert!(origin_path(&path, false).is_err(), "{path}");
        let path = format!("/v1/orders/{}", id_segment("a.b").unwrap_or_default());
        assert!(origin_path(&path, false).is_ok(), "{path}");
    }
}
