//! An `http` step's request written byte for byte (`wire: exact` or
//! `absolute-form`), for the spellings an HTTP library never sends.
//!
//! The harness's client (reqwest over hyper) lower-cases header names and
//! always writes the request target in origin form; RFC 9110 makes names
//! case-insensitive and RFC 9112 lets a client send an absolute-form
//! target, and curl, browsers and proxies do. A server must judge those
//! the same, and only a request written by hand shows whether it does.
//! So the head goes out as the step wrote it (header names as spelt,
//! values' bytes with their blanks), followed by `Host`, `Content-Length`
//! when there is a body, and `Connection: close`, so the answer ends when
//! the server closes. The answer is read whole, bounded by the response
//! cap and the call timeout, and decoded (`Content-Length`, chunked, or
//! to the close). A connection that closes before the head is whole is
//! [`TargetError::Closed`]; an answer that is not HTTP is
//! [`TargetError::NotHttp`]: never a verdict.
//!
//! Over TLS (`https://`), `wire: exact` means the same HTTP/1.1 bytes
//! inside the TLS stream: the spelling judged is the request's, and TLS
//! is only its carrier (the handshake is the one every other exchange
//! makes, `tls.rs`, with the same trust). An absolute-form target names
//! the `https` scheme.

use reqkey_reference::scheme::{self, Scheme};
use std::time::Duration;

use reqkey_scenario::agent_step::Wire;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::targets::access::Access;
use crate::targets::{HttpRequest, HttpResponse, TargetError};

/// A connection the request is written on: TCP, or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The most a response head may take.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Sends `request` to the server at `base`
/// (`http[s]://[userinfo@]HOST:PORT`) as written, and reads its answer
/// whole.
pub async fn exchange(
    base: &str,
    request: &HttpRequest,
    cap: u64,
    timeout_ms: u64,
    link: &Access,
) -> Result<HttpResponse, TargetError> {
    tokio::time::timeout(
        Duration::from_millis(timeout_ms),
        exchange_unbounded(base, request, cap, link),
    )
    .await
    .unwrap_or(Err(TargetError::Timeout { timeout_ms }))
}

/// The authority (`HOST:PORT`) of `base`, userinfo left out, and whether
/// it is reached over TLS.
fn authority(base: &str) -> Result<(&str, bool), TargetError> {
    let (rest, tls) = match scheme::of_scheme(base, Scheme::Http) {
        Some((tls, rest)) => (rest, tls),
        None => {
            return Err(TargetError::BadSpec(
                "a raw wire step needs an http:// or https:// target".into(),
            ))
        }
    };
    let rest = rest.split('/').next().unwrap_or(rest);
    Ok((rest.rsplit('@').next().unwrap_or(rest), tls))
}

/// The request's bytes: head as written, then the body.
pub fn request_bytes(host: &str, request: &HttpRequest) -> Vec<u8> {
    request_bytes_for(host, false, request)
}

/// [`request_bytes`], the absolute form naming `https` when `tls`.
pub fn request_bytes_for(host: &str, tls: bool, request: &HttpRequest) -> Vec<u8> {
    let scheme = if tls { "https" } else { "http" };
    let target = match request.wire {
        Wire::AbsoluteForm => format!("{scheme}://{host}{}", request.path),
        Wire::Library | Wire::Exact | Wire::Chunked => request.path.clone(),
    };
    let chunked = request.wire == Wire::Chunked;
    let mut out = format!("{} {target} HTTP/1.1\r\n", request.method).into_bytes();
    for (name, value) in &request.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    match &request.body {
        Some(_) if chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        Some(body) => {
            out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
        }
        None => {}
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    match &request.body {
        Some(body) if chunked => out.extend_from_slice(&chunks(body)),
        Some(body) => out.extend_from_slice(body),
        None => {}
    }
    out
}

/// What follows an interim (1xx but 101) answer's head at the start of
/// `raw`, if one is there.
fn after_interim(raw: &[u8]) -> Option<&[u8]> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let line = raw[..end].split(|b| *b == b'\r').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut parts = text.splitn(3, ' ');
    let version = parts.next()?;
    let status: u16 = parts.next()?.parse().ok()?;
    (version.starts_with("HTTP/1.") && (100..200).contains(&status) && status != 101)
        .then(|| &raw[end + 4..])
}

