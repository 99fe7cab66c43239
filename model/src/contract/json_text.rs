//! JSON kept as text: validated, written out and canonicalised (SPEC 3)
//! without building a `serde_json::Value` (issue 39).
//!
//! Why: a `Value` costs 30 to 80 bytes a node, so a 1 MiB body of many
//! small values (`[0,0,...]`, 524k of them) became a tree of tens of MB,
//! and 16 such bodies at once took `serve agent` to 546 MB. A server that
//! needs of an input only its digest and an echo keeps it as text: these
//! functions check a body exactly as parsing it into a `Value` would
//! ([`validate`]), find a member in it ([`object_member`]), and give an
//! input's two texts ([`JsonText`]): the written form, byte for byte what
//! [`written_json`](crate::digest::written_json) gives for its `Value`,
//! and the canonical form, byte for byte what
//! [`canonical_json`](crate::digest::canonical_json) gives, so every digest
//! is the same. The cost is the text itself, a few times over: an
//! object's members are buffered to be sorted, arrays and scalars are not.
//!
//! One shape is left to the `Value` path: an object key that starts with
//! `$serde_json::private::` (serde_json's own markers, which its `Value`
//! reads as a number or raw text rather than as a key) is reported as
//! [`TextError::NeedsValue`], and the caller parses the body into a
//! `Value` as before, so that even that quirk answers as it did.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::contract::digest::{
    canonical_json, sha256_hex_of, write_char, write_number_text, write_string, written_json,
    DigestKind,
};
use crate::contract::types::StartRun;

/// Why a text could not be read without a `Value`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// Not one JSON value (it did not pass [`validate`]).
    #[error("not JSON")]
    Invalid,
    /// An object key serde_json's `Value` reads specially: parse a `Value`.
    #[error("a key only a serde_json Value reads as serde_json does")]
    NeedsValue,
}

/// The key prefix of serde_json's private markers.
const SERDE_MARKER: &str = "$serde_json::private::";

/// Deeper nesting than serde_json accepts (128) is refused by
/// [`validate`]; this bounds the recursion of the text walk on its own.
const MAX_DEPTH: usize = 256;

/// Checks that `bytes` are one JSON value, exactly as
/// `serde_json::from_slice::<Value>` checks them (the same parser, its
/// string decoding, recursion limit and trailing-characters check), and
/// returns them as text. Nothing is kept: the walk builds no value.
pub fn validate(bytes: &[u8]) -> Result<&str, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    Walk.deserialize(&mut de)?;
    de.end()?;
    // Valid JSON is UTF-8 (outside strings only ASCII is allowed, and the
    // parser checked every string); a failure here cannot happen.
    std::str::from_utf8(bytes).map_err(serde::de::Error::custom)
}

/// A visitor that accepts every value and keeps none of it. Strings and
/// keys are read through `deserialize_any`, so serde_json decodes and
/// checks them as it does for a `Value` (not skipped unchecked as
/// `IgnoredAny` would).
struct Walk;

impl<'de> DeserializeSeed<'de> for Walk {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Walk)
    }
}

impl<'de> Visitor<'de> for Walk {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Walk)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Walk)?.is_some() {
            map.next_value_seed(Walk)?;
        }
        Ok(())
    }
}

/// One JSON value as its two texts: written (what a store keeps and
/// echoes) and canonical (what digests and comparisons read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText {
    written: String,
    canonical: String,
}

impl JsonText {
    /// The texts of a `Value` (the [`written_json`] and [`canonical_json`]
    /// of it).
    pub fn from_value(value: &Value) -> Self {
        Self {
            written: written_json(value),
            canonical: canonical_json(value),
        }
    }

    /// The texts of `text`, one JSON value that passed [`validate`].
    pub fn from_validated(text: &str) -> Result<Self, TextError> {
        Ok(Self {
            written: form_of(text, Form::Written)?,
            canonical: form_of(text, Form::Canonical)?,
        })
    }

    /// What [`written_json`] gives for the value.
    pub fn written(&self) -> &str {
        &self.written
    }

    /// What [`canonical_json`] gives for the value.
    pub fn canonical(&self) -> &str {
        &self.canonical
    }

    /// The value itself (parsed from the written text, which always
    /// parses; `null` were it ever not to).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.written).unwrap_or(Value::Null)
    }

    /// The string member `name` of an object value (the last one, as a
    /// `Value` keeps it); `None` when the value is not an object, has no
    /// such member, or it is not a string.
    pub fn string_member(&self, name: &str) -> Option<String> {
        let range = object_member(&self.written, name).ok()???;
        as_string(&self.written[range]).ok()?
    }
}

