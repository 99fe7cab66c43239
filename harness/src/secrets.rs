//! The one redacted display of what the user typed that can carry a secret
//! (a target, a `--start` command line, an environment value), and the
//! last line of defence that keeps those secrets out of every output.
//!
//! Why two layers: every output names a target by its redacted display
//! (`TargetSpec::display_name`) and a started command by
//! [`redact_command`], but error messages are built from many sources (an
//! HTTP client's error quoting its URL, a shell's complaint quoting its
//! command line) that cannot all be audited by hand. So the secrets those
//! displays hide are also remembered here, once, when the text is parsed,
//! and [`scrub`] replaces any that still appears with `***` in every
//! output primitive (`report::inert`, which every report format and the
//! terminal go through, and the exported histories).
//!
//! What counts as a secret (docs/reports.md, "Secrets"): in a URL the
//! userinfo (the password, or the user when it stands alone: a token) and
//! every query value; in a command line, every URL in it as above, the
//! value of a `NAME=VALUE` word whose name looks secret (`PASSWORD`,
//! `TOKEN`, `SECRET`, `KEY`, `AUTH`, `CRED`...), and the word after a flag
//! whose name looks secret (`--password X`). A remembered secret shorter
//! than [`MIN_SECRET_CHARS`] is not scrubbed from free text (it would
//! garble every word that holds it); the displays hide it all the same.

use reqkey_reference::scheme;
use std::sync::Mutex;

/// What a hidden part is shown as.
pub const REDACTED: &str = "***";
/// The shortest remembered secret [`scrub`] replaces in free text.
pub const MIN_SECRET_CHARS: usize = 4;
/// The most secrets remembered (a bounded list; later ones are still
/// hidden by the displays).
const MAX_SECRETS: usize = 256;

static SECRETS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(secret: &str) {
    let secret = secret.trim_matches(|c| c == '\'' || c == '"');
    if secret.chars().count() < MIN_SECRET_CHARS || secret == REDACTED {
        return;
    }
    let mut secrets = SECRETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if secrets.len() < MAX_SECRETS && !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_owned());
        // Longest first, so that a secret holding another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every remembered secret replaced by `***`.
pub fn scrub(text: &str) -> String {
    let secrets = SECRETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    scrub_with(text, &secrets)
}

/// `text` with each of `secrets` (longest first) replaced by `***`,
/// wherever it stands raw or escaped ([`spellings_at`]).
fn scrub_with(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets.iter() {
        let chars: Vec<char> = s.chars().collect();
        if let Some(replaced) = replace_spelt(&out, &chars) {
            out = replaced;
        }
    }
    out
}

/// The longest secret looked for in its escaped forms (a longer one is
/// still replaced where it stands raw).
const MAX_ESCAPED_SECRET_CHARS: usize = 4_096;
/// The most places in a text one partial match may stand at once (each
/// character of a secret has at most four spellings; the bound keeps a
/// pathological secret linear).
const MAX_MATCH_STATES: usize = 16;

/// `text` with every spelling of `secret` replaced by `***`, or `None`
/// when it holds none.
fn replace_spelt(text: &str, secret: &[char]) -> Option<String> {
    let first = *secret.first()?;
    if secret.len() > MAX_ESCAPED_SECRET_CHARS {
        let raw: String = secret.iter().collect();
        return text.contains(&raw).then(|| text.replace(&raw, REDACTED));
    }
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    // Bounded: every round moves `i` forward by at least one character.
    while i < bytes.len() {
        let b = bytes[i];
        let may_start = text[i..].starts_with(first)
            || matches!(b, b'\\' | b'&' | b'%')
            || (b == b'+' && first == ' ');
        if may_start {
            if let Some(end) = match_end(bytes, i, secret) {
                let o = out.get_or_insert_with(String::new);
                o.push_str(&text[copied..i]);
                o.push_str(REDACTED);
                copied = end;
                i = end;
                continue;
            }
        }
        i += text[i..].chars().next().map_or(1, char::len_utf8);
    }
    out.map(|mut o| {
        o.push_str(&text[copied..]);
        o
    })
}

