//! The inputs both fuzzers send: every kind of text and every JSON shape.
//!
//! A store or server that keeps an input must give it back as it was sent
//! (SPEC 4 `[[store.input.numbers-exact]]`, SPEC 3: an answer echoes an
//! input by value). What breaks that is a kind of value its authors never
//! tried: a character outside the Basic Multilingual Plane through a
//! 3-byte `utf8` column, a control character through a hand-written
//! escaper, `-0` or 2^64 through a double, an empty object turned into an
//! empty array. The store fuzzer (`run::fuzz::store`) and the agent fuzzer
//! (`run::fuzz::agent`) draw from the same lists, kept here once, so both
//! levels meet the same values.

use serde_json::Value;

/// How long the long text is, in characters (past common `VARCHAR(255)`
/// and 1 KiB buffers, far below any body limit).
pub const LONG_TEXT_CHARS: usize = 2_000;

/// Texts of every kind: plain ASCII (the first two, the common case, so
/// that collisions stay common), the empty string, JSON escapes, control
/// characters, non-ASCII of the BMP, characters outside it (surrogate
/// pairs in UTF-16), combining marks, right-to-left scripts with their
/// marks, invisible and separator characters; [`text`] adds a long one.
pub const TEXTS: [&str; 11] = [
    "a",
    "b",
    "",
    "quote \" back\\slash /slash",
    "line\nbreak\ttab\rreturn\u{8}\u{c}",
    "ctl \u{1} \u{1f} \u{7f} nul\u{0}end",
    "é ü 日本 Ω ß",
    "🦀 𝄞 😀 \u{10ffff}",
    "e\u{301} a\u{308}\u{20dd} n\u{303}",
    "שלום مرحبا \u{200f}\u{202e}rtl",
    "\u{feff}bom \u{200b}zw \u{2028}ls \u{2029}ps",
];

/// How many texts [`text`] knows: [`TEXTS`] and the long one.
pub const TEXT_KINDS: usize = TEXTS.len() + 1;

/// The `i`-th kind of text (modulo [`TEXT_KINDS`]); the last is
/// [`LONG_TEXT_CHARS`] characters mixing ASCII and non-BMP ones.
pub fn text(i: usize) -> String {
    match TEXTS.get(i % TEXT_KINDS) {
        Some(t) => (*t).to_owned(),
        None => "long 🦀 ".chars().cycle().take(LONG_TEXT_CHARS).collect(),
    }
}

/// Values of every JSON shape, as written on the wire (parsed with the
/// workspace's `arbitrary_precision`, so each number keeps its spelling):
/// null, booleans, integers small, negative, past 2^53 and past 2^64, `-0`,
/// non-integral and exponent numbers (beyond the double range too),
/// strings, empty and non-empty arrays and objects, nested ones, and the
/// same number written `1` and `1.0` (one value, SPEC 3); then values that
/// differ from one of those only in their JSON type (`"0"` and `0`,
/// `"true"` and `true`, `"null"` and `null`, `[0]` and `0`, a `text` of
/// `1`, `"1"` or `null`): different inputs, different digests (SPEC 3).
pub const SHAPES: [&str; 27] = [
    "null",
    "true",
    "false",
    "0",
    "-7",
    "9007199254740993",
    "18446744073709551616",
    "-0",
    "1.5",
    "-0.001",
    "1.5e30",
    "1e-7",
    "1e400",
    "\"plain string\"",
    "[]",
    "{}",
    "[1, \"x\", null, true, {\"z\": -2.5}, [], {}]",
    "{\"a\": {\"b\": {\"c\": [[{\"d\": null}]]}}, \"e\": {}}",
    "{\"text\": \"a\", \"n\": 1.0}",
    "{\"text\": \"a\", \"n\": 1}",
    "\"0\"",
    "\"true\"",
    "\"null\"",
    "[0]",
    "{\"text\": 1}",
    "{\"text\": \"1\"}",
    "{\"text\": null}",
];

/// The `i`-th JSON shape (modulo [`SHAPES`]). Every entry parses (a unit
/// test holds it); an entry that did not would be `null`, still a shape.
pub fn shape(i: usize) -> Value {
    serde_json::from_str(SHAPES[i % SHAPES.len()]).unwrap_or(Value::Null)
}

/// The ways one JSON value is written (RFC 8259): every one is the same
/// value, so the same input and the same digest (SPEC 3
/// `[[digest.numbers]]`, SPEC 4 `[[store.commit.start-digest-canonical]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// serde_json's compact form (what every other request uses).
    Compact,
    /// Blanks and line breaks between every token.
    Spaced,
    /// Every object's members in reverse order.
    Reversed,
    /// Strings escaped: every non-ASCII character as `\uXXXX` (surrogate
    /// pairs outside the BMP), `/` as `\/`, every other ASCII letter as
    /// `\u00XX`.
    Escaped,
    /// Numbers within a double's exact range respelled: `1` as `1.0`,
    /// `1.5` as `1.50`, `1e-7` as `1E-7` (beyond it, as written: SPEC 3
    /// does not let those decide a digest).
    Numbers,
}

impl Spelling {
    pub const ALL: [Spelling; 5] = [
        Spelling::Compact,
        Spelling::Spaced,
        Spelling::Reversed,
        Spelling::Escaped,
        Spelling::Numbers,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Spelling::Compact => "compact",
            Spelling::Spaced => "spaced",
            Spelling::Reversed => "members reversed",
            Spelling::Escaped => "strings escaped",
            Spelling::Numbers => "numbers respelt",
        }
    }
}

/// `v` written as `how` says.
pub fn spell(v: &Value, how: Spelling) -> String {
    let mut out = String::new();
    write_spelled(v, how, &mut out);
    out
}

