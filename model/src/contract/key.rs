//! Parsing a request key (SPEC 2).
//!
//! The parser is the only gate between raw client bytes and every lookup, so
//! its error type is deliberately *unable* to carry the raw value: a
//! [`KeyError`] names what was wrong (empty, too long, a forbidden byte at a
//! position) and nothing else, which is what keeps the raw value out of
//! response bodies, headers and logs.

/// The HTTP header that carries a request key.
pub const REQUEST_KEY_HEADER: &str = "X-Helix-Request-Key";

/// The longest valid key, in bytes (every valid byte is ASCII).
pub const REQUEST_KEY_MAX_LEN: usize = 128;

/// A parsed, valid request key: 1 to 128 characters of `[A-Za-z0-9._:-]`.
/// Compared byte for byte (case-sensitive).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestKey(String);

impl RequestKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a raw key was refused. Carries no part of the raw value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("request key is empty")]
    Empty,
    #[error("request key is longer than {REQUEST_KEY_MAX_LEN} characters")]
    TooLong,
    #[error("request key has a character outside [A-Za-z0-9._:-] at byte {position}")]
    ForbiddenCharacter { position: usize },
    #[error("request key header is repeated")]
    Repeated,
}

impl KeyError {
    /// The wire code every entry answers a malformed key with (HTTP 400).
    pub const CODE: &'static str = "validation_error";
}

/// Is `b` one of the bytes a key may contain?
pub fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

/// Is `b` a byte an HTTP/1.1 header value cannot hold (SPEC 2,
/// `[S2-http-layer]`)? RFC 9110 section 5.5 allows visible ASCII, SP, HTAB
/// and obs-text (0x80-0xFF) in a field value, so these are every C0 control
/// but HTAB (CR and LF included) and DEL. A request whose key header holds
/// one may be refused by the server's HTTP layer before the application
/// sees the key; every other malformed key reaches the application and gets
/// the JSON 400 `validation_error`.
pub fn is_http_refused_header_byte(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

/// Accepts exactly `^[A-Za-z0-9._:-]{1,128}$`.
pub fn parse_request_key(raw: &str) -> Result<RequestKey, KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some(position) = raw.bytes().position(|b| !is_key_byte(b)) {
        return Err(KeyError::ForbiddenCharacter { position });
    }
    // Every byte is ASCII here, so bytes == characters.
    if raw.len() > REQUEST_KEY_MAX_LEN {
        return Err(KeyError::TooLong);
    }
    Ok(RequestKey(raw.to_owned()))
}

/// Parses the values of a key header as an HTTP layer hands them over: none
/// is "no key", one is parsed, more than one is [`KeyError::Repeated`].
pub fn parse_request_key_header<'a>(
    mut values: impl Iterator<Item = &'a [u8]>,
) -> Result<Option<RequestKey>, KeyError> {
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    // Non-UTF-8 bytes are outside the alphabet anyway.
    let raw = std::str::from_utf8(first).map_err(|e| KeyError::ForbiddenCharacter {
        position: e.valid_up_to(),
    })?;
    parse_request_key(raw).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_whole_alphabet_and_the_length_bounds() {
        assert!(parse_request_key("a").is_ok());
        assert!(parse_request_key("AZaz09._:-").is_ok());
        assert!(parse_request_key(&"k".repeat(128)).is_ok());
    }

    #[test]
    fn refuses_every_documented_bad_shape() {
        let long = "k".repeat(129);
        let cases: [(&str, KeyError); 7] = [
            ("", KeyError::Empty),
            (&long, KeyError::TooLong),
            ("a b", KeyError::ForbiddenCharacter { position: 1 }),
            ("é", KeyError::ForbiddenCharacter { position: 0 }),
            ("a\tb", KeyError::ForbiddenCharacter { position: 1 }),
            ("\"k\"", KeyError::ForbiddenCharacter { position: 0 }),
            ("k/1", KeyError::ForbiddenCharacter { position: 1 }),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_request_key(raw), Err(want), "{raw:?}");
        }
    }

    #[test]
    fn error_messages_never_contain_the_raw_value() {
        for raw in ["secret value", "sécret", "s\"ecret", &"secret".repeat(30)] {
            let msg = parse_request_key(raw).unwrap_err().to_string();
            assert!(!msg.contains("secret") && !msg.contains("ecret"), "{msg}");
        }
    }

    #[test]
    fn a_repeated_header_is_refused() {
        let two: [&[u8]; 2] = [b"a", b"a"];
        assert_eq!(
            parse_request_key_header(two.into_iter()),
            Err(KeyError::Repeated)
        );
        assert_eq!(parse_request_key_header(std::iter::empty()), Ok(None));
    }

    fn reference_accepts(s: &str) -> bool {
        (1..=128).contains(&s.chars().count()) && s.bytes().all(is_key_byte)
    }

    proptest! {
        #[test]
        fn parser_accepts_exactly_the_pattern(s in "\\PC{0,140}|[A-Za-z0-9._:-]{0,140}|[ -~]{0,20}") {
            prop_assert_eq!(parse_request_key(&s).is_ok(), reference_accepts(&s));
        }

        #[test]
        fn valid_keys_round_trip_byte_for_byte(s in "[A-Za-z0-9._:-]{1,128}") {
            let key = parse_request_key(&s).unwrap();
            prop_assert_eq!(key.as_str(), s.as_str());
        }
    }
}
