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
/// same number written `1` and `1.0` (one value, SPEC 3).
pub const SHAPES: [&str; 20] = [
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
];

/// The `i`-th JSON shape (modulo [`SHAPES`]). Every entry parses (a unit
/// test holds it); an entry that did not would be `null`, still a shape.
pub fn shape(i: usize) -> Value {
    serde_json::from_str(SHAPES[i % SHAPES.len()]).unwrap_or(Value::Null)
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