/// `lowercase hex of sha256(canonical_json({"kind": KIND, "input": INPUT}))`
/// from INPUT's canonical text: the same as
/// [`request_digest`](crate::digest::request_digest) of its value.
pub fn request_digest_of_canonical(kind: DigestKind, canonical_input: &str) -> String {
    sha256_hex_of(&[
        "{\"input\":",
        canonical_input,
        ",\"kind\":\"",
        kind.as_str(),
        "\"}",
    ])
}

/// The [`start_digest`](crate::digest::start_digest) of `start` with its
/// input given as canonical text (`start.input` is not read).
pub fn start_digest_of_canonical(start: &StartRun, canonical_input: &str) -> String {
    // The members in code point order, as canonical JSON sorts them.
    let mut head = String::from("{\"expectedCurrentRunId\":");
    match &start.expected_current_run_id {
        Some(id) => write_string(id, &mut head),
        None => head.push_str("null"),
    }
    head.push_str(",\"input\":");
    let mut tail = String::new();
    if let Some(d) = &start.request_digest {
        tail.push_str(",\"requestDigest\":");
        write_string(d, &mut tail);
    }
    if let Some(k) = &start.request_key {
        tail.push_str(",\"requestKey\":");
        write_string(k, &mut tail);
    }
    tail.push_str(",\"runId\":");
    write_string(&start.run_id, &mut tail);
    tail.push_str(",\"sessionId\":");
    write_string(&start.session_id, &mut tail);
    tail.push('}');
    sha256_hex_of(&[&head, canonical_input, &tail])
}

/// Where, in `text` (one JSON value that passed [`validate`]), the value of
/// the member `name` is: `None` when `text` is not an object,
/// `Some(None)` when it has no such member, the last one when it has
/// several (as a `Value` keeps it). Every key of `text`, nested ones
/// included, is read: one of serde_json's markers is
/// [`TextError::NeedsValue`].
pub fn object_member(text: &str, name: &str) -> Result<Option<Option<Range<usize>>>, TextError> {
    let mut s = Scanner::new(text);
    s.ws();
    if s.peek() != Some(b'{') {
        s.skip(0)?;
        return s.end().map(|()| None);
    }
    s.pos += 1;
    let mut found = None;
    s.ws();
    if s.peek() == Some(b'}') {
        s.pos += 1;
        return s.end().map(|()| Some(None));
    }
    loop {
        s.ws();
        let key = s.key()?;
        s.ws();
        s.expect(b':')?;
        s.ws();
        let start = s.pos;
        s.skip(1)?;
        if key == name {
            found = Some(start..s.pos);
        }
        s.ws();
        match s.next()? {
            b',' => continue,
            b'}' => break,
            _ => return Err(TextError::Invalid),
        }
    }
    s.end().map(|()| Some(found))
}

/// Where the last element of `text` (one validated JSON value) is: `None`
/// when `text` is not an array, `Some(None)` when it is empty. Nested keys
/// are read as [`object_member`] reads them.
pub fn last_element(text: &str) -> Result<Option<Option<Range<usize>>>, TextError> {
    let mut s = Scanner::new(text);
    s.ws();
    if s.peek() != Some(b'[') {
        s.skip(0)?;
        return s.end().map(|()| None);
    }
    s.pos += 1;
    s.ws();
    if s.peek() == Some(b']') {
        s.pos += 1;
        return s.end().map(|()| Some(None));
    }
    let mut last;
    loop {
        s.ws();
        let start = s.pos;
        s.skip(1)?;
        last = start..s.pos;
        s.ws();
        match s.next()? {
            b',' => continue,
            b']' => break,
            _ => return Err(TextError::Invalid),
        }
    }
    s.end().map(|()| Some(Some(last)))
}

/// The string `text` (one validated JSON value) holds, decoded; `None`
/// when it is not a string.
pub fn as_string(text: &str) -> Result<Option<String>, TextError> {
    let mut s = Scanner::new(text);
    s.ws();
    if s.peek() != Some(b'"') {
        return Ok(None);
    }
    let decoded = s.string()?;
    s.end().map(|()| Some(decoded))
}

/// Which text of a value to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// [`written_json`]: numbers as serde_json keeps them.
    Written,
    /// [`canonical_json`]: numbers in the ECMAScript form.
    Canonical,
}

