//! Canonical JSON and digests (SPEC 3).
//!
//! Canonical form: UTF-8, object keys sorted by code point, no insignificant
//! whitespace, strings escaped minimally, numbers in the ECMAScript
//! `Number.prototype.toString` form (RFC 8785). Sorting is done here, not
//! left to `serde_json::Map`, because a feature elsewhere in a dependency
//! graph (`preserve_order`) can silently switch that map to insertion order.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

use crate::contract::types::StartRun;

/// The kind of entry a request digest fingerprints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DigestKind {
    Execute,
    Resume,
    Retry,
}

impl DigestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DigestKind::Execute => "execute",
            DigestKind::Resume => "resume",
            DigestKind::Retry => "retry",
        }
    }
}

/// The JSON text of `value` as the client wrote it, whitespace aside: what
/// a store keeps and echoes (SPEC 3: an answer echoes an input by value).
/// serde_json's `arbitrary_precision` (on in this workspace) keeps every
/// number's text, so `18446744073709551616`, `1e400`, `-0` and `1e-400`
/// come back as sent, where [`canonical_json`] writes the nearest double
/// (`18446744073709552000`, `0`) because the digest compares values.
pub fn written_json(value: &Value) -> String {
    // Serializing a `Value` to a string has no failure case (its map keys
    // are strings); the canonical form is a by-value fallback all the same.
    serde_json::to_string(value).unwrap_or_else(|_| canonical_json(value))
}

/// The canonical JSON text of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // `str` ordering is byte order of UTF-8, which is code point order.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(k, out);
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
    }
}

pub(crate) fn write_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        write_char(c, out);
    }
    out.push('"');
}

/// One character of a string, escaped minimally.
pub(crate) fn write_char(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\u{c}' => out.push_str("\\f"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x20 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    }
}

fn write_number(n: &serde_json::Number, out: &mut String) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = n.as_f64() {
        write_es_number(f, out);
    } else {
        out.push_str(&n.to_string());
    }
}

/// [`write_number`] for a number kept as serde_json keeps it under
/// `arbitrary_precision` (its text, `E` as `e`), read as `Number` reads
/// that text: as an `i64`, else a `u64`, else a finite `f64`, else as is
/// (`1e400`). `crate::contract::json_text` writes canonical text with it.
pub(crate) fn write_number_text(text: &str, out: &mut String) {
    if let Ok(i) = text.parse::<i64>() {
        let _ = write!(out, "{i}");
    } else if let Ok(u) = text.parse::<u64>() {
        let _ = write!(out, "{u}");
    } else if let Some(f) = text.parse::<f64>().ok().filter(|f| f.is_finite()) {
        write_es_number(f, out);
    } else {
        out.push_str(text);
    }
}

