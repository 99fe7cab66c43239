//! Per-answer latency of an HTTP target, and the Nagle + delayed-ACK stall it names.
//!
//! Why: a server that writes an answer's head and its body in two sends,
//! without `TCP_NODELAY`, has its second send held back by Nagle's
//! algorithm until the client acknowledges the first, and the client
//! delays that ACK (about 40 ms on Linux). Python's standard-library HTTP
//! server does exactly this: certify took 99 s instead of 2.2 s and
//! `bench lookup` said 44 ms per lookup instead of 0.2 ms, and nothing
//! said why (issue 41). The stall has a shape no slow server has: the
//! head arrives at once and the (small) body about 40 ms after it, so the
//! time goes between head and body, not before the head.
//!
//! The rule ([`nagle_stall`]): among the last [`KEPT`] answers, the small
//! ones (a body of at most [`SMALL_BODY_BYTES`]) whose body ended at least
//! [`STALL_MS`] after the head, that wait being at least
//! [`STALL_SHARE_PERCENT`]% of the answer's whole time, are *stalled*; the
//! warning needs at least [`MIN_STALLED`] of them, and at least
//! [`MIN_STALLED_PERCENT`]% of the small answers. A server that is slow to
//! decide (the time before the head) never matches; a rare stall does not
//! either. Not the median of all answers: fresh connections start in the
//! client's quick-ACK mode and answer fast, so a run that opens many (the
//! seeding of `bench lookup`) would hide the stall of every later one.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// How many recent answers the log keeps (a bounded ring).
pub const KEPT: usize = 512;
/// Stalled answers the rule needs before it says anything.
pub const MIN_STALLED: usize = 10;
/// The least share of the small answers that must be stalled.
pub const MIN_STALLED_PERCENT: usize = 25;
/// A body of at most this many bytes fits in one TCP segment on loopback
/// and would arrive with its head if the server sent them together.
pub const SMALL_BODY_BYTES: usize = 4096;
/// The delayed-ACK timer is 40 ms on Linux (200 ms on some systems);
/// a little below it, to keep the rule on a loaded machine's 38 ms.
pub const STALL_MS: f64 = 35.0;
/// The head-to-body wait's share of the whole answer time.
pub const STALL_SHARE_PERCENT: f64 = 70.0;

/// One answer's timing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// From sending the request to the head's arrival.
    pub head_ms: f64,
    /// From the head's arrival to the body's end.
    pub body_ms: f64,
    pub body_bytes: usize,
}

/// A named warning about a target, shown by every reporter; it never
/// changes a verdict or an exit code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetWarning {
    /// Stable name (`nagle_stall`).
    pub code: &'static str,
    /// What was measured.
    pub message: String,
    /// What to change.
    pub fix: String,
}

impl TargetWarning {
    /// The codes reqkey writes, for reading a report back (`certify merge`).
    pub const CODES: [&'static str; 2] = ["nagle_stall", "listen_queue"];

    /// `code` as one of [`Self::CODES`], if it is one.
    pub fn known_code(code: &str) -> Option<&'static str> {
        Self::CODES.iter().copied().find(|c| *c == code)
    }

    /// One line: `warning[code]: message; fix: ...`.
    pub fn line(&self) -> String {
        format!("warning[{}]: {} Fix: {}", self.code, self.message, self.fix)
    }
}

/// The recent answers of one target (thread-safe, bounded).
#[derive(Debug, Default)]
pub struct LatencyLog {
    samples: Mutex<VecDeque<Sample>>,
}

