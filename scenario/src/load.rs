//! Loading scenarios: files read bounded, parsed once, numbers restored
//! as written, validated; every error placed at `file:line:col`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::limits::{
    check_depth, end_position, position_at, second_document, MAX_DEPTH, MAX_SCENARIO_BYTES,
};
use crate::locate::{locate, Seg};
use crate::scenario::Scenario;
use crate::step::{Action, Step};
use crate::validate::validate;
use crate::{agent_step, spelling};

/// Why a scenario could not be loaded. Exit code 2. Every error about a
/// file's content carries the position it is about.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{0}: no scenario files (*.yaml) found")]
    Empty(PathBuf),
}

fn syntax(path: &Path, (line, column): (usize, usize), message: String) -> LoadError {
    LoadError::Syntax {
        path: path.to_owned(),
        line,
        column,
        message,
    }
}

/// A check on the loaded scenario failed: the error points at the node
/// `at` names (the document's start if the parser cannot place it).
fn invalid(path: &Path, text: &str, at: &[Seg], message: String) -> LoadError {
    let (line, column) = locate(text, at).unwrap_or((1, 1));
    LoadError::Invalid {
        path: path.to_owned(),
        line,
        column,
        message,
    }
}

/// Parses one scenario from text; `path` only names it in errors.
///
/// Bounded before the parser runs: a text over [`MAX_SCENARIO_BYTES`] or
/// nesting deeper than [`MAX_DEPTH`] is refused after one linear scan,
/// with the position where it crossed the limit.
pub fn parse_scenario(path: &Path, text: &str) -> Result<Scenario, LoadError> {
    if text.len() > MAX_SCENARIO_BYTES {
        return Err(syntax(
            path,
            position_at(text, MAX_SCENARIO_BYTES),
            format!("a scenario file is at most {MAX_SCENARIO_BYTES} bytes; this one goes on"),
        ));
    }
    check_depth(text, MAX_DEPTH).map_err(|e| {
        syntax(
            path,
            (e.line, e.column),
            format!("nested deeper than {MAX_DEPTH} levels (the limit of a scenario)"),
        )
    })?;
    let mut scenario: Scenario = serde_yaml::from_str(text).map_err(|e| {
        let message = e.to_string();
        let at = match e.location() {
            Some(l) => (l.line(), l.column()),
            // The one error serde_yaml does not place: a second document.
            None => second_document(text).unwrap_or_else(|| end_position(text)),
        };
        // serde_yaml appends " at line L column C"; the prefix says it already.
        let message = match message.rfind(" at line ") {
            Some(cut) if e.location().is_some() => message[..cut].to_owned(),
            _ => message,
        };
        syntax(path, at, message)
    })?;
    scenario.file = path.to_owned();
    if let Some(written) = spelling::Written::parse(text) {
        if let Some(steps) = written.root().get("steps") {
            restore_numbers(steps, &mut scenario.steps).map_err(|e| LoadError::Invalid {
                path: path.to_owned(),
                line: e.line,
                column: e.column,
                message: e.message,
            })?;
        }
    }
    validate(&scenario).map_err(|(at, message)| invalid(path, text, &at, message))?;
    Ok(scenario)
}

/// Puts the numbers of the bodies the steps send (store args, `rpc`,
/// `http.json`) back as the file spells them (see [`spelling`]).
fn restore_numbers(
    nodes: spelling::At<'_>,
    steps: &mut [Step],
) -> Result<(), spelling::SpellingError> {
    for (node, step) in nodes.items().into_iter().zip(steps.iter_mut()) {
        // The expectation too: `1e400` is a number there, not YAML's string.
        if let (Some(n), Some(expect)) = (node.get("expect"), step.expect.as_mut()) {
            n.restore(expect)?;
        }
        match &mut step.action {
            Action::Store { op, args } => {
                if let Some(n) = node.get(op) {
                    n.restore(args)?;
                }
            }
            Action::Rpc(value) => {
                if let Some(n) = node.get("rpc") {
                    n.restore(value)?;
                }
            }
            Action::Http(step) => {
                let body = node.get("http").and_then(|h| h.get("json"));
                if let Some(n) = body {
                    if let Some(agent_step::BodyTemplate::Json(v)) = &mut step.body {
                        n.restore(v)?;
                    }
                    if let Some(v) = step.source.get_mut("json") {
                        n.restore(v)?;
                    }
                }
            }
            Action::Parallel(items) => {
                if let Some(n) = node.get("parallel") {
                    restore_numbers(n, items)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads a scenario file's bytes, never more than [`MAX_SCENARIO_BYTES`]
/// (plus one, to know it goes on): a larger file is a load error at the
/// position where it crosses the limit, and is never held whole.
pub fn read_bounded(path: &Path) -> Result<Vec<u8>, LoadError> {
    use std::io::Read;
    let io = |source| LoadError::Io {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(MAX_SCENARIO_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() > MAX_SCENARIO_BYTES {
        let text = String::from_utf8_lossy(&bytes[..MAX_SCENARIO_BYTES]);
        return Err(syntax(
            path,
            end_position(&text),
            format!("a scenario file is at most {MAX_SCENARIO_BYTES} bytes; this one goes on"),
        ));
    }
    Ok(bytes)
}

/// Reads a scenario file ([`read_bounded`]); bytes that are not UTF-8 are
/// a load error at their position.
pub fn read_scenario_file(path: &Path) -> Result<String, LoadError> {
    String::from_utf8(read_bounded(path)?).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let text = String::from_utf8_lossy(&e.as_bytes()[..valid]);
        syntax(
            path,
            end_position(&text),
            "the file is not UTF-8 from here".into(),
        )
    })
}

/// Loads scenarios from files and directories (recursively, `*.yaml` and
/// `*.yml`, in path order). Ids must be unique across everything loaded.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<Scenario>, LoadError> {
    let files = scenario_files(paths)?;
    let mut texts = Vec::with_capacity(files.len());
    for file in files {
        let text = read_scenario_file(&file)?;
        texts.push((file, text));
    }
    parse_all(&texts)
}

/// Parses scenario texts, each named by its path; ids must be unique.
pub fn parse_all<P: AsRef<Path>, T: AsRef<str>>(
    texts: &[(P, T)],
) -> Result<Vec<Scenario>, LoadError> {
    let mut scenarios = Vec::with_capacity(texts.len());
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for (file, text) in texts {
        let (file, text) = (file.as_ref(), text.as_ref());
        let scenario = parse_scenario(file, text)?;
        if let Some(first) = seen.insert(scenario.id.clone(), file.to_owned()) {
            let message = format!(
                "id `{}` is already used by {}",
                scenario.id,
                first.display()
            );
            return Err(invalid(file, text, &[Seg::Key("id")], message));
        }
        scenarios.push(scenario);
    }
    Ok(scenarios)
}

/// The scenario files `load_paths` would load, in the order it loads them.
pub fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut files = Vec::new();
    for path in paths {
        let before = files.len();
        collect(path, &mut files)?;
        if files.len() == before {
            return Err(LoadError::Empty(path.clone()));
        }
    }
    Ok(files)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let meta = std::fs::metadata(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    if meta.is_file() {
        out.push(path.to_owned());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(entry);
        }
    }
    Ok(())
}
