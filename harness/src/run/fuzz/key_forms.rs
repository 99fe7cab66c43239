//! The keys the idem fuzzer sends, in the forms clients make them (issue
//! 56): UUID v4, ULID, a 64-hex digest, base64url, long keys that differ
//! only at their end (past 64, 128 and 255 bytes), keys full of blanks,
//! keys with the escapes and every printable character the declared
//! syntax allows; and the `Idempotency-Key` name in the spellings
//! HTTP/1.1 clients and proxies send.
//!
//! Why: a key that always looks one way (`k0-<hex>`) is one a server can
//! recognise, and it never meets the stores that truncate a long key,
//! fold its case or collapse its blanks, or that race only on one
//! spelling. So a program draws one [`KeyStyle`] for all its keys (keys
//! collide only within a style) from the seed, and each request a name
//! spelling.
//!
//! Every key holds the case's tag (`idem_program::case_tag`, its first
//! [`TAG_CHARS`] characters) as one run of characters, so that no case
//! meets another's keys and a reproduction (`idem_scenario.rs`) replaces
//! that run with a fresh value; the rest of a key is made from the tag,
//! the key's slot and the style, and its two twins (the other case, one
//! blank more) change only that rest.

use reqkey_model::idem_profile::{key_of, KeySyntax};

/// How many characters of the case's tag a key holds.
pub const TAG_CHARS: usize = 12;

/// The `Idempotency-Key` name as clients and proxies write it; the first
/// is what an HTTP library (and HTTP/2) sends, and goes through the
/// harness's client; the others are written byte for byte.
pub const KEY_HEADER_SPELLINGS: [&str; 4] = [
    "idempotency-key",
    "Idempotency-Key",
    "IDEMPOTENCY-KEY",
    "Idempotency-key",
];

/// The name of spelling `n`.
pub fn key_header_name(n: usize) -> &'static str {
    KEY_HEADER_SPELLINGS[n % KEY_HEADER_SPELLINGS.len()]
}

/// What a program's keys look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStyle {
    /// `xxxxxxxx-xxxx-4xxx-[ab]xxx-xxxxxxxxxxxx`.
    Uuid,
    /// 26 Crockford base32 characters, upper case.
    Ulid,
    /// 64 lower-case hex digits (a SHA-256).
    Hex64,
    /// 43 base64url characters (32 bytes, unpadded).
    Base64Url,
    /// 72, 136 and 264 bytes, the two keys of a case equal but for the last.
    Long72,
    Long136,
    Long264,
    /// Runs of blanks inside (never at the ends: a bare value loses those).
    Blanks,
    /// A double quote and a backslash (escaped inside an sf-string).
    Escapes,
    /// Every printable character the syntax allows.
    Printable,
}

impl KeyStyle {
    pub const ALL: [KeyStyle; 10] = [
        Self::Uuid,
        Self::Ulid,
        Self::Hex64,
        Self::Base64Url,
        Self::Long72,
        Self::Long136,
        Self::Long264,
        Self::Blanks,
        Self::Escapes,
        Self::Printable,
    ];

    /// Style `n` (modulo the styles).
    pub fn of(n: usize) -> KeyStyle {
        Self::ALL[n % Self::ALL.len()]
    }
}

/// A key's text in three runs: the tag's run is the one twins keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyText {
    pub head: String,
    pub tag: String,
    pub tail: String,
}

impl KeyText {
    pub fn text(&self) -> String {
        format!("{}{}{}", self.head, self.tag, self.tail)
    }

    /// The key in the other case (letters of head and tail swapped).
    pub fn case_twin(&self) -> String {
        let swap = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_lowercase() {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect()
        };
        format!("{}{}{}", swap(&self.head), self.tag, swap(&self.tail))
    }

    /// The key with one blank more: in its first run of two blanks, else
    /// at its end.
    pub fn blank_twin(&self) -> String {
        let text = self.text();
        match text.find("  ") {
            Some(at) => format!("{} {}", &text[..at], &text[at..]),
            None => format!("{text} "),
        }
    }
}

/// A stream of pseudo-random numbers from `seed` (splitmix64).
struct Mix(u64);

impl Mix {
    fn of(parts: &[&str]) -> Mix {
        let h = parts.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, p| {
            p.bytes()
                .chain(std::iter::once(0xff))
                .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
        });
        Mix(h)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn from(&mut self, alphabet: &[u8], n: usize) -> String {
        (0..n)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
            .collect()
    }
}