fn write_spelled(v: &Value, how: Spelling, out: &mut String) {
    let gap = if how == Spelling::Spaced { " \n " } else { "" };
    match v {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                write_spelled(item, how, out);
            }
            out.push_str(gap);
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            let members: Vec<(&String, &Value)> = if how == Spelling::Reversed {
                map.iter().rev().collect()
            } else {
                map.iter().collect()
            };
            for (i, (k, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                write_string(k, how, out);
                out.push_str(gap);
                out.push(':');
                out.push_str(gap);
                write_spelled(item, how, out);
            }
            out.push_str(gap);
            out.push('}');
        }
        Value::String(t) => write_string(t, how, out),
        Value::Number(n) if how == Spelling::Numbers => {
            out.push_str(&respell_number(&n.to_string()))
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_string(t: &str, how: Spelling, out: &mut String) {
    if how != Spelling::Escaped {
        out.push_str(&Value::String(t.to_owned()).to_string());
        return;
    }
    out.push('"');
    for (i, c) in t.chars().enumerate() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            c if c.is_ascii_alphabetic() && i % 2 == 0 => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 || !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number's text respelled to the same value, when its value is exact
/// in a double (integers below 2^53, decimals of at most 15 digits).
fn respell_number(text: &str) -> String {
    let digits = text.chars().filter(char::is_ascii_digit).count();
    let exact = digits <= 15 && text.parse::<f64>().is_ok_and(f64::is_finite);
    if !exact {
        text.to_owned()
    } else if text.contains(['e', 'E']) {
        text.replace('e', "E")
    } else if text.contains('.') {
        format!("{text}0")
    } else {
        format!("{text}.0")
    }
}

/// A text of exactly `bytes` bytes of UTF-8: `multibyte` mixes 2-, 3- and
/// 4-byte characters (`é`, `日`, `🦀`) and fills the rest with ASCII, so
/// that it is far fewer characters (and UTF-16 units) than bytes.
pub fn text_of_bytes(bytes: usize, multibyte: bool) -> String {
    let mut out = String::with_capacity(bytes);
    if multibyte {
        for c in ['é', '日', '🦀'].into_iter().cycle() {
            if out.len() + c.len_utf8() > bytes {
                break;
            }
            out.push(c);
        }
    }
    while out.len() < bytes {
        out.push('x');
    }
    out
}

/// A text of exactly `chars` characters mixing 2-, 3- and 4-byte ones
/// (`é`, `日`, `🦀`): about three times as many bytes.
pub fn text_of_chars(chars: usize) -> String {
    ['é', '日', '🦀'].into_iter().cycle().take(chars).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_shape_parses_and_keeps_its_spelling() {
        for (i, s) in SHAPES.iter().enumerate() {
            let v: Value = serde_json::from_str(s).unwrap();
            assert_eq!(shape(i), v);
        }
        // The numbers come back as written, not through a double.
        assert_eq!(shape(6).to_string(), "18446744073709551616");
        assert_eq!(shape(7).to_string(), "-0");
        // (serde_json writes the exponent's sign: `1e+400`, one value.)
        assert!(shape(12).to_string().ends_with("e+400"), "{}", shape(12));
    }

    /// Every spelling of every shape and text is the same value.
    #[test]
    fn every_spelling_reads_back_as_the_same_value() {
        let values: Vec<Value> = (0..SHAPES.len())
            .map(shape)
            .chain(
                (0..TEXT_KINDS).map(|i| serde_json::json!({"text": text(i), "a": [1.5, -0.25, 7]})),
            )
            .collect();
        for v in &values {
            for how in Spelling::ALL {
                let written = spell(v, how);
                let back: Value = serde_json::from_str(&written)
                    .unwrap_or_else(|e| panic!("{how:?} {written}: {e}"));
                assert_eq!(
                    reqkey_model::canonical_json(&back),
                    reqkey_model::canonical_json(v),
                    "{how:?}: {written}"
                );
            }
        }
        let v = serde_json::json!({"text": "é/a", "n": 1, "m": 2});
        assert_eq!(spell(&v, Spelling::Compact), v.to_string());
        assert!(spell(&v, Spelling::Escaped).contains("\\u00E9\\/"));
        assert!(spell(&v, Spelling::Numbers).contains("1.0"));
        assert!(spell(&v, Spelling::Reversed).starts_with("{\"text\""));
        assert_ne!(spell(&v, Spelling::Spaced), v.to_string());
    }

    #[test]
    fn texts_of_bytes_are_exact_and_multibyte_ones_short_in_characters() {
        for n in [0, 1, 255, 256, 65_535, 1_048_577] {
            assert_eq!(text_of_bytes(n, false).len(), n);
            let mb = text_of_bytes(n, true);
            assert_eq!(mb.len(), n);
            if n > 100 {
                assert!(mb.chars().count() * 2 < n, "{n}");
                assert!(mb.encode_utf16().count() < n);
            }
        }
    }

    #[test]
    fn the_texts_cover_every_kind() {
        let all: Vec<String> = (0..TEXT_KINDS).map(text).collect();
        assert!(all.iter().any(String::is_empty));
        assert!(all.iter().any(|t| t.chars().any(|c| (c as u32) > 0xffff)));
        assert!(all.iter().any(|t| t.chars().any(|c| (c as u32) < 0x20)));
        assert!(all.iter().any(|t| t.contains('\u{301}')));
        assert!(all.iter().any(|t| t.contains('\u{200f}')));
        assert_eq!(text(TEXTS.len()).chars().count(), LONG_TEXT_CHARS);
        assert_eq!(text(TEXT_KINDS), text(0));
    }
}
