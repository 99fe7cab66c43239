//! Patterns: how an expectation matches an answer.
//!
//! Subset matching by default (an answer may carry more fields than the
//! pattern names), with a few explicit forms for what subset matching cannot
//! say: a field that must be absent, an exact value, a length, and
//! alternatives. A mismatch is reported as a path and a reason, so a failure
//! says *where* the answer differs, not only that it does.

use serde_json::Value;

/// Where and why a pattern did not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// Dotted path into the answer (`ok.run.requestKey`), empty at the root.
    pub path: String,
    pub reason: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "at `{}`: {}", self.path, self.reason)
        }
    }
}

fn join(path: &str, part: &str) -> String {
    if path.is_empty() {
        part.to_owned()
    } else {
        format!("{path}.{part}")
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 120 {
        let cut = (0..=117)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

/// The single special key of an object pattern, if it is one.
fn special(pattern: &serde_json::Map<String, Value>) -> Option<(&str, &Value)> {
    if pattern.len() != 1 {
        return None;
    }
    let (k, v) = pattern.iter().next()?;
    matches!(
        k.as_str(),
        "$exact" | "$length" | "$one_of" | "$at_most" | "$at_least" | "$contains" | "$none"
    )
    .then_some((k.as_str(), v))
}

/// Does `actual` match `pattern`? `Ok(())` or the first mismatch.
pub fn matches(pattern: &Value, actual: &Value) -> Result<(), Mismatch> {
    match_at("", pattern, Some(actual))
}

fn match_at(path: &str, pattern: &Value, actual: Option<&Value>) -> Result<(), Mismatch> {
    let fail = |reason: String| {
        Err(Mismatch {
            path: path.to_owned(),
            reason,
        })
    };
    match (pattern, actual) {
        (Value::String(s), None) if s == "$absent" => Ok(()),
        (Value::String(s), Some(a)) if s == "$absent" => fail(format!(
            "expected the field to be absent, found {}",
            short(a)
        )),
        // `{$one_of: [..., $absent]}`: a field that may be missing.
        (Value::Object(p), None)
            if special(p).is_some_and(|(k, arg)| {
                k == "$one_of" && arg.as_array().is_some_and(|o| o.contains(&json_absent()))
            }) =>
        {
            Ok(())
        }
        (_, None) => fail(format!("missing; expected {}", short(pattern))),
        (Value::String(s), Some(_)) if s == "$any" => Ok(()),
        (Value::Object(p), Some(a)) => {
            if let Some((key, arg)) = special(p) {
                return match_special(path, key, arg, a);
            }
            let Value::Object(obj) = a else {
                return fail(format!("expected an object, found {}", short(a)));
            };
            for (k, pv) in p {
                match_at(&join(path, k), pv, obj.get(k))?;
            }
            Ok(())
        }
        (Value::Array(p), Some(a)) => {
            let Value::Array(items) = a else {
                return fail(format!("expected an array, found {}", short(a)));
            };
            if p.len() != items.len() {
                return fail(format!(
                    "expected {} elements, found {}",
                    p.len(),
                    items.len()
                ));
            }
            for (i, (pv, av)) in p.iter().zip(items).enumerate() {
                match_at(&join(path, &i.to_string()), pv, Some(av))?;
            }
            Ok(())
        }
        (p, Some(a)) => {
            if same_value(p, a) {
                Ok(())
            } else {
                fail(format!("expected {}, found {}", short(p), short(a)))
            }
        }
    }
}

/// Are two numbers the same number (by value, not by spelling: SPEC 3
/// `[[digest.numbers]]`)? A scenario's `1.5` matches an answer's `1.50`.
/// Values are compared as exact decimals, not as doubles: 2^64 is not
/// `18446744073709552000` (SPEC 8 `[[certify.match.input-exact]]`).
pub fn same_number(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(x), Some(y)) = (exact_decimal(a.as_str()), exact_decimal(b.as_str())) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        // Past the doubles (`1e400`): the same spelling or nothing.
        _ => a.as_str() == b.as_str(),
    }
}

/// A JSON number's exact value as (negative, significant digits without
/// leading or trailing zeros, exponent of the last digit); zero is
/// `(false, "", 0)` whatever its sign or spelling. `None` for text that is
/// no JSON number or an exponent beyond `i64`.
fn exact_decimal(text: &str) -> Option<(bool, String, i64)> {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (
            &rest[..at],
            rest[at + 1..].trim_start_matches('+').parse::<i64>().ok()?,
        ),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let frac_len = i64::try_from(frac.len()).ok()?;
    let mut exponent = exponent.checked_sub(frac_len)?;
    let trimmed_end = digits.trim_end_matches('0');
    exponent = exponent.checked_add(i64::try_from(digits.len() - trimmed_end.len()).ok()?)?;
    let significant = trimmed_end.trim_start_matches('0');
    if significant.is_empty() {
        return Some((false, String::new(), 0));
    }
    Some((negative, significant.to_owned(), exponent))
}

/// JSON equality with numbers compared by value.
pub fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_value(v, w)))
        }
        (x, y) => x == y,
    }
}

