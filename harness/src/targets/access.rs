//! What every request to a target carries and keeps, whatever its level:
//! the TLS trust (`--cacert`, `tls.rs`), the credentials (`--header`,
//! curl's spelling), and the pace (`--max-rps`).
//!
//! Parsed once at the command line into a [`Access`] that every HTTP target,
//! the exact-bytes writer and the proxy's upstream client share. A
//! credential's value is registered as a secret when it is parsed
//! (`secrets.rs`), so that no output shows it even where an error quotes
//! it; it is added at the lowest layer, under the request a report shows.
//!
//! A value written `env:NAME` is read from the environment variable NAME
//! (so that a token needs to be on no command line and in no file); an
//! unset variable is a usage error naming the variable, never the value.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::ClientConfig;
use tokio::time::Instant;

use crate::targets::{tls, TargetError};

/// How every request reaches a target.
#[derive(Clone, Default)]
pub struct Access(Arc<Inner>);

#[derive(Default)]
struct Inner {
    /// `None`: the system's roots only ([`tls::default_config`]).
    tls: Option<Arc<ClientConfig>>,
    /// The `--cacert` file, for messages.
    cacert: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
    pace: Option<Pace>,
    /// `--request-log`: where every request is written as it leaves.
    log: Option<Arc<crate::targets::request_log::RequestLog>>,
}

impl Access {
    /// A link trusting the system's roots and `cacert`, sending `headers`
    /// (`NAME: VALUE` each, as [`parse_header`] reads them) on every
    /// request, at most `max_rps` requests a second.
    pub fn new(
        cacert: Option<&Path>,
        headers: &[String],
        max_rps: Option<u32>,
    ) -> Result<Access, String> {
        let tls = cacert.map(|p| tls::client_config(Some(p))).transpose()?;
        let headers = headers
            .iter()
            .map(|h| parse_header(h))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Access(Arc::new(Inner {
            tls,
            cacert: cacert.map(|p| p.display().to_string()),
            headers,
            pace: max_rps.map(Pace::new),
            log: None,
        })))
    }

    /// This link writing every request to `log` (`--request-log`).
    pub fn logging_to(self, log: crate::targets::request_log::RequestLog) -> Access {
        let inner = Arc::try_unwrap(self.0).unwrap_or_else(|shared| Inner {
            tls: shared.tls.clone(),
            cacert: shared.cacert.clone(),
            headers: shared.headers.clone(),
            pace: shared.pace.as_ref().map(|p| Pace::new(p.rps)),
            log: None,
        });
        Access(Arc::new(Inner {
            log: Some(Arc::new(log)),
            ..inner
        }))
    }

    /// Writes one request to the `--request-log`, if there is one: its
    /// headers as they go out (credentials and `User-Agent` included).
    pub fn log_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, Vec<u8>)],
        body_bytes: usize,
        wire: &str,
    ) {
        if let Some(log) = &self.0.log {
            log.record(method, path, headers, body_bytes, wire);
        }
    }

    /// The TLS client configuration every HTTPS exchange uses.
    pub fn tls(&self) -> Result<Arc<ClientConfig>, TargetError> {
        match &self.0.tls {
            Some(config) => Ok(Arc::clone(config)),
            None => tls::default_config().map_err(TargetError::BadSpec),
        }
    }

    /// The `--cacert` file, if one was given.
    pub fn cacert(&self) -> Option<&str> {
        self.0.cacert.as_deref()
    }

    /// The credential headers sent on every request.
    pub fn headers(&self) -> &[(String, Vec<u8>)] {
        &self.0.headers
    }

    /// `headers` of a request with the credentials and the run's
    /// `User-Agent` (`user_agent.rs`) added (a header the request already
    /// carries, by name, is left as the request has it).
    pub fn with_credentials(&self, headers: &[(String, Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
        let mut out = headers.to_vec();
        for (name, value) in self.headers() {
            if !out.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                out.push((name.clone(), value.clone()));
            }
        }
        crate::targets::user_agent::add_to(&mut out);
        out
    }

    /// The `--max-rps` bound, if any.
    pub fn max_rps(&self) -> Option<u32> {
        self.0.pace.as_ref().map(|p| p.rps)
    }

    /// Waits for this request's turn under `--max-rps` (at once without
    /// one): until fewer than `max_rps` requests left in the last second
    /// (and [`PACE_MARGIN`]). Bounded: each round either takes its turn or
    /// sleeps until the oldest of those leaves the window.
    pub async fn pace(&self) {
        if let Some(pace) = &self.0.pace {
            while let Err(at) = pace.take(Instant::now()) {
                tokio::time::sleep_until(at).await;
            }
        }
    }
}

