//! The clauses of `spec/SPEC.md`: every normative statement's stable id.
//!
//! The spec itself is the one source of truth. Each normative statement
//! carries an id written right after it, `[[area.topic.rule]]`, and the
//! "Clause ids" table near its top says at which level (store, agent, or
//! none, with the reason) each clause is certified; the longest matching
//! row decides. This module parses both out of the spec's text, which is
//! embedded at build time so that the binary works anywhere.
//!
//! Parsing is strict: an id that is malformed or written twice, a table row
//! that matches no id, or an id that no row covers is a [`ClauseError`] —
//! a test keeps the embedded spec free of them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use crate::contract::vocab::Level;

/// The spec's text, embedded when the crate is built.
pub const SPEC_TEXT: &str = include_str!("../../../spec/SPEC.md");

/// Where a clause is certified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Certified {
    /// By scenarios of these levels (never empty).
    At(BTreeSet<Level>),
    /// By no scenario; the text says why (and what checks it instead).
    Elsewhere(String),
}

/// One clause of the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clause {
    /// `area.topic.rule`.
    pub id: String,
    /// The 1-based line of the spec it is written on.
    pub line: usize,
    /// The heading of the section it is in (`4. The run-start commit (stores)`).
    pub section: String,
    pub certified: Certified,
}

impl Clause {
    /// Whether scenarios of `level` certify this clause.
    pub fn applies_to(&self, level: Level) -> bool {
        matches!(&self.certified, Certified::At(levels) if levels.contains(&level))
    }
}

