//! The certification suite: which scenario files, in which order, under
//! which version, and their digest.
//!
//! A certificate is only worth something if a reader can tell exactly which
//! checks it passed. So `reqkey certify` never takes a selection: it runs
//! every file under `scenarios/<level>/`, and the certificate carries a
//! sha256 digest over those files in a fixed order. Two certificates with
//! the same digest were judged by the same scenarios, byte for byte; a
//! committed certificate whose digest differs from the current suite's is
//! stale (a test in `reports/` checks exactly that).
//!
//! The suite is embedded in the binary at build time (`harness/build.rs`),
//! so an installed `reqkey` certifies from any directory; `--scenarios
//! ROOT` judges by another copy on disk instead. The digest is computed the
//! same way for both, so the embedded suite and the `scenarios/` directory
//! it was built from have the same digest, and a report says which one ran.
//!
//! The digest is `sha256:` followed by the lowercase hex of sha256 over,
//! for each file in byte order of its path relative to the suite directory
//! (with `/` separators): the relative path, a newline, the file's length
//! in bytes in decimal, a newline, and the file's bytes. Framing with the
//! length means no two different suites hash the same input.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::targets::Level;
use reqkey_scenario::{self as scenario, LoadError, Scenario};

include!(concat!(env!("OUT_DIR"), "/embedded_suite.rs"));

/// How the embedded suite names itself as a report's `source`.
pub const EMBEDDED_SOURCE: &str = "embedded";

/// The file (beside the level directories) that holds the suite version.
pub const VERSION_FILE: &str = "VERSION";

/// What a report says about the scenarios it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuiteInfo {
    /// The directory or files the scenarios came from, as given.
    pub source: String,
    /// The suite version (`scenarios/VERSION`), when the whole suite of a
    /// level was loaded; `None` for an ad-hoc selection of files.
    pub version: Option<String>,
    /// `sha256:<hex>` over the scenario files (see the module docs).
    pub digest: String,
    /// How many scenario files.
    pub files: usize,
    /// The suite built into this binary (not files read from disk).
    #[serde(default)]
    pub embedded: bool,
}

/// Why the suite could not be read. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The suite directory of a level under a scenarios root.
pub fn level_dir(root: &Path, level: Level) -> PathBuf {
    root.join(level.info().suite_dir)
}

/// Reads the suite version from `root/VERSION` (one line).
pub fn read_version(root: &Path) -> Result<String, SuiteError> {
    let path = root.join(VERSION_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| SuiteError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(text.trim().to_owned())
}

/// The digest of named files (see the module docs); the order they are
/// given in does not matter.
pub fn digest_named<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut named: Vec<(&str, &[u8])> = files.into_iter().collect();
    named.sort();
    let mut hasher = Sha256::new();
    for (name, bytes) in named {
        hasher.update(name.as_bytes());
        hasher.update(b"\n");
        hasher.update(bytes.len().to_string().as_bytes());
        hasher.update(b"\n");
        hasher.update(bytes);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The digest of `files`, each named by its path relative to `base`.
pub fn digest_files(base: &Path, files: &[PathBuf]) -> Result<String, SuiteError> {
    let named: Vec<(String, &PathBuf)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(base).unwrap_or(f);
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            (name, f)
        })
        .collect();
    let mut read = Vec::with_capacity(named.len());
    for (name, file) in named {
        // Bounded like the loader: a file over the limit is refused, not read whole.
        let bytes = scenario::read_bounded(file)?;
        read.push((name, bytes));
    }
    Ok(digest_named(
        read.iter().map(|(n, b)| (n.as_str(), b.as_slice())),
    ))
}

/// The whole suite of `level` under the scenarios `root`: its info and the
/// files to load.
pub fn whole_suite(root: &Path, level: Level) -> Result<(SuiteInfo, Vec<PathBuf>), SuiteError> {
    let dir = level_dir(root, level);
    let files = scenario::scenario_files(std::slice::from_ref(&dir))?;
    let digest = digest_files(&dir, &files)?;
    let version = read_version(root)?;
    Ok((
        SuiteInfo {
            source: dir.display().to_string(),
            version: Some(version),
            digest,
            files: files.len(),
            embedded: false,
        },
        files,
    ))
}

/// The embedded suite's files of `level`: (path relative to the level
/// directory, text).
fn embedded_level(level: Level) -> Vec<(&'static str, &'static str)> {
    let prefix = format!("{}/", level.info().suite_dir);
    EMBEDDED_FILES
        .iter()
        .filter_map(|(path, text)| path.strip_prefix(prefix.as_str()).map(|rel| (rel, *text)))
        .collect()
}

