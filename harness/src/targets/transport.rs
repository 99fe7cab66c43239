//! What the HTTP targets share about the wire: one client configuration
//! (no redirects, no proxy, a total timeout), a bounded body read, the
//! classification of a failed exchange into a typed [`TargetError`], and
//! the check of `/health`'s `protocol` against the `--target` scheme.
//!
//! Every read is bounded twice: by the call timeout (which covers
//! connecting, the head and the whole body, so a target that drips bytes
//! ends as a timeout) and by the response cap (an answer larger than
//! `--max-response-bytes` is cut there and never held in memory whole).

use reqkey_reference::scheme::{self, Scheme};
use std::error::Error as _;

use serde_json::Value;

use reqkey_reference::store::redact_url;

use crate::targets::{Level, TargetError, TargetOptions};

/// The HTTP client of every HTTP target: redirects are never followed (a
/// 3xx is the target's answer, judged like any other; following it would
/// judge another server under this target's name), no proxy, and every
/// exchange bounded by the call timeout from connect to the body's end.
/// Every connection it opens is timed into `connects` (a full listen
/// queue shows as a connect of a second or more: `connect_log.rs`).
pub fn client(
    opts: &TargetOptions,
    connects: &std::sync::Arc<crate::targets::connect_log::ConnectLog>,
) -> Result<reqwest::Client, TargetError> {
    reqwest::Client::builder()
        .use_preconfigured_tls(opts.link.tls()?.as_ref().clone())
        .connector_layer(crate::targets::connect_log::TimedConnect {
            log: std::sync::Arc::clone(connects),
        })
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(opts.call_timeout())
        // Drop idle connections before common servers do (Node closes
        // them after 5 s), so a step never reuses a socket the server is
        // closing, which would look like a connection closed mid-answer.
        .pool_idle_timeout(std::time::Duration::from_secs(2))
        .build()
        .map_err(|e| TargetError::BadSpec(format!("cannot build an HTTP client: {e}")))
}

/// The URL of `path` at the target `base`, refused (exit 2, before
/// anything is sent) unless it stays at the target's origin: the path
/// starts with one `/`, and the URL parsed from the two has the base's
/// scheme, host, port and userinfo (issue 57: a path `@127.0.0.1:B/...`
/// made `http://HOST:A@127.0.0.1:B/...`, another server, and sent it the
/// credentials).
pub fn at_origin(base: &str, path: &str) -> Result<reqwest::Url, TargetError> {
    let refuse = |why: &str| {
        TargetError::BadSpec(format!(
            "the request path `{}` would leave the target's origin ({why}): not sent",
            crate::secrets::scrub(&path.chars().take(200).collect::<String>())
        ))
    };
    if !path.starts_with('/') || path.starts_with("//") || path.contains('\\') {
        return Err(refuse("a path starts with one `/`"));
    }
    let origin = reqwest::Url::parse(base).map_err(|e| refuse(&e.to_string()))?;
    let url = reqwest::Url::parse(&format!("{base}{path}")).map_err(|e| refuse(&e.to_string()))?;
    let same = url.scheme() == origin.scheme()
        && url.host_str() == origin.host_str()
        && url.port_or_known_default() == origin.port_or_known_default()
        && url.username() == origin.username()
        && url.password() == origin.password();
    if same {
        Ok(url)
    } else {
        Err(refuse("another scheme, host, port or userinfo"))
    }
}

