//! Scenario variables: `$name` and `${name}`.
//!
//! A scenario is data; its `$names` become concrete values per trial. An
//! unbound name is bound on first use to a fresh string that is valid as a
//! session id, a run id and a request key, under the run's namespace, so
//! that two runs (or two trials) against one shared backend never touch the
//! same session. `$absent` and `$any` are pattern words, never variables.
//! `${name:N}` is the fresh value of `name` padded with `x` to exactly N
//! characters (for boundary cases: a session id of 256 characters, and
//! one of 257 that equals it but for the last character added); a value
//! already longer than N is left as it is. The run namespace keeps fresh
//! values under 64 characters.

use std::collections::HashMap;

use serde_json::Value;

/// Words reserved for patterns.
pub const PATTERN_WORDS: [&str; 2] = ["absent", "any"];

/// The bindings of one trial.
#[derive(Debug, Clone)]
pub struct Vars {
    /// Prefix of every fresh value: `<run namespace>.<scenario>.<trial>`.
    prefix: String,
    bound: HashMap<String, Value>,
}

fn is_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Vars {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            bound: HashMap::new(),
        }
    }

    pub fn bind(&mut self, name: &str, value: Value) {
        self.bound.insert(name.to_owned(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.bound.get(name)
    }

    /// The value of `name`, binding a fresh one if it is unbound.
    pub fn resolve(&mut self, name: &str) -> Value {
        if let Some(v) = self.bound.get(name) {
            return v.clone();
        }
        let fresh = Value::String(format!("{}.{name}", self.prefix));
        self.bound.insert(name.to_owned(), fresh.clone());
        fresh
    }

    /// Substitutes every `$name` (a whole string) and `${name}` (inside a
    /// string) in `template`. Object keys are left alone (patterns use
    /// `$exact` and friends as keys). `$$` stands for a literal `$`.
    pub fn substitute(&mut self, template: &Value) -> Value {
        match template {
            Value::String(s) => self.substitute_str(s),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.substitute(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.substitute(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    fn substitute_str(&mut self, s: &str) -> Value {
        if let Some(name) = s.strip_prefix('$') {
            if PATTERN_WORDS.contains(&name) {
                return Value::String(s.to_owned());
            }
            if is_var_name(name) {
                return self.resolve(name);
            }
        }
        if !s.contains('$') {
            return Value::String(s.to_owned());
        }
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            if let Some(stripped) = after.strip_prefix('$') {
                out.push('$');
                rest = stripped;
            } else if let Some(inner) = after.strip_prefix('{') {
                let pad = inner
                    .find('}')
                    .and_then(|end| padded(&inner[..end]).map(|p| (end, p)));
                if let Some((end, (name, width))) = pad {
                    let mut v = match self.resolve(name) {
                        Value::String(v) => v,
                        other => other.to_string(),
                    };
                    while v.chars().count() < width {
                        v.push('x');
                    }
                    out.push_str(&v);
                    rest = &inner[end + 1..];
                    continue;
                }
                match inner.find('}') {
                    Some(end) if is_var_name(&inner[..end]) => {
                        match self.resolve(&inner[..end]) {
                            Value::String(v) => out.push_str(&v),
                            other => out.push_str(&other.to_string()),
                        }
                        rest = &inner[end + 1..];
                    }
                    _ => {
                        out.push('$');
                        rest = after;
                    }
                }
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        Value::String(out)
    }
}

/// `name:N` (N at most 4096) as `(name, N)`.
fn padded(s: &str) -> Option<(&str, usize)> {
    let (name, width) = s.split_once(':')?;
    let width: usize = width.parse().ok().filter(|w| *w <= 4096)?;
    is_var_name(name).then_some((name, width))
}

/// Reads a dot-separated path (`ok.run.runId`, `ok.0.runId`) out of `value`.
pub fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|p| !p.is_empty())
        .try_fold(value, |v, part| match v {
            Value::Object(m) => m.get(part),
            Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn unbound_names_get_fresh_values_that_stay_bound() {
        let mut vars = Vars::new("ns.1.0");
        let a = vars.substitute(&json!({"s": "$s", "again": "$s", "k": "key-${s}-${i}"}));
        assert_eq!(a["s"], json!("ns.1.0.s"));
        assert_eq!(a["again"], a["s"]);
        assert_eq!(a["k"], json!("key-ns.1.0.s-ns.1.0.i"));
    }

    #[test]
    fn a_padded_name_is_its_fresh_value_padded_to_the_width() {
        let mut vars = Vars::new("ns.1.0");
        let v = vars.substitute(&json!(["${s:12}", "${s:13}", "$s", "${s:2}", "${s:x}"]));
        assert_eq!(v[0], json!("ns.1.0.sxxxx"));
        assert_eq!(v[1], json!("ns.1.0.sxxxxx"));
        assert_eq!(v[2], json!("ns.1.0.s"));
        assert_eq!(v[3], json!("ns.1.0.s"), "longer than the width: unchanged");
        assert_eq!(v[4], json!("${s:x}"), "not a width: literal");
    }

    #[test]
    fn bound_values_keep_their_json_type() {
        let mut vars = Vars::new("p");
        vars.bind("n", json!(3));
        assert_eq!(vars.substitute(&json!(["$n", "x${n}"])), json!([3, "x3"]));
    }

    #[test]
    fn pattern_words_and_escapes_are_left_alone() {
        let mut vars = Vars::new("p");
        assert_eq!(vars.substitute(&json!("$absent")), json!("$absent"));
        assert_eq!(
            vars.substitute(&json!("$$5 and $ alone")),
            json!("$5 and $ alone")
        );
        assert_eq!(vars.substitute(&json!({"$exact": 1})), json!({"$exact": 1}));
    }

    #[test]
    fn lookup_walks_objects_and_arrays() {
        let v = json!({"ok": [{"runId": "r"}]});
        assert_eq!(lookup(&v, "ok.0.runId"), Some(&json!("r")));
        assert_eq!(lookup(&v, "ok.1"), None);
    }
}