impl fmt::Debug for Access {
    /// Names the credentials' headers, never their values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Access")
            .field("cacert", &self.0.cacert)
            .field("headers", &names)
            .field("max_rps", &self.max_rps())
            .finish()
    }
}

/// At most `rps` requests in any one-second window, bursts of up to `rps`
/// at once: a request leaves when fewer than `rps` left in the second (and
/// [`PACE_MARGIN`]) before it, counted by when they really left (a request
/// that woke late does not let the next ones crowd in behind it). So a
/// race scenario's burst still starts at once under a rate that allows
/// it, and no window of a second, wherever it starts, holds more than
/// `rps` requests as the harness sends them (issue 57: a bucket that
/// refilled while it drained let twice the rate into the first second).
struct Pace {
    rps: u32,
    /// When the last `rps` requests left, oldest first (bounded by `rps`).
    left: Mutex<std::collections::VecDeque<Instant>>,
}

/// How much later than one second after the request `rps` places before
/// it a request leaves: the jitter between the harness's send and the
/// target's read, so that the target too sees no more than `rps` in a
/// second.
pub const PACE_MARGIN: Duration = Duration::from_millis(50);

impl Pace {
    fn new(rps: u32) -> Pace {
        let rps = rps.max(1);
        Pace {
            rps,
            left: Mutex::new(std::collections::VecDeque::with_capacity(
                rps.min(4_096) as usize
            )),
        }
    }

    /// Takes a turn at `now` (`Ok`: the request leaves), or says when to
    /// ask again. Asked with a clock that never goes back.
    fn take(&self, now: Instant) -> Result<(), Instant> {
        let mut left = self
            .left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = left.back().map_or(now, |last| now.max(*last));
        if left.len() >= self.rps as usize {
            let free_at = left
                .front()
                .map_or(now, |oldest| *oldest + Duration::from_secs(1) + PACE_MARGIN);
            if free_at > now {
                return Err(free_at);
            }
            left.pop_front();
        }
        left.push_back(now);
        Ok(())
    }
}

/// `NAME: VALUE` (curl's `--header` spelling) into a header, its value
/// read from the environment when written `env:VAR`, and registered as a
/// secret (with the credentials after an auth scheme, `Bearer TOKEN`).
/// A mistake names the header and never the value.
pub fn parse_header(text: &str) -> Result<(String, Vec<u8>), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or("--header takes `NAME: VALUE` (a colon after the name; the text given is not shown, it may hold a credential)")?;
    let name = name.trim();
    // A name that is not a token may hold the credential itself
    // (`-H 'Authorization=Bearer X:Y'` splits inside the token): never quoted.
    reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        "--header takes `NAME: VALUE`: the text before the first colon is not a header \
         name (not shown, it may hold a credential): write the header's name, a colon, then its value"
            .to_owned()
    })?;
    let value = resolve_value(name, value.trim())?;
    reqwest::header::HeaderValue::from_bytes(value.as_bytes())
        .map_err(|_| format!("--header {name}: the value cannot be sent in HTTP/1.1"))?;
    register_credential(&value);
    Ok((name.to_owned(), value.into_bytes()))
}

/// A header value as written, or read from the environment (`env:VAR`).
pub fn resolve_value(name: &str, written: &str) -> Result<String, String> {
    let Some(var) = written.strip_prefix("env:") else {
        return Ok(written.to_owned());
    };
    if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(format!(
            "header {name}: `env:{var}` does not name an environment variable"
        ));
    }
    std::env::var(var)
        .map_err(|_| format!("header {name}: the environment variable {var} is not set"))
}

