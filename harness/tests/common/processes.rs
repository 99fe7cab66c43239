//! Which processes a test's targets left behind: each started process
//! carries a marker in its environment, and afterwards no live one may.

use std::process::Command;
use std::time::{Duration, Instant};

/// A marker no other run shares: `reqkey-<what>-<pid>-<nanos>`.
pub fn marker(what: &str) -> String {
    format!(
        "reqkey-{what}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    )
}

/// Live (not zombie) processes whose environment holds `marker`.
pub fn carrying(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z')))
            .unwrap_or(true);
        if !zombie && env.windows(marker.len()).any(|w| w == marker.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// Waits (bounded) until no live process carries `marker`; kills any
/// left (so a failing test leaves nothing behind) and fails.
pub fn assert_none_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !carrying(marker).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = carrying(marker);
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert_eq!(left, Vec::<u32>::new(), "processes left: {marker}");
}
