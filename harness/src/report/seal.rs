//! The seal over a shard's results, so that `certify merge` cannot be fed
//! a shard edited after its run.
//!
//! Why: shards travel between CI jobs as artifacts, and merge once took
//! them at their word; failures flipped to passes by hand merged into
//! CONFORMS. Each `certify --partition` writes `results.json.seal` beside
//! its `results.json`: SHA-256 of the file's exact bytes, or, when
//! `REQKEY_SEAL_KEY` is set (a CI secret shared by the shard jobs and the
//! merge job), HMAC-SHA256 keyed by it. Merge verifies every shard's
//! seal before reading it. Unkeyed, the seal catches an edit that did not
//! recompute it; only a key makes it proof against someone who knows how
//! (docs/reports.md, "Sharded certification").
//!
//! Why a run id: a seal proves a shard was not edited, not that it belongs
//! with the others; yesterday's sealed green shards once merged with
//! today's red one into CONFORMS. Every certification names its run
//! (`certify --run-id ID`, given to every shard of one CI run, or derived
//! from the seed, the suite digest, the target and the shard count), in
//! `results.json` (so keyed seals cover it) and in the seal; merge
//! refuses shards of different runs, and `certify merge --run-id ID`
//! refuses shards of any run but the one named.
//!
//! Why results are bounded before they are read: merge takes files from
//! another job; one of 3 GiB was once read whole (3.15 GB peak) before its
//! seal was checked. Now its size is checked first ([`MAX_RESULTS_BYTES`]),
//! and the seal is computed over the file read in pieces
//! ([`verify_file`]), before any byte is kept whole or parsed.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2_seal::{Digest, Sha256};

/// The seal's file name, beside `results.json`.
pub const SEAL_FILE: &str = "results.json.seal";
/// The environment variable holding the seal key.
pub const SEAL_KEY_ENV: &str = "REQKEY_SEAL_KEY";
/// The seal document's schema.
const SEAL_SCHEMA: &str = "reqkey-seal/1";
/// The largest seal file read (a seal is a few hundred bytes).
pub const MAX_SEAL_BYTES: u64 = 4096;

#[derive(Debug, Serialize, Deserialize)]
struct SealDoc {
    schema: String,
    /// What it seals (`results.json`).
    file: String,
    /// `sha256` or `hmac-sha256`.
    algorithm: String,
    /// Lower-case hex.
    digest: String,
    /// The run the sealed results belong to (`results.json`'s `run_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
}

/// The largest `results.json` merge reads: a certification's results are
/// bounded by the suite (each target text cut to 4 KiB,
/// `run::bound`), a few MiB for the whole suite; a larger file is refused
/// before it is read.
pub const MAX_RESULTS_BYTES: u64 = 16 * 1024 * 1024;

/// The longest `--run-id`.
pub const MAX_RUN_ID_CHARS: usize = 128;

/// Checks a `--run-id`: 1 to [`MAX_RUN_ID_CHARS`] of `A-Z a-z 0-9 . _ : -`.
pub fn parse_run_id(text: &str) -> Result<String, String> {
    let ok = !text.is_empty()
        && text.chars().count() <= MAX_RUN_ID_CHARS
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "a run id is 1 to {MAX_RUN_ID_CHARS} characters of A-Z a-z 0-9 . _ : -"
        ))
    }
}

/// The run id a certification takes when given none: the same for every
/// shard of one run (the same seed, suite, target and shard count), and
/// different for a run with another seed. `derived:` and 16 hex digits.
pub fn derived_run_id(seed: u64, suite_digest: &str, target: &str, shards: u32) -> String {
    let text = format!("reqkey-run/1\n{seed}\n{suite_digest}\n{target}\n{shards}\n");
    format!("derived:{}", &hex(&Sha256::digest(text.as_bytes()))[..16])
}

