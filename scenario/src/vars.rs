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
//!
//! Two families of names are not fresh values (issue 45: no scenario
//! hard-codes what a target declares):
//!
//! - `$profile.FIELD` / `${profile.FIELD}`: the value the target's declared
//!   profile gives FIELD (`$profile.concurrentStatus` is the number 409
//!   where the profile says 409), bound by the runner before a trial; the
//!   loader refuses a FIELD the scenario's level does not declare. Inside
//!   object keys too (`headers: {${profile.replayHeader}: $absent}`).
//! - `${key.NAME}` / `$key.NAME`: NAME's fresh value written as an
//!   `Idempotency-Key` field value the declared `keySyntax` admits: quoted
//!   (`"v"`) under `sf-string` and `any`, bare (`v`) under `token`.
//!
//! At the idem level (`set_client_ids`), a fresh value is a UUID v4 as
//! clients write them (issue 56: a key shaped `<namespace>.<trial>.k` is
//! one a server can tell from its clients'): drawn from the trial's
//! prefix and the name in lower case, in upper case when the name starts
//! with a capital (`${key.Ak}` and `${key.ak}` are one UUID in two
//! cases, as Windows and .NET clients write GUIDs in upper case).

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

/// Words reserved for patterns.
pub const PATTERN_WORDS: [&str; 2] = ["absent", "any"];

/// The prefix of the names a declared profile binds.
pub const PROFILE_PREFIX: &str = "profile.";
/// The prefix of a key written as the declared `keySyntax` admits it.
pub const KEY_PREFIX: &str = "key.";

/// The bindings of one trial.
#[derive(Debug, Clone)]
pub struct Vars {
    /// Prefix of every fresh value: `<run namespace>.<scenario>.<trial>`.
    prefix: String,
    bound: HashMap<String, Value>,
    /// `${key.NAME}` is written bare (`keySyntax: "token"`), not quoted.
    bare_keys: bool,
    /// Fresh values are UUIDs (the idem level).
    client_ids: bool,
}

