//! `--expected-failures FILE`: scenario ids a backend is known to fail.
//!
//! CI gates on exit codes, and a backend with a known, tracked defect must
//! still be able to gate everything else. The file lists scenario ids, one
//! a line; `#` starts a comment (whole-line or trailing); blank lines are
//! ignored. A listed scenario that fails is reported as an expected
//! failure and keeps the run green; one that passes turns the run red
//! (exit 1), because the list is now wrong and would hide a regression.
//! An id that is in no loaded scenario is a harness error (exit 2): a typo
//! must not silently expect nothing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Why an expected-failures file cannot be used. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ExpectedFailuresError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: `{id}` is not a scenario id ([A-Za-z0-9._-], no spaces)")]
    BadId {
        path: PathBuf,
        line: usize,
        id: String,
    },
    #[error("{path}: not in the suite: {}", ids.join(", "))]
    Unknown { path: PathBuf, ids: Vec<String> },
}

/// Parses the file's text into ids, in order, without duplicates.
pub fn parse(path: &Path, text: &str) -> Result<Vec<String>, ExpectedFailuresError> {
    let mut ids = Vec::new();
    let mut seen = BTreeSet::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let valid = line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        if !valid {
            return Err(ExpectedFailuresError::BadId {
                path: path.to_owned(),
                line: n + 1,
                id: line.to_owned(),
            });
        }
        if seen.insert(line.to_owned()) {
            ids.push(line.to_owned());
        }
    }
    Ok(ids)
}

/// Reads and parses the file, and checks every id against the suite.
pub fn load<'a>(
    path: &Path,
    suite_ids: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<String>, ExpectedFailuresError> {
    let text = std::fs::read_to_string(path).map_err(|source| ExpectedFailuresError::Io {
        path: path.to_owned(),
        source,
    })?;
    let ids = parse(path, &text)?;
    let known: BTreeSet<&str> = suite_ids.into_iter().collect();
    let unknown: Vec<String> = ids
        .iter()
        .filter(|id| !known.contains(id.as_str()))
        .cloned()
        .collect();
    if unknown.is_empty() {
        Ok(ids)
    } else {
        Err(ExpectedFailuresError::Unknown {
            path: path.to_owned(),
            ids: unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn comments_blank_lines_and_duplicates_are_ignored() {
        let ids = parse(
            Path::new("xf"),
            "# known bugs\n\nrequest-key.race  # issue 12\nrequest-key.race\n  a.b\n",
        )
        .unwrap();
        assert_eq!(ids, ["request-key.race", "a.b"]);
    }

    #[test]
    fn a_line_that_is_not_an_id_names_its_line() {
        let e = parse(Path::new("xf"), "ok.id\ntwo words\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "xf:2: `two words` is not a scenario id ([A-Za-z0-9._-], no spaces)"
        );
    }
}