const HEX: &[u8] = b"0123456789abcdef";
const HEX_LETTERS: &[u8] = b"abcdef";
const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const TCHAR_PUNCT: &str = "!#$%&'*+-.^_`|~";

/// Whether `syntax` takes `content` as a key in some spelling (bare, or
/// as an sf-string).
fn admissible(content: &str, syntax: KeySyntax) -> bool {
    key_of(sf_quote(content).as_bytes(), syntax).is_some()
        || key_of(content.as_bytes(), syntax).is_some()
}

/// `content` as an sf-string (RFC 8941 3.3.3: `\"` and `\\` escaped).
pub fn sf_quote(content: &str) -> String {
    let mut out = String::with_capacity(content.len() + 2);
    out.push('"');
    for c in content.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// A UUID v4 made from `name` (the probes at scale name their keys; the
/// name never goes out): one name, one key; two names, two keys.
pub fn client_key(name: &str) -> String {
    let mut mix = Mix::of(&[name]);
    format!(
        "{}-{}-4{}-{}{}-{}",
        mix.from(HEX, 8),
        mix.from(HEX, 4),
        mix.from(HEX, 3),
        mix.from(b"89ab", 1),
        mix.from(HEX, 3),
        mix.from(HEX, 12)
    )
}

/// Key `slot` of the case tagged `tag` in `style`, as `syntax` can take it
/// (a style it cannot, blanks or quotes under `token`, is a UUID instead).
pub fn key_text(style: KeyStyle, slot: usize, tag: &str, syntax: KeySyntax) -> KeyText {
    let t = tag.get(..TAG_CHARS).unwrap_or(tag);
    let style_name = format!("{style:?}");
    let slot_name = slot.to_string();
    let mut own = Mix::of(&[t, &style_name, &slot_name]);
    // Shared by both slots: the long keys differ only at their end.
    let mut shared = Mix::of(&[t, &style_name]);
    let k = |head: String, tag: String, tail: String| KeyText { head, tag, tail };
    let key = match style {
        KeyStyle::Uuid => k(
            format!(
                "{}-{}-4{}-{}{}-",
                own.from(HEX, 8),
                own.from(HEX, 4),
                own.from(HEX, 3),
                own.from(b"ab", 1),
                own.from(HEX, 3)
            ),
            t.to_owned(),
            String::new(),
        ),
        KeyStyle::Ulid => k(
            format!("0{}", own.from(CROCKFORD, 9)),
            t.to_ascii_uppercase(),
            format!(
                "{}{}",
                own.from(b"ABCDEFGHJKMNPQRSTVWXYZ", 1),
                own.from(CROCKFORD, 3)
            ),
        ),
        KeyStyle::Hex64 => k(
            String::new(),
            t.to_owned(),
            format!(
                "{}{}",
                own.from(HEX_LETTERS, 1),
                own.from(HEX, 63 - t.len())
            ),
        ),
        KeyStyle::Base64Url => k(
            format!("{}-{}_", own.from(B64URL, 8), own.from(B64URL, 2)),
            t.to_owned(),
            own.from(B64URL, 43usize.saturating_sub(12 + t.len())),
        ),
        KeyStyle::Long72 | KeyStyle::Long136 | KeyStyle::Long264 => {
            let total = match style {
                KeyStyle::Long72 => 72,
                KeyStyle::Long136 => 136,
                _ => 264,
            };
            let fill = total - t.len() - 2;
            let last = (b'A' + (slot % 26) as u8) as char;
            k(
                String::new(),
                t.to_owned(),
                format!("_{}{last}", shared.from(B64URL, fill)),
            )
        }
        KeyStyle::Blanks => k(
            "pay ".to_owned(),
            t.to_owned(),
            format!("   order  {}", own.from(b"abcdefgh", 3)),
        ),
        KeyStyle::Escapes => k(
            "q\"".to_owned(),
            t.to_owned(),
            format!("\\{}\"z", own.from(b"abcdefgh", 2)),
        ),
        KeyStyle::Printable => {
            let set: Vec<u8> = if syntax == KeySyntax::Token {
                (b'0'..=b'9')
                    .chain(b'A'..=b'Z')
                    .chain(b'a'..=b'z')
                    .chain(TCHAR_PUNCT.bytes())
                    .collect()
            } else {
                (0x20u8..=0x7e).collect()
            };
            let turn = (own.next() % set.len() as u64) as usize;
            let all: String = set
                .iter()
                .cycle()
                .skip(turn)
                .take(set.len())
                .map(|b| *b as char)
                .collect();
            k(
                String::new(),
                t.to_owned(),
                format!("{all}{}", own.from(b"abcdefgh", 2)),
            )
        }
    };
    if admissible(&key.text(), syntax) {
        key
    } else {
        key_text(KeyStyle::Uuid, slot, tag, syntax)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: &str = "0f3a9c2e7b1d55aa";

    #[test]
    fn each_style_looks_like_what_clients_send_and_holds_the_tag() {
        let uuid = key_text(KeyStyle::Uuid, 0, TAG, KeySyntax::SfString).text();
        assert_eq!(uuid.len(), 36);
        assert_eq!(&uuid[14..15], "4");
        assert!(uuid.ends_with("0f3a9c2e7b1d"), "{uuid}");
        let ulid = key_text(KeyStyle::Ulid, 0, TAG, KeySyntax::SfString).text();
        assert_eq!(ulid.len(), 26);
        assert!(ulid.bytes().all(|b| CROCKFORD.contains(&b)), "{ulid}");
        let hex = key_text(KeyStyle::Hex64, 1, TAG, KeySyntax::Token).text();
        assert_eq!(hex.len(), 64);
        assert!(hex.bytes().all(|b| HEX.contains(&b)), "{hex}");
        let b64 = key_text(KeyStyle::Base64Url, 1, TAG, KeySyntax::Any).text();
        assert_eq!(b64.len(), 43);
        for style in KeyStyle::ALL {
            for syntax in [KeySyntax::SfString, KeySyntax::Any, KeySyntax::Token] {
                let a = key_text(style, 0, TAG, syntax);
                let b = key_text(style, 1, TAG, syntax);
                assert_ne!(a.text(), b.text(), "{style:?}");
                assert!(
                    a.text().to_lowercase().contains("0f3a9c2e7b1d"),
                    "{style:?}"
                );
                assert!(admissible(&a.text(), syntax), "{style:?} {syntax:?}");
                assert_ne!(a.case_twin(), a.text(), "{style:?} has no letter to turn");
                assert_eq!(a.case_twin().to_lowercase(), a.text().to_lowercase());
                assert_ne!(a.blank_twin(), a.text());
                assert!(!a.text().starts_with(' ') && !a.text().ends_with(' '));
                assert!(!a.text().to_ascii_lowercase().contains("reqkey"));
            }
        }
    }

    #[test]
    fn a_named_key_is_a_uuid_of_its_name() {
        let a = client_key("cap1-0f3a");
        assert_eq!(a.len(), 36);
        assert_eq!(a, client_key("cap1-0f3a"));
        assert_ne!(a, client_key("cap2-0f3a"));
        assert!(!a.contains("cap"));
    }

    #[test]
    fn long_keys_differ_only_past_their_first_255_bytes() {
        for (style, len) in [
            (KeyStyle::Long72, 72),
            (KeyStyle::Long136, 136),
            (KeyStyle::Long264, 264),
        ] {
            let a = key_text(style, 0, TAG, KeySyntax::SfString).text();
            let b = key_text(style, 1, TAG, KeySyntax::SfString).text();
            assert_eq!((a.len(), b.len()), (len, len));
            assert_eq!(a[..len - 1], b[..len - 1]);
        }
    }

    #[test]
    fn printable_keys_carry_every_character_the_syntax_allows() {
        let sf = key_text(KeyStyle::Printable, 0, TAG, KeySyntax::SfString).text();
        assert!((0x20u8..=0x7e).all(|b| sf.as_bytes().contains(&b)));
        assert!(key_of(sf_quote(&sf).as_bytes(), KeySyntax::SfString).is_some());
        let token = key_text(KeyStyle::Printable, 0, TAG, KeySyntax::Token).text();
        assert!(TCHAR_PUNCT.bytes().all(|b| token.as_bytes().contains(&b)));
        assert!(key_of(token.as_bytes(), KeySyntax::Token).is_some());
        // Blanks and quotes are no token: a UUID stands in.
        let blanks = key_text(KeyStyle::Blanks, 0, TAG, KeySyntax::Token).text();
        assert_eq!(blanks.len(), 36);
    }
}
