//! The agent server's request bodies (SPEC 7), read as text (issue 39).
//!
//! Why text: a `serde_json::Value` costs 30 to 80 bytes a node, so a 1 MiB
//! body of small values became tens of MB, and 16 at once took `serve
//! agent` to 546 MB. A body is checked exactly as a `Value` parse checks
//! it and answers the same (400 `validation_error`: not JSON, not an
//! object, a field missing; 413 over the limit), and an entry's input is
//! kept as its written and canonical text ([`JsonText`]), which is all the
//! digest, the commit and the echo need. A body [`reqkey_model::json_text`]
//! leaves to a `Value` ([`TextError::NeedsValue`]) is parsed as before.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use reqkey_model::json_text::{self, JsonText, TextError};
use serde_json::Value;

/// Bodies from this size on are read on the blocking pool.
pub const BLOCKING_PARSE_BYTES: usize = 64 * 1024;

/// Why a body is refused; the server answers each (400
/// `validation_error` with the message, or 413).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Over the limit: 413.
    TooLarge,
    /// Not read (e.g. not received within the body read timeout).
    Unreadable,
    /// Not what the route takes; the message says what.
    Invalid(&'static str),
}

/// The body's bytes, judged against `limit` (413 over it; 400 when it
/// could not be read, e.g. not received within the body read timeout).
pub(super) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, BodyError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            BodyError::TooLarge
        } else {
            BodyError::Unreadable
        }
    })?;
    if bytes.len() > limit {
        return Err(BodyError::TooLarge);
    }
    Ok(bytes)
}

/// Runs `read` over the body; a large body off the async workers (issue
/// 29): a few of them must not keep every worker busy while a fresh
/// client waits.
pub(super) async fn read_body<T: Send + 'static>(
    bytes: Bytes,
    read: fn(&[u8]) -> Result<T, BodyError>,
) -> Result<T, BodyError> {
    if bytes.len() >= BLOCKING_PARSE_BYTES {
        tokio::task::spawn_blocking(move || read(&bytes))
            .await
            .map_err(|_| BodyError::Unreadable)?
    } else {
        read(&bytes)
    }
}

fn not_json() -> BodyError {
    BodyError::Invalid("the request body is not JSON")
}

fn not_an_object() -> BodyError {
    BodyError::Invalid("the request body must be a JSON object")
}

/// The body as a `Value` (a JSON object, else 400). Only for a body whose
/// text [`json_text`] leaves to a `Value` ([`TextError::NeedsValue`]): every
/// other body is read as text, because a `Value` of a 1 MiB body of small
/// values costs tens of MB (issue 39). Both answer every body the same.
fn object_value(bytes: &[u8]) -> Result<Value, BodyError> {
    let value = serde_json::from_slice::<Value>(bytes).map_err(|_| not_json())?;
    if !value.is_object() {
        return Err(not_an_object());
    }
    Ok(value)
}

/// What a body read as text answers: `Ok(answer)`, or the text walk's
/// error mapped (not JSON; or `None`: read it as a `Value`).
fn text_answer<T>(walked: Result<Result<T, BodyError>, TextError>) -> Option<Result<T, BodyError>> {
    match walked {
        Ok(answer) => Some(answer),
        Err(TextError::Invalid) => Some(Err(not_json())),
        Err(TextError::NeedsValue) => None,
    }
}

/// The `input` of a start or resume body, as text (SPEC 7: a JSON object
/// with an `input` field).
pub(super) fn entry_input(bytes: &[u8]) -> Result<JsonText, BodyError> {
    let text = json_text::validate(bytes).map_err(|_| not_json())?;
    let walked = json_text::object_member(text, "input").and_then(|member| match member {
        None => Ok(Err(not_an_object())),
        Some(None) => Ok(Err(BodyError::Invalid("the body lacks the field `input`"))),
        Some(Some(at)) => JsonText::from_validated(&text[at]).map(Ok),
    });
    text_answer(walked).unwrap_or_else(|| {
        field_input(object_value(bytes)?).map(|input| JsonText::from_value(&input))
    })
}

/// A retry body: empty, or a JSON object (whose fields are ignored).
pub(super) fn retry_body(bytes: &[u8]) -> Result<(), BodyError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let text = json_text::validate(bytes).map_err(|_| not_json())?;
    let walked = json_text::object_member(text, "input").map(|member| match member {
        None => Err(not_an_object()),
        Some(_) => Ok(()),
    });
    text_answer(walked).unwrap_or_else(|| object_value(bytes).map(drop))
}

/// The last message of a chat body, `(role, content)`, read as text.
pub(super) fn chat_message(bytes: &[u8]) -> Result<(String, String), BodyError> {
    let text = json_text::validate(bytes).map_err(|_| not_json())?;
    text_answer(last_message_text(text)).unwrap_or_else(|| last_message(&object_value(bytes)?))
}