/// reqwest's own message ("error sending request") hides the cause: the
/// message with every source appended.
fn full_message(e: &reqwest::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

/// The typed reason a failed exchange with `base` could not be judged, or
/// (for an answer that is not HTTP) the protocol violation it is.
pub fn classify(e: &reqwest::Error, base: &str, timeout_ms: u64) -> TargetError {
    if e.is_timeout() {
        return TargetError::Timeout { timeout_ms };
    }
    let message = crate::secrets::scrub(&format!("{}: {}", redact_url(base), full_message(e)));
    if let Some(refused) = crate::targets::tls::rustls_cause(e) {
        let why = crate::targets::tls::reason(refused);
        return if crate::targets::tls::is_certificate_refusal(refused) {
            TargetError::Certificate(format!("{}: {why}", redact_url(base)))
        } else {
            TargetError::Unreachable(format!(
                "{}: the TLS handshake failed ({why}): is the target serving TLS on that port?",
                redact_url(base)
            ))
        };
    }
    if e.is_connect() {
        return TargetError::Unreachable(message);
    }
    let mut source = e.source();
    while let Some(cause) = source {
        if let Some(h) = cause.downcast_ref::<hyper::Error>() {
            if h.is_parse() || h.is_parse_status() || h.is_parse_too_large() {
                return TargetError::NotHttp(message);
            }
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return TargetError::Closed(message);
            }
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ) {
                return TargetError::Closed(message);
            }
        }
        source = cause.source();
    }
    // A body that ended early or could not be decoded is a connection that
    // broke mid-answer; anything else the harness cannot place is treated
    // the same way: not judged.
    TargetError::Closed(message)
}

/// Reads a response body chunk by chunk, never holding more than `cap`
/// bytes: an answer that announces or sends more is
/// [`TargetError::TooLarge`] as soon as it crosses the cap.
pub async fn read_body(
    mut response: reqwest::Response,
    cap: u64,
    base: &str,
    timeout_ms: u64,
) -> Result<Vec<u8>, TargetError> {
    if response.content_length().is_some_and(|n| n > cap) {
        return Err(TargetError::TooLarge { cap });
    }
    let mut body = Vec::new();
    // Bounded: every chunk grows `body` toward the cap, and the client's
    // timeout ends a body that never finishes.
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| classify(&e, base, timeout_ms))?
    {
        if body.len() as u64 + chunk.len() as u64 > cap {
            return Err(TargetError::TooLarge { cap });
        }
        let before = body.len();
        body.extend_from_slice(&chunk);
        // The harness's memory, each time the answer crosses another
        // 256 KiB (answers are read side by side: up to 256 copies of a
        // step, each up to the cap).
        if before >> 18 != body.len() >> 18 {
            if let Some(why) = crate::memory::over() {
                return Err(TargetError::OverMemory(why));
            }
        }
    }
    Ok(body)
}

/// A response head's headers as text (a value that is not UTF-8 is read
/// lossily).
pub fn headers_of(response: &reqwest::Response) -> Vec<(String, String)> {
    response
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The protocol a level's targets name in `/health`.
pub fn protocol_of(level: Level) -> &'static str {
    level.info().protocol
}

/// How `--target` must be written for a server of `level`.
fn scheme_of(level: Level) -> &'static str {
    level.info().target_form
}

