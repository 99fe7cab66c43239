//! The declared profile of an `Idempotency-Key` implementation (SPEC 10),
//! parsed from the app's `GET /.reqkey/health` answer.
//!
//! The draft leaves many choices open (which status an invalid key gets,
//! whether a duplicate waits or is refused, whether error answers are
//! replayed...). An implementation declares each choice, and is judged
//! against it: a choice is never guessed. So every field is required, and a
//! missing or ill-typed one is a typed error the harness turns into exit 2
//! ("declares no profile"), never a verdict. Pure: no IO.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};

/// The protocol an idem app's `/.reqkey/health` names.
pub const IDEM_PROTOCOL: &str = "reqkey-idem/1";

/// How the header's value becomes a key (draft 2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeySyntax {
    /// Only a quoted Structured Field String; its content is the key.
    SfString,
    /// The raw field value, quoted or bare, is the key.
    Any,
    /// The raw field value is the key, and only an RFC 9110 token is one
    /// (`1*tchar`: letters, digits and ``!#$%&'*+-.^_`|~``); anything
    /// else (a quote, a blank, a comma, a non-ASCII byte) is malformed.
    Token,
}

impl KeySyntax {
    /// Is a key written bare on the wire (not as a quoted sf-string)?
    pub fn bare_keys(self) -> bool {
        self == KeySyntax::Token
    }
}

/// What the payload of a retry is compared by (draft 2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fingerprint {
    None,
    Bytes,
    Json,
}

/// What a duplicate meets while the first request is in flight (draft 2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrent {
    /// Refused with `concurrentStatus` (the draft's 409).
    Conflict,
    /// Waits for the first and gets its answer replayed.
    Wait,
}

/// What happens to a key after the handler answers 4xx or 5xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Errors {
    /// The error answer is replayed like a success.
    Stored,
    /// The key is freed; a retry executes again.
    Released,
}

/// What a key is scoped by besides itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ScopeBy {
    Caller,
    Method,
    Path,
}

impl ScopeBy {
    pub fn name(self) -> &'static str {
        match self {
            ScopeBy::Caller => "caller",
            ScopeBy::Method => "method",
            ScopeBy::Path => "path",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [ScopeBy::Caller, ScopeBy::Method, ScopeBy::Path]
            .into_iter()
            .find(|b| b.name() == s)
    }
}

/// Every field of SPEC 10's profile table, as declared.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IdemProfile {
    pub key_required: bool,
    pub key_syntax: KeySyntax,
    pub invalid_key_status: Option<u16>,
    pub fingerprint: Fingerprint,
    pub mismatch_status: Option<u16>,
    pub concurrent: Concurrent,
    pub concurrent_status: Option<u16>,
    pub errors: Errors,
    /// Sorted, without repeats.
    pub scope: Vec<ScopeBy>,
    pub expiry_ms: Option<u64>,
    pub lock_ms: Option<u64>,
    pub replay_header: Option<String>,
    pub durable: bool,
}

impl IdemProfile {
    /// Every field of the profile, as `/.reqkey/health` names them: what
    /// `$profile.FIELD` may name.
    pub const FIELDS: [&'static str; 13] = [
        "keyRequired",
        "keySyntax",
        "invalidKeyStatus",
        "fingerprint",
        "mismatchStatus",
        "concurrent",
        "concurrentStatus",
        "errors",
        "scope",
        "expiryMs",
        "lockMs",
        "replayHeader",
        "durable",
    ];

    /// The draft's defaults where it names one: sf-string keys required,
    /// 400 for an invalid key, 422 for another payload, 409 while in
    /// flight, errors replayed, keys scoped by caller, method and path.
    pub fn draft_default() -> Self {
        Self {
            key_required: true,
            key_syntax: KeySyntax::SfString,
            invalid_key_status: Some(400),
            fingerprint: Fingerprint::Json,
            mismatch_status: Some(422),
            concurrent: Concurrent::Conflict,
            concurrent_status: Some(409),
            errors: Errors::Stored,
            scope: vec![ScopeBy::Caller, ScopeBy::Method, ScopeBy::Path],
            expiry_ms: None,
            lock_ms: None,
            replay_header: Some("idempotent-replayed".into()),
            durable: false,
        }
    }

