//! Agent-level steps: raw HTTP exchanges, SSE reading, waiting for a run.
//!
//! A `reqkey-agent/1` scenario must be able to send what a careless or
//! hostile client sends — a repeated header, a header with a blank inside,
//! bytes that are not UTF-8, a body that is not JSON or is over 1 MiB — and
//! to judge everything that comes back. So a step's request is written out
//! in full (method, path, an ordered list of headers, a JSON or raw body)
//! and its answer is one JSON value that patterns can match:
//!
//! ```json
//! {"status": 201,
//!  "headers": {"content-type": "application/json"},
//!  "body": "<the body as text>",
//!  "json": <the body parsed, when it is JSON>,
//!  "sse": {"names": [...], "events": [...], "runIds": [...],
//!          "attached": bool, "text": "...", "status": "completed"}}
//! ```
//!
//! `sse` is present on `text/event-stream` answers: `names` lists the event
//! names in order, `runIds` the distinct runs the stream named (a correct
//! stream names exactly one), `text` the concatenated deltas, `status` the
//! last `finish`. Every part of a step is bounded: the body size
//! (`MAX_BODY_BYTES`), the delay and the wait (`MAX_WAIT_MS`), checked
//! when the scenario loaded (`reqkey_scenario::agent_step`).

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::targets::{HttpRequest, HttpResponse, Target, TargetError};

/// The longest `waitMs` one poll of `wait_run` asks for.
const POLL_WAIT_MS: u64 = 1_000;
/// Statuses that never change again (SPEC 1).
const FINISHED: [&str; 3] = ["completed", "failed", "interrupted"];
/// The pause between polls of a run that is live but not `running`.
const POLL_PAUSE_MS: u64 = 20;

/// The most JSON values of one answer the judge parses. Parsed, JSON takes
/// tens of times its text (an effects list of 16.4 MB, under the 16 MiB
/// cap, took 600 MB for one step, and several scenarios read one at
/// once); past this bound the answer is not parsed and its step is no
/// verdict (`too_large`, exit 2). About 40,000 effect records of
/// `/.reqkey/effects`.
pub const MAX_ANSWER_JSON_VALUES: u64 = 1 << 18;