/// Where a spelling of `secret` that starts at `start` ends (the longest),
/// each of its characters raw or escaped.
fn match_end(text: &[u8], start: usize, secret: &[char]) -> Option<usize> {
    let mut at = vec![start];
    let mut next = Vec::new();
    let mut lens = Vec::new();
    for &c in secret {
        next.clear();
        for &p in &at {
            lens.clear();
            spellings_at(text, p, c, &mut lens);
            for l in &lens {
                if !next.contains(&(p + l)) && next.len() < MAX_MATCH_STATES {
                    next.push(p + l);
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        std::mem::swap(&mut at, &mut next);
    }
    at.into_iter().max()
}

/// The lengths of the spellings of `c` that stand at `text[at..]`: the
/// character itself; a JSON escape (`\"`, `\\`, `\/`, `\n`, `\u0022`, a
/// surrogate pair); an HTML or XML character reference (`&quot;`,
/// `&apos;`, `&#34;`, `&#x22;`); its UTF-8 bytes percent-encoded (`%22`,
/// either case), or `+` for a space (a URL's query). So a secret an app
/// echoes inside JSON, a report escapes for HTML or XML, or a URL carries
/// is found like the raw one.
fn spellings_at(text: &[u8], at: usize, c: char, out: &mut Vec<usize>) {
    let rest = &text[at.min(text.len())..];
    let mut utf8 = [0u8; 4];
    let raw = c.encode_utf8(&mut utf8).as_bytes();
    if rest.starts_with(raw) {
        out.push(raw.len());
    }
    match rest.first() {
        Some(b'\\') => json_spellings(rest, c, out),
        Some(b'&') => {
            if let Some((d, len)) = character_reference(rest) {
                if d == c {
                    out.push(len);
                }
            }
        }
        Some(b'%') => {
            let mut len = 0;
            for byte in raw {
                match rest.get(len..len + 3) {
                    Some([b'%', h, l]) if hex_pair(*h, *l) == Some(*byte) => len += 3,
                    _ => return,
                }
            }
            out.push(len);
        }
        Some(b'+') if c == ' ' => out.push(1),
        _ => {}
    }
}

fn hex_digit(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

fn hex_pair(h: u8, l: u8) -> Option<u8> {
    u8::try_from(hex_digit(h)? * 16 + hex_digit(l)?).ok()
}

/// The four hex digits at `text[..4]` as a number.
fn hex4(text: &[u8]) -> Option<u32> {
    text.get(..4)?
        .iter()
        .try_fold(0u32, |n, b| Some(n * 16 + hex_digit(*b)?))
}

/// How deep JSON escapes nest that [`json_spellings`] reads: a JSON text
/// inside a JSON string inside a JSON string ... (an app's answer quoted
/// in a report that is itself JSON-escaped for the terminal).
const MAX_JSON_DEPTH: u32 = 4;

/// The lengths of the spellings of `c` at the start of `text` (which
/// starts with a backslash) as JSON escapes at any depth up to
/// [`MAX_JSON_DEPTH`]: at depth `k` a backslash is `2^k` backslashes, a
/// quote (or `/`) `2^k - 1` backslashes and the quote, and any other
/// escape (`\n`, `\u0022`, a surrogate pair) its letter after `2^(k-1)`
/// backslashes.
fn json_spellings(text: &[u8], c: char, out: &mut Vec<usize>) {
    let run = text
        .iter()
        .take(1 << MAX_JSON_DEPTH)
        .take_while(|b| **b == b'\\')
        .count();
    if c == '\\' {
        out.extend(
            (0..=MAX_JSON_DEPTH)
                .map(|k| 1usize << k)
                .filter(|p| *p <= run),
        );
    }
    if !run.is_power_of_two() && !(run + 1).is_power_of_two() {
        return;
    }
    let after = &text[run..];
    if matches!(c, '"' | '/') && after.first() == Some(&(c as u8)) && (run + 1).is_power_of_two() {
        out.push(run + 1);
        return;
    }
    if !run.is_power_of_two() {
        return;
    }
    let d = match after.first() {
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let Some(unit) = after.get(1..).and_then(hex4) else {
                return;
            };
            if !(0xD800..0xDC00).contains(&unit) {
                if char::from_u32(unit) == Some(c) {
                    out.push(run + 5);
                }
                return;
            }
            // A surrogate pair: the second half escaped the same way.
            let second = &after[5.min(after.len())..];
            let same = second.len() > run
                && second[..run].iter().all(|b| *b == b'\\')
                && second[run] == b'u';
            let low = if same {
                second.get(run + 1..).and_then(hex4)
            } else {
                None
            };
            if let Some(low) = low.filter(|l| (0xDC00..0xE000).contains(l)) {
                let scalar = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                if char::from_u32(scalar) == Some(c) {
                    out.push(2 * (run + 5));
                }
            }
            return;
        }
        _ => return,
    };
    if d == c {
        out.push(run + 1);
    }
}

/// The character an HTML or XML character reference at the start of
/// `text` stands for (`&quot;`, `&amp;`, `&lt;`, `&gt;`, `&apos;`, `&#N;`,
/// `&#xH;`), and its length.
fn character_reference(text: &[u8]) -> Option<(char, usize)> {
    let end = text.iter().take(12).position(|b| *b == b';')?;
    let body = std::str::from_utf8(&text[1..end]).ok()?;
    let c = match body {
        "quot" => '"',
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "apos" => '\'',
        _ => {
            let number = body.strip_prefix('#')?;
            let value = match number.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(value)?
        }
    };
    Some((c, end + 1))
}

/// [`scrub`] for serialized JSON: the document stays valid JSON. Every
/// string of it (keys included) is read, scrubbed as text (so a secret
/// inside a string that itself holds escaped JSON, an app's answer quoted
/// in a report, is found too) and written again where it changed; numbers
/// and the layout are left as they are.
pub fn scrub_json(serialized: &str) -> String {
    let secrets = SECRETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if secrets.is_empty() {
        return serialized.to_owned();
    }
    let bytes = serialized.as_bytes();
    let mut out = String::with_capacity(serialized.len());
    let mut copied = 0;
    let mut i = 0;
    // Bounded: every round moves `i` past a string or one byte.
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let mut end = i + 1;
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        let end = (end + 1).min(bytes.len());
        let Some(token) = serialized.get(i..end) else {
            i = end;
            continue;
        };
        if let Ok(text) = serde_json::from_str::<String>(token) {
            let scrubbed = scrub_with(&text, &secrets);
            if scrubbed != text {
                out.push_str(&serialized[copied..i]);
                out.push_str(&serde_json::to_string(&scrubbed).unwrap_or_default());
                copied = end;
            }
        }
        i = end;
    }
    out.push_str(&serialized[copied..]);
    out
}

/// The secrets of one URL: its userinfo's password (or the user when no
/// password follows: a token) and its query values. A PostgreSQL URL's
/// user is a role, never a secret, as `redact_url` shows it: remembering
/// `postgres` as a secret hid the word in every report (`***://...`).
fn url_secrets(url: &str) -> Vec<String> {
    let Some(written) = scheme::split(url) else {
        return Vec::new();
    };
    let rest = written.rest;
    let postgres = written
        .name
        .rsplit('@')
        .next()
        .and_then(scheme::known)
        .is_some_and(|k| k.scheme.is_postgres());
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let mut found = Vec::new();
    for one in authority.split(',') {
        if let Some((userinfo, _)) = one.rsplit_once('@') {
            match userinfo.split_once(':') {
                Some((user, password)) => {
                    found.push(password.to_owned());
                    found.push(userinfo.to_owned());
                    // A user with an empty password is a token.
                    if password.is_empty() && !postgres {
                        found.push(user.to_owned());
                    }
                }
                None if postgres => {}
                None => found.push(userinfo.to_owned()),
            }
        }
    }
    if let Some((_, query)) = tail.split_once('?') {
        let query = query.split('#').next().unwrap_or(query);
        for pair in query.split('&') {
            if let Some((_, value)) = pair.split_once('=') {
                found.push(value.to_owned());
            }
        }
    }
    found
}

/// Remembers the secrets of a target text (one URL, or a comma-separated
/// list of them, or a form that embeds one after `@`), so that [`scrub`]
/// hides them wherever they reappear.
pub fn register_target(text: &str) {
    // `reference-agent@postgres://u:p@h/db`: the URL starts at its scheme.
    let from = scheme::url_start(text).unwrap_or(0);
    // Replicas (`http://a:1,http://b:2`) are URLs apart; a cluster's
    // hosts (`redis+cluster://a:1,b:2`) belong to its one URL.
    let mut urls: Vec<String> = Vec::new();
    for piece in text[from..].split(',') {
        match urls.last_mut() {
            Some(last) if scheme::split(piece).is_none() => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.to_owned()),
        }
    }
    for url in urls {
        for s in url_secrets(&url) {
            remember(&s);
        }
    }
}

/// Remembers one secret value as it is (a `--header` credential), so
/// that [`scrub`] hides it wherever it reappears.
pub fn register_secret(value: &str) {
    remember(value);
}

/// Does a variable or flag name look like it names a secret?
fn secret_name(name: &str) -> bool {
    let name = name.trim_start_matches('-').to_ascii_lowercase();
    [
        "pass", "pwd", "secret", "token", "key", "auth", "cred", "cookie", "private", "session",
        "bearer", "apikey",
    ]
    .iter()
    .any(|w| name.contains(w))
}

/// One shell word of a command line: its text as the shell reads it
/// (quotes and backslashes removed) and, for each byte of that text, where
/// it stands in the line, so a secret found in the word is hidden where it
/// was written, whatever quotes surround it.
#[derive(Debug, Default)]
struct Word {
    text: String,
    at: Vec<usize>,
}

impl Word {
    /// The line's byte range holding `text[from..to]`.
    fn source(&self, from: usize, to: usize) -> Option<(usize, usize)> {
        let start = *self.at.get(from)?;
        let last = *self.at.get(to.checked_sub(1)?)?;
        Some((start, last + 1))
    }
}

/// The words of a shell command line, split where the shell splits them:
/// blanks and the operators `; & | ( ) < >` outside quotes end a word (so
/// `pw;`, `'pw'`, `"pw"` and `pw&&` all read `pw`). Bounded by the line.
fn shell_words(line: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut word = Word::default();
    let mut chars = line.char_indices().peekable();
    // A character is copied as written, so each of its bytes maps to the
    // byte of the line it came from.
    let push = |word: &mut Word, at: usize, c: char| {
        word.text.push(c);
        word.at.extend(at..at + c.len_utf8());
    };
    let (mut single, mut double) = (false, false);
    while let Some((at, c)) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '\\' if !single => {
                if let Some((next_at, next)) = chars.next() {
                    if double && !matches!(next, '"' | '\\' | '$' | '`') {
                        push(&mut word, at, '\\');
                    }
                    push(&mut word, next_at, next);
                }
            }
            c if !single
                && !double
                && (c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '<' | '>')) =>
            {
                if !word.text.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => push(&mut word, at, c),
        }
    }
    if !word.text.is_empty() {
        words.push(word);
    }
    words
}