    pub fn scoped_by(&self, by: ScopeBy) -> bool {
        self.scope.contains(&by)
    }

    /// The profile as `/.reqkey/health` writes it (camelCase JSON).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The value of one profile field by its JSON name, for `requires:`.
    pub fn field(&self, name: &str) -> Option<Value> {
        self.to_json().get(name).cloned()
    }
}

impl fmt::Display for IdemProfile {
    /// One line naming every field, for reports.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let json = self.to_json();
        let Some(obj) = json.as_object() else {
            return Ok(());
        };
        let parts: Vec<String> = obj.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// What `/.reqkey/health` names besides the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Implementation {
    pub name: String,
    pub version: String,
    pub storage: String,
}

/// A whole `/.reqkey/health` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IdemHealth {
    pub implementation: Implementation,
    pub profile: IdemProfile,
}

/// Why a `/.reqkey/health` answer declares no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdemProfileError {
    #[error("not a JSON object")]
    NotObject,
    #[error("protocol is {found}, not \"{IDEM_PROTOCOL}\"")]
    Protocol { found: String },
    #[error("no `{field}`")]
    Missing { field: String },
    #[error("`{field}` is {found}, not {want}")]
    IllTyped {
        field: String,
        want: &'static str,
        found: String,
    },
    #[error("`{field}` must be {want} when {because}")]
    Inconsistent {
        field: &'static str,
        want: &'static str,
        because: &'static str,
    },
}

/// A short, inert rendering of a value the target sent (never markup).
fn shown(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 {
        format!("{}...", s.chars().take(40).collect::<String>())
    } else {
        s
    }
}

fn get<'a>(
    obj: &'a Map<String, Value>,
    at: &str,
    field: &str,
) -> Result<&'a Value, IdemProfileError> {
    obj.get(field).ok_or_else(|| IdemProfileError::Missing {
        field: format!("{at}{field}"),
    })
}

fn ill(at: &str, field: &str, want: &'static str, v: &Value) -> IdemProfileError {
    IdemProfileError::IllTyped {
        field: format!("{at}{field}"),
        want,
        found: shown(v),
    }
}

fn string(obj: &Map<String, Value>, at: &str, field: &str) -> Result<String, IdemProfileError> {
    match get(obj, at, field)? {
        Value::String(s) => Ok(s.clone()),
        v => Err(ill(at, field, "a string", v)),
    }
}

fn boolean(obj: &Map<String, Value>, field: &str) -> Result<bool, IdemProfileError> {
    match get(obj, "profile.", field)? {
        Value::Bool(b) => Ok(*b),
        v => Err(ill("profile.", field, "a boolean", v)),
    }
}

/// A refusal's status: an error status (SPEC 10 `[[idem.profile.declared]]`:
/// a 1xx-3xx refusal could not be told from the handler's own answers, so
/// such a profile is impossible and declares nothing).
fn status_or_null(obj: &Map<String, Value>, field: &str) -> Result<Option<u16>, IdemProfileError> {
    match get(obj, "profile.", field)? {
        Value::Null => Ok(None),
        v => match v.as_u64() {
            Some(n @ 400..=599) => Ok(Some(n as u16)),
            _ => Err(ill(
                "profile.",
                field,
                "an error status (400-599) or null",
                v,
            )),
        },
    }
}

/// A duration of the profile: positive (a key forgotten or a lock lapsed
/// the moment it is taken is no idempotency at all; `[[idem.profile.declared]]`).
fn ms_or_null(obj: &Map<String, Value>, field: &str) -> Result<Option<u64>, IdemProfileError> {
    match get(obj, "profile.", field)? {
        Value::Null => Ok(None),
        v => v
            .as_u64()
            .filter(|ms| *ms > 0)
            .map(Some)
            .ok_or_else(|| ill("profile.", field, "a positive integer (ms) or null", v)),
    }
}