/// The size of each chunk of a `wire: chunked` body but the last: small
/// and odd, so that chunk boundaries fall inside tokens and inside
/// multi-byte characters.
const CHUNK_BYTES: usize = 7_001;

/// `body` in the chunked transfer coding (RFC 9112 section 7.1): chunks
/// of [`CHUNK_BYTES`], the last shorter, then the zero-size chunk.
pub fn chunks(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / CHUNK_BYTES * 8 + 16);
    for chunk in body.chunks(CHUNK_BYTES) {
        out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        out.extend_from_slice(chunk);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

async fn exchange_unbounded(
    base: &str,
    request: &HttpRequest,
    cap: u64,
    link: &Access,
) -> Result<HttpResponse, TargetError> {
    let (mut stream, host, tls) = open(base, link).await?;
    stream
        .write_all(&request_bytes_for(&host, tls, request))
        .await
        .map_err(|e| TargetError::Closed(format!("{host}: {e}")))?;
    read_answer(stream.as_mut(), cap, &host).await
}

/// A connection to the server at `base` (TCP, or TLS with the run's
/// trust), its `HOST:PORT` and whether it is TLS.
pub async fn open(base: &str, link: &Access) -> Result<(Box<dyn Io>, String, bool), TargetError> {
    let (host, tls) = authority(base)?;
    let tcp = TcpStream::connect(host)
        .await
        .map_err(|e| TargetError::Unreachable(format!("{host}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if tls {
        let config = link.tls()?;
        match crate::targets::tls::connect(config, crate::targets::tls::host_of(host), tcp).await {
            Ok(s) => Box::new(s),
            Err(e) => {
                return Err(match crate::targets::tls::rustls_cause(&e) {
                    Some(r) if crate::targets::tls::is_certificate_refusal(r) => {
                        TargetError::Certificate(format!(
                            "{host}: {}",
                            crate::targets::tls::reason(r)
                        ))
                    }
                    _ => TargetError::Unreachable(format!("{host}: the TLS handshake failed: {e}")),
                })
            }
        }
    } else {
        Box::new(tcp)
    };
    Ok((stream, host.to_owned(), tls))
}

/// The answer on `stream`, read to the close (bounded by `cap` and the
/// caller's timeout) and decoded.
pub async fn read_answer(
    stream: &mut dyn Io,
    cap: u64,
    host: &str,
) -> Result<HttpResponse, TargetError> {
    let limit = usize::try_from(cap)
        .unwrap_or(usize::MAX)
        .saturating_add(MAX_HEAD_BYTES);
    let mut raw = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    // Bounded: every read grows `raw` toward `limit`, and the caller's
    // timeout ends a server that never closes.
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(n) => n,
            // A reset after the answer was whole (the server closed with
            // unread bytes) still leaves a complete answer to parse.
            Err(_) if !raw.is_empty() => break,
            Err(e) => return Err(TargetError::Closed(format!("{host}: {e}"))),
        };
        if n == 0 {
            break;
        }
        if raw.len() + n > limit {
            return Err(TargetError::TooLarge { cap });
        }
        let before = raw.len();
        raw.extend_from_slice(&chunk[..n]);
        // The harness's memory ceiling, each time the answer crosses
        // another 256 KiB (as `transport::read_body` does).
        if before >> 18 != raw.len() >> 18 {
            if let Some(why) = crate::memory::over() {
                return Err(TargetError::OverMemory(why));
            }
        }
    }
    parse_response(&raw, cap).map_err(|e| match e {
        Parse::Incomplete(m) => TargetError::Closed(format!("{host}: {m}")),
        Parse::NotHttp(m) => TargetError::NotHttp(format!("{host}: {m}")),
        Parse::TooLarge => TargetError::TooLarge { cap },
    })
}

/// Why bytes read are not a whole answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse {
    /// The connection closed before the answer was whole.
    Incomplete(String),
    /// What came back is not an HTTP/1.1 answer.
    NotHttp(String),
    /// The body is over the cap.
    TooLarge,
}