/// The secrets of one shell word, as ranges of its text: the secrets of
/// a URL in it, the value of `NAME=VALUE` (`--name=VALUE`) or of a header
/// `Name: VALUE` whose name looks secret (and the value's last word: the
/// token after `Bearer`), or the whole word when the flag before it was
/// secret-named. Sets `hide_next` when it is such a flag.
fn word_secrets(word: &str, hide_next: &mut bool) -> Vec<(usize, usize)> {
    if std::mem::take(hide_next) {
        return vec![(0, word.len())];
    }
    let mut found = Vec::new();
    if let Some(from) = scheme::url_start(word) {
        for secret in url_secrets(&word[from..]) {
            if secret.is_empty() {
                continue;
            }
            found.extend(word.match_indices(&secret).map(|(i, s)| (i, i + s.len())));
        }
        return found;
    }
    let header = word
        .split_once(':')
        .filter(|(name, _)| !name.is_empty() && !name.contains(['=', ' ']));
    if let Some((name, value)) = word.split_once('=').or(header) {
        let trimmed = value.trim_start();
        if secret_name(name) && !trimmed.is_empty() {
            let from = word.len() - trimmed.len();
            found.push((from, word.len()));
            if let Some(i) = trimmed.rfind(' ') {
                found.push((from + i + 1, word.len()));
            }
        }
        return found;
    }
    if word.starts_with('-') && secret_name(word) {
        *hide_next = true;
    }
    found
}

