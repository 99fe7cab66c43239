//! The shape of the workspace, checked: no two files of one crate import
//! each other (what both need lives in a file both can use), and the
//! harness keeps its files in rooms by job (at most three `.rs` files at the
//! top of `harness/src`). ARCHITECTURE.md states both; this keeps them true.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs` are
/// `[a, b]`; `lib.rs` and `main.rs` are `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments (doc links are not imports).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths that start at `at` in `code`: `a::b::C` gives `[a, b, C]`;
/// `{a::b, c}` gives one path per item.
fn paths_at(code: &str, at: usize) -> Vec<Vec<String>> {
    let rest = &code[at..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut depth = 1;
        let mut end = inner.len();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let mut items = Vec::new();
        let (mut depth, mut start) = (0, 0);
        let body = &inner[..end];
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&body[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        items.push(&body[start..]);
        return items
            .into_iter()
            .map(str::trim)
            .filter(|i| !i.is_empty())
            .map(|i| paths_at(i, 0).into_iter().next().unwrap_or_default())
            .collect();
    }
    let mut segments = Vec::new();
    let mut s = rest;
    loop {
        let len = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
        if len == 0 {
            break;
        }
        segments.push(s[..len].to_owned());
        match s[len..].strip_prefix("::") {
            Some(next) if next.starts_with(is_ident) => s = next,
            _ => break,
        }
    }
    vec![segments]
}

/// Every occurrence of `needle` not preceded by an identifier character or
/// `::` (so `crate::` inside `reqkey_model::crate` never counts).
fn occurrences<'a>(code: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(needle).filter_map(move |(i, _)| {
        let before = &code[..i];
        let clean = !before.ends_with(is_ident) && !before.ends_with("::");
        clean.then_some(i + needle.len())
    })
}

