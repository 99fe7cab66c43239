//! Requests sent so that they arrive together: a burst at its narrowest
//! (issue 57; issue 56 sends every burst and batch of the idem and agent
//! fuzzers through it on every HTTP target: `IdemTarget`,
//! `HttpAgentTarget`, an API map's `MappedTarget`).
//!
//! Tasks released by a barrier still leave a few hundred microseconds
//! apart, each with its own connect and handshake; a race that shows only
//! when duplicates reach the app within microseconds is then seldom met.
//! So each request of a burst gets a connection of its own, opened (TLS
//! handshake included) and written but for its last byte first; once every
//! one is there and a settle as long as the slowest took to open (1 to 50
//! ms) has let those bytes cross, the last bytes go out together, and each
//! answer is read whole (`Connection: close`, bounded by the response cap
//! and the call timeout, decoded by `wire.rs`). Each request is answered with the instant its last byte
//! left and the instant its answer was whole: the window the judge reads.
//! A server may answer before a large body is whole (a refusal for the
//! key alone) and close: a write that fails then is not the request's
//! end, its answer is still read, and only a request neither written
//! whole nor answered is an error.
//!
//! What a request carries is what `http_agent.rs` would send: the run's
//! credentials and its `--max-rps` turn (taken before its connection), the
//! target's origin only (the caller's path is checked there first).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::sync::Barrier;

use crate::targets::access::Access;
use crate::targets::wire::{open, read_answer, request_bytes_for, Io};
use crate::targets::{HttpRequest, TargetError, Timed};

/// The most requests sent together (a burst of the battery is 8).
pub const MAX_TOGETHER: usize = 64;
/// How long the written heads are given to cross before the last bytes
/// go: as long as the slowest connection of the burst took to open (a
/// round trip or two, its TLS handshake included), within these bounds.
const MIN_SETTLE: Duration = Duration::from_millis(1);
const MAX_SETTLE: Duration = Duration::from_millis(50);

/// Sends `requests` to the server at `base` (`http[s]://HOST:PORT`) so
/// that they arrive together; answers in the order given. `requests`
/// carry their credentials already; each takes its `--max-rps` turn here.
pub async fn send_together(
    base: &str,
    requests: Vec<HttpRequest>,
    cap: u64,
    timeout_ms: u64,
    link: &Access,
) -> Vec<Result<Timed, TargetError>> {
    if requests.len() > MAX_TOGETHER {
        return requests
            .iter()
            .map(|_| {
                Err(TargetError::Unsupported(format!(
                    "more than {MAX_TOGETHER} requests sent together"
                )))
            })
            .collect();
    }
    let n = requests.len();
    // The slowest connection's opening time, in µs.
    let slowest_open_us = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let written = Arc::new(Barrier::new(n.max(1)));
    let release = Arc::new(Barrier::new(n.max(1)));
    let timeout = Duration::from_millis(timeout_ms);
    let mut tasks = Vec::with_capacity(n);
    for request in requests {
        let (base, link) = (base.to_owned(), link.clone());
        let (written, release) = (Arc::clone(&written), Arc::clone(&release));
        let slowest = Arc::clone(&slowest_open_us);
        tasks.push(tokio::spawn(async move {
            // The head but its last byte, bounded; a failure still meets
            // both barriers, so that the others are not kept waiting.
            let prepared = tokio::time::timeout(timeout, async {
                link.pace().await;
                let opening = Instant::now();
                let (mut stream, host, tls) = open(&base, &link).await?;
                let took = u64::try_from(opening.elapsed().as_micros()).unwrap_or(u64::MAX);
                slowest.fetch_max(took, std::sync::atomic::Ordering::Relaxed);
                let bytes = request_bytes_for(&host, tls, &request);
                let (head, last) = bytes.split_at(bytes.len().saturating_sub(1));
                // A server may answer before the body is whole (a refusal
                // for the key alone) and close: its answer is still read.
                let cut = write_flushed(stream.as_mut(), head, &host).await.err();
                Ok::<_, TargetError>((stream, host, last.to_vec(), cut))
            })
            .await
            .unwrap_or(Err(TargetError::Timeout { timeout_ms }));
            if written.wait().await.is_leader() {
                let us = slowest.load(std::sync::atomic::Ordering::Relaxed);
                let settle = Duration::from_micros(us).clamp(MIN_SETTLE, MAX_SETTLE);
                tokio::time::sleep(settle).await;
            }
            release.wait().await;
            let (mut stream, host, last, mut cut) = prepared?;
            let sent = Instant::now();
            let answered = tokio::time::timeout(timeout, async {
                if cut.is_none() {
                    cut = write_flushed(stream.as_mut(), &last, &host).await.err();
                }
                match (read_answer(stream.as_mut(), cap, &host).await, cut) {
                    (Ok(answer), _) => Ok(answer),
                    // Neither written whole nor answered: the write's error.
                    (Err(_), Some(e)) => Err(e),
                    (Err(e), None) => Err(e),
                }
            })
            .await
            .unwrap_or(Err(TargetError::Timeout { timeout_ms }))?;
            Ok(Timed {
                response: answered,
                sent,
                answered: Instant::now(),
            })
        }));
    }
    let mut out = Vec::with_capacity(n);
    for task in tasks {
        out.push(
            task.await
                .unwrap_or_else(|e| Err(TargetError::Closed(format!("a request's task: {e}")))),
        );
    }
    out
}

async fn write_flushed(stream: &mut dyn Io, bytes: &[u8], host: &str) -> Result<(), TargetError> {
    stream
        .write_all(bytes)
        .await
        .map_err(|e| TargetError::Closed(format!("{host}: {e}")))?;
    stream
        .flush()
        .await
        .map_err(|e| TargetError::Closed(format!("{host}: {e}")))
}