/// The statement a clause id stands after, as the spec writes it: from
/// the start of its paragraph, list item or table row to the id, the
/// other ids and line breaks dropped.
pub fn statement(clause: &Clause) -> String {
    let lines: Vec<&str> = SPEC_TEXT.lines().collect();
    let marker = format!("[[{}]]", clause.id);
    let Some(end) = clause.line.checked_sub(1).filter(|i| *i < lines.len()) else {
        return String::new();
    };
    let starts_item = |l: &str| {
        let t = l.trim_start();
        let numbered = t
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        t.starts_with("- ") || t.starts_with("| ") || t.starts_with('#') || numbered
    };
    let mut start = end;
    while start > 0 && !starts_item(lines[start]) {
        let above = lines[start - 1].trim();
        if above.is_empty() || above.starts_with('#') || above.starts_with('|') {
            break;
        }
        start -= 1;
    }
    let mut text = lines[start..=end].join(" ");
    if let Some(at) = text.find(&marker) {
        text.truncate(at);
    }
    // Ids written together after one sentence share it: drop the ones
    // just before this one; then, within its item, the statement starts
    // after the previous id.
    loop {
        let trimmed = text.trim_end();
        match trimmed.strip_suffix("]]").and_then(|t| t.rfind("[[")) {
            Some(open) => text = trimmed[..open].to_owned(),
            None => break,
        }
    }
    if let Some(prev) = text.rfind("]]") {
        text = text[prev + 2..].to_owned();
    }
    // Drop the ids of other clauses stated before it in the same item.
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find("[[") {
        out.push_str(&rest[..open]);
        match rest[open..].find("]]") {
            Some(close) => rest = &rest[open + close + 2..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    let joined = out.split_whitespace().collect::<Vec<_>>().join(" ");
    // The sentence before it may end with its own id and a full stop:
    // ". It reads..." starts at "It".
    joined
        .trim_start_matches(['.', ',', ';', ':', ' '])
        .to_owned()
}

/// The list or table a clause introduces, one entry per item or row, ids
/// dropped: a clause written at the end of a sentence that ends with `:`
/// or "in this order" (`store.commit.order`, `plan.order`) is defined by
/// what follows it; empty for any other clause.
pub fn introduced_list(clause: &Clause) -> Vec<String> {
    let lines: Vec<&str> = SPEC_TEXT.lines().collect();
    let marker = format!("[[{}]]", clause.id);
    let Some(line) = clause.line.checked_sub(1).and_then(|i| lines.get(i)) else {
        return Vec::new();
    };
    let Some(at) = line.find(&marker) else {
        return Vec::new();
    };
    // `...in the order listed [[id]]:` or `...as follows: [[id]]` at the
    // end of its line: the sentence introduces what follows.
    let after = line[at + marker.len()..].trim();
    let before = line[..at].trim_end();
    if !(after == ":" || (after.is_empty() && before.ends_with(':'))) {
        return Vec::new();
    }
    let is_item = |l: &str| {
        let t = l.trim_start();
        let numbered = t
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        t.starts_with("- ") || t.starts_with('|') || numbered
    };
    let mut items: Vec<String> = Vec::new();
    let mut i = clause.line;
    // One blank line may stand between the sentence and its list.
    if lines.get(i).is_some_and(|l| l.trim().is_empty()) {
        i += 1;
    }
    while let Some(l) = lines.get(i) {
        let t = l.trim();
        if is_item(l) {
            // A table's header separator row (`|---|`) says nothing.
            if !t.trim_matches(['|', '-', ' ']).is_empty() {
                items.push(t.to_owned());
            }
        } else if !t.is_empty() && l.starts_with(' ') && !items.is_empty() {
            if let Some(last) = items.last_mut() {
                last.push(' ');
                last.push_str(t);
            }
        } else {
            break;
        }
        i += 1;
    }
    if !items.iter().any(|t| !t.starts_with('|')) && items.len() < 2 {
        return Vec::new();
    }
    items
        .into_iter()
        .map(|item| {
            let mut out = String::with_capacity(item.len());
            let mut rest = item.as_str();
            while let Some(open) = rest.find("[[") {
                out.push_str(&rest[..open]);
                rest = rest[open..]
                    .find("]]")
                    .map_or("", |c| &rest[open + c + 2..]);
            }
            out.push_str(rest);
            let joined = out.split_whitespace().collect::<Vec<_>>().join(" ");
            // "write nothing [[a]]; otherwise" reads "write nothing; otherwise".
            [".", ",", ";", ":"]
                .iter()
                .fold(joined, |t, p| t.replace(&format!(" {p}"), p))
        })
        .collect()
}

/// Why the spec's clauses could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClauseError {
    #[error("spec line {line}: `[[{id}]]` is not a clause id (lowercase dot-separated words of [a-z0-9-], at least two)")]
    Malformed { line: usize, id: String },
    #[error("spec line {line}: clause `{id}` is already written on line {first}")]
    Duplicate {
        line: usize,
        id: String,
        first: usize,
    },
    #[error("the spec has no \"clause ids | certified at\" table")]
    NoTable,
    #[error("spec line {line}: the clause table row is malformed: {message}")]
    BadRow { line: usize, message: String },
    #[error("spec line {line}: the clause table names `{pattern}`, which matches no clause")]
    UnusedRow { line: usize, pattern: String },
    #[error("spec line {line}: no row of the clause table covers `{id}`")]
    Uncovered { line: usize, id: String },
}

/// The parsed clauses of the embedded spec, in the order they are written.
pub fn clauses() -> Result<&'static [Clause], ClauseError> {
    static PARSED: LazyLock<Result<Vec<Clause>, ClauseError>> =
        LazyLock::new(|| parse_clauses(SPEC_TEXT));
    PARSED.as_ref().map(Vec::as_slice).map_err(Clone::clone)
}

/// The clause with this id, if the embedded spec has it.
pub fn find(id: &str) -> Option<&'static Clause> {
    clauses().ok()?.iter().find(|c| c.id == id)
}