fn form_of(text: &str, form: Form) -> Result<String, TextError> {
    let mut s = Scanner::new(text);
    let mut out = String::with_capacity(text.len());
    s.ws();
    s.value(&mut out, form, 0)?;
    s.end()?;
    Ok(out)
}

/// A walk over JSON text that [`validate`] accepted. It still checks what
/// it reads and answers [`TextError::Invalid`] rather than trusting it.
struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Result<u8, TextError> {
        let b = self.peek().ok_or(TextError::Invalid)?;
        self.pos += 1;
        Ok(b)
    }

    fn expect(&mut self, want: u8) -> Result<(), TextError> {
        if self.next()? == want {
            Ok(())
        } else {
            Err(TextError::Invalid)
        }
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Only whitespace is left.
    fn end(&mut self) -> Result<(), TextError> {
        self.ws();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(TextError::Invalid)
        }
    }

    fn literal(&mut self, word: &str) -> Result<&'a str, TextError> {
        let end = self.pos + word.len();
        if self.bytes.get(self.pos..end) == Some(word.as_bytes()) {
            self.pos = end;
            Ok(&self.text[end - word.len()..end])
        } else {
            Err(TextError::Invalid)
        }
    }

    fn number(&mut self) -> Result<&'a str, TextError> {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
        ) {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(TextError::Invalid);
        }
        self.text.get(start..self.pos).ok_or(TextError::Invalid)
    }

    /// An object key, decoded (borrowed from the text when it has no
    /// escape); one of serde_json's markers is [`TextError::NeedsValue`].
    fn key(&mut self) -> Result<Cow<'a, str>, TextError> {
        let start = self.pos + 1;
        self.skip_string()?;
        let raw = self
            .text
            .get(start..self.pos - 1)
            .ok_or(TextError::Invalid)?;
        let key = if raw.contains('\\') {
            self.pos = start - 1;
            Cow::Owned(self.string()?)
        } else {
            Cow::Borrowed(raw)
        };
        if key.starts_with(SERDE_MARKER) {
            return Err(TextError::NeedsValue);
        }
        Ok(key)
    }

    /// A string at the cursor (its opening quote), decoded.
    fn string(&mut self) -> Result<String, TextError> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                self.pos += 1;
            }
            out.push_str(
                self.text
                    .get(run_start..self.pos)
                    .ok_or(TextError::Invalid)?,
            );
            match self.next()? {
                b'"' => return Ok(out),
                _ => out.push(self.escaped()?),
            }
        }
    }

    /// A string value at the cursor, written as canonical (and written)
    /// JSON writes it, without decoding it whole first: a run without an
    /// escape goes out as it is (valid JSON has no quote, backslash nor
    /// control character in one, which are all the form escapes), each
    /// escape decoded and written escaped minimally.
    fn string_to(&mut self, out: &mut String) -> Result<(), TextError> {
        self.expect(b'"')?;
        out.push('"');
        loop {
            let run_start = self.pos;
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                self.pos += 1;
            }
            let run = self
                .text
                .get(run_start..self.pos)
                .ok_or(TextError::Invalid)?;
            if run.bytes().any(|b| b < 0x20) {
                return Err(TextError::Invalid);
            }
            out.push_str(run);
            match self.next()? {
                b'"' => {
                    out.push('"');
                    return Ok(());
                }
                _ => write_char(self.escaped()?, out),
            }
        }
    }

    /// Steps over a string value (no copy of it).
    fn skip_string(&mut self) -> Result<(), TextError> {
        self.expect(b'"')?;
        loop {
            while !matches!(self.peek(), Some(b'"' | b'\\') | None) {
                self.pos += 1;
            }
            match self.next()? {
                b'"' => return Ok(()),
                _ => {
                    self.escaped()?;
                }
            }
        }
    }

    /// The character of one escape after its backslash.
    fn escaped(&mut self) -> Result<char, TextError> {
        let c = match self.next()? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                let code = match first {
                    0xD800..=0xDBFF => {
                        self.expect(b'\\')?;
                        self.expect(b'u')?;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(TextError::Invalid);
                        }
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(TextError::Invalid),
                    n => n,
                };
                char::from_u32(code).ok_or(TextError::Invalid)?
            }
            _ => return Err(TextError::Invalid),
        };
        Ok(c)
    }

    fn hex4(&mut self) -> Result<u32, TextError> {
        let digits = self
            .text
            .get(self.pos..self.pos + 4)
            .ok_or(TextError::Invalid)?;
        let n = u32::from_str_radix(digits, 16).map_err(|_| TextError::Invalid)?;
        self.pos += 4;
        Ok(n)
    }

    /// Writes the value at the cursor in `form`.
    fn value(&mut self, out: &mut String, form: Form, depth: usize) -> Result<(), TextError> {
        if depth > MAX_DEPTH {
            return Err(TextError::Invalid);
        }
        match self.peek().ok_or(TextError::Invalid)? {
            b'{' => self.object(out, form, depth),
            b'[' => {
                self.pos += 1;
                out.push('[');
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                    out.push(']');
                    return Ok(());
                }
                loop {
                    self.ws();
                    self.value(out, form, depth + 1)?;
                    self.ws();
                    match self.next()? {
                        b',' => out.push(','),
                        b']' => {
                            out.push(']');
                            return Ok(());
                        }
                        _ => return Err(TextError::Invalid),
                    }
                }
            }
            b'"' => self.string_to(out),
            b't' => self.literal("true").map(|w| out.push_str(w)),
            b'f' => self.literal("false").map(|w| out.push_str(w)),
            b'n' => self.literal("null").map(|w| out.push_str(w)),
            _ => {
                let token = self.number()?;
                number(token, form, out);
                Ok(())
            }
        }
    }

    /// An object: its members buffered, then written in key order, the
    /// last of a repeated key kept (a `Value`'s map keeps the last).
    fn object(&mut self, out: &mut String, form: Form, depth: usize) -> Result<(), TextError> {
        self.expect(b'{')?;
        // Each member's value written into one buffer, found by its range.
        let mut values = String::new();
        let mut members: Vec<(Cow<'a, str>, Range<usize>)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
        } else {
            loop {
                self.ws();
                let key = self.key()?;
                self.ws();
                self.expect(b':')?;
                self.ws();
                let start = values.len();
                self.value(&mut values, form, depth + 1)?;
                members.push((key, start..values.len()));
                self.ws();
                match self.next()? {
                    b',' => continue,
                    b'}' => break,
                    _ => return Err(TextError::Invalid),
                }
            }
        }
        // Stable: among equal keys the order read is kept, and the last wins.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        out.push('{');
        let mut first = true;
        for (i, (key, value)) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            write_string(key, out);
            out.push(':');
            out.push_str(values.get(value.clone()).ok_or(TextError::Invalid)?);
        }
        out.push('}');
        Ok(())
    }

    /// Steps over the value at the cursor, reading every key in it.
    fn skip(&mut self, depth: usize) -> Result<(), TextError> {
        if depth > MAX_DEPTH {
            return Err(TextError::Invalid);
        }
        let (open, close) = match self.peek().ok_or(TextError::Invalid)? {
            b'{' => (b'{', b'}'),
            b'[' => (b'[', b']'),
            b'"' => return self.skip_string(),
            b't' => return self.literal("true").map(drop),
            b'f' => return self.literal("false").map(drop),
            b'n' => return self.literal("null").map(drop),
            _ => return self.number().map(drop),
        };
        self.expect(open)?;
        self.ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if open == b'{' {
                self.key()?;
                self.ws();
                self.expect(b':')?;
                self.ws();
            }
            self.skip(depth + 1)?;
            self.ws();
            match self.next()? {
                b',' => continue,
                c if c == close => return Ok(()),
                _ => return Err(TextError::Invalid),
            }
        }
    }
}

