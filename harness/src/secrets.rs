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

/// `text` with each of `secrets` (longest first) replaced by `***`.
fn scrub_with(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for s in secrets.iter() {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REDACTED);
        }
    }
    out
}

/// [`scrub`] for serialized JSON: the document stays valid JSON. A
/// secret is replaced as it stands inside a string (JSON-escaped when it
/// holds a quote, a backslash or a control character); an all-digit
/// secret is left, since it cannot be told from the document's numbers.
pub fn scrub_json(serialized: &str) -> String {
    let secrets = SECRETS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = serialized.to_owned();
    for s in secrets.iter() {
        if s.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let quoted = serde_json::to_string(s).unwrap_or_default();
        let inner = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or(s);
        if out.contains(inner) {
            out = out.replace(inner, REDACTED);
        }
    }
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

    #[test]
    fn short_words_are_not_scrubbed_from_free_text() {
        register_target("http://ab:cd@h:1");
        assert_eq!(scrub("ab cd"), "ab cd");
    }
}
