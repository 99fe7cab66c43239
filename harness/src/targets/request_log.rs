//! `--request-log FILE` (run, certify, fuzz): one JSON line per request
//! the harness sends to the target (issue 56), so that what reqkey's
//! traffic looks like can be read, not assumed.
//!
//! Each line: `method`, `path`, `headers` (the names as they went out,
//! in order), `key` (the `Idempotency-Key` or `X-Helix-Request-Key`
//! value as sent, lossy UTF-8; absent without one), `userAgent`,
//! `bodyBytes` and `wire` (`library`: through the HTTP library, which
//! sends names in lower case; `exact`: written byte for byte; `together`:
//! a burst whose last bytes left at once). Header values other than the
//! key and the user agent are never written (credentials among them),
//! and every line goes through `secrets::scrub` like every other output.
//! Lines are written as requests leave (under a lock, one write each), so
//! the order is the order of sending; a write error stops the log, never
//! the run.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use serde_json::json;

/// The header names whose value is the request key.
const KEY_HEADERS: [&str; 2] = ["idempotency-key", "x-helix-request-key"];

/// An open request log.
#[derive(Debug)]
pub struct RequestLog {
    out: Mutex<Option<std::fs::File>>,
}

impl RequestLog {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<RequestLog, String> {
        let file = std::fs::File::create(path)
            .map_err(|e| format!("--request-log {}: {e}", path.display()))?;
        Ok(RequestLog {
            out: Mutex::new(Some(file)),
        })
    }

    /// Writes the line of one request.
    pub fn record(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, Vec<u8>)],
        body_bytes: usize,
        wire: &str,
    ) {
        let line = line(method, path, headers, body_bytes, wire);
        if let Ok(mut out) = self.out.lock() {
            let failed = match out.as_mut() {
                Some(f) => f.write_all(line.as_bytes()).is_err(),
                None => false,
            };
            if failed {
                *out = None;
            }
        }
    }
}

/// The JSON line of one request (newline included).
pub fn line(
    method: &str,
    path: &str,
    headers: &[(String, Vec<u8>)],
    body_bytes: usize,
    wire: &str,
) -> String {
    let value_of = |names: &[&str]| {
        headers
            .iter()
            .find(|(n, _)| names.iter().any(|k| n.eq_ignore_ascii_case(k)))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    };
    let mut v = json!({
        "method": method,
        "path": path,
        "headers": headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        "userAgent": value_of(&["user-agent"]),
        "bodyBytes": body_bytes,
        "wire": wire,
    });
    if let (Some(key), Some(obj)) = (value_of(&KEY_HEADERS), v.as_object_mut()) {
        obj.insert("key".into(), key.into());
    }
    let mut text = crate::secrets::scrub_json(&v.to_string());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_line_names_headers_as_spelt_and_shows_no_other_value() {
        let headers = vec![
            ("IDEMPOTENCY-KEY".to_owned(), b"\"k 1\"".to_vec()),
            ("Authorization".to_owned(), b"Bearer s3cr3t-token".to_vec()),
            ("User-Agent".to_owned(), b"curl/8.5.0".to_vec()),
        ];
        let l = line("POST", "/orders", &headers, 12, "exact");
        assert!(l.ends_with('\n'));
        let v: serde_json::Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["headers"][0], "IDEMPOTENCY-KEY");
        assert_eq!(v["key"], "\"k 1\"");
        assert_eq!(v["userAgent"], "curl/8.5.0");
        assert_eq!(v["bodyBytes"], 12);
        assert!(!l.contains("s3cr3t"), "{l}");
        let none = line("GET", "/x", &[], 0, "library");
        assert!(!none.contains("\"key\""), "{none}");
    }
}