/// The one display of a `--start` command line (and of any environment
/// value given as one): every URL in it redacted (userinfo, query
/// values), the value of a `NAME=VALUE` word whose name looks secret
/// hidden, and the word after a flag whose name looks secret hidden. Words
/// are read as the shell reads them, so the punctuation around a secret
/// (quotes, `;`, `&&`, `|`, parentheses, `--flag=`) does not matter. The
/// hidden parts are remembered for [`scrub`].
pub fn redact_command(line: &str) -> String {
    let (shown, secrets) = command_secrets(line);
    for secret in &secrets {
        remember(secret);
    }
    shown
}

/// [`redact_command`] without remembering: the display and the secrets
/// it hides.
fn command_secrets(line: &str) -> (String, Vec<String>) {
    let mut hide_next = false;
    let mut hidden: Vec<(usize, usize)> = Vec::new();
    let mut secrets = Vec::new();
    for word in shell_words(line) {
        let ranges = word_secrets(&word.text, &mut hide_next);
        for &(from, to) in &ranges {
            let Some(secret) = word.text.get(from..to) else {
                continue;
            };
            secrets.push(secret.to_owned());
            // A range holding another (a URL's `user:password`) is
            // remembered, but the display hides only the inner one.
            let holds_another = ranges
                .iter()
                .any(|&(f, t)| (f, t) != (from, to) && from <= f && t <= to);
            if let (false, Some(range)) = (holds_another, word.source(from, to)) {
                hidden.push(range);
            }
        }
    }
    hidden.sort_unstable();
    let mut shown = String::with_capacity(line.len());
    let mut next = 0;
    for (start, end) in hidden {
        if end <= next {
            continue;
        }
        let start = start.max(next);
        shown.push_str(&line[next..start]);
        shown.push_str(REDACTED);
        next = end;
    }
    shown.push_str(&line[next..]);
    (shown, secrets)
}