/// The UUID v4 of `seed` (FNV-1a, then splitmix64 for its 122 bits).
fn uuid_of(seed: &str) -> String {
    let mut h = seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut next = || {
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (a, b) = (next(), next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        8 + ((b >> 60) & 0x3),
        (b >> 48) & 0xfff,
        b & 0xffff_ffff_ffff
    )
}

fn is_var_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A name a scenario may use: a plain one, `profile.FIELD` or `key.NAME`.
fn is_ref(s: &str) -> bool {
    is_var_name(s)
        || [PROFILE_PREFIX, KEY_PREFIX]
            .iter()
            .any(|p| s.strip_prefix(p).is_some_and(is_var_name))
}

impl Vars {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            bound: HashMap::new(),
            bare_keys: false,
            client_ids: false,
        }
    }

    /// Fresh values as UUIDs (`true`: the idem level; module doc).
    pub fn set_client_ids(&mut self, on: bool) {
        self.client_ids = on;
    }

    /// Binds `profile.FIELD` to each field of a declared profile (its JSON
    /// form, camelCase names).
    pub fn bind_profile(&mut self, fields: &serde_json::Map<String, Value>) {
        for (name, value) in fields {
            self.bound
                .insert(format!("{PROFILE_PREFIX}{name}"), value.clone());
        }
    }

    /// `${key.NAME}` bare (`true`: the declared `keySyntax` is `token`) or
    /// quoted as an sf-string (the default).
    pub fn set_bare_keys(&mut self, bare: bool) {
        self.bare_keys = bare;
    }

    pub fn bind(&mut self, name: &str, value: Value) {
        self.bound.insert(name.to_owned(), value);
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.bound.get(name)
    }

    /// The value of `name`, binding a fresh one if it is unbound. A
    /// profile field no profile bound is `null` (the loader admits only
    /// the fields of the scenario's level, and the runner binds them all).
    pub fn resolve(&mut self, name: &str) -> Value {
        if let Some(v) = self.bound.get(name) {
            return v.clone();
        }
        if name.starts_with(PROFILE_PREFIX) {
            return Value::Null;
        }
        if let Some(base) = name.strip_prefix(KEY_PREFIX) {
            let v = match self.resolve(base) {
                Value::String(v) => v,
                other => other.to_string(),
            };
            return Value::String(if self.bare_keys {
                v
            } else {
                format!("\"{v}\"")
            });
        }
        let fresh = Value::String(if self.client_ids {
            let id = uuid_of(&format!("{}.{}", self.prefix, name.to_lowercase()));
            if name.starts_with(|c: char| c.is_ascii_uppercase()) {
                id.to_ascii_uppercase()
            } else {
                id
            }
        } else {
            format!("{}.{name}", self.prefix)
        });
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
                    .map(|(k, v)| {
                        let key = if k.contains("${profile.") {
                            match self.substitute_str(k) {
                                Value::String(s) => s,
                                other => other.to_string(),
                            }
                        } else {
                            k.clone()
                        };
                        (key, self.substitute(v))
                    })
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
            if is_ref(name) {
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
                    // `${key.NAME:N}`: NAME's value padded, then written
                    // as the declared keySyntax writes a key.
                    let (base, as_key) = match name.strip_prefix(KEY_PREFIX) {
                        Some(base) => (base, true),
                        None => (name, false),
                    };
                    let mut v = match self.resolve(base) {
                        Value::String(v) => v,
                        other => other.to_string(),
                    };
                    while v.chars().count() < width {
                        v.push('x');
                    }
                    if as_key && !self.bare_keys {
                        v = format!("\"{v}\"");
                    }
                    out.push_str(&v);
                    rest = &inner[end + 1..];
                    continue;
                }
                match inner.find('}') {
                    Some(end) if is_ref(&inner[..end]) => {
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

/// The names `template` uses (`$name`, `${name}`, `${name:N}`,
/// `profile.FIELD`, `key.NAME`), pattern words and `$$` left out; object
/// keys only for `${profile.FIELD}`.
pub fn names_in(template: &Value, out: &mut BTreeSet<String>) {
    match template {
        Value::String(s) => names_in_str(s, out),
        Value::Array(items) => items.iter().for_each(|v| names_in(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if k.contains("${profile.") {
                    names_in_str(k, out);
                }
                names_in(v, out);
            }
        }
        _ => {}
    }
}

fn names_in_str(s: &str, out: &mut BTreeSet<String>) {
    if let Some(name) = s.strip_prefix('$') {
        if is_ref(name) && !PATTERN_WORDS.contains(&name) {
            out.insert(name.to_owned());
            return;
        }
    }
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        let after = &rest[pos + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => {
                    let name = &inner[..end];
                    if let Some((base, _)) = padded(name) {
                        out.insert(base.strip_prefix(KEY_PREFIX).unwrap_or(base).to_owned());
                    } else if is_ref(name) {
                        out.insert(name.to_owned());
                    }
                    rest = &inner[end + 1..];
                }
                None => rest = after,
            }
        } else {
            rest = after;
        }
    }
}

/// `name:N` or `key.name:N` (N at most 4096) as `(name, N)`.
fn padded(s: &str) -> Option<(&str, usize)> {
    let (name, width) = s.split_once(':')?;
    let width: usize = width.parse().ok().filter(|w| *w <= 4096)?;
    let base = name.strip_prefix(KEY_PREFIX).unwrap_or(name);
    is_var_name(base).then_some((name, width))
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
    fn at_the_idem_level_fresh_values_are_uuids_and_a_capital_name_the_upper_case_twin() {
        let mut vars = Vars::new("ns.1.0");
        vars.set_client_ids(true);
        let v = vars.substitute(&json!([
            "$k",
            "${key.ak}",
            "${key.Ak}",
            "$k",
            "${k:40}",
            "$j"
        ]));
        let k = v[0].as_str().unwrap();
        assert_eq!(k.len(), 36);
        assert_eq!(&k[14..15], "4", "{k}");
        assert!("89ab".contains(&k[19..20]), "{k}");
        assert!(!k.contains("ns."), "{k}");
        assert_eq!(v[3], v[0]);
        let (lower, upper) = (v[1].as_str().unwrap(), v[2].as_str().unwrap());
        assert_ne!(lower, upper);
        assert_eq!(lower.to_ascii_uppercase(), upper);
        assert!(lower.starts_with('"') && lower.ends_with('"'));
        assert_eq!(v[4].as_str().unwrap().len(), 40);
        assert_ne!(v[5], v[0]);
        let mut other_trial = Vars::new("ns.1.1");
        other_trial.set_client_ids(true);
        assert_ne!(other_trial.substitute(&json!("$k")), v[0]);
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
    fn profile_fields_and_keys_come_from_the_declared_profile() {
        let mut vars = Vars::new("p");
        let profile = json!({"concurrentStatus": 429, "replayHeader": "x-replayed"});
        vars.bind_profile(profile.as_object().unwrap());
        let t = json!({"status": "$profile.concurrentStatus", "headers": {"${profile.replayHeader}": "$absent"},
            "k": "${key.k}", "text": "status ${profile.concurrentStatus}", "none": "$profile.lockMs"});
        assert_eq!(
            vars.substitute(&t),
            json!({"status": 429, "headers": {"x-replayed": "$absent"}, "k": "\"p.k\"",
                "text": "status 429", "none": null})
        );
        assert_eq!(vars.substitute(&json!("${key.k:6}")), json!("\"p.kxxx\""));
        vars.set_bare_keys(true);
        assert_eq!(vars.substitute(&json!("${key.k}")), json!("p.k"));
        assert_eq!(vars.substitute(&json!("${key.k:6}")), json!("p.kxxx"));
        let mut names = BTreeSet::new();
        names_in(&t, &mut names);
        names_in(&json!(["${s:12}", "$$x", "$absent", "a${r}b"]), &mut names);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "key.k",
                "profile.concurrentStatus",
                "profile.lockMs",
                "profile.replayHeader",
                "r",
                "s"
            ]
        );
    }

    #[test]
    fn lookup_walks_objects_and_arrays() {
        let v = json!({"ok": [{"runId": "r"}]});
        assert_eq!(lookup(&v, "ok.0.runId"), Some(&json!("r")));
        assert_eq!(lookup(&v, "ok.1"), None);
    }
}
