//! How large the bodies of an idem program are (issue 56): tiny to large,
//! drawn from the seed.
//!
//! A check-then-set race in an app that parses its body before it looks
//! the key up shows with large bodies and hides with small ones: how long
//! a request takes to read and parse decides how close its duplicates come
//! to the check. So each program of the idem fuzz pass (each generated
//! case, each program of the battery) has a body size class drawn from the
//! run's seed and the program's index, and every request of it carries a
//! body grown to that class: a JSON object gets one more member (`notes`, a
//! text), anything else trailing blanks. Every request of a program grows
//! alike, so two payloads equal as JSON stay equal and two different ones
//! stay different; the model judges the bytes sent.
//!
//! But a request the profile refuses for its key alone (malformed, or
//! missing where one is required) keeps its body small: a server answers
//! it before reading the body and may close at once, and a client still
//! writing a large body then loses the answer to the reset (RFC 9112
//! section 9.6): no verdict. Its fingerprint is never stored, so nothing
//! is lost.

use reqkey_model::idem_model::IdemRequest;
use reqkey_model::idem_profile::{key_of, IdemProfile};

/// The body size classes: (the least, the most) bytes added, and weight.
const CLASSES: [(usize, usize, u64); 4] = [
    (0, 0, 4),
    (64, 1_024, 2),
    (4 * 1_024, 16 * 1_024, 2),
    (64 * 1_024, 256 * 1_024, 2),
];
/// The member a JSON object body grows by.
const MEMBER: &str = "notes";

/// SplitMix64: one well-mixed draw from `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Which stream of programs a size is drawn for (the battery's and the
/// generated cases' never share a draw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Battery,
    Cases,
}

/// The bytes program `index` of `stream` adds to each body under `seed`.
pub fn grown_by(seed: u64, stream: Stream, index: u64) -> usize {
    let salt = match stream {
        Stream::Battery => 0x6261_7474,
        Stream::Cases => 0x6361_7365,
    };
    let a = mix(seed ^ mix(salt ^ mix(index)));
    let total: u64 = CLASSES.iter().map(|c| c.2).sum();
    let mut pick = a % total;
    for (least, most, weight) in CLASSES {
        if pick < weight {
            let span = (most - least) as u64 + 1;
            return least + (mix(a) % span) as usize;
        }
        pick -= weight;
    }
    0
}

/// `body` grown by about `by` bytes: a JSON object gets a `notes` member of
/// `by` characters (printable, varied, like a client's text), anything else
/// `by` trailing blanks (JSON allows them; a text stays the same text to
/// a route that trims it).
pub fn grow(body: &[u8], by: usize) -> Vec<u8> {
    if by == 0 {
        return body.to_vec();
    }
    let object = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.as_object().map(serde_json::Map::is_empty));
    let end = body.iter().rposition(|b| *b == b'}');
    match (object, end) {
        (Some(empty), Some(end)) => {
            let text: String = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
                .chars()
                .cycle()
                .take(by)
                .collect();
            let comma = if empty { "" } else { "," };
            let mut out = Vec::with_capacity(body.len() + by + 16);
            out.extend_from_slice(&body[..end]);
            out.extend_from_slice(format!("{comma}\"{MEMBER}\":\"{text}\"").as_bytes());
            out.extend_from_slice(&body[end..]);
            out
        }
        _ => {
            let mut out = body.to_vec();
            out.resize(body.len() + by, b' ');
            out
        }
    }
}

/// `request` with its body grown by `by` bytes, unless `profile` refuses
/// it for its key alone (see the module doc).
pub fn grown(mut request: IdemRequest, by: usize, profile: &IdemProfile) -> IdemRequest {
    let refused_for_key = match &request.key {
        None => profile.key_required,
        Some(k) => key_of(k, profile.key_syntax).is_none(),
    };
    if !refused_for_key {
        request.body = grow(&request.body, by);
    }
    request
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::Value;

    #[test]
    fn sizes_span_tiny_to_large_and_follow_the_seed() {
        let sizes: Vec<usize> = (0..400).map(|i| grown_by(1, Stream::Cases, i)).collect();
        assert!(sizes.contains(&0));
        assert!(sizes.iter().any(|s| (64..=1_024).contains(s)));
        assert!(sizes.iter().any(|s| *s >= 64 * 1_024));
        assert!(sizes.iter().all(|s| *s <= 256 * 1_024));
        let again: Vec<usize> = (0..400).map(|i| grown_by(1, Stream::Cases, i)).collect();
        assert_eq!(sizes, again);
        let other: Vec<usize> = (0..400).map(|i| grown_by(2, Stream::Cases, i)).collect();
        assert_ne!(sizes, other);
        let battery: Vec<usize> = (0..400).map(|i| grown_by(1, Stream::Battery, i)).collect();
        assert_ne!(sizes, battery);
    }

    #[test]
    fn growing_keeps_equal_payloads_equal_and_different_ones_different() {
        let a = br#"{"item":"a","sleepMs":5}"#;
        let a2 = br#"{ "sleepMs" : 5,  "item" : "a" }"#;
        let b = br#"{"item":"b"}"#;
        let json = |x: &[u8]| serde_json::from_slice::<Value>(x).unwrap();
        let (ga, ga2, gb) = (grow(a, 5_000), grow(a2, 5_000), grow(b, 5_000));
        assert_eq!(json(&ga), json(&ga2));
        assert_ne!(json(&ga), json(&gb));
        assert!(ga.len() >= a.len() + 5_000);
        assert_eq!(json(&ga)["sleepMs"], 5);
        assert_eq!(json(&grow(b"{}", 10))["notes"].as_str().unwrap().len(), 10);
        // Not an object: trailing blanks, the same JSON value.
        assert_eq!(json(&grow(b"[1,2]", 100)), json(b"[1,2]"));
        assert_eq!(grow(b"not json", 3), b"not json   ");
        assert_eq!(grow(a, 0), a);
    }

    #[test]
    fn a_request_refused_for_its_key_keeps_its_small_body() {
        let p = IdemProfile::draft_default();
        let req = |key: Option<&[u8]>| IdemRequest {
            method: "POST".into(),
            path: "/orders".into(),
            caller: "alice".into(),
            key: key.map(<[u8]>::to_vec),
            body: br#"{"item":"a"}"#.to_vec(),
        };
        assert_eq!(grown(req(None), 100, &p).body.len(), 12);
        assert_eq!(grown(req(Some(b"")), 100, &p).body.len(), 12);
        assert!(grown(req(Some(b"\"k\"")), 100, &p).body.len() > 100);
    }
}