/// An HTTP/1.1 answer read to the connection's close.
pub fn parse_response(mut raw: &[u8], cap: u64) -> Result<HttpResponse, Parse> {
    // Interim answers (RFC 9110 section 15.2: `100 Continue` to an
    // `Expect: 100-continue`, `103 Early Hints`) come before the final one.
    while let Some(rest) = after_interim(raw) {
        raw = rest;
    }
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| Parse::Incomplete("the answer's head never ended".into()))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|_| version.starts_with("HTTP/1."))
        .ok_or_else(|| Parse::NotHttp("no HTTP/1.x status line".into()))?;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| Parse::NotHttp("a header line without a colon".into()))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let header = |n: &str| {
        headers
            .iter()
            .find(|(name, _)| name == n)
            .map(|(_, v)| v.as_str())
    };
    let rest = &raw[end + 4..];
    let chunked = header("transfer-encoding").is_some_and(|v| {
        v.rsplit(',')
            .next()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
    });
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| Parse::NotHttp("a Content-Length that is not a number".into()))?;
        if rest.len() < length {
            return Err(Parse::Incomplete(format!(
                "{} of {length} body bytes before the close",
                rest.len()
            )));
        }
        rest[..length].to_vec()
    } else {
        rest.to_vec()
    };
    if body.len() as u64 > cap {
        return Err(Parse::TooLarge);
    }
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// A chunked body (RFC 9112 7.1), read to its last chunk.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, Parse> {
    let mut body = Vec::new();
    // Bounded: every round consumes at least a size line from `rest`.
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| Parse::Incomplete("a chunk size line never ended".into()))?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| Parse::NotHttp("a chunk size that is not hexadecimal".into()))?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            return Err(Parse::Incomplete("a chunk cut short".into()));
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_head_goes_out_as_written() {
        let request = HttpRequest {
            method: "POST".into(),
            path: "/sessions/s/start".into(),
            headers: vec![("X-HELIX-REQUEST-KEY".into(), b" k1 ".to_vec())],
            body: Some(b"{}".to_vec()),
            wire: Wire::AbsoluteForm,
            ..HttpRequest::default()
        };
        let bytes = request_bytes("127.0.0.1:9", &request);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "POST http://127.0.0.1:9/sessions/s/start HTTP/1.1\r\nX-HELIX-REQUEST-KEY:  k1 \r\n\
             Host: 127.0.0.1:9\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        );
        assert_eq!(authority("http://u:p@h:1").unwrap(), ("h:1", false));
        assert_eq!(authority("https://h:2").unwrap(), ("h:2", true));
        let tls = String::from_utf8(request_bytes_for("h:2", true, &request)).unwrap();
        assert!(
            tls.starts_with("POST https://h:2/sessions/s/start HTTP/1.1\r\n"),
            "{tls}"
        );
    }

    /// A `wire: chunked` body is the same bytes in chunks cut inside
    /// characters, and reads back whole.
    #[test]
    fn a_chunked_body_reads_back_as_its_bytes() {
        let body = "é🦀x".repeat(3_000).into_bytes();
        let request = HttpRequest {
            method: "POST".into(),
            path: "/p".into(),
            body: Some(body.clone()),
            wire: Wire::Chunked,
            ..HttpRequest::default()
        };
        let bytes = request_bytes("h:1", &request);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            text.contains("Transfer-Encoding: chunked\r\n"),
            "{text:.200}"
        );
        assert!(!text.contains("Content-Length"));
        let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(bytes[head_end..].starts_with(b"1b59\r\n"));
        assert_eq!(dechunk(&bytes[head_end..]).unwrap(), body);
        assert_eq!(chunks(b""), b"0\r\n\r\n");
    }

    #[test]
    fn answers_are_read_by_length_chunks_or_close() {
        let by_length = b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nX-A: b\r\n\r\n{}";
        let r = parse_response(by_length, 100).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, &b"{}"[..]));
        assert_eq!(r.headers[1], ("x-a".to_owned(), "b".to_owned()));
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked, 100).unwrap().body, b"abcde");
        let continued =
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        let r = parse_response(continued, 100).unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, b"ok".as_slice()));
        let to_close = b"HTTP/1.1 200 OK\r\n\r\nall of it";
        assert_eq!(parse_response(to_close, 100).unwrap().body, b"all of it");
        assert!(matches!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", 100),
            Err(Parse::Incomplete(_))
        ));
        assert!(matches!(
            parse_response(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                100
            ),
            Err(Parse::Incomplete(_))
        ));
        assert!(matches!(
            parse_response(b"SSH-2.0\r\n\r\n", 100),
            Err(Parse::NotHttp(_))
        ));
        assert_eq!(parse_response(to_close, 3).unwrap_err(), Parse::TooLarge);
    }
}
