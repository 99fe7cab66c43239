//! Raw wire steps: `raw:` sends a store request as text, byte for byte,
//! and `expect_raw:` checks an answer against exact JSON text.
//!
//! YAML re-serialises what it reads, so an `args` map cannot say in which
//! order its keys go on the wire or how a number is spelt (`1` or `1.0`).
//! `raw: '{"op":"commitRunStart","args":{...}}'` is the body of the
//! `POST /rpc` request exactly as written (after `${var}` interpolation);
//! `expect_raw: '{"ok":{...}}'` is compared with the answer as JSON values:
//! the same keys (an absent key is not a `null` one), key order
//! irrelevant, numbers by value (SPEC 3 `[[digest.numbers]]`: `1` and
//! `1.0` are one number). What an in-process target does with raw text is
//! in `docs/scenario-format.md` ("Raw wire steps").

use serde_json::Value;

use super::pattern::same_number;

/// Checks an `expect_raw` text at load time: it must be JSON (variables go
/// inside strings, `"${r}"`, so the template itself is JSON).
pub fn check_expectation(text: &str) -> Result<(), String> {
    serde_json::from_str::<Value>(text)
        .map(|_| ())
        .map_err(|e| format!("expect_raw is not JSON: {e}"))
}

/// Checks a `raw` text at load time: any text may be sent (a malformed
/// request on purpose), but not an empty one, which says nothing.
pub fn check_request(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        Err("raw needs the request text to send".into())
    } else {
        Ok(())
    }
}

/// Compares `actual` with `expected` exactly: `Ok` when they are the same
/// JSON value, else where they first differ (`$.ok.run.requestKey: ...`).
pub fn json_equal(expected: &Value, actual: &Value) -> Result<(), String> {
    walk("$", expected, actual)
}

fn walk(at: &str, expected: &Value, actual: &Value) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let here = format!("{at}.{k}");
                match a.get(k) {
                    Some(av) => walk(&here, ev, av)?,
                    None => return Err(format!("{here}: absent, expected {ev}")),
                }
            }
            if let Some(k) = a.keys().find(|k| !e.contains_key(*k)) {
                return Err(format!("{at}.{k}: present ({}), expected absent", a[k]));
            }
            Ok(())
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                return Err(format!("{at}: {} elements, expected {}", a.len(), e.len()));
            }
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                walk(&format!("{at}[{i}]"), ev, av)?;
            }
            Ok(())
        }
        (Value::Number(e), Value::Number(a)) if same_number(e, a) => Ok(()),
        (e, a) if e == a => Ok(()),
        (e, a) => Err(format!("{at}: {a}, expected {e}")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn j(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn key_order_is_irrelevant_and_numbers_compare_by_value() {
        assert!(json_equal(&j(r#"{"b":1,"a":[2.0]}"#), &j(r#"{"a":[2],"b":1e0}"#)).is_ok());
    }

    #[test]
    fn absent_is_not_null_and_extra_keys_are_refused() {
        let e = json_equal(&j(r#"{"a":1}"#), &j(r#"{"a":1,"k":null}"#)).unwrap_err();
        assert!(e.contains("$.k: present (null), expected absent"), "{e}");
        let e = json_equal(&j(r#"{"a":1,"k":null}"#), &j(r#"{"a":1}"#)).unwrap_err();
        assert!(e.contains("$.k: absent"), "{e}");
    }

    #[test]
    fn values_that_differ_are_named_by_path() {
        let e = json_equal(&j(r#"{"a":[1,"x"]}"#), &j(r#"{"a":[1,"y"]}"#)).unwrap_err();
        assert!(e.starts_with("$.a[1]"), "{e}");
        assert!(json_equal(&j("1"), &j("\"1\"")).is_err());
        assert!(json_equal(&j("[1]"), &j("[1,1]")).is_err());
    }

    #[test]
    fn templates_are_checked_at_load() {
        assert!(check_expectation(r#"{"ok":"${r}"}"#).is_ok());
        assert!(check_expectation("[1,").is_err());
        assert!(check_request(" ").is_err());
        assert!(check_request("[1,").is_ok());
    }
}
