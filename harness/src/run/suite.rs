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
//! The digest is `sha256:` followed by the lowercase hex of sha256 over,
//! for each file in byte order of its path relative to the suite directory
//! (with `/` separators): the relative path, a newline, the file's length
//! in bytes in decimal, a newline, and the file's bytes. Framing with the
//! length means no two different suites hash the same input.

use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::scenario::{self, LoadError};
use crate::target::Level;

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
    root.join(level.to_string())
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

/// The digest of `files`, each named by its path relative to `base`.
pub fn digest_files(base: &Path, files: &[PathBuf]) -> Result<String, SuiteError> {
    let mut named: Vec<(String, &PathBuf)> = files
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
    named.sort();
    let mut hasher = Sha256::new();
    for (name, file) in named {
        // Bounded like the loader: a file over the limit is refused, not read whole.
        let bytes = scenario::read_bounded(file)?;
        hasher.update(name.as_bytes());
        hasher.update(b"\n");
        hasher.update(bytes.len().to_string().as_bytes());
        hasher.update(b"\n");
        hasher.update(&bytes);
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(format!("sha256:{hex}"))
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
        },
        files,
    ))
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