impl LatencyLog {
    pub fn record(&self, head: Duration, body: Duration, body_bytes: usize) {
        let sample = Sample {
            head_ms: head.as_secs_f64() * 1000.0,
            body_ms: body.as_secs_f64() * 1000.0,
            body_bytes,
        };
        let Ok(mut samples) = self.samples.lock() else {
            return;
        };
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The warnings the answers so far call for.
    pub fn warnings(&self) -> Vec<TargetWarning> {
        let Ok(samples) = self.samples.lock() else {
            return Vec::new();
        };
        let samples: Vec<Sample> = samples.iter().copied().collect();
        nagle_stall(&samples).into_iter().collect()
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The Nagle + delayed-ACK warning, when `samples` have its shape (see
/// the module docs for the rule).
pub fn nagle_stall(samples: &[Sample]) -> Option<TargetWarning> {
    let small: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.body_bytes <= SMALL_BODY_BYTES)
        .collect();
    let stalled: Vec<&&Sample> = small
        .iter()
        .filter(|s| {
            s.body_ms >= STALL_MS
                && s.body_ms * 100.0 >= STALL_SHARE_PERCENT * (s.head_ms + s.body_ms)
        })
        .collect();
    if stalled.len() < MIN_STALLED || stalled.len() * 100 < MIN_STALLED_PERCENT * small.len() {
        return None;
    }
    let body = median(stalled.iter().map(|s| s.body_ms).collect());
    let whole = median(stalled.iter().map(|s| s.head_ms + s.body_ms).collect());
    Some(TargetWarning {
        code: TargetWarning::CODES[0],
        message: format!(
            "the target's small answers stall: in {} of {} answers of at most {SMALL_BODY_BYTES} bytes, the body arrived a median {body:.0} ms after the head (the whole answer took {whole:.0} ms). That is the shape of Nagle's algorithm meeting the client's delayed ACK (about 40 ms): the server writes an answer's head and body in two sends on a socket without TCP_NODELAY. The verdicts stand; the run is just that much slower.",
            stalled.len(),
            small.len()
        ),
        fix: "set TCP_NODELAY on every accepted socket (Python: `conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)`, or in a `http.server` handler's `setup()`; Node: `socket.setNoDelay(true)`), or write the head and the body in one send".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(head_ms: f64, body_ms: f64, bytes: usize, n: usize) -> Vec<Sample> {
        (0..n)
            .map(|_| Sample {
                head_ms,
                body_ms,
                body_bytes: bytes,
            })
            .collect()
    }

    #[test]
    fn small_answers_whose_body_lags_40_ms_are_named() {
        let w = nagle_stall(&samples(0.3, 41.0, 120, 20)).unwrap();
        assert_eq!(w.code, "nagle_stall");
        assert!(w.fix.contains("TCP_NODELAY"), "{}", w.fix);
        assert!(w.message.contains("median 41 ms"), "{}", w.message);
        // Quick answers (fresh connections in quick-ACK mode) do not hide it.
        let mut mixed = samples(0.3, 0.2, 120, 60);
        mixed.extend(samples(0.3, 40.0, 120, 40));
        let w = nagle_stall(&mixed).unwrap();
        assert!(w.message.contains("in 40 of 100 answers"), "{}", w.message);
    }

    #[test]
    fn fast_slow_to_decide_or_large_answers_are_not() {
        // Fast: nothing to say.
        assert_eq!(nagle_stall(&samples(0.3, 0.1, 120, 50)), None);
        // Slow before the head (a server that takes 45 ms to decide).
        assert_eq!(nagle_stall(&samples(45.0, 0.1, 120, 50)), None);
        // Slow both before and after the head: the wait is not the body's.
        assert_eq!(nagle_stall(&samples(60.0, 40.0, 120, 50)), None);
        // Large bodies take their time.
        assert_eq!(nagle_stall(&samples(0.3, 40.0, 100_000, 50)), None);
        // Too few answers to say.
        assert_eq!(nagle_stall(&samples(0.3, 40.0, 120, MIN_STALLED - 1)), None);
        // Rare stalls only: fewer than 10, or under a quarter.
        let mut mixed = samples(0.3, 0.2, 120, 11);
        mixed.extend(samples(0.3, 40.0, 120, 9));
        assert_eq!(nagle_stall(&mixed), None);
        let mut mixed = samples(0.3, 0.2, 120, 100);
        mixed.extend(samples(0.3, 40.0, 120, 20));
        assert_eq!(nagle_stall(&mixed), None);
    }

    #[test]
    fn the_log_keeps_the_last_answers_only() {
        let log = LatencyLog::default();
        for _ in 0..KEPT {
            log.record(Duration::from_micros(300), Duration::from_millis(40), 100);
        }
        assert_eq!(log.warnings().len(), 1);
        for _ in 0..KEPT {
            log.record(Duration::from_micros(300), Duration::from_micros(100), 100);
        }
        assert!(
            log.warnings().is_empty(),
            "the stall is older than the ring"
        );
    }
}
