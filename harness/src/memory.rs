//! The process's resident memory, and the ceiling every reader of an
//! input holds it to (`--max-memory-bytes`, a global option).
//!
//! # Why
//!
//! A bound on each input's size does not bound what reading it takes:
//! `reqkey check history` on a 257 MB history (each session under its
//! 256 MiB bound) that was not linearizable peaked at 10.2 GB, and under
//! a 12 GB cap it aborted (SIGABRT, exit 134) instead of saying which
//! bound it crossed (issue 58). Every reader of an input (a history, a
//! shard's results, an answer) now asks this module at its
//! checkpoints (every 256 KiB of a history's text, every 65,536 search steps,
//! each shard read, every 256 KiB of an answer) whether the process holds
//! more than the ceiling; past it, it stops reading and the command exits
//! 2 naming `--max-memory-bytes`, before the operating system's cap (a
//! cgroup's `memory.max`, `ulimit -v`) ends it mid-allocation. (An API
//! map needs no gauge: it is at most 256 KiB and its YAML aliases are
//! limited by the parser; at its bound it is read in about 60 MiB.)
//!
//! # What is measured
//!
//! The process's resident set (`VmRSS` in `/proc/self/status`, what
//! `/usr/bin/time` and a cgroup count), read at each checkpoint; the
//! largest reading is kept ([`peak_bytes`]). Between two checkpoints the
//! process grows by at most what one step of its reader allocates (a MiB
//! 256 KiB of history text typed, one shard, one answer's chunk), which is why
//! the default ceiling leaves room under a machine's memory. On a system
//! without `/proc` nothing is read and no ceiling is enforced (the
//! command says so in `--help`: Linux only).

use std::sync::atomic::{AtomicU64, Ordering};

/// The default ceiling: 4 GiB, about 16 times the largest history one
/// session may hold (`--max-session-bytes`, 256 MiB of text, which takes
/// about 1.2 GB at its bound) and far above a certification's few hundred
/// MiB, under the 24 GiB of the project's CI machine with room for the
/// rest of it.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 4 << 30;

/// The smallest ceiling accepted: the binary alone is about 20 MiB
/// resident.
pub const MIN_MAX_MEMORY_BYTES: u64 = 32 << 20;

static CEILING: AtomicU64 = AtomicU64::new(DEFAULT_MAX_MEMORY_BYTES);
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Sets the ceiling (`--max-memory-bytes`), once, when the command line
/// is read.
pub fn set_ceiling(bytes: u64) {
    CEILING.store(bytes, Ordering::Relaxed);
}

/// The ceiling in force, in bytes.
pub fn ceiling() -> u64 {
    CEILING.load(Ordering::Relaxed)
}

/// The process's resident memory now, in bytes (`None` without
/// `/proc/self/status`).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    let bytes = kib.saturating_mul(1024);
    PEAK.fetch_max(bytes, Ordering::Relaxed);
    Some(bytes)
}

/// The largest resident memory the process reached, as the kernel counts
/// it (`VmHWM`), or else the largest this module read.
pub fn peak_bytes() -> Option<u64> {
    let from_kernel = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        });
    let read = PEAK.load(Ordering::Relaxed);
    from_kernel.or((read > 0).then_some(read))
}

/// Why the process may not go on reading: it holds more than the ceiling
/// (`None` while within it, or where nothing can be read).
pub fn over() -> Option<String> {
    let held = resident_bytes()?;
    let ceiling = ceiling();
    (held > ceiling).then(|| {
        format!(
            "the process holds {} MiB, over its memory ceiling of {} MiB (--max-memory-bytes {ceiling}): \
             stopped before holding more; raise the ceiling, or give it a smaller input",
            held >> 20,
            ceiling >> 20
        )
    })
}

/// [`over`] as a yes or no, the form `reqkey_check::lin::CheckOptions`
/// asks during a search.
pub fn is_over() -> bool {
    over().is_some()
}

/// Reads `--max-memory-bytes`: a number of bytes, at least
/// [`MIN_MAX_MEMORY_BYTES`].
pub fn parse_ceiling(text: &str) -> Result<u64, String> {
    let bytes: u64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of bytes"))?;
    if bytes < MIN_MAX_MEMORY_BYTES {
        return Err(format!(
            "at least {MIN_MAX_MEMORY_BYTES} bytes ({} MiB): the binary alone takes about 20 MiB",
            MIN_MAX_MEMORY_BYTES >> 20
        ));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_ceiling_under_the_binary_or_not_a_number_is_refused() {
        assert!(parse_ceiling("1000").unwrap_err().contains("at least"));
        assert!(parse_ceiling("4GiB").unwrap_err().contains("not a number"));
        assert_eq!(parse_ceiling("33554432"), Ok(32 << 20));
    }

    #[test]
    fn the_resident_memory_is_read_and_its_peak_kept() {
        // Linux (the project's CI): /proc is there.
        let now = resident_bytes().unwrap();
        assert!(now > 1 << 20, "{now}");
        assert!(peak_bytes().unwrap() >= now);
    }
}
