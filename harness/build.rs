//! Embeds the scenario corpus (`../scenarios`: `VERSION`, the
//! falsification record `falsification.json`, and every
//! `.yaml`/`.yml` under `store/`, `agent/` and `idempotency-key/`) into the binary, so that an
//! installed `reqkey` certifies from any directory. Writes
//! `$OUT_DIR/embedded_suite.rs`: a sorted list of (path relative to the
//! scenarios root, `include_str!` of the file).

use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    println!("cargo:rerun-if-changed={}", dir.display());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("..").join("scenarios");
    let mut files = Vec::new();
    for top in ["VERSION", "falsification.json"] {
        let file = root.join(top);
        println!("cargo:rerun-if-changed={}", file.display());
        if file.is_file() {
            files.push(file);
        }
    }
    for level in ["store", "agent", "idempotency-key"] {
        collect(&root.join(level), &mut files);
    }
    let mut rows: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let rel = f
                .strip_prefix(&root)
                .unwrap_or(f)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            (rel, f.display().to_string())
        })
        .collect();
    rows.sort();
    let mut code = String::from(
        "/// The embedded scenario corpus: (path under the scenarios root, text).\n\
         pub static EMBEDDED_FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, abs) in rows {
        code.push_str(&format!("    ({rel:?}, include_str!({abs:?})),\n"));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    if let Err(e) = std::fs::write(out.join("embedded_suite.rs"), code) {
        panic!("cannot write embedded_suite.rs: {e}");
    }
}
