//! The shape of the workspace, checked: crates depend only down the flow
//! (model <- scenario <- check <- harness; model <- reference <- harness)
//! and the pure ones stay pure; the rooms of the harness import only down
//! the flow; no two files of one crate import each other (what both need
//! lives in a file both can use); ARCHITECTURE.md's code map names every
//! file. ARCHITECTURE.md states the rules; this keeps them true, and each
//! check is shown failing on a tree that breaks it.

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

/// The crates of the workspace, their folders, and the workspace crates
/// each may depend on: the arrows point down the flow, never up.
const CRATES: [(&str, &str, &[&str]); 5] = [
    ("reqkey-model", "model", &[]),
    ("reqkey-scenario", "scenario", &["reqkey-model"]),
    (
        "reqkey-check",
        "check",
        &["reqkey-model", "reqkey-scenario"],
    ),
    ("reqkey-reference", "reference-impl", &["reqkey-model"]),
    (
        "reqkey-harness",
        "harness",
        &[
            "reqkey-model",
            "reqkey-scenario",
            "reqkey-check",
            "reqkey-reference",
        ],
    ),
];

/// Crates that must stay pure: no async runtime, no network, no database.
const PURE: [&str; 3] = ["reqkey-model", "reqkey-scenario", "reqkey-check"];
const IMPURE_DEPENDENCIES: [&str; 9] = [
    "tokio",
    "reqwest",
    "hyper",
    "hyper-util",
    "axum",
    "async-trait",
    "rusqlite",
    "tokio-postgres",
    "redis",
];

/// The rooms of `harness/src` and the rooms each may import: `targets`
/// knows no other room; `run` drives targets; `report` renders what `run`
/// emitted; `bench` measures through `run` and `targets`; `proxy` is
/// self-contained; `cmd` wires them all. Nothing imports `cmd`.
const ROOMS: [(&str, &[&str]); 6] = [
    ("targets", &[]),
    ("run", &["targets"]),
    ("report", &["run", "targets"]),
    ("proxy", &[]),
    ("bench", &["run", "targets"]),
    ("cmd", &["targets", "run", "report", "proxy", "bench"]),
];

/// The `[dependencies]` (not dev or build) of a Cargo.toml, by name.
fn dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                let name = name.trim().trim_end_matches(".workspace").trim();
                if !name.is_empty() && !name.starts_with('#') {
                    out.insert(name.to_owned());
                }
            }
        }
    }
    out
}

/// Arrows between crates that the table does not allow, and impure
/// dependencies of pure crates.
fn crate_violations(manifests: &[(&str, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, manifest) in manifests {
        let deps = dependencies(manifest);
        let allowed = CRATES
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, a)| *a)
            .unwrap_or(&[]);
        for dep in deps.iter().filter(|d| d.starts_with("reqkey-")) {
            if !allowed.contains(&dep.as_str()) {
                bad.push(format!("{name} -> {dep}"));
            }
        }
        if PURE.contains(name) {
            for dep in deps
                .iter()
                .filter(|d| IMPURE_DEPENDENCIES.contains(&d.as_str()))
            {
                bad.push(format!("{name} (pure) -> {dep}"));
            }
        }
    }
    bad
}

/// The rooms each room of `src` imports (`crate::ROOM`), outside its own.
fn room_arrows(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let names: Vec<&str> = ROOMS.iter().map(|(r, _)| *r).collect();
    let mut arrows = BTreeMap::new();
    for room in &names {
        let mut files = Vec::new();
        let dir = src.join(room);
        if !dir.is_dir() {
            continue;
        }
        rust_files(&dir, &mut files);
        let mut to = BTreeSet::new();
        for f in files {
            let code = code_only(&std::fs::read_to_string(&f).unwrap());
            for at in occurrences(&code, "crate::") {
                for p in paths_at(&code, at) {
                    if let Some(first) = p.first() {
                        if first != room && names.contains(&first.as_str()) {
                            to.insert(first.clone());
                        }
                    }
                }
            }
        }
        arrows.insert((*room).to_owned(), to);
    }
    arrows
}