/// The text of an embedded scenario, by the `file` its [`Scenario`] has
/// (`embedded/<level dir>/<path>`).
pub fn embedded_text(file: &Path) -> Option<&'static str> {
    let rel = file.strip_prefix(EMBEDDED_SOURCE).ok()?;
    let rel = rel.to_str()?;
    EMBEDDED_FILES
        .iter()
        .find(|(path, _)| *path == rel)
        .map(|(_, text)| *text)
}

/// A top-level file of the embedded suite (`VERSION`,
/// `falsification.json`), by name.
pub fn embedded_file(name: &str) -> Option<&'static str> {
    EMBEDDED_FILES
        .iter()
        .find(|(path, _)| *path == name)
        .map(|(_, text)| *text)
}

/// The version of the embedded suite.
pub fn embedded_version() -> String {
    EMBEDDED_FILES
        .iter()
        .find(|(path, _)| *path == VERSION_FILE)
        .map_or_else(String::new, |(_, text)| text.trim().to_owned())
}

/// The whole embedded suite of `level`: its info and its scenarios (a
/// scenario's `file` is `embedded/<level>/<path>`).
pub fn embedded_suite(level: Level) -> Result<(SuiteInfo, Vec<Scenario>), SuiteError> {
    let files = embedded_level(level);
    let digest = digest_named(files.iter().map(|(rel, text)| (*rel, text.as_bytes())));
    let base = Path::new(EMBEDDED_SOURCE).join(level.info().suite_dir);
    let texts: Vec<(PathBuf, &str)> = files
        .iter()
        .map(|(rel, text)| (base.join(rel), *text))
        .collect();
    let scenarios = scenario::parse_all(&texts)?;
    Ok((
        SuiteInfo {
            source: format!("{EMBEDDED_SOURCE}/{}", level.info().suite_dir),
            version: Some(embedded_version()),
            digest,
            files: files.len(),
            embedded: true,
        },
        scenarios,
    ))
}

/// The whole suite of `level` under a scenarios root on disk, loaded.
pub fn disk_suite(root: &Path, level: Level) -> Result<(SuiteInfo, Vec<Scenario>), SuiteError> {
    let (info, files) = whole_suite(root, level)?;
    Ok((info, scenario::load_paths(&files)?))
}

/// Writes the embedded suite under `dir` (`VERSION`, `store/`, `agent/`),
/// for reading or for `--scenarios`; returns how many files it wrote.
pub fn export_embedded(dir: &Path) -> Result<usize, SuiteError> {
    for (rel, text) in EMBEDDED_FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| SuiteError::Io {
                path: parent.to_owned(),
                source,
            })?;
        }
        std::fs::write(&path, text).map_err(|source| SuiteError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(EMBEDDED_FILES.len())
}

/// An ad-hoc selection (`reqkey run PATHS`): digested too, so a report says
/// exactly what ran, but without a suite version.
pub fn selection(paths: &[PathBuf]) -> Result<SuiteInfo, SuiteError> {
    let files = scenario::scenario_files(paths)?;
    let base = match paths {
        [one] if one.is_dir() => one.as_path(),
        _ => Path::new(""),
    };
    Ok(SuiteInfo {
        source: paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        version: None,
        digest: digest_files(base, &files)?,
        files: files.len(),
        embedded: false,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "reqkey-suite-{}-{}",
            std::process::id(),
            files.iter().map(|(n, b)| n.len() + b.len()).sum::<usize>()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        dir
    }

    #[test]
    fn the_digest_ignores_the_order_files_are_given_in() {
        let dir = dir_with(&[("a.yaml", "one"), ("b.yaml", "two")]);
        let ab = digest_files(&dir, &[dir.join("a.yaml"), dir.join("b.yaml")]).unwrap();
        let ba = digest_files(&dir, &[dir.join("b.yaml"), dir.join("a.yaml")]).unwrap();
        assert_eq!(ab, ba);
        assert!(ab.starts_with("sha256:") && ab.len() == 7 + 64, "{ab}");
    }

    #[test]
    fn the_digest_changes_with_a_byte_or_a_name() {
        let dir = dir_with(&[("a.yaml", "one!"), ("c.yaml", "one")]);
        let a = digest_files(&dir, &[dir.join("a.yaml")]).unwrap();
        let c = digest_files(&dir, &[dir.join("c.yaml")]).unwrap();
        std::fs::write(dir.join("a.yaml"), "one?").unwrap();
        let a2 = digest_files(&dir, &[dir.join("a.yaml")]).unwrap();
        assert_ne!(a, c);
        assert_ne!(a, a2);
    }
}