/// The longest line [`forward_scrubbed`] passes on whole; a longer one
/// is passed on in pieces of this size.
const MAX_FORWARDED_LINE_BYTES: u64 = 64 * 1024;

/// Copies what a started command prints to the harness's stderr, line by
/// line (each at most [`MAX_FORWARDED_LINE_BYTES`]), through [`scrub`].
/// A thread of its own ends when the command's end of the pipe closes.
pub fn forward_scrubbed(stream: impl std::io::Read + Send + 'static) {
    use std::io::{BufRead, Read, Write};
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match (&mut reader)
                .take(MAX_FORWARDED_LINE_BYTES)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    let text = scrub(&String::from_utf8_lossy(&line));
                    let _ = std::io::stderr().write_all(text.as_bytes());
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PostgreSQL user is a role, shown by `redact_url`; remembered as
    /// a secret, `postgres` was hidden in every report (`***://...`).
    #[test]
    fn a_postgres_user_is_no_secret_but_a_token_as_user_is() {
        assert!(url_secrets("postgres://postgres@127.0.0.1:5432/test").is_empty());
        assert_eq!(
            url_secrets("postgres://app:pw-secret@h/db"),
            ["pw-secret", "app:pw-secret"]
        );
        assert_eq!(url_secrets("redis://tok-12345@h:6379/"), ["tok-12345"]);
        assert_eq!(
            url_secrets("https://tok-12345:@h/"),
            ["", "tok-12345:", "tok-12345"]
        );
    }

    #[test]
    fn a_command_line_shows_no_secret_and_remembers_each() {
        let line = "DB_PASSWORD=s3cr3t-a server --token s3cr3t-b --port 7001 \
                    --db postgres://u:s3cr3t-c@h/db?sslpassword=s3cr3t-d --name=x";
        let shown = redact_command(line);
        assert_eq!(
            shown,
            "DB_PASSWORD=*** server --token *** --port 7001 \
             --db postgres://u:***@h/db?sslpassword=*** --name=x"
        );
        for s in ["s3cr3t-a", "s3cr3t-b", "s3cr3t-c", "s3cr3t-d"] {
            assert_eq!(scrub(&format!("said {s}!")), "said ***!", "{s}");
        }
        assert_eq!(scrub("port 7001"), "port 7001");
    }

    /// Every spelling of issue 51 and more: the secret glued to quotes,
    /// `;`, `&&`, `|`, parentheses, `--flag=`, inside URLs and headers.
    const SPELLINGS: &[&str] = &[
        "export DB_PASSWORD='{S}'; exec server",
        "export DB_PASSWORD=\"{S}\";server",
        "DB_PASSWORD={S}; server",
        "DB_PASSWORD={S}&&server",
        "(API_TOKEN={S}) && server",
        "env SECRET_KEY={S} server|tee log",
        "server --password={S};",
        "server --password='{S}' --port 1",
        "server --password '{S}'",
        "server --password \"{S}\"|tee log",
        "server --token {S};",
        "server --token={S}>log",
        "server --api-key=\"{S}\"",
        "server --db 'postgres://u:{S}@h/db';",
        "server --db \"postgres://u:{S}@h:5432/db?x=1\"",
        "server --url https://{S}@h/db;",
        "server --url 'http://h/x?token={S}&a=b'",
        "DATABASE_URL='postgres://app:{S}@db/app' server",
        "curl -H 'Authorization: Bearer {S}' http://h/",
        "server --session-secret=\\{S}",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn a_secret_is_hidden_whatever_the_punctuation_around_it(
            secret in "[A-Za-z0-9][A-Za-z0-9._~-]{3,23}",
            spelling in 0..SPELLINGS.len(),
        ) {
            let template = SPELLINGS[spelling];
            proptest::prop_assume!(!template.replace("{S}", "").contains(&secret));
            let line = template.replace("{S}", &secret);
            // Not remembered: the list is global and bounded.
            let (shown, mut secrets) = command_secrets(&line);
            secrets.retain(|s| s.len() >= MIN_SECRET_CHARS);
            secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
            proptest::prop_assert!(!shown.contains(&secret), "{line} -> {shown}");
            proptest::prop_assert!(shown.contains(REDACTED), "{shown}");
            // What the command prints, however it spells the secret.
            for said in [
                format!("password is {secret}."),
                format!("'{secret}'"),
                format!("\"{secret}\";"),
                format!("--password={secret}"),
                format!("{secret};{secret}"),
            ] {
                let scrubbed = scrub_with(&said, &secrets);
                proptest::prop_assert!(!scrubbed.contains(&secret), "{line}: {said} -> {scrubbed}");
            }
        }
    }

    #[test]
    fn the_spellings_of_issue_51_are_hidden_where_they_stand() {
        assert_eq!(
            redact_command("export DB_PASSWORD='pw-51-a'; exec server --port 1"),
            "export DB_PASSWORD='***'; exec server --port 1"
        );
        assert_eq!(
            redact_command("server --password=pw-51-b; x"),
            "server --password=***; x"
        );
        assert_eq!(
            redact_command("server --token \"pw-51-c\" x"),
            "server --token \"***\" x"
        );
        assert_eq!(
            redact_command("curl -H 'Authorization: Bearer pw-51-d'"),
            "curl -H 'Authorization: Bearer ***'"
        );
        for s in ["pw-51-a", "pw-51-b", "pw-51-c", "pw-51-d"] {
            assert_eq!(scrub(&format!("x{s};")), "x***;", "{s}");
        }
        // Not a secret: a plain flag, a port, a quoted argument.
        assert_eq!(
            redact_command("server --name 'a b' --port 7001; echo ok"),
            "server --name 'a b' --port 7001; echo ok"
        );
    }

    #[test]
    fn a_target_remembers_its_password_its_token_and_its_query_values() {
        register_target("reference-agent@postgres://u:pw-one-xyz@h/db?password=pw-two-xyz");
        register_target("http://tok-three-xyz@a:1,http://b:2");
        register_target("store+http://:tok-four-xyz@127.0.0.1:9");
        for s in ["pw-one-xyz", "pw-two-xyz", "tok-three-xyz", "tok-four-xyz"] {
            assert_eq!(scrub(s), REDACTED, "{s}");
        }
    }

    #[test]
    fn scrubbed_json_stays_json() {
        register_target("http://u:9876543210@h:1?k=q%22uo%5Ct%22e&t=a\"b\\c");
        let doc = serde_json::json!({"seed": 9_876_543_210_u64, "said": "a\"b\\c and a\"b\\c"});
        let text = scrub_json(&doc.to_string());
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back["seed"], 9_876_543_210_u64);
        assert_eq!(back["said"], "*** and ***");
    }

    /// Issue 57: a credential holding `"`, `\`, markup, a blank or a
    /// non-ASCII letter, as an app echoes it inside JSON, as each report
    /// format escapes it and as a URL carries it.
    #[test]
    fn a_secret_is_hidden_in_every_escaped_form() {
        let secret = "Bearer tok\"en\\x<&>'/ é🦀-57";
        register_secret(secret);
        let json = serde_json::to_string(secret).unwrap_or_default();
        let json = &json[1..json.len() - 1];
        let ascii_json: String = secret
            .encode_utf16()
            .map(|u| match u {
                0x20..=0x7e if u != 0x22 && u != 0x5c => char::from(u as u8).to_string(),
                _ => format!("\\u{u:04X}"),
            })
            .collect();
        let html: String = secret
            .chars()
            .map(|c| match c {
                '"' => "&quot;".to_owned(),
                '\'' => "&#39;".to_owned(),
                '&' => "&amp;".to_owned(),
                '<' => "&lt;".to_owned(),
                '>' => "&gt;".to_owned(),
                c => c.to_string(),
            })
            .collect();
        let xml = html.replace("&#39;", "&apos;");
        let numeric: String = secret
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_string()
                } else {
                    format!("&#x{:x};", u32::from(c))
                }
            })
            .collect();
        let url = |upper: bool, plus: bool| -> String {
            secret
                .bytes()
                .map(|b| match b {
                    b' ' if plus => "+".to_owned(),
                    b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => {
                        char::from(b).to_string()
                    }
                    b if upper => format!("%{b:02X}"),
                    b => format!("%{b:02x}"),
                })
                .collect()
        };
        let twice = serde_json::to_string(json).unwrap_or_default();
        let twice = &twice[1..twice.len() - 1];
        let thrice = serde_json::to_string(&format!("{{\"a\":\"{twice}\"}}")).unwrap_or_default();
        let thrice = &thrice[10..thrice.len() - 4];
        let forms = [
            secret.to_owned(),
            json.to_owned(),
            twice.to_owned(),
            thrice.to_owned(),
            json.replace('/', "\\/"),
            ascii_json,
            html,
            xml,
            numeric,
            url(true, false),
            url(false, true),
        ];
        for form in &forms {
            let said = format!("the app said {{\"echo\":\"{form}\"}} then");
            let scrubbed = scrub(&said);
            assert_eq!(scrubbed, "the app said {\"echo\":\"***\"} then", "{form}");
        }
        // In results.json, the app's JSON answer is a string inside a string.
        let answer = format!("{{\"echo\":\"{json}\"}}");
        let doc = serde_json::json!({"body": answer, "n": 57}).to_string();
        let scrubbed = scrub_json(&doc);
        assert!(!scrubbed.contains("tok"), "{scrubbed}");
        let back: serde_json::Value = serde_json::from_str(&scrubbed).unwrap_or_default();
        assert_eq!(back["n"], 57);
        assert_eq!(back["body"], "{\"echo\":\"***\"}");
        // The token after the scheme alone, too (register_credential does).
        register_secret("tok\"en\\x<&>'/ é🦀-57");
        assert_eq!(scrub("tok\\\"en\\\\x\\u003c&>'/ é🦀-57"), "***");
    }

    #[test]
    fn short_words_are_not_scrubbed_from_free_text() {
        register_target("http://ab:cd@h:1");
        assert_eq!(scrub("ab cd"), "ab cd");
    }
}