/// ECMAScript `Number.prototype.toString` for a finite double.
fn write_es_number(f: f64, out: &mut String) {
    if f == 0.0 {
        out.push('0');
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddde-7".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = exp + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

fn sha256_hex(text: &str) -> String {
    sha256_hex_of(&[text])
}

/// Lowercase hex of the SHA-256 of `parts` one after another (a text too
/// large to copy once more is hashed in its pieces).
pub(crate) fn sha256_hex_of(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
    }
    let hash = hasher.finalize();
    let mut hex = String::with_capacity(64);
    for b in hash {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// `lowercase hex of sha256(canonical_json({"kind": KIND, "input": INPUT}))`.
pub fn request_digest(kind: DigestKind, input: &Value) -> String {
    let mut obj = serde_json::Map::new();
    obj.insert("input".into(), input.clone());
    obj.insert("kind".into(), Value::String(kind.as_str().into()));
    sha256_hex(&canonical_json(&Value::Object(obj)))
}

pub fn execute_request_digest(input: &Value) -> String {
    request_digest(DigestKind::Execute, input)
}

pub fn resume_request_digest(input: &Value) -> String {
    request_digest(DigestKind::Resume, input)
}

pub fn retry_request_digest() -> String {
    request_digest(DigestKind::Retry, &Value::Null)
}

/// The start digest of a run-start commit: a digest of every `StartRun`
/// field, `requestKey` and `requestDigest` included, with `input` compared
/// canonically. Two commits replay each other exactly when these are equal.
pub fn start_digest(start: &StartRun) -> String {
    let mut obj = serde_json::Map::new();
    obj.insert("sessionId".into(), Value::String(start.session_id.clone()));
    obj.insert("runId".into(), Value::String(start.run_id.clone()));
    obj.insert(
        "expectedCurrentRunId".into(),
        start
            .expected_current_run_id
            .clone()
            .map_or(Value::Null, Value::String),
    );
    obj.insert("input".into(), start.input.clone());
    if let Some(k) = &start.request_key {
        obj.insert("requestKey".into(), Value::String(k.clone()));
    }
    if let Some(d) = &start.request_digest {
        obj.insert("requestDigest".into(), Value::String(d.clone()));
    }
    sha256_hex(&canonical_json(&Value::Object(obj)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The four vectors of SPEC 3, verbatim.
    #[test]
    fn spec_vectors() {
        let vectors = [
            (
                DigestKind::Execute,
                r#"{"text":"hello"}"#,
                r#"{"input":{"text":"hello"},"kind":"execute"}"#,
                "eb47905c4cf88de233bd23a7bb177a0c88b74e1fcd6931e4b788a893948c1a98",
            ),
            (
                DigestKind::Execute,
                r#"{"text":"hello","b":1,"a":[1,2,{"z":"é","y":null}]}"#,
                r#"{"input":{"a":[1,2,{"y":null,"z":"é"}],"b":1,"text":"hello"},"kind":"execute"}"#,
                "07deedf1365fd163ebb722a283466d6a132c314d02560b78ba769778b6d3421d",
            ),
            (
                DigestKind::Resume,
                r#"{"text":"go on"}"#,
                r#"{"input":{"text":"go on"},"kind":"resume"}"#,
                "31d98a10b9b2f96edca9e6819db997a600f8cf6bd4ac4e5d255323709f6a76f2",
            ),
            (
                DigestKind::Retry,
                "null",
                r#"{"input":null,"kind":"retry"}"#,
                "67aaa0843dbd37847691f8aa48afe9fd25ad581200d659efeca65e3f38b35895",
            ),
        ];
        for (kind, input, canonical, hex) in vectors {
            let input: Value = serde_json::from_str(input).unwrap();
            let wrapped = json!({"kind": kind.as_str(), "input": input});
            assert_eq!(canonical_json(&wrapped), canonical);
            assert_eq!(request_digest(kind, &input), hex);
        }
        assert_eq!(retry_request_digest(), vectors[3].3);
    }

    #[test]
    fn numbers_use_the_ecmascript_form() {
        let cases = [
            (json!(1.0), "1"),
            (json!(-0.5), "-0.5"),
            (json!(1e21), "1e+21"),
            (json!(1e20), "100000000000000000000"),
            (json!(1.5e-7), "1.5e-7"),
            (json!(0.000001), "0.000001"),
            (json!(123.456), "123.456"),
            (json!(u64::MAX), "18446744073709551615"),
        ];
        for (v, want) in cases {
            assert_eq!(canonical_json(&v), want);
        }
    }

    #[test]
    fn strings_are_escaped_minimally() {
        let v = json!("a\"b\\c\n\u{1}é/\u{2028}");
        assert_eq!(canonical_json(&v), "\"a\\\"b\\\\c\\n\\u0001é/\u{2028}\"");
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            "[a-z\u{e9}\"\\\\]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{1,3}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Rebuilds every object of `v` with its keys inserted in reverse.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Array(a) => Value::Array(a.iter().map(reversed).collect()),
            Value::Object(m) => {
                let mut entries: Vec<_> = m.iter().collect();
                entries.reverse();
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.clone(), reversed(v)))
                        .collect(),
                )
            }
            other => other.clone(),
        }
    }

    proptest! {
        #[test]
        fn digests_ignore_object_key_order(v in arb_json()) {
            prop_assert_eq!(execute_request_digest(&v), execute_request_digest(&reversed(&v)));
        }

        #[test]
        fn digests_differ_when_input_differs(a in arb_json(), b in arb_json()) {
            prop_assume!(a != b);
            prop_assert_ne!(execute_request_digest(&a), execute_request_digest(&b));
        }

        #[test]
        fn digests_differ_by_kind(v in arb_json()) {
            prop_assert_ne!(execute_request_digest(&v), resume_request_digest(&v));
        }

        #[test]
        fn canonical_json_parses_back_to_the_same_value(v in arb_json()) {
            let back: Value = serde_json::from_str(&canonical_json(&v)).unwrap();
            prop_assert_eq!(back, v);
        }
    }
}