/// Registers a credential's value as a secret, and the credentials after
/// its auth scheme (`Bearer TOKEN`, `Basic B64`) on their own.
pub fn register_credential(value: &str) {
    crate::secrets::register_secret(value);
    if let Some((_, credentials)) = value.split_once(' ') {
        crate::secrets::register_secret(credentials.trim());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn headers_parse_in_curls_spelling_and_read_the_environment() {
        let (n, v) = parse_header("X-Tenant: acme-corp").unwrap();
        assert_eq!((n.as_str(), v.as_slice()), ("X-Tenant", &b"acme-corp"[..]));
        std::env::set_var("REQKEY_LINK_TEST_TOKEN", "Bearer tok-from-env-123");
        let (_, v) = parse_header("Authorization: env:REQKEY_LINK_TEST_TOKEN").unwrap();
        assert_eq!(v, b"Bearer tok-from-env-123");
        assert_eq!(crate::secrets::scrub("saw tok-from-env-123"), "saw ***");
        let e = parse_header("Authorization: env:REQKEY_LINK_UNSET_VAR").unwrap_err();
        assert!(e.contains("REQKEY_LINK_UNSET_VAR is not set"), "{e}");
        assert!(parse_header("no colon here").is_err());
        let e = parse_header("Bad Name: s3cr3t-value").unwrap_err();
        assert!(!e.contains("s3cr3t-value"), "{e}");
        // Issue 57: `=` for `:` puts the token before the first colon.
        let e = parse_header("Authorization=Bearer s3cr3t-a:s3cr3t-b").unwrap_err();
        assert!(!e.contains("s3cr3t") && !e.contains("Bearer"), "{e}");
        assert!(e.contains("not a header name"), "{e}");
        let e = parse_header("X-A: bad\u{1}s3cr3t").unwrap_err();
        assert!(!e.contains("s3cr3t"), "{e}");
    }

    #[test]
    fn a_request_keeps_its_own_header_and_gets_the_others() {
        let link = Access::new(None, &["Authorization: Bearer a-b-c-d".into()], None).unwrap();
        let out = link.with_credentials(&[("x-a".into(), b"1".to_vec())]);
        // Its own, the credential, and the run's User-Agent.
        assert_eq!(out.len(), 3);
        assert_eq!(out[2].0, "User-Agent");
        let own = link.with_credentials(&[
            ("authorization".into(), b"mine".to_vec()),
            ("user-agent".into(), b"me".to_vec()),
        ]);
        assert_eq!(
            own,
            vec![
                ("authorization".to_owned(), b"mine".to_vec()),
                ("user-agent".to_owned(), b"me".to_vec())
            ]
        );
        assert!(!format!("{link:?}").contains("a-b-c-d"));
    }

    #[test]
    fn the_pace_allows_a_burst_and_no_window_of_a_second_holds_more() {
        let pace = Pace::new(4);
        let start = Instant::now();
        let second = Duration::from_secs(1) + PACE_MARGIN;
        // A burst of 4 at once, then the fifth waits for the first's second.
        for _ in 0..4 {
            assert_eq!(pace.take(start), Ok(()));
        }
        assert_eq!(pace.take(start), Err(start + second));
        // One woke late: the ones after it wait for its second, not for
        // the slot it was given.
        let late = start + Duration::from_millis(1_300);
        assert_eq!(pace.take(late), Ok(()));
        for _ in 0..3 {
            assert_eq!(pace.take(late), Ok(()));
        }
        assert_eq!(pace.take(late), Err(late + second));
        let mut left: Vec<Duration> = vec![Duration::ZERO; 4];
        left.extend([late - start; 4]);
        for (i, t) in left.iter().enumerate() {
            let within = left[i..]
                .iter()
                .filter(|u| **u - *t < Duration::from_secs(1));
            assert!(within.count() <= 4, "{left:?}");
        }
        // Long after, a burst goes at once again.
        let later = start + Duration::from_secs(10);
        for _ in 0..4 {
            assert_eq!(pace.take(later), Ok(()));
        }
    }
}