/// The seal key from [`SEAL_KEY_ENV`], if set and not empty.
pub fn key_from_env() -> Option<Vec<u8>> {
    std::env::var_os(SEAL_KEY_ENV)
        .map(|v| v.into_encoded_bytes())
        .filter(|k| !k.is_empty())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

fn hmac(key: &[u8]) -> Result<Hmac<Sha256>, String> {
    Hmac::<Sha256>::new_from_slice(key).map_err(|e| format!("the seal key: {e}"))
}

/// The seal of `results` (the exact bytes of `results.json`), as the text
/// of `results.json.seal`, naming `run_id`.
pub fn seal(results: &[u8], key: Option<&[u8]>, run_id: Option<&str>) -> Result<String, String> {
    let (algorithm, digest) = match key {
        Some(key) => {
            let mut mac = hmac(key)?;
            mac.update(results);
            ("hmac-sha256", hex(&mac.finalize().into_bytes()))
        }
        None => ("sha256", hex(&Sha256::digest(results))),
    };
    let doc = SealDoc {
        schema: SEAL_SCHEMA.into(),
        file: "results.json".into(),
        algorithm: algorithm.into(),
        digest,
        run_id: run_id.map(str::to_owned),
    };
    serde_json::to_string_pretty(&doc)
        .map(|t| t + "\n")
        .map_err(|e| format!("the seal: {e}"))
}

/// A digest being computed over bytes given in pieces.
enum Digesting {
    Plain(Sha256),
    Keyed(Hmac<Sha256>),
}

impl Digesting {
    /// The digest the seal `doc` names, keyed by `key` when it must be;
    /// the reason when the seal cannot be checked.
    fn for_seal(origin: &str, doc: &SealDoc, key: Option<&[u8]>) -> Result<Digesting, String> {
        match (doc.algorithm.as_str(), key) {
            ("hmac-sha256", Some(key)) => Ok(Digesting::Keyed(hmac(key)?)),
            ("hmac-sha256", None) => Err(format!(
                "{origin} is sealed with a key: set {SEAL_KEY_ENV} to the key the shards were sealed with"
            )),
            ("sha256", Some(_)) => Err(format!(
                "{origin} is sealed without a key, but {SEAL_KEY_ENV} is set: anyone could have written it \
                 (run the shards with {SEAL_KEY_ENV} set too)"
            )),
            ("sha256", None) => Ok(Digesting::Plain(Sha256::new())),
            (other, _) => Err(format!(
                "{origin}: {SEAL_FILE}: unknown algorithm `{}`",
                crate::report::inert::terminal(other)
            )),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Digesting::Plain(d) => d.update(bytes),
            Digesting::Keyed(m) => m.update(bytes),
        }
    }

    fn holds(self, digest: &[u8]) -> bool {
        match self {
            Digesting::Plain(d) => d.finalize().as_slice() == digest,
            Digesting::Keyed(m) => m.verify_slice(digest).is_ok(),
        }
    }
}

/// A seal's text read: its schema and file checked, its digest unhexed.
fn read_seal(origin: &str, seal_text: &str) -> Result<(SealDoc, Vec<u8>), String> {
    let doc: SealDoc = serde_json::from_str(seal_text)
        .map_err(|e| format!("{origin}: {SEAL_FILE} is not a seal: {e}"))?;
    if doc.schema != SEAL_SCHEMA || doc.file != "results.json" {
        return Err(format!(
            "{origin}: {SEAL_FILE} is not a {SEAL_SCHEMA} seal of results.json"
        ));
    }
    let digest = unhex(&doc.digest)
        .ok_or_else(|| format!("{origin}: {SEAL_FILE}: the digest is not hex"))?;
    Ok((doc, digest))
}

fn mismatch(origin: &str, key: Option<&[u8]>) -> String {
    format!(
        "{origin}: results.json does not match its seal: it was changed after the run{}",
        if key.is_some() {
            " (or sealed with another key)"
        } else {
            ""
        }
    )
}

/// Checks `results` against its seal; the run id the seal names, or the
/// reason when it does not hold.
pub fn verify(
    origin: &str,
    results: &[u8],
    seal_text: &str,
    key: Option<&[u8]>,
) -> Result<Option<String>, String> {
    let (doc, digest) = read_seal(origin, seal_text)?;
    let mut digesting = Digesting::for_seal(origin, &doc, key)?;
    digesting.update(results);
    if digesting.holds(&digest) {
        Ok(doc.run_id)
    } else {
        Err(mismatch(origin, key))
    }
}

/// Checks the file `results` against its seal without holding it whole:
/// refused past [`MAX_RESULTS_BYTES`] before a byte is read, then read in
/// pieces through the digest. The run id the seal names, or why not.
pub fn verify_file(
    origin: &str,
    results: &std::path::Path,
    seal_text: &str,
    key: Option<&[u8]>,
) -> Result<Option<String>, String> {
    use std::io::Read;
    let (doc, digest) = read_seal(origin, seal_text)?;
    let mut digesting = Digesting::for_seal(origin, &doc, key)?;
    let file = std::fs::File::open(results)
        .map_err(|e| format!("cannot read {}: {e}", results.display()))?;
    let size = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", results.display()))?
        .len();
    if size > MAX_RESULTS_BYTES {
        return Err(too_large(origin, size));
    }
    let mut reader = file.take(MAX_RESULTS_BYTES + 1);
    let mut piece = vec![0u8; 64 * 1024];
    let mut read = 0u64;
    loop {
        let n = reader
            .read(&mut piece)
            .map_err(|e| format!("cannot read {}: {e}", results.display()))?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read > MAX_RESULTS_BYTES {
            return Err(too_large(origin, read));
        }
        digesting.update(&piece[..n]);
    }
    if digesting.holds(&digest) {
        Ok(doc.run_id)
    } else {
        Err(mismatch(origin, key))
    }
}

fn too_large(origin: &str, size: u64) -> String {
    format!(
        "{origin}: results.json is {size} bytes, over the {MAX_RESULTS_BYTES}-byte bound on a shard's results \
         (MAX_RESULTS_BYTES): not read"
    )
}

/// Seals `DIR/results.json` into `DIR/results.json.seal`.
pub fn write_seal(dir: &std::path::Path, key: Option<&[u8]>) -> Result<(), String> {
    let file = dir.join("results.json");
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    // The run id the results name (this run just wrote them).
    let run_id = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("run_id")?.as_str().map(str::to_owned));
    let path = dir.join(SEAL_FILE);
    std::fs::write(&path, seal(&bytes, key, run_id.as_deref())?)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_seal_holds_for_its_bytes_only_and_a_key_must_match() {
        let results = br#"{"verdict":"fail"}"#;
        let forged = br#"{"verdict":"pass"}"#;
        let plain = seal(results, None, Some("r1")).unwrap();
        assert_eq!(verify("s", results, &plain, None), Ok(Some("r1".into())));
        assert!(verify("s", forged, &plain, None)
            .unwrap_err()
            .contains("does not match its seal"));
        let keyed = seal(results, Some(b"k1"), None).unwrap();
        assert!(verify("s", results, &keyed, Some(b"k1")).is_ok());
        assert!(verify("s", results, &keyed, Some(b"k2")).is_err());
        assert!(verify("s", forged, &keyed, Some(b"k1")).is_err());
        assert!(verify("s", results, &keyed, None)
            .unwrap_err()
            .contains("sealed with a key"));
        assert!(verify("s", results, &plain, Some(b"k1"))
            .unwrap_err()
            .contains("sealed without a key"));
        // HMAC-SHA256 test vector (RFC 4231, test case 2).
        let mut mac = hmac(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