/// About how many JSON values `body` holds, counted without parsing it
/// (one linear scan): each `,`, `{` and `[` outside strings, plus one.
pub fn json_values(body: &[u8]) -> u64 {
    let (mut count, mut in_string, mut escaped) = (1u64, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b',' | b'{' | b'[' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// `Err` when `body` holds more JSON values than the judge parses.
fn within_json_bound(body: &[u8]) -> Result<(), TargetError> {
    let values = json_values(body);
    if values > MAX_ANSWER_JSON_VALUES {
        return Err(TargetError::TooManyValues {
            values,
            bound: MAX_ANSWER_JSON_VALUES,
        });
    }
    Ok(())
}

/// One `http` step: optional delay, the exchange, the answer as JSON.
pub async fn http_step(
    target: &dyn Target,
    request: HttpRequest,
    delay_ms: u64,
    timeout_ms: u64,
) -> Result<Value, TargetError> {
    if delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
    let started = tokio::time::Instant::now();
    let response = timed(target.http(request), timeout_ms).await?;
    within_json_bound(&response.body)?;
    let mut out = answer(&response);
    // From the request sent (after `delay_ms`) to the answer's last byte:
    // when a stream ended is part of what some clauses say.
    out["elapsedMs"] = json!(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    Ok(out)
}

async fn timed<T>(
    f: impl std::future::Future<Output = Result<T, TargetError>>,
    timeout_ms: u64,
) -> Result<T, TargetError> {
    tokio::time::timeout(Duration::from_millis(timeout_ms), f)
        .await
        .unwrap_or(Err(TargetError::Timeout { timeout_ms }))
}

/// One `wait_run` step: polls `GET /sessions/{id}/runs/{runId}?waitMs=N`
/// until the run has one of the wanted statuses, answers something else
/// than 200, or `timeout_ms` passes. The answer is the last exchange's,
/// plus `reached` (did the run get there) and `waitedMs`.
pub async fn wait_run_step(
    target: &dyn Target,
    session: &str,
    run: &str,
    wanted: &[String],
    timeout_ms: u64,
    call_timeout_ms: u64,
) -> Result<Value, TargetError> {
    let started = Instant::now();
    let deadline = started + Duration::from_millis(timeout_ms);
    // Bounded: every round waits (server side or here) and the deadline is finite.
    loop {
        let left_ms = deadline
            .saturating_duration_since(Instant::now())
            .as_millis() as u64;
        let request = HttpRequest {
            method: "GET".into(),
            path: format!(
                "/sessions/{session}/runs/{run}?waitMs={}",
                left_ms.min(POLL_WAIT_MS)
            ),
            headers: Vec::new(),
            body: None,
            replica: None,
            wire: reqkey_scenario::agent_step::Wire::Library,
        };
        let response = timed(target.http(request), call_timeout_ms).await?;
        within_json_bound(&response.body)?;
        let mut out = answer(&response);
        let status = out
            .get("json")
            .and_then(|j| j.get("status"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let reached = response.status == 200 && wanted.iter().any(|w| w == status);
        // A finished status never changes again: no point waiting it out.
        let settled = FINISHED.contains(&status);
        if reached || settled || response.status != 200 || left_ms == 0 {
            out["reached"] = Value::Bool(reached);
            out["waitedMs"] = json!(started.elapsed().as_millis() as u64);
            return Ok(out);
        }
        if status != "running" {
            tokio::time::sleep(Duration::from_millis(POLL_PAUSE_MS)).await;
        }
    }
}

/// The JSON form of an HTTP answer (see the module docs).
pub fn answer(response: &HttpResponse) -> Value {
    let mut headers = Map::new();
    for (name, value) in &response.headers {
        let name = name.to_ascii_lowercase();
        match headers.get_mut(&name) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(value);
            }
            _ => {
                headers.insert(name, Value::String(value.clone()));
            }
        }
    }
    let body = String::from_utf8_lossy(&response.body).into_owned();
    let is_sse = headers
        .get("content-type")
        .and_then(Value::as_str)
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    let mut out = json!({"status": response.status, "headers": headers, "body": body});
    // Parsed only within the bound (the steps check it first, as no
    // verdict; anything else sees no `json`).
    if json_values(&response.body) <= MAX_ANSWER_JSON_VALUES {
        if let Ok(parsed) = serde_json::from_slice::<Value>(&response.body) {
            out["json"] = parsed;
        }
    }
    if is_sse {
        out["sse"] = parse_sse(&body);
    }
    out
}

/// Reads a whole `text/event-stream` body.
pub fn parse_sse(body: &str) -> Value {
    let mut events = Vec::new();
    let normalized = body.replace("\r\n", "\n");
    for block in normalized.split("\n\n") {
        let mut name = None;
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                name = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        if name.is_none() && data.is_empty() {
            continue;
        }
        let data = data.join("\n");
        let data = serde_json::from_str::<Value>(&data).unwrap_or(Value::String(data));
        events.push(json!({"event": name.unwrap_or_else(|| "message".into()), "data": data}));
    }
    let names: Vec<Value> = events.iter().map(|e| e["event"].clone()).collect();
    let mut run_ids: Vec<Value> = Vec::new();
    let mut attached = Value::Null;
    let mut text = String::new();
    let mut status = Value::Null;
    for e in &events {
        if let Some(id) = e["data"].get("runId") {
            if !run_ids.contains(id) {
                run_ids.push(id.clone());
            }
        }
        match e["event"].as_str() {
            Some("run-start") if attached.is_null() => {
                attached = e["data"].get("attached").cloned().unwrap_or(Value::Null);
            }
            Some("text") => {
                if let Some(d) = e["data"].get("delta").and_then(Value::as_str) {
                    text.push_str(d);
                }
            }
            Some("finish") => status = e["data"].get("status").cloned().unwrap_or(Value::Null),
            _ => {}
        }
    }
    json!({"names": names, "events": events, "runIds": run_ids, "attached": attached,
           "text": text, "status": status})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_bodies_are_read_into_events_runs_and_status() {
        let body = "event: run-start\ndata: {\"runId\":\"r1\",\"startSequence\":1,\"attached\":true}\n\n\
                    event: text\ndata: {\"delta\":\"echo: a\"}\n\nevent: finish\ndata: {\"status\":\"completed\"}\n\n";
        let sse = parse_sse(body);
        assert_eq!(sse["names"], json!(["run-start", "text", "finish"]));
        assert_eq!(sse["runIds"], json!(["r1"]));
        assert_eq!(sse["attached"], json!(true));
        assert_eq!(sse["text"], json!("echo: a"));
        assert_eq!(sse["status"], json!("completed"));
    }
}