fn json_absent() -> Value {
    Value::String("$absent".into())
}

fn match_special(path: &str, key: &str, arg: &Value, actual: &Value) -> Result<(), Mismatch> {
    let fail = |reason: String| {
        Err(Mismatch {
            path: path.to_owned(),
            reason,
        })
    };
    match key {
        "$exact" => {
            if same_value(arg, actual) {
                Ok(())
            } else {
                fail(format!(
                    "expected exactly {}, found {}",
                    short(arg),
                    short(actual)
                ))
            }
        }
        "$at_most" | "$at_least" => {
            let most = key == "$at_most";
            let word = if most { "at most" } else { "at least" };
            let (Some(bound), Value::Number(n)) = (arg.as_f64(), actual) else {
                return fail(format!(
                    "expected a number {word} {}, found {}",
                    short(arg),
                    short(actual)
                ));
            };
            match n.as_f64() {
                Some(x) if (most && x <= bound) || (!most && x >= bound) => Ok(()),
                _ => fail(format!("expected {word} {}, found {n}", short(arg))),
            }
        }
        "$contains" | "$none" => {
            let Value::Array(items) = actual else {
                return fail(format!("expected an array, found {}", short(actual)));
            };
            let hit = items
                .iter()
                .position(|item| match_at(path, arg, Some(item)).is_ok());
            match (key, hit) {
                ("$contains", None) => fail(format!(
                    "no element of {} matches {}",
                    items.len(),
                    short(arg)
                )),
                ("$none", Some(i)) => fail(format!(
                    "element {i} matches {}, which none may: {}",
                    short(arg),
                    short(&items[i])
                )),
                _ => Ok(()),
            }
        }
        "$length" => {
            let Some(want) = arg.as_u64() else {
                return fail(format!("$length takes a whole number, not {}", short(arg)));
            };
            match actual {
                Value::Array(a) if a.len() as u64 == want => Ok(()),
                Value::Array(a) => fail(format!("expected {want} elements, found {}", a.len())),
                other => fail(format!(
                    "expected an array of {want}, found {}",
                    short(other)
                )),
            }
        }
        _ => {
            let Value::Array(options) = arg else {
                return fail("$one_of takes a list of patterns".into());
            };
            let mut reasons = Vec::new();
            for option in options {
                match match_at(path, option, Some(actual)) {
                    Ok(()) => return Ok(()),
                    Err(m) => reasons.push(m.to_string()),
                }
            }
            fail(format!(
                "matched none of {} alternatives ({})",
                options.len(),
                reasons.join("; ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    /// With numbers kept as spelt (serde_json `arbitrary_precision`), a
    /// pattern still compares them by value, in fields and under `$exact`.
    #[test]
    fn numbers_match_by_value_not_spelling() {
        let j = |s: &str| -> Value { serde_json::from_str(s).unwrap() };
        assert!(matches(&j(r#"{"n":1.5}"#), &j(r#"{"n":1.50}"#)).is_ok());
        assert!(matches(&j(r#"{"n":100}"#), &j(r#"{"n":1e2}"#)).is_ok());
        assert!(matches(&j(r#"{"$exact":{"n":[1]}}"#), &j(r#"{"n":[1.0]}"#)).is_ok());
        assert!(matches(&j(r#"{"n":1.5}"#), &j(r#"{"n":1.51}"#)).is_err());
        assert!(matches(&j(r#"{"n":1}"#), &j(r#"{"n":"1"}"#)).is_err());
        assert!(matches(&j(r#"{"n":1e400}"#), &j(r#"{"n":1e400}"#)).is_ok());
        assert!(matches(&j(r#"{"n":1e400}"#), &j(r#"{"n":2e400}"#)).is_err());
    }

    #[test]
    fn at_most_bounds_a_number() {
        assert!(matches(&json!({"t": {"$at_most": 300}}), &json!({"t": 300})).is_ok());
        assert!(matches(&json!({"t": {"$at_most": 300}}), &json!({"t": 12})).is_ok());
        let m = matches(&json!({"t": {"$at_most": 300}}), &json!({"t": 301})).unwrap_err();
        assert_eq!(m.path, "t");
        assert!(matches(&json!({"t": {"$at_most": 300}}), &json!({"t": "1"})).is_err());
        assert!(matches(&json!({"t": {"$at_most": 300}}), &json!({})).is_err());
        assert!(matches(&json!({"c": {"$at_least": 2}}), &json!({"c": 2})).is_ok());
        assert!(matches(&json!({"c": {"$at_least": 2}}), &json!({"c": 7})).is_ok());
        let m = matches(&json!({"c": {"$at_least": 2}}), &json!({"c": 1})).unwrap_err();
        assert!(m.to_string().contains("at least 2"), "{m}");
    }

    #[test]
    fn objects_match_by_subset() {
        let answer =
            json!({"ok": {"outcome": "started", "run": {"runId": "r", "status": "running"}}});
        assert!(matches(&json!({"ok": {"run": {"runId": "r"}}}), &answer).is_ok());
        let m = matches(&json!({"ok": {"run": {"runId": "x"}}}), &answer).unwrap_err();
        assert_eq!(m.path, "ok.run.runId");
    }

    #[test]
    fn absent_means_not_even_null() {
        assert!(matches(&json!({"k": "$absent"}), &json!({})).is_ok());
        assert!(matches(&json!({"k": "$absent"}), &json!({"k": null})).is_err());
        assert!(matches(&json!({"k": null}), &json!({})).is_err());
    }

    #[test]
    fn numbers_compare_as_exact_decimals() {
        let j = |s: &str| -> Value { serde_json::from_str(s).unwrap() };
        let same = |a: &str, b: &str| same_value(&j(a), &j(b));
        assert!(same("1.50", "1.5"));
        assert!(same("-0", "0"));
        assert!(same("1e0", "1.0"));
        assert!(same("2E+3", "2000"));
        assert!(same("1e400", "10e399"));
        assert!(same("18446744073709551616", "18446744073709551616.0"));
        assert!(!same("18446744073709551616", "18446744073709552000"));
        assert!(!same("100000000000000000000000000001", "1e29"));
        assert!(!same("1e400", "null"));
        assert!(!same("0.1", "0.10000000000000001"));
        assert!(!same("-1", "1"));
    }

    #[test]
    fn exact_refuses_extra_fields() {
        assert!(matches(&json!({"$exact": {"a": 1}}), &json!({"a": 1})).is_ok());
        assert!(matches(&json!({"$exact": {"a": 1}}), &json!({"a": 1, "b": 2})).is_err());
    }

    #[test]
    fn length_and_one_of() {
        assert!(matches(&json!({"ok": {"$length": 2}}), &json!({"ok": [1, 2]})).is_ok());
        let has = json!({"e": {"$contains": {"k": "a", "count": 1}}});
        let none = json!({"e": {"$none": {"k": "a"}}});
        let list = json!({"e": [{"k": "b", "count": 2}, {"k": "a", "count": 1}]});
        assert!(matches(&has, &list).is_ok());
        assert!(matches(&none, &list).is_err());
        let twice = json!({"e": [{"k": "a", "count": 2}]});
        assert!(matches(&has, &twice).is_err());
        assert!(matches(&none, &json!({"e": [{"k": "b"}]})).is_ok());
        assert!(matches(&has, &json!({"e": {"k": "a"}})).is_err());
        assert!(matches(&json!({"ok": {"$length": 1}}), &json!({"ok": [1, 2]})).is_err());
        let p = json!({"$one_of": [{"ok": null}, {"error": {"kind": "not_found"}}]});
        assert!(matches(&p, &json!({"ok": null})).is_ok());
        assert!(matches(&p, &json!({"ok": 1})).is_err());
    }

    #[test]
    fn one_of_with_absent_admits_a_missing_field_and_nothing_else() {
        let p = json!({"c": {"$one_of": ["reject", "$absent"]}});
        assert!(matches(&p, &json!({})).is_ok());
        assert!(matches(&p, &json!({"c": "reject"})).is_ok());
        assert!(matches(&p, &json!({"c": null})).is_err());
        assert!(matches(&p, &json!({"c": "queue"})).is_err());
        assert!(matches(&json!({"c": {"$one_of": ["reject"]}}), &json!({})).is_err());
    }

    #[test]
    fn arrays_must_have_the_same_length() {
        assert!(matches(&json!([1]), &json!([1, 2])).is_err());
        assert!(matches(&json!([{"a": 1}, "$any"]), &json!([{"a": 1, "b": 0}, 5])).is_ok());
    }
}
