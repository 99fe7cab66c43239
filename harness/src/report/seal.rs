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
/// of `results.json.seal`.
pub fn seal(results: &[u8], key: Option<&[u8]>) -> Result<String, String> {
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
    };
    serde_json::to_string_pretty(&doc)
        .map(|t| t + "\n")
        .map_err(|e| format!("the seal: {e}"))
}

/// Checks `results` against its seal; the reason when it does not hold.
pub fn verify(
    origin: &str,
    results: &[u8],
    seal_text: &str,
    key: Option<&[u8]>,
) -> Result<(), String> {
    let doc: SealDoc = serde_json::from_str(seal_text)
        .map_err(|e| format!("{origin}: {SEAL_FILE} is not a seal: {e}"))?;
    if doc.schema != SEAL_SCHEMA || doc.file != "results.json" {
        return Err(format!(
            "{origin}: {SEAL_FILE} is not a {SEAL_SCHEMA} seal of results.json"
        ));
    }
    let digest = unhex(&doc.digest)
        .ok_or_else(|| format!("{origin}: {SEAL_FILE}: the digest is not hex"))?;
    let holds = match (doc.algorithm.as_str(), key) {
        ("hmac-sha256", Some(key)) => {
            let mut mac = hmac(key)?;
            mac.update(results);
            mac.verify_slice(&digest).is_ok()
        }
        ("hmac-sha256", None) => {
            return Err(format!(
                "{origin} is sealed with a key: set {SEAL_KEY_ENV} to the key the shards were sealed with"
            ))
        }
        ("sha256", Some(_)) => {
            return Err(format!(
                "{origin} is sealed without a key, but {SEAL_KEY_ENV} is set: anyone could have written it \
                 (run the shards with {SEAL_KEY_ENV} set too)"
            ))
        }
        ("sha256", None) => Sha256::digest(results).as_slice() == digest.as_slice(),
        (other, _) => {
            return Err(format!(
                "{origin}: {SEAL_FILE}: unknown algorithm `{}`",
                crate::report::inert::terminal(other)
            ))
        }
    };
    if holds {
        Ok(())
    } else {
        Err(format!(
            "{origin}: results.json does not match its seal: it was changed after the run{}",
            if key.is_some() {
                " (or sealed with another key)"
            } else {
                ""
            }
        ))
    }
}

/// Seals `DIR/results.json` into `DIR/results.json.seal`.
pub fn write_seal(dir: &std::path::Path, key: Option<&[u8]>) -> Result<(), String> {
    let file = dir.join("results.json");
    let bytes = std::fs::read(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let path = dir.join(SEAL_FILE);
    std::fs::write(&path, seal(&bytes, key)?)
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
        let plain = seal(results, None).unwrap();
        assert!(verify("s", results, &plain, None).is_ok());
        assert!(verify("s", forged, &plain, None)
            .unwrap_err()
            .contains("does not match its seal"));
        let keyed = seal(results, Some(b"k1")).unwrap();
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