/// The byte ranges of inline modules (`mod tests { ... }`) in `code`: there
/// `super::` names the file itself, not its parent.
fn inline_modules(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    for (i, _) in code.match_indices("mod ") {
        if code[..i].ends_with(is_ident) {
            continue;
        }
        let rest = &code[i + 4..];
        let name_len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        let after = rest[name_len..].trim_start();
        if name_len == 0 || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        for (j, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        ranges.push(open..open + j);
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    ranges
}

/// Which files of one crate each file imports (`use`, paths in code,
/// `pub use` re-exports alike), resolved to the longest module prefix.
fn import_graph(src: &Path) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .iter()
        .map(|f| (module_path(src, f), f.clone()))
        .collect();
    let resolve = |path: &[String]| -> Option<PathBuf> {
        (0..=path.len())
            .rev()
            .find_map(|k| modules.get(&path[..k]).cloned())
    };
    let mut graph = BTreeMap::new();
    for file in &files {
        let me = module_path(src, file);
        let is_mod_file = matches!(
            file.file_name().and_then(|n| n.to_str()),
            Some("mod.rs" | "lib.rs" | "main.rs")
        );
        // `super::` from a file means its parent module; `self::` (and a
        // bare child name in a `use`) from a mod file means its children.
        let parent: Vec<String> = if is_mod_file {
            me.iter()
                .take(me.len().saturating_sub(1))
                .cloned()
                .collect()
        } else {
            me[..me.len() - 1].to_vec()
        };
        let here = me.clone();
        let code = code_only(&std::fs::read_to_string(file).unwrap());
        let mut targets = BTreeSet::new();
        let mut add = |base: &[String], rel: Vec<String>| {
            let full: Vec<String> = base.iter().cloned().chain(rel).collect();
            if let Some(t) = resolve(&full) {
                if &t != file {
                    targets.insert(t);
                }
            }
        };
        for at in occurrences(&code, "crate::") {
            for p in paths_at(&code, at) {
                add(&[], p);
            }
        }
        let inline = inline_modules(&code);
        for at in occurrences(&code, "super::") {
            if inline.iter().any(|r| r.contains(&at)) {
                continue;
            }
            for p in paths_at(&code, at) {
                add(&parent, p);
            }
        }
        for at in occurrences(&code, "self::") {
            for p in paths_at(&code, at) {
                add(&here, p);
            }
        }
        if is_mod_file {
            for line in code.lines() {
                let l = line.trim_start();
                let l = l.strip_prefix("pub ").unwrap_or(l);
                if let Some(rest) = l.strip_prefix("use ") {
                    for p in paths_at(rest, 0) {
                        let mut child = me.clone();
                        child.extend(p.iter().take(1).cloned());
                        if !p.is_empty() && modules.contains_key(&child) {
                            add(&me, p);
                        }
                    }
                }
            }
        }
        graph.insert(file.clone(), targets);
    }
    graph
}

fn mutual_pairs(src: &Path) -> Vec<(PathBuf, PathBuf)> {
    let graph = import_graph(src);
    let mut pairs = Vec::new();
    for (a, targets) in &graph {
        for b in targets {
            if a < b && graph.get(b).is_some_and(|t| t.contains(a)) {
                pairs.push((a.clone(), b.clone()));
            }
        }
    }
    pairs
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    for krate in ["model", "reference-impl", "harness"] {
        let pairs = mutual_pairs(&workspace().join(krate).join("src"));
        assert!(
            pairs.is_empty(),
            "{krate}: files that import each other: {pairs:#?}"
        );
    }
}

#[test]
fn the_checker_sees_a_pair_that_imports_each_other() {
    let dir = std::env::temp_dir().join(format!("reqkey-arch-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("room")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod room;\n").unwrap();
    std::fs::write(
        src.join("room/mod.rs"),
        "pub mod a;\npub use a::Thing;\npub struct Shared;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("room/a.rs"),
        "/// [`crate::room::b`] in a comment is no import.\nuse super::Shared;\npub struct Thing;\n",
    )
    .unwrap();
    std::fs::write(src.join("room/b.rs"), "use crate::room::a::Thing;\n").unwrap();
    let pairs = mutual_pairs(&src);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        pairs,
        vec![(src.join("room/a.rs"), src.join("room/mod.rs"))],
        "a re-export in mod.rs and `use super::` in the child make a pair; a doc link does not"
    );
}

#[test]
fn the_harness_keeps_its_files_in_rooms() {
    let src = workspace().join("harness/src");
    let top: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "rs"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(top.len() <= 3, "top-level files of harness/src: {top:?}");
    for room in ["scenario", "run", "target", "check", "report", "cmd"] {
        assert!(src.join(room).join("mod.rs").is_file(), "{room}/mod.rs");
    }
}

#[test]
fn nothing_under_scenario_talks_to_a_network() {
    let mut files = Vec::new();
    rust_files(&workspace().join("harness/src/scenario"), &mut files);
    for f in files {
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        for word in ["reqwest", "tokio::net", "std::net", "TcpStream", ".await"] {
            assert!(!code.contains(word), "{}: uses {word}", f.display());
        }
    }
}

#[test]
fn architecture_md_names_every_folder_of_the_harness() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    for room in ["scenario/", "run/", "target/", "check/", "report/", "cmd/"] {
        assert!(
            text.contains(&format!("`{room}`")),
            "ARCHITECTURE.md: {room}"
        );
    }
}

#[test]
fn no_source_file_is_left_out_of_the_repository() {
    // A `.gitignore` rule once hid `harness/src/target/`: a clean clone
    // did not build. Every file under a crate's src/ must be tracked.
    let out = std::process::Command::new("git")
        .args([
            "ls-files",
            "--others",
            "--exclude-standard",
            "--ignored",
            "--",
        ])
        .args([
            "model/src",
            "reference-impl/src",
            "harness/src",
            "harness/tests",
            "scenarios",
        ])
        .current_dir(workspace())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ignored = String::from_utf8_lossy(&out.stdout);
    assert!(
        ignored.trim().is_empty(),
        "ignored by .gitignore: {ignored}"
    );
}