fn word<T>(
    obj: &Map<String, Value>,
    field: &str,
    want: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, IdemProfileError> {
    let v = get(obj, "profile.", field)?;
    v.as_str()
        .and_then(parse)
        .ok_or_else(|| ill("profile.", field, want, v))
}

/// Parses a whole `/.reqkey/health` answer (SPEC 10 `[[idem.profile.declared]]`).
pub fn parse_health(health: &Value) -> Result<IdemHealth, IdemProfileError> {
    let obj = health.as_object().ok_or(IdemProfileError::NotObject)?;
    match obj.get("protocol") {
        Some(Value::String(p)) if p == IDEM_PROTOCOL => {}
        Some(v) => return Err(IdemProfileError::Protocol { found: shown(v) }),
        None => {
            return Err(IdemProfileError::Missing {
                field: "protocol".into(),
            })
        }
    }
    let imp = match get(obj, "", "implementation")? {
        Value::Object(m) => m,
        v => return Err(ill("", "implementation", "an object", v)),
    };
    let implementation = Implementation {
        name: string(imp, "implementation.", "name")?,
        version: string(imp, "implementation.", "version")?,
        storage: string(imp, "implementation.", "storage")?,
    };
    let profile = match get(obj, "", "profile")? {
        Value::Object(m) => parse_profile(m)?,
        v => return Err(ill("", "profile", "an object", v)),
    };
    Ok(IdemHealth {
        implementation,
        profile,
    })
}

/// Parses the `profile` object alone.
pub fn parse_profile(obj: &Map<String, Value>) -> Result<IdemProfile, IdemProfileError> {
    let key_syntax = word(
        obj,
        "keySyntax",
        "\"sf-string\", \"any\" or \"token\"",
        |s| match s {
            "sf-string" => Some(KeySyntax::SfString),
            "any" => Some(KeySyntax::Any),
            "token" => Some(KeySyntax::Token),
            _ => None,
        },
    )?;
    let fingerprint = word(
        obj,
        "fingerprint",
        "\"none\", \"bytes\" or \"json\"",
        |s| match s {
            "none" => Some(Fingerprint::None),
            "bytes" => Some(Fingerprint::Bytes),
            "json" => Some(Fingerprint::Json),
            _ => None,
        },
    )?;
    let concurrent = word(obj, "concurrent", "\"conflict\" or \"wait\"", |s| match s {
        "conflict" => Some(Concurrent::Conflict),
        "wait" => Some(Concurrent::Wait),
        _ => None,
    })?;
    let errors = word(obj, "errors", "\"stored\" or \"released\"", |s| match s {
        "stored" => Some(Errors::Stored),
        "released" => Some(Errors::Released),
        _ => None,
    })?;
    let scope_v = get(obj, "profile.", "scope")?;
    let scope_want = "an array of \"caller\", \"method\", \"path\"";
    let Value::Array(items) = scope_v else {
        return Err(ill("profile.", "scope", scope_want, scope_v));
    };
    let mut scope = Vec::with_capacity(items.len());
    for item in items {
        let by = item
            .as_str()
            .and_then(ScopeBy::parse)
            .ok_or_else(|| ill("profile.", "scope", scope_want, scope_v))?;
        scope.push(by);
    }
    scope.sort();
    scope.dedup();
    let replay_header = match get(obj, "profile.", "replayHeader")? {
        Value::Null => None,
        Value::String(s) if is_token(s) => Some(s.to_ascii_lowercase()),
        v => return Err(ill("profile.", "replayHeader", "a header name or null", v)),
    };
    let profile = IdemProfile {
        key_required: boolean(obj, "keyRequired")?,
        key_syntax,
        invalid_key_status: status_or_null(obj, "invalidKeyStatus")?,
        fingerprint,
        mismatch_status: status_or_null(obj, "mismatchStatus")?,
        concurrent,
        concurrent_status: status_or_null(obj, "concurrentStatus")?,
        errors,
        scope,
        expiry_ms: ms_or_null(obj, "expiryMs")?,
        lock_ms: ms_or_null(obj, "lockMs")?,
        replay_header,
        durable: boolean(obj, "durable")?,
    };
    if (profile.fingerprint == Fingerprint::None) != profile.mismatch_status.is_none() {
        return Err(IdemProfileError::Inconsistent {
            field: "mismatchStatus",
            want: "null exactly",
            because: "fingerprint is \"none\"",
        });
    }
    if profile.key_syntax == KeySyntax::Token && profile.invalid_key_status.is_none() {
        return Err(IdemProfileError::Inconsistent {
            field: "invalidKeyStatus",
            want: "a status",
            because: "keySyntax is \"token\" (a value of other characters is refused)",
        });
    }
    if (profile.concurrent == Concurrent::Wait) != profile.concurrent_status.is_none() {
        return Err(IdemProfileError::Inconsistent {
            field: "concurrentStatus",
            want: "null exactly",
            because: "concurrent is \"wait\"",
        });
    }
    Ok(profile)
}

/// An HTTP field name (RFC 9110 token), 1 to 64 characters.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The key an `Idempotency-Key` field value carries under `syntax`, or
/// `None` when it is malformed (draft 2.1; RFC 8941 3.3.3 for sf-string:
/// printable ASCII between double quotes, `\"` and `\\` escapes; RFC 9110
/// 5.6.2 for token). An empty key is malformed under every syntax.
pub fn key_of(raw: &[u8], syntax: KeySyntax) -> Option<Vec<u8>> {
    let key = match syntax {
        KeySyntax::Any => raw.to_vec(),
        KeySyntax::SfString => parse_sf_string(raw)?,
        KeySyntax::Token => raw.iter().all(|b| is_tchar(*b)).then(|| raw.to_vec())?,
    };
    (!key.is_empty()).then_some(key)
}

/// An RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_sf_string(raw: &[u8]) -> Option<Vec<u8>> {
    let inner = raw.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    let mut out = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e),
                _ => return None,
            },
            b'"' => return None,
            0x20..=0x7e => out.push(b),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn health(profile: Value) -> Value {
        json!({"protocol": IDEM_PROTOCOL,
               "implementation": {"name": "x", "version": "1", "storage": "memory"},
               "profile": profile})
    }

    #[test]
    fn fields_names_every_field_of_the_json_form() {
        let json = IdemProfile::draft_default().to_json();
        let mut names: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = IdemProfile::FIELDS.to_vec();
        names.sort_unstable();
        fields.sort_unstable();
        assert_eq!(names, fields);
    }

    #[test]
    fn the_default_profile_round_trips_through_json() {
        let p = IdemProfile::draft_default();
        let h = parse_health(&health(p.to_json())).unwrap();
        assert_eq!(h.profile, p);
        assert_eq!(h.implementation.storage, "memory");
        assert_eq!(p.field("concurrentStatus"), Some(json!(409)));
        assert!(p.to_string().contains("keySyntax=\"sf-string\""));
    }

    #[test]
    fn every_missing_field_is_named() {
        let full = IdemProfile::draft_default().to_json();
        for field in full.as_object().unwrap().keys() {
            let mut p = full.clone();
            p.as_object_mut().unwrap().remove(field);
            let e = parse_health(&health(p)).unwrap_err();
            assert_eq!(
                e,
                IdemProfileError::Missing {
                    field: format!("profile.{field}")
                }
            );
        }
    }

    #[test]
    fn ill_typed_fields_are_typed_errors() {
        let cases = [
            ("keyRequired", json!("yes")),
            ("keySyntax", json!("quoted")),
            ("invalidKeyStatus", json!(99)),
            ("fingerprint", json!(1)),
            ("mismatchStatus", json!("422")),
            ("concurrent", json!("queue")),
            ("concurrentStatus", json!(-1)),
            ("concurrentStatus", json!(100)),
            ("invalidKeyStatus", json!(204)),
            ("mismatchStatus", json!(302)),
            ("expiryMs", json!(0)),
            ("lockMs", json!(0)),
            ("errors", json!("kept")),
            ("scope", json!(["caller", "tenant"])),
            ("expiryMs", json!(1.5)),
            ("lockMs", json!("soon")),
            ("replayHeader", json!("bad header")),
            ("durable", json!(null)),
        ];
        for (field, v) in cases {
            let mut p = IdemProfile::draft_default().to_json();
            p[field] = v;
            match parse_health(&health(p)).unwrap_err() {
                IdemProfileError::IllTyped { field: f, .. } => {
                    assert_eq!(f, format!("profile.{field}"))
                }
                e => panic!("{field}: {e}"),
            }
        }
    }

    #[test]
    fn inconsistent_statuses_and_other_protocols_are_refused() {
        let mut p = IdemProfile::draft_default().to_json();
        p["fingerprint"] = json!("none");
        assert!(matches!(
            parse_health(&health(p)),
            Err(IdemProfileError::Inconsistent { .. })
        ));
        let mut p = IdemProfile::draft_default().to_json();
        p["concurrent"] = json!("wait");
        assert!(matches!(
            parse_health(&health(p)),
            Err(IdemProfileError::Inconsistent { .. })
        ));
        let mut h = health(IdemProfile::draft_default().to_json());
        h["protocol"] = json!("reqkey-agent/1");
        assert!(matches!(
            parse_health(&h),
            Err(IdemProfileError::Protocol { .. })
        ));
        assert_eq!(parse_health(&json!([])), Err(IdemProfileError::NotObject));
        let mut h = health(IdemProfile::draft_default().to_json());
        h["implementation"] = json!({"name": "x", "version": 1, "storage": "m"});
        assert!(matches!(
            parse_health(&h),
            Err(IdemProfileError::IllTyped { .. })
        ));
    }

    #[test]
    fn scope_is_sorted_and_deduplicated() {
        let mut p = IdemProfile::draft_default().to_json();
        p["scope"] = json!(["path", "caller", "path"]);
        let h = parse_health(&health(p)).unwrap();
        assert_eq!(h.profile.scope, vec![ScopeBy::Caller, ScopeBy::Path]);
        assert!(!h.profile.scoped_by(ScopeBy::Method));
    }

    #[test]
    fn keys_follow_the_declared_syntax() {
        use KeySyntax::*;
        assert_eq!(key_of(b"\"k1\"", SfString), Some(b"k1".to_vec()));
        assert_eq!(key_of(b"k1", SfString), None);
        assert_eq!(key_of(b"\"\"", SfString), None);
        assert_eq!(key_of(b"", Any), None);
        assert_eq!(key_of(b"\"a\\\"b\"", SfString), Some(b"a\"b".to_vec()));
        assert_eq!(key_of(b"\"a\\nb\"", SfString), None);
        assert_eq!(key_of(b"\"a\"b\"", SfString), None);
        assert_eq!(key_of("\"é\"".as_bytes(), SfString), None);
        assert_eq!(key_of(b"\"k1\"", Any), Some(b"\"k1\"".to_vec()));
        assert_eq!(key_of(b" k1", Any), Some(b" k1".to_vec()));
        assert_eq!(key_of(b"k1.x-Y_~", Token), Some(b"k1.x-Y_~".to_vec()));
        for bad in [&b"\"k1\""[..], b"k 1", b"k,1", b"k:1", b"", "é".as_bytes()] {
            assert_eq!(key_of(bad, Token), None, "{bad:?}");
        }
    }

    #[test]
    fn a_token_profile_refuses_what_is_not_a_token_so_it_declares_a_status() {
        let mut p = IdemProfile::draft_default().to_json();
        p["keySyntax"] = json!("token");
        let h = parse_health(&health(p.clone())).unwrap();
        assert!(h.profile.key_syntax.bare_keys());
        p["invalidKeyStatus"] = Value::Null;
        assert!(matches!(
            parse_health(&health(p)),
            Err(IdemProfileError::Inconsistent {
                field: "invalidKeyStatus",
                ..
            })
        ));
    }
}