fn room_violations(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (room, to) in arrows {
        let allowed = ROOMS
            .iter()
            .find(|(r, _)| r == room)
            .map(|(_, a)| *a)
            .unwrap_or(&[]);
        for t in to {
            if !allowed.contains(&t.as_str()) {
                bad.push(format!("{room} -> {t}"));
            }
        }
    }
    bad
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    for (_, dir, _) in CRATES {
        let pairs = mutual_pairs(&workspace().join(dir).join("src"));
        assert!(
            pairs.is_empty(),
            "{dir}: files that import each other: {pairs:#?}"
        );
    }
}

#[test]
fn crates_depend_only_down_the_flow_and_pure_crates_stay_pure() {
    let members = std::fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let manifests: Vec<(&str, String)> = CRATES
        .iter()
        .map(|(name, dir, _)| {
            assert!(members.contains(&format!("\"{dir}\"")), "{dir} is a member");
            let text = std::fs::read_to_string(workspace().join(dir).join("Cargo.toml")).unwrap();
            assert!(
                text.contains(&format!("name = \"{name}\"")),
                "{dir} is {name}"
            );
            (*name, text)
        })
        .collect();
    let bad = crate_violations(&manifests);
    assert!(bad.is_empty(), "arrows against the layering: {bad:?}");
}

#[test]
fn the_crate_check_fails_on_an_arrow_up_the_flow() {
    let manifests = vec![
        (
            "reqkey-scenario",
            "[dependencies]\nreqkey-model.workspace = true\nreqkey-check.workspace = true\n"
                .to_owned(),
        ),
        (
            "reqkey-check",
            "[dependencies]\ntokio.workspace = true\n[dev-dependencies]\nreqwest = \"1\"\n"
                .to_owned(),
        ),
    ];
    assert_eq!(
        crate_violations(&manifests),
        vec![
            "reqkey-scenario -> reqkey-check".to_owned(),
            "reqkey-check (pure) -> tokio".to_owned()
        ],
        "an arrow up the flow and an async dependency of a pure crate are caught; dev-dependencies are not"
    );
}

#[test]
fn the_rooms_of_the_harness_import_only_down_the_flow() {
    let arrows = room_arrows(&workspace().join("harness/src"));
    for (room, _) in ROOMS {
        assert!(arrows.contains_key(room), "harness/src/{room}/ exists");
    }
    let bad = room_violations(&arrows);
    assert!(bad.is_empty(), "arrows against the layering: {bad:?}");
}

#[test]
fn the_room_check_fails_on_an_arrow_against_the_layering() {
    let dir = std::env::temp_dir().join(format!("reqkey-rooms-{}", std::process::id()));
    let src = dir.join("src");
    for (room, _) in ROOMS {
        std::fs::create_dir_all(src.join(room)).unwrap();
        std::fs::write(src.join(room).join("mod.rs"), "").unwrap();
    }
    // targets may import no room; run may import targets.
    std::fs::write(src.join("targets/a.rs"), "use crate::run::runner::Thing;\n").unwrap();
    std::fs::write(
        src.join("run/b.rs"),
        "use crate::targets::{Target, Level};\n",
    )
    .unwrap();
    std::fs::write(
        src.join("report/c.rs"),
        "/// [`crate::cmd::x`] in a comment is no arrow.\nfn f() { crate::cmd::common::go(); }\n",
    )
    .unwrap();
    let bad = room_violations(&room_arrows(&src));
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        bad,
        vec!["report -> cmd".to_owned(), "targets -> run".to_owned()]
    );
}