/// A number token in `form`. serde_json keeps a number as its text with
/// the exponent respelt `e` and a sign (`1E5` is kept `1e+5`); an integer
/// within 64 bits as the integer's digits, which are the same. The
/// canonical form reads that text by value.
fn number(token: &str, form: Form, out: &mut String) {
    let respelt;
    let kept = match token.find(['e', 'E']) {
        None => token,
        Some(at) => {
            let (mantissa, rest) = token.split_at(at);
            let exponent = &rest[1..];
            let sign = if exponent.starts_with(['+', '-']) {
                ""
            } else {
                "+"
            };
            respelt = format!("{mantissa}e{sign}{exponent}");
            respelt.as_str()
        }
    };
    match form {
        Form::Written => out.push_str(kept),
        Form::Canonical => write_number_text(kept, out),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::contract::digest::{request_digest, start_digest};
    use proptest::prelude::*;

    fn texts(text: &str) -> JsonText {
        JsonText::from_validated(validate(text.as_bytes()).unwrap()).unwrap()
    }

    /// The four vectors of SPEC 3, from text.
    #[test]
    fn spec_vectors_from_text() {
        let vectors = [
            (
                DigestKind::Execute,
                r#"{"text":"hello"}"#,
                "eb47905c4cf88de233bd23a7bb177a0c88b74e1fcd6931e4b788a893948c1a98",
            ),
            (
                DigestKind::Execute,
                r#"{"text":"hello","b":1,"a":[1,2,{"z":"é","y":null}]}"#,
                "07deedf1365fd163ebb722a283466d6a132c314d02560b78ba769778b6d3421d",
            ),
            (
                DigestKind::Resume,
                r#"{"text":"go on"}"#,
                "31d98a10b9b2f96edca9e6819db997a600f8cf6bd4ac4e5d255323709f6a76f2",
            ),
            (
                DigestKind::Retry,
                "null",
                "67aaa0843dbd37847691f8aa48afe9fd25ad581200d659efeca65e3f38b35895",
            ),
        ];
        for (kind, input, hex) in vectors {
            let t = texts(input);
            assert_eq!(request_digest_of_canonical(kind, t.canonical()), hex);
        }
    }

    #[test]
    fn numbers_and_strings_read_as_a_value_reads_them() {
        for text in [
            "[18446744073709551616,-9223372036854775809,1e+400,-0,1e-400,1.50,1E5,-0.0,0.000001,1e21]",
            r#"{"b":"\u00e9\/\ud83d\ude00\n\u0001","a":{"z":1,"a":[]},"b":2}"#,
            " \t\n{ \"x\" : [ 1 , { } , [ ] , \"\" ] }\r\n",
            r#""\u2028\"\\""#,
            "123",
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            let t = texts(text);
            assert_eq!(t.canonical(), canonical_json(&v), "{text}");
            assert_eq!(t.written(), written_json(&v), "{text}");
            assert_eq!(t.to_value(), v, "{text}");
        }
    }

    #[test]
    fn serde_markers_are_left_to_a_value() {
        for text in [
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"a":[{"\u0024serde_json::private::RawValue":1}]}"#,
        ] {
            let valid = validate(text.as_bytes()).unwrap();
            assert_eq!(JsonText::from_validated(valid), Err(TextError::NeedsValue));
            assert_eq!(object_member(valid, "a"), Err(TextError::NeedsValue));
        }
    }

    #[test]
    fn members_elements_and_strings_are_found_as_a_value_finds_them() {
        let text = r#"{"input":{"a":1},"x":[1,"two",{"k":"v"}],"input":[0,0],"s":"\u00e9"}"#;
        let at = object_member(text, "input").unwrap().unwrap().unwrap();
        assert_eq!(&text[at], "[0,0]");
        assert_eq!(object_member(text, "nope"), Ok(Some(None)));
        assert_eq!(object_member("[1]", "input"), Ok(None));
        let x = object_member(text, "x").unwrap().unwrap().unwrap();
        let last = last_element(&text[x.clone()]).unwrap().unwrap().unwrap();
        assert_eq!(&text[x.clone()][last], r#"{"k":"v"}"#);
        assert_eq!(last_element("[]"), Ok(Some(None)));
        assert_eq!(last_element("{}"), Ok(None));
        let s = object_member(text, "s").unwrap().unwrap().unwrap();
        assert_eq!(as_string(&text[s]), Ok(Some("é".to_owned())));
        assert_eq!(as_string("1"), Ok(None));
        assert_eq!(texts(text).string_member("s"), Some("é".to_owned()));
        assert_eq!(texts(text).string_member("x"), None);
    }

    /// A string as JSON text, each character spelt at random: as is (when
    /// it may be), as a short escape, or as `\uXXXX` (a surrogate pair
    /// beyond the BMP).
    fn spelt(chars: Vec<(char, u8)>) -> String {
        let mut out = String::from("\"");
        for (c, how) in chars {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '\n' => Some("\\n"),
                '\t' => Some("\\t"),
                '\r' => Some("\\r"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                '/' => Some("\\/"),
                _ => None,
            };
            let must_escape = c == '"' || c == '\\' || (c as u32) < 0x20;
            match (how % 3, short) {
                (0, _) if !must_escape => out.push(c),
                (1, Some(s)) => out.push_str(s),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{:04x}", u));
                    }
                }
            }
        }
        out.push('"');
        out
    }

    fn arb_string() -> impl Strategy<Value = String> {
        prop::collection::vec(
            (
                prop_oneof![
                    prop::char::range('a', 'e'),
                    Just('"'),
                    Just('\\'),
                    Just('/'),
                    Just('\n'),
                    Just('\u{1}'),
                    Just('\u{7f}'),
                    Just('é'),
                    Just('\u{2028}'),
                    Just('😀'),
                    Just('$'),
                ],
                any::<u8>(),
            ),
            0..6,
        )
        .prop_map(spelt)
    }

    fn arb_number() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("{f:?}")),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| format!("{f:E}")),
            prop::sample::select(vec![
                "0",
                "-0",
                "1.50",
                "1e400",
                "-1e400",
                "1E-400",
                "18446744073709551616",
                "-9223372036854775809",
                "0.1e1",
                "1e+2",
                "100000000000000000000000",
            ])
            .prop_map(str::to_owned),
        ]
    }

    fn ws() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["", "", " ", "\n\t", "\r\n "])
    }

    /// JSON text of every shape: numbers in many spellings, strings with
    /// escapes, repeated object keys, whitespace anywhere.
    fn arb_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_owned()),
            Just("true".to_owned()),
            Just("false".to_owned()),
            arb_number(),
            arb_string(),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec((ws(), inner.clone(), ws()), 0..5).prop_map(|items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(a, v, b)| format!("{a}{v}{b}"))
                        .collect();
                    format!("[{}]", items.join(","))
                }),
                prop::collection::vec(
                    (
                        prop_oneof![
                            prop::sample::select(vec![
                                "\"a\"",
                                "\"b\"",
                                "\"\\u0061\"",
                                "\"input\""
                            ])
                            .prop_map(str::to_owned),
                            arb_string(),
                        ],
                        ws(),
                        inner,
                    ),
                    0..5
                )
                .prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, w, v)| format!("{w}{k}{w}:{w}{v}{w}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// The text path gives the value path's texts and digests, byte for
        /// byte, on every generated text.
        #[test]
        fn text_and_value_agree(text in arb_text()) {
            let v: Value = serde_json::from_str(&text).unwrap();
            let valid = validate(text.as_bytes()).unwrap();
            let t = JsonText::from_validated(valid).unwrap();
            prop_assert_eq!(t.canonical(), canonical_json(&v));
            prop_assert_eq!(t.written(), written_json(&v));
            for kind in [DigestKind::Execute, DigestKind::Resume] {
                prop_assert_eq!(
                    request_digest_of_canonical(kind, t.canonical()),
                    request_digest(kind, &v)
                );
            }
            let start = StartRun {
                session_id: "s\"1".into(),
                run_id: "r".into(),
                expected_current_run_id: Some("é".into()),
                input: v.clone(),
                request_key: Some("k".into()),
                request_digest: Some("d".into()),
            };
            prop_assert_eq!(start_digest_of_canonical(&start, t.canonical()), start_digest(&start));
            let bare = StartRun { expected_current_run_id: None, request_key: None, request_digest: None, ..start };
            prop_assert_eq!(start_digest_of_canonical(&bare, t.canonical()), start_digest(&bare));
            // Members as `Value::get` finds them.
            for key in ["a", "b", "input"] {
                let found = object_member(valid, key).unwrap();
                match (&v, found) {
                    (Value::Object(m), Some(at)) => {
                        let got = at.map(|r| serde_json::from_str::<Value>(&valid[r]).unwrap());
                        prop_assert_eq!(got.as_ref(), m.get(key));
                    }
                    (Value::Object(_), None) => prop_assert!(false, "an object read as not one"),
                    (_, found) => prop_assert_eq!(found, None),
                }
            }
        }

        /// Validation refuses exactly what parsing a `Value` refuses, on
        /// texts cut short or with a byte changed.
        #[test]
        fn validation_agrees_with_a_value_parse(
            text in arb_text(),
            cut in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            change in any::<bool>(),
        ) {
            let mut bytes = text.into_bytes();
            let at = cut.index(bytes.len().max(1));
            if change && !bytes.is_empty() {
                let last = bytes.len() - 1;
                bytes[at.min(last)] = byte;
            } else {
                bytes.truncate(at);
            }
            let by_value = serde_json::from_slice::<Value>(&bytes).is_ok();
            prop_assert_eq!(validate(&bytes).is_ok(), by_value);
        }
    }

    #[test]
    fn too_deep_is_refused_as_a_value_refuses_it() {
        for depth in [127, 128, 129, 300] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            assert_eq!(
                validate(text.as_bytes()).is_ok(),
                serde_json::from_str::<Value>(&text).is_ok(),
                "{depth}"
            );
        }
    }
}