/// [`last_message`] over a validated body's text.
fn last_message_text(text: &str) -> Result<Result<(String, String), BodyError>, TextError> {
    let Some(messages) = json_text::object_member(text, "messages")? else {
        return Ok(Err(not_an_object()));
    };
    let Some(at) = messages else {
        return Ok(Err(BodyError::Invalid(
            "the body lacks the field `messages`",
        )));
    };
    let messages = &text[at];
    let Some(last) = json_text::last_element(messages)? else {
        return Ok(Err(BodyError::Invalid("`messages` must be an array")));
    };
    let Some(at) = last else {
        return Ok(Err(BodyError::Invalid("`messages` must not be empty")));
    };
    let last = &messages[at];
    let string_field = |name: &str| -> Result<Option<String>, TextError> {
        match json_text::object_member(last, name)? {
            Some(Some(at)) => json_text::as_string(&last[at]),
            _ => Ok(None),
        }
    };
    let Some(role) = string_field("role")? else {
        return Ok(Err(BodyError::Invalid(
            "the last message lacks a string `role`",
        )));
    };
    let Some(content) = string_field("content")? else {
        return Ok(Err(BodyError::Invalid(
            "the last message lacks a string `content`",
        )));
    };
    Ok(Ok((role, content)))
}

/// Moves the `input` out of the body (not a copy: a large input is held
/// once per request, issue 29).
fn field_input(mut body: Value) -> Result<Value, BodyError> {
    body.get_mut("input")
        .map(Value::take)
        .ok_or(BodyError::Invalid("the body lacks the field `input`"))
}

/// The last message of a chat body: `(role, content)`.
fn last_message(body: &Value) -> Result<(String, String), BodyError> {
    let messages = body
        .get("messages")
        .ok_or(BodyError::Invalid("the body lacks the field `messages`"))?
        .as_array()
        .ok_or(BodyError::Invalid("`messages` must be an array"))?;
    let last = messages
        .last()
        .ok_or(BodyError::Invalid("`messages` must not be empty"))?;
    let role = last
        .get("role")
        .and_then(Value::as_str)
        .ok_or(BodyError::Invalid("the last message lacks a string `role`"))?;
    let content = last
        .get("content")
        .and_then(Value::as_str)
        .ok_or(BodyError::Invalid(
            "the last message lacks a string `content`",
        ))?;
    Ok((role.to_owned(), content.to_owned()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Bodies of every kind of refusal and acceptance, hostile ones too.
    fn bodies() -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = [
            r#"{"input":{"text":"a","n":[1,2.50,1E400,-0]}}"#,
            r#"{"input":1,"input":[0,0]}"#,
            r#"{"other":1}"#,
            r#"[{"input":1}]"#,
            r#""input""#,
            "",
            "   ",
            "{",
            r#"{"input":1}x"#,
            r#"{"input":"\ud800"}"#,
            r#"{"input":"\udc00\ud800"}"#,
            r#"{"input":"\u00e9\ud83d\ude00"}"#,
            r#"{"input":{"$serde_json::private::Number":"1"}}"#,
            r#"{"input":1,"x":{"$serde_json::private::Number":5}}"#,
            r#"{"$serde_json::private::Number":"1"}"#,
            r#"{"input":01}"#,
            r#"{"input":1.}"#,
            r#"{"input":"a	b"}"#,
            r#"{"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"messages":[{"role":"user","content":"a"},{"role":"tool","content":"b","role":"x"}]}"#,
            r#"{"messages":[]}"#,
            r#"{"messages":{}}"#,
            r#"{"messages":[1]}"#,
            r#"{"messages":[{"role":1,"content":"c"}]}"#,
            r#"{"messages":[{"role":"u"}]}"#,
        ]
        .iter()
        .map(|b| b.as_bytes().to_vec())
        .collect();
        out.push(b"\xef\xbb\xbf{\"input\":1}".to_vec());
        out.push(b"{\"input\":\"\xff\"}".to_vec());
        out.push(format!("{{\"input\":{}1{}}}", "[".repeat(127), "]".repeat(127)).into_bytes());
        out.push(format!("{{\"input\":{}1{}}}", "[".repeat(128), "]".repeat(128)).into_bytes());
        out
    }

    /// The answers of the `Value` path these functions replaced.
    fn entry_input_by_value(bytes: &[u8]) -> Result<JsonText, BodyError> {
        field_input(object_value(bytes)?).map(|input| JsonText::from_value(&input))
    }

    fn retry_by_value(bytes: &[u8]) -> Result<(), BodyError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        object_value(bytes).map(drop)
    }

    #[test]
    fn every_body_is_answered_as_the_value_path_answered_it() {
        for body in bodies() {
            let shown = String::from_utf8_lossy(&body)
                .chars()
                .take(80)
                .collect::<String>();
            assert_eq!(entry_input(&body), entry_input_by_value(&body), "{shown}");
            assert_eq!(retry_body(&body), retry_by_value(&body), "{shown}");
            assert_eq!(
                chat_message(&body),
                object_value(&body).and_then(|v| last_message(&v)),
                "{shown}"
            );
        }
    }
}