/// Files at the top of `harness/src` that every room may use and that use
/// no room: what every output goes through (`secrets.rs`, the one redacted
/// display of anything that can carry a secret) and the memory ceiling
/// every reader of an input checks (`memory.rs`, issue 58: readers sit in
/// `targets`, `report` and `cmd`). Printing that a closed pipe cannot turn
/// into a panic is a module inside `lib.rs`, so the top holds four files
/// at most (issue 50, and issue 58's one more).
const SUPPORT: [&str; 2] = ["secrets.rs", "memory.rs"];

/// The fuzzers' files of `run/` that sit outside their room `run/fuzz/`
/// (issue 50: the seven `fuzz*` files lay side by side in `run/`).
fn misplaced_fuzzers(run: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(run, &mut files);
    files
        .iter()
        .filter_map(|f| {
            let rel = f
                .strip_prefix(run)
                .ok()?
                .to_string_lossy()
                .replace('\\', "/");
            (rel.contains("fuzz") && !rel.starts_with("fuzz/")).then_some(rel)
        })
        .collect()
}

#[test]
fn the_fuzzers_live_in_a_room_of_their_own() {
    let run = workspace().join("harness/src/run");
    assert!(run.join("fuzz/mod.rs").is_file(), "run/fuzz/mod.rs");
    let bad = misplaced_fuzzers(&run);
    assert!(bad.is_empty(), "fuzz files outside run/fuzz/: {bad:?}");
    // The check fails on a tree with a fuzzer beside the runner.
    let dir = std::env::temp_dir().join(format!("reqkey-fuzz-room-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("fuzz")).unwrap();
    std::fs::write(dir.join("fuzz/store.rs"), "").unwrap();
    std::fs::write(dir.join("fuzz_cases.rs"), "").unwrap();
    assert_eq!(misplaced_fuzzers(&dir), vec!["fuzz_cases.rs".to_owned()]);
    let _ = std::fs::remove_dir_all(&dir);
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
    let allowed: BTreeSet<String> = ["lib.rs", "main.rs"]
        .into_iter()
        .chain(SUPPORT)
        .map(str::to_owned)
        .collect();
    assert!(
        top.is_subset(&allowed),
        "top-level files of harness/src outside the rooms: {:?}",
        top.difference(&allowed).collect::<Vec<_>>()
    );
    assert!(
        top.len() <= 2 + SUPPORT.len(),
        "harness/src holds {top:?} at its top: lib.rs, main.rs and the support files at most"
    );
    // A support file is below every room: it imports none of them.
    for file in SUPPORT {
        let code = code_only(&std::fs::read_to_string(src.join(file)).unwrap());
        for (room, _) in ROOMS {
            assert!(
                !code.contains(&format!("crate::{room}::")),
                "{file} imports the room {room}: support files sit below every room"
            );
        }
    }
    for (room, _) in ROOMS {
        assert!(src.join(room).join("mod.rs").is_file(), "{room}/mod.rs");
    }
    assert!(
        !src.join("target").exists(),
        "a folder named target/ is taken for Cargo's output by tools and ignore rules"
    );
}

#[test]
fn nothing_in_the_pure_crates_talks_to_a_network_or_awaits() {
    for dir in ["model/src", "scenario/src", "check/src"] {
        let mut files = Vec::new();
        rust_files(&workspace().join(dir), &mut files);
        assert!(!files.is_empty(), "{dir}");
        for f in files {
            let code = code_only(&std::fs::read_to_string(&f).unwrap());
            for word in [
                "reqwest",
                "tokio",
                "std::net",
                "TcpStream",
                ".await",
                "async fn",
            ] {
                assert!(!code.contains(word), "{}: uses {word}", f.display());
            }
        }
    }
}

#[test]
fn architecture_md_names_every_crate_and_room() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    for (name, dir, _) in CRATES {
        assert!(text.contains(name), "ARCHITECTURE.md: {name}");
        assert!(text.contains(&format!("{dir}/")), "ARCHITECTURE.md: {dir}/");
    }
    for (room, _) in ROOMS {
        assert!(
            text.contains(&format!("`{room}/`")),
            "ARCHITECTURE.md: {room}/"
        );
    }
    for list in [
        "How to add a backend",
        "How to add a step kind",
        "How to add a report format",
        "How to add a clause",
        "Adding a protocol level",
    ] {
        assert!(text.contains(list), "ARCHITECTURE.md: {list}");
    }
}

/// Lines of production code in a Rust file: everything before its
/// `#[cfg(test)]` module.
fn production_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

/// The files of `src` with more than `limit` lines of production code.
fn oversized(src: &Path, limit: usize) -> Vec<(PathBuf, usize)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let n = production_lines(&std::fs::read_to_string(&f).unwrap());
            (n > limit).then_some((f, n))
        })
        .collect()
}

