//! "Did you mean" for a `--target` no form takes: a misspelt scheme or name, a missing `:`.
//!
//! Why: `memroy` and `store+http//127.0.0.1:7001` used to get only
//! "unknown target" (issue 41). The check is on the form's head (the
//! scheme or the name before `:`), never on a host or a path, and
//! suggests at most one form. TLS forms (`https://`, `store+https://`,
//! `idem+https://`) are forms like the others (issue 48).

/// The heads of the target forms and the separator each takes after it.
const FORMS: &[(&str, &str)] = &[
    ("memory", ""),
    ("broken-memory", ":"),
    ("sqlite", ":"),
    ("postgres", "://"),
    ("postgres+standby-reads", "://"),
    ("redis", "://"),
    ("redis+cluster", "://"),
    ("store+http", "://"),
    ("store+https", "://"),
    ("http", "://"),
    ("https", "://"),
    ("idem+http", "://"),
    ("idem+https", "://"),
    ("reference-idem", ""),
    ("broken-idem", ":"),
    ("reference-agent", ""),
    ("reference-agents", ":"),
];

/// What to tell a user whose `--target` no form takes, or `None` when
/// nothing close is known.
pub fn hint(spec: &str) -> Option<String> {
    let head_len = spec
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '+' || c == '-'))
        .unwrap_or(spec.len());
    let (head, after) = spec.split_at(head_len);
    let sep_len = after
        .find(|c: char| c != ':' && c != '/')
        .unwrap_or(after.len());
    let (sep, rest) = after.split_at(sep_len);
    let lower = head.to_ascii_lowercase();
    let (form, form_sep) = FORMS
        .iter()
        .map(|(form, form_sep)| (osa_distance(&lower, form), *form, *form_sep))
        .filter(|(d, form, _)| *d <= 2 && *d * 3 <= form.len())
        .min_by_key(|(d, _, _)| *d)
        .map(|(_, form, form_sep)| (form, form_sep))?;
    // The right head with the right separator is a form: the trouble is
    // elsewhere (a host, a variant) and the form's own error says so.
    if form == lower && (sep == form_sep || (form_sep.is_empty() && sep.starts_with(':'))) {
        return None;
    }
    let sep = if form_sep.is_empty() { sep } else { form_sep };
    Some(format!(
        "did you mean `{form}{sep}{}`?",
        without_userinfo(rest)
    ))
}

/// A target as an error shows it: `redact_url`'s form, and, for text that
/// is no URL (`store+http//u:pw@h`: the `:` is missing), everything
/// before the last `@` hidden too.
pub fn shown(spec: &str) -> String {
    if reqkey_reference::scheme::split(spec).is_some() {
        return reqkey_reference::store::redact_url(spec);
    }
    without_userinfo(spec)
}

fn without_userinfo(text: &str) -> String {
    match text.rsplit_once('@') {
        Some((_, host)) => format!("***@{host}"),
        None => text.to_owned(),
    }
}

/// Optimal string alignment distance: insertions, deletions,
/// substitutions and swaps of two neighbours cost 1 each.
fn osa_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    if let Some(first) = d.first_mut() {
        for (j, cell) in first.iter_mut().enumerate() {
            *cell = j;
        }
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_heads_and_separators_get_the_form() {
        assert_eq!(hint("memroy").as_deref(), Some("did you mean `memory`?"));
        assert_eq!(
            hint("store+http//127.0.0.1:7001").as_deref(),
            Some("did you mean `store+http://127.0.0.1:7001`?")
        );
        assert_eq!(
            hint("postgress://u@h/db").as_deref(),
            Some("did you mean `postgres://***@h/db`?")
        );
        assert_eq!(
            hint("broken-memroy:no-cas").as_deref(),
            Some("did you mean `broken-memory:no-cas`?")
        );
        assert_eq!(
            hint("reference-agnet").as_deref(),
            Some("did you mean `reference-agent`?")
        );
    }

    #[test]
    fn tls_forms_are_forms_and_their_misspellings_get_them() {
        assert_eq!(hint("store+https://h:1"), None);
        assert_eq!(hint("idem+https://h:1"), None);
        assert_eq!(
            hint("store+htps://h:1").as_deref(),
            Some("did you mean `store+https://h:1`?")
        );
        assert_eq!(
            hint("idem+htps//h:1").as_deref(),
            Some("did you mean `idem+https://h:1`?")
        );
    }

    #[test]
    fn nothing_close_or_a_right_head_suggests_nothing() {
        assert_eq!(hint("dynamodb://x"), None);
        assert_eq!(hint("broken-memory:no-such-defect"), None);
        assert_eq!(hint("x"), None);
        assert_eq!(osa_distance("memroy", "memory"), 1);
    }

    #[test]
    fn no_secret_reaches_a_hint() {
        let h = hint("store+http//u:hunter2@h:1").unwrap_or_default();
        assert_eq!(h, "did you mean `store+http://***@h:1`?");
        assert_eq!(shown("store+http//u:hunter2@h:1"), "***@h:1");
        assert!(!shown("postgres://u:hunter2@h/db").contains("hunter2"));
        assert_eq!(osa_distance("", "ab"), 2);
    }
}