/// Whether `id` is well formed: at least two dot-separated words of
/// `[a-z0-9-]`, each starting with a letter or digit.
pub fn is_clause_id(id: &str) -> bool {
    let words: Vec<&str> = id.split('.').collect();
    words.len() >= 2
        && words.iter().all(|w| {
            !w.is_empty()
                && !w.starts_with('-')
                && w.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// The `[[...]]` ids written on one line (one quoted in backticks, as the
/// spec does when it shows the form, is not an id).
fn ids_on(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find("[[") {
        let quoted = rest[..open].ends_with('`');
        let after = &rest[open + 2..];
        let Some(close) = after.find("]]") else { break };
        if !quoted {
            out.push(&after[..close]);
        }
        rest = &after[close + 2..];
    }
    out
}

/// A row of the clause table: its patterns (`store.*` or an exact id).
struct Row {
    line: usize,
    patterns: Vec<String>,
    certified: Certified,
}

fn parse_row(line_no: usize, line: &str) -> Result<Row, ClauseError> {
    let bad = |message: &str| ClauseError::BadRow {
        line: line_no,
        message: message.to_owned(),
    };
    let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
    let [ids, levels] = cells.as_slice() else {
        return Err(bad("want two cells"));
    };
    let patterns: Vec<String> = ids
        .split(',')
        .map(|p| p.trim().trim_matches('`').to_owned())
        .collect();
    for p in &patterns {
        let ok = match p.strip_suffix(".*") {
            Some(prefix) => is_clause_id(&format!("{prefix}.x")),
            None => is_clause_id(p),
        };
        if !ok {
            return Err(bad(&format!("`{p}` is neither an id nor `area.*`")));
        }
    }
    let levels = levels.trim();
    let certified = if let Some(reason) = levels.strip_prefix("none") {
        let reason = reason.trim_start_matches(':').trim();
        if reason.is_empty() {
            return Err(bad("`none` needs a reason"));
        }
        Certified::Elsewhere(reason.to_owned())
    } else {
        let mut set = BTreeSet::new();
        for name in levels.split(',') {
            let level = Level::parse(name.trim())
                .ok_or_else(|| bad(&format!("unknown level `{}`", name.trim())))?;
            set.insert(level);
        }
        Certified::At(set)
    };
    Ok(Row {
        line: line_no,
        patterns,
        certified,
    })
}

/// How specific a pattern is for `id` (longer is more specific), or `None`
/// when it does not match.
fn match_len(pattern: &str, id: &str) -> Option<usize> {
    match pattern.strip_suffix(".*") {
        Some(prefix) => id
            .strip_prefix(prefix)
            .filter(|rest| rest.starts_with('.'))
            .map(|_| prefix.len()),
        None => (pattern == id).then_some(usize::MAX),
    }
}

/// Parses the clauses and the clause table out of a spec's text.
pub fn parse_clauses(text: &str) -> Result<Vec<Clause>, ClauseError> {
    let mut found: Vec<(String, usize, String)> = Vec::new();
    let mut first_line: BTreeMap<String, usize> = BTreeMap::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut section = String::new();
    let mut in_table = false;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
        }
        if line.trim_start().starts_with("| clause ids |") {
            in_table = true;
            continue;
        }
        if in_table {
            if !line.trim_start().starts_with('|') {
                in_table = false;
            } else if !line.trim_start().starts_with("|---") {
                rows.push(parse_row(line_no, line)?);
                continue;
            } else {
                continue;
            }
        }
        for id in ids_on(line) {
            if !is_clause_id(id) {
                return Err(ClauseError::Malformed {
                    line: line_no,
                    id: id.to_owned(),
                });
            }
            if let Some(first) = first_line.insert(id.to_owned(), line_no) {
                return Err(ClauseError::Duplicate {
                    line: line_no,
                    id: id.to_owned(),
                    first,
                });
            }
            found.push((id.to_owned(), line_no, section.clone()));
        }
    }
    if rows.is_empty() {
        return Err(ClauseError::NoTable);
    }
    for row in &rows {
        for p in &row.patterns {
            if !found.iter().any(|(id, ..)| match_len(p, id).is_some()) {
                return Err(ClauseError::UnusedRow {
                    line: row.line,
                    pattern: p.clone(),
                });
            }
        }
    }
    found
        .into_iter()
        .map(|(id, line, section)| {
            let best = rows
                .iter()
                .filter_map(|r| {
                    r.patterns
                        .iter()
                        .filter_map(|p| match_len(p, &id))
                        .max()
                        .map(|len| (len, r))
                })
                .max_by_key(|(len, _)| *len);
            let Some((_, row)) = best else {
                return Err(ClauseError::Uncovered { line, id });
            };
            Ok(Clause {
                id,
                line,
                section,
                certified: row.certified.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod statement_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_statement_is_the_text_its_id_stands_after() {
        let all = clauses().unwrap();
        let find = |id: &str| all.iter().find(|c| c.id == id).unwrap();
        let cas = statement(find("store.commit.cas"));
        assert!(cas.starts_with("3. **CAS.**"), "{cas}");
        assert!(!cas.contains("[["), "{cas}");
        let strict = statement(find("wire.store.strict-json"));
        assert!(strict.contains("repeats a member name"), "{strict}");
        for c in all {
            assert!(!statement(c).is_empty(), "{}", c.id);
        }
    }

    #[test]
    fn a_clause_that_introduces_a_list_takes_its_items() {
        let all = clauses().unwrap();
        let find = |id: &str| all.iter().find(|c| c.id == id).unwrap();
        let order = find("store.commit.order");
        let text = statement(order);
        assert!(text.starts_with("It reads and decides"), "{text}");
        let list = introduced_list(order);
        assert_eq!(list.len(), 4, "{list:?}");
        assert!(list[0].starts_with("1. **Same-runId replay.**"), "{list:?}");
        assert!(list[3].starts_with("4. **Write.**"), "{list:?}");
        assert!(
            list[3].ends_with("Answer `{outcome: \"started\", run}`."),
            "{list:?}"
        );
        assert!(
            list[1].ends_with("`{existingRunId: <holder>}`. Nothing is written."),
            "{list:?}"
        );
        assert!(list.iter().all(|i| !i.contains("[[")), "{list:?}");
        let plan = introduced_list(find("plan.order"));
        assert_eq!(plan.len(), 6, "header and five rows: {plan:?}");
        assert!(plan[1].starts_with("| none |"), "{plan:?}");
        // A clause in the middle of a paragraph introduces nothing.
        assert!(introduced_list(find("store.commit.cas")).is_empty());
        assert!(introduced_list(find("store.commit.atomic")).is_empty());
        // A list item whose id ends its line does not take the next items.
        assert!(introduced_list(find("lease.taken-before-commit")).is_empty());
        let with_lists: Vec<&str> = all
            .iter()
            .filter(|c| !introduced_list(c).is_empty())
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(with_lists, ["store.commit.order", "plan.order"]);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const TABLE: &str = "| clause ids | certified at |\n|---|---|\n| `a.*` | store |\n| `a.b.c` | none: measured |\n| `b.*` | store, agent |\n\n";

    #[test]
    fn the_embedded_spec_parses_and_every_level_has_clauses() {
        let all = clauses().unwrap();
        assert!(all.len() >= 100, "{}", all.len());
        for level in Level::ALL {
            assert!(all.iter().any(|c| c.applies_to(level)), "{level:?}");
        }
        let c = find("store.commit.key-holder").unwrap();
        assert!(c.section.starts_with("4."), "{}", c.section);
        assert!(c.applies_to(Level::Store) && !c.applies_to(Level::Agent));
        assert!(matches!(
            find("store.reads.by-key-indexed").unwrap().certified,
            Certified::Elsewhere(_)
        ));
        assert!(find("agent.route.start").unwrap().applies_to(Level::Agent));
    }

    #[test]
    fn the_longest_matching_row_decides() {
        let text = format!("{TABLE}## 1. X\nOne [[a.b.c]] two [[a.b.d]].\nThree [[b.x]]\n");
        let parsed = parse_clauses(&text).unwrap();
        assert_eq!(parsed.len(), 3);
        assert!(matches!(parsed[0].certified, Certified::Elsewhere(ref r) if r == "measured"));
        assert!(parsed[1].applies_to(Level::Store));
        assert!(!parsed[1].applies_to(Level::Agent));
        assert!(parsed[2].applies_to(Level::Agent));
        assert_eq!((parsed[1].line, parsed[1].section.as_str()), (8, "1. X"));
    }

    #[test]
    fn mistakes_in_the_spec_are_typed_errors() {
        let dup = format!("{TABLE}[[a.x]] and [[a.x]]\n");
        assert!(matches!(
            parse_clauses(&dup),
            Err(ClauseError::Duplicate { .. })
        ));
        let bad = format!("{TABLE}[[A.x]]\n");
        assert!(matches!(
            parse_clauses(&bad),
            Err(ClauseError::Malformed { .. })
        ));
        let uncovered = format!("{TABLE}[[a.b.c]] [[b.y]] [[c.z]]\n");
        assert!(matches!(
            parse_clauses(&uncovered),
            Err(ClauseError::Uncovered { ref id, .. }) if id == "c.z"
        ));
        let unused = format!("{TABLE}[[a.x]]\n");
        assert!(matches!(
            parse_clauses(&unused),
            Err(ClauseError::UnusedRow { .. })
        ));
        assert_eq!(parse_clauses("[[a.b]]"), Err(ClauseError::NoTable));
        assert!(!is_clause_id("single") && !is_clause_id("a..b") && is_clause_id("a.b-c.d1"));
    }
}