/// A reader who wants one job finds it in a file of a few hundred lines,
/// not among a thousand lines of others (issue 36).
const MAX_PRODUCTION_LINES: usize = 1_000;

#[test]
fn no_production_file_is_over_a_thousand_lines() {
    let mut big = Vec::new();
    for (_, dir, _) in CRATES {
        big.extend(oversized(
            &workspace().join(dir).join("src"),
            MAX_PRODUCTION_LINES,
        ));
    }
    assert!(
        big.is_empty(),
        "split these by job (each new file with a one-line opening comment naming its job): {big:#?}"
    );
}

#[test]
fn the_size_check_fails_on_a_long_file_and_counts_no_tests() {
    let dir = std::env::temp_dir().join(format!("reqkey-arch-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let long = "fn f() {}\n".repeat(MAX_PRODUCTION_LINES + 1);
    std::fs::write(dir.join("long.rs"), &long).unwrap();
    let tested = format!(
        "fn g() {{}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        "    fn t() {}\n".repeat(2 * MAX_PRODUCTION_LINES)
    );
    std::fs::write(dir.join("tested.rs"), tested).unwrap();
    let found = oversized(&dir, MAX_PRODUCTION_LINES);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.ends_with("long.rs"));
    assert_eq!(found[0].1, MAX_PRODUCTION_LINES + 1);
}

/// Every `.rs` file of the workspace's crates is named in ARCHITECTURE.md's
/// code map (by its path below its crate's src/, or its folder's).
#[test]
fn architecture_md_code_map_matches_the_tree() {
    let text = std::fs::read_to_string(workspace().join("ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for (_, dir, _) in CRATES {
        let src = workspace().join(dir).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let rel = f
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if matches!(rel.as_str(), "lib.rs" | "main.rs") || rel.ends_with("mod.rs") {
                continue;
            }
            if !text.contains(&format!("`{rel}`")) {
                missing.push(format!("{dir}/src/{rel}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not in ARCHITECTURE.md's code map: {missing:#?}"
    );
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
            "scenario/src",
            "check/src",
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

/// The one file that knows the schemes of URLs (target and database URLs
/// alike, issue 58): every other file asks it.
const SCHEME_MODULE: &str = "reference-impl/src/scheme.rs";

/// The heads of every scheme reqkey reads (`store+https`, `postgres+...`
/// and `rediss` start with one of them).
const SCHEME_HEADS: [&str; 5] = ["http", "store+", "idem+", "postgres", "redis"];

/// A file's code without its comments (a `//` inside a string literal is
/// code) and without the items under `#[cfg(test)]` (tests may spell
/// URLs): each is cut from the attribute to its closing brace.
fn production_code(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        let (mut in_string, mut escaped) = (false, false);
        let bytes = line.as_bytes();
        let mut end = line.len();
        for (i, &b) in bytes.iter().enumerate() {
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
            } else if b == b'"' {
                in_string = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                end = i;
                break;
            }
        }
        code.push_str(&line[..end]);
        code.push('\n');
    }
    while let Some(at) = code.find("#[cfg(test)]") {
        let Some(open) = code[at..].find('{').map(|o| at + o) else {
            code.truncate(at);
            break;
        };
        let mut depth = 0usize;
        let mut close = code.len();
        for (i, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        code.replace_range(at..close, "");
    }
    code
}

/// The places in `code` that take a URL's scheme apart by hand: a string
/// method given a literal that holds `://` or starts with a scheme's head
/// (`.starts_with("redis")`, `.strip_prefix("store+http://")`,
/// `.split_once("://")`).
fn scheme_matches(code: &str) -> Vec<String> {
    const METHODS: [&str; 11] = [
        ".starts_with(\"",
        ".strip_prefix(\"",
        ".ends_with(\"",
        ".strip_suffix(\"",
        ".split_once(\"",
        ".rsplit_once(\"",
        ".split(\"",
        ".find(\"",
        ".rfind(\"",
        ".contains(\"",
        ".matches(\"",
    ];
    let is_scheme = |literal: &str| {
        literal.contains("://") || SCHEME_HEADS.iter().any(|h| literal.starts_with(h))
    };
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for method in METHODS {
            for (at, _) in line.match_indices(method) {
                let literal = &line[at + method.len()..];
                let literal = literal.split('"').next().unwrap_or("");
                if is_scheme(literal) {
                    found.push(format!("line {}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

/// Every place outside [`SCHEME_MODULE`] (in the workspace's crates, tests
/// aside) that matches a URL's scheme by hand.
fn scheme_parsers(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (_, dir, _) in CRATES {
        let mut files = Vec::new();
        rust_files(&root.join(dir).join("src"), &mut files);
        for f in files {
            let rel = f
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel == SCHEME_MODULE {
                continue;
            }
            let code = production_code(&std::fs::read_to_string(&f).unwrap());
            out.extend(
                scheme_matches(&code)
                    .into_iter()
                    .map(|m| format!("{rel}: {m}")),
            );
        }
    }
    out
}

#[test]
fn one_module_parses_url_schemes() {
    let root = workspace();
    assert!(root.join(SCHEME_MODULE).is_file(), "{SCHEME_MODULE}");
    let found = scheme_parsers(&root);
    assert!(
        found.is_empty(),
        "URL schemes matched outside {SCHEME_MODULE} (ask reqkey_reference::scheme): {found:#?}"
    );
    // The check fails on a tree with a second parser, and passes the
    // module itself, tests and text that only writes a URL.
    let dir = std::env::temp_dir().join(format!("reqkey-schemes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (_, crate_dir, _) in CRATES {
        std::fs::create_dir_all(dir.join(crate_dir).join("src")).unwrap();
    }
    std::fs::write(
        dir.join(SCHEME_MODULE),
        "pub fn split(t: &str) { t.split_once(\"://\"); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("harness/src/fine.rs"),
        "// a comment: t.starts_with(\"redis://\")\nfn f(tls: bool) -> String { format!(\"{}://h\", if tls { \"https\" } else { \"http\" }) }\n#[cfg(test)]\nmod tests { fn t() { assert!(\"redis://h\".starts_with(\"redis\")); } }\n",
    )
    .unwrap();
    assert!(
        scheme_parsers(&dir).is_empty(),
        "{:?}",
        scheme_parsers(&dir)
    );
    for (name, code) in [
        (
            "prefix.rs",
            "fn f(t: &str) -> bool { t.starts_with(\"redis\") }\n",
        ),
        (
            "strip.rs",
            "fn f(t: &str) { t.strip_prefix(\"store+http://\"); }\n",
        ),
        ("split.rs", "fn f(t: &str) { t.split_once(\"://\"); }\n"),
        (
            "contains.rs",
            "fn f(s: &str) -> bool { s.contains(\"://\") }\n",
        ),
    ] {
        let file = dir.join("check/src").join(name);
        std::fs::write(&file, code).unwrap();
        let found = scheme_parsers(&dir);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        assert!(
            found[0].starts_with(&format!("check/src/{name}: line 1")),
            "{found:?}"
        );
        std::fs::remove_file(&file).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