/// Checks that a target opened as `level` does not name the other
/// protocol in its `/health`: that is a wiring mistake (the wrong scheme
/// in `--target`), exit 2 with the scheme to use, never a verdict. A
/// `/health` that names no protocol, or one the harness does not know, is
/// left to the scenarios to judge.
pub fn check_protocol(level: Level, health: &Value) -> Result<(), TargetError> {
    let named = health.get("protocol").and_then(Value::as_str);
    let other = named
        .and_then(Level::of_protocol)
        .filter(|other| *other != level);
    if let Some(other) = other {
        return Err(TargetError::WrongProtocol {
            expected: protocol_of(level),
            found: protocol_of(other),
            hint: format!(
                "this server speaks {}: certify it with --target {}",
                protocol_of(other),
                scheme_of(other)
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_other_protocol_is_a_wiring_mistake_naming_the_scheme() {
        let e = check_protocol(Level::Store, &json!({"protocol": "reqkey-agent/1"})).unwrap_err();
        assert!(e.is_harness_error());
        assert_eq!(e.reason(), "wrong_protocol");
        assert!(e.to_string().contains("--target http://HOST:PORT"), "{e}");
        let e = check_protocol(Level::Agent, &json!({"protocol": "reqkey-store/1"})).unwrap_err();
        assert!(e.to_string().contains("store+http://HOST:PORT"), "{e}");
    }

    /// Issue 57: a path that makes another authority, or leaves the path.
    #[test]
    fn a_path_that_would_leave_the_origin_is_refused_before_sending() {
        let base = "http://localhost:7095";
        assert_eq!(
            at_origin(base, "/v1/orders?x=1").unwrap().as_str(),
            "http://localhost:7095/v1/orders?x=1"
        );
        for path in [
            "@127.0.0.1:9/v1/orders",
            "//evil.example/v1",
            "/\\evil.example",
            "v1/orders",
            ":9/v1",
            "",
        ] {
            let e = at_origin(base, path).unwrap_err();
            assert!(e.is_harness_error(), "{path}");
            assert!(e.to_string().contains("not sent"), "{path}: {e}");
        }
        assert!(at_origin("https://u:p@h:1", "/x").is_ok());
    }

    #[test]
    fn the_right_or_an_unknown_protocol_is_left_to_the_scenarios() {
        assert!(check_protocol(Level::Store, &json!({"protocol": "reqkey-store/1"})).is_ok());
        assert!(check_protocol(Level::Agent, &json!({"protocol": "reqkey-agent/1"})).is_ok());
        assert!(check_protocol(Level::Agent, &json!({"name": "x"})).is_ok());
    }
}

/// The base URL of an HTTP target (`http://HOST:PORT` or
/// `https://HOST:PORT`), held whole for the client; it formats redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpBase(String);

impl HttpBase {
    /// `http://HOST:PORT` or `https://HOST:PORT` (a trailing `/` dropped);
    /// anything else is the reason it is not one.
    pub fn parse(text: &str) -> Result<HttpBase, String> {
        let text = text.trim().trim_end_matches('/');
        let rest = scheme::of_scheme(text, Scheme::Http).map(|(_, rest)| rest);
        match rest {
            Some(rest) if !rest.is_empty() && !rest.contains('/') => Ok(HttpBase(text.to_owned())),
            Some(rest) if rest.contains('/') => {
                Err("expected http[s]://HOST:PORT, without a path".to_owned())
            }
            _ => Err("expected http://HOST:PORT or https://HOST:PORT".to_owned()),
        }
    }

    /// `scheme://HOST:PORT` from a scheme-less authority (`tls`: https).
    pub fn of_authority(authority: &str, tls: bool) -> Result<HttpBase, String> {
        HttpBase::parse(&format!(
            "{}://{authority}",
            if tls { "https" } else { "http" }
        ))
    }

    /// The URL the client connects to (with any userinfo it carries).
    pub fn url(&self) -> &str {
        &self.0
    }

    /// Is it reached over TLS (`https://`)?
    pub fn is_tls(&self) -> bool {
        scheme::of_scheme(&self.0, Scheme::Http).is_some_and(|(tls, _)| tls)
    }

    /// `HOST:PORT`, userinfo left out (the port defaulted by the scheme).
    pub fn authority(&self) -> String {
        let rest = scheme::split(&self.0).map_or(self.0.as_str(), |u| u.rest);
        let hostport = rest.rsplit('@').next().unwrap_or(rest);
        let has_port = hostport
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        if has_port {
            hostport.to_owned()
        } else {
            format!("{hostport}:{}", if self.is_tls() { 443 } else { 80 })
        }
    }

    /// The target's form without its scheme: `HOST:PORT`, userinfo
    /// redacted, for forms such as `store+https://` to print back.
    pub fn shown_authority(&self) -> String {
        let shown = self.to_string();
        scheme::split(&shown).map_or(shown.clone(), |u| u.rest.to_owned())
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.is_tls() {
            "https"
        } else {
            "http"
        }
    }
}

/// A certificate refusal with the certificate named: the one `base`
/// presents is read in a second handshake that checks nothing and sends
/// nothing (`tls::name_certificate`). Any other error is returned as is.
pub async fn name_refused_certificate(
    e: TargetError,
    base: &HttpBase,
    timeout_ms: u64,
) -> TargetError {
    let TargetError::Certificate(message) = e else {
        return e;
    };
    let timeout = std::time::Duration::from_millis(timeout_ms.min(5_000));
    match crate::targets::tls::name_certificate(&base.authority(), timeout).await {
        Some(named) => TargetError::Certificate(format!("{message}; the certificate: {named}")),
        None => TargetError::Certificate(message),
    }
}

impl std::fmt::Display for HttpBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for HttpBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HttpBase({self})")
    }
}

/// Checks that `body` is JSON in which no object repeats a member name
/// (at any depth). RFC 8259 leaves a repeated name's meaning open, and a
/// parser that keeps the last one would certify `{"ok": A, "ok": B}` as an
/// `ok` answer: where a protocol is strict (SPEC 6
/// `[[wire.store.strict-json]]`), a repeat is a protocol violation.
pub fn no_repeated_members(body: &[u8]) -> Result<(), String> {
    use serde::de::{self, MapAccess, SeqAccess, Visitor};

    struct Walk;
    struct Walker;

    impl<'de> serde::Deserialize<'de> for Walk {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Walk, D::Error> {
            d.deserialize_any(Walker)
        }
    }

    impl<'de> Visitor<'de> for Walker {
        type Value = Walk;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Walk, A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    let shown: String = key.chars().take(64).collect();
                    return Err(de::Error::custom(format!(
                        "the member `{shown}` is repeated in one object"
                    )));
                }
                map.next_value::<Walk>()?;
            }
            Ok(Walk)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Walk, A::Error> {
            while seq.next_element::<Walk>()?.is_some() {}
            Ok(Walk)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Walk, E> {
            Ok(Walk)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Walk, E> {
            Ok(Walk)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Walk, E> {
            Ok(Walk)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Walk, E> {
            Ok(Walk)
        }
        fn visit_str<E>(self, _: &str) -> Result<Walk, E> {
            Ok(Walk)
        }
        fn visit_unit<E>(self) -> Result<Walk, E> {
            Ok(Walk)
        }
    }

    let mut d = serde_json::Deserializer::from_slice(body);
    <Walk as serde::Deserialize>::deserialize(&mut d).map_err(|e| e.to_string())?;
    d.end().map_err(|e| e.to_string())
}

/// Is `content_type` a JSON media type (`application/json`, with or
/// without parameters, or `application/*+json`)?
pub fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

#[cfg(test)]
mod strict_tests {
    use super::*;

    #[test]
    fn repeated_members_and_trailing_bytes_are_refused_at_any_depth() {
        assert!(no_repeated_members(br#"{"ok":{"a":1,"b":[{"c":1e400}]}}"#).is_ok());
        for bad in [
            &br#"{"ok":{"x":1},"ok":{"x":2}}"#[..],
            br#"{"ok":{"run":{"runId":"a","runId":"b"}}}"#,
            br#"{"ok":[{"a":1,"a":1}]}"#,
            br#"{"ok":null} {"ok":null}"#,
            br#"{"ok":null}x"#,
        ] {
            assert!(
                no_repeated_members(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let e = no_repeated_members(br#"{"ok":1,"ok":2}"#).unwrap_err();
        assert!(e.contains("`ok` is repeated"), "{e}");
    }

    #[test]
    fn json_media_types_are_recognized() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/problem+json",
        ] {
            assert!(is_json_media_type(ok), "{ok}");
        }
        for bad in ["text/plain", "text/json", "application/jsonx", ""] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }
}
