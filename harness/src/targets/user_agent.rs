//! The `User-Agent` every request of a run carries (issue 56): one of a
//! few that real HTTP clients send, drawn from the run's seed.
//!
//! A request without a `User-Agent`, or with one naming reqkey, is one a
//! server can tell from its clients' and treat apart (a WAF rule, a
//! middleware that skips "bots", a rate limiter keyed on it). So every
//! request of a run says what a common client says, the same one for the
//! whole run (a client keeps its identity), chosen by the seed so that a
//! replay sends the same. Process-wide: every target of a run shares it.
//! A request that sets its own `User-Agent` (a scenario's header) keeps it.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What common HTTP clients send, as they send it.
pub const USER_AGENTS: [&str; 6] = [
    "curl/8.5.0",
    "python-requests/2.31.0",
    "okhttp/4.12.0",
    "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
    "Go-http-client/1.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
];

static CHOSEN: AtomicUsize = AtomicUsize::new(0);

/// Draws the run's `User-Agent` from `seed`.
pub fn choose(seed: u64) {
    let i = (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % USER_AGENTS.len();
    CHOSEN.store(i, Ordering::Relaxed);
}

/// The run's `User-Agent`.
pub fn current() -> &'static str {
    USER_AGENTS[CHOSEN.load(Ordering::Relaxed) % USER_AGENTS.len()]
}

/// `headers` with the run's `User-Agent` added, unless they carry one.
pub fn add_to(headers: &mut Vec<(String, Vec<u8>)>) {
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("user-agent"))
    {
        headers.push(("User-Agent".to_owned(), current().as_bytes().to_vec()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_names_a_common_client_and_never_reqkey() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..64 {
            choose(seed);
            let ua = current();
            assert!(!ua.to_ascii_lowercase().contains("reqkey"), "{ua}");
            seen.insert(ua);
        }
        assert!(seen.len() > 2, "{seen:?}");
        let mut own = vec![("user-agent".to_owned(), b"mine".to_vec())];
        add_to(&mut own);
        assert_eq!(own.len(), 1);
        let mut none = Vec::new();
        add_to(&mut none);
        assert_eq!(none[0].0, "User-Agent");
    }
}
