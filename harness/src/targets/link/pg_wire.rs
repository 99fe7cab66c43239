//! The PostgreSQL frontend/backend protocol (version 3) as far as the link
//! nemesis reads it: messages framed, never interpreted beyond what a
//! fault needs (docs/link-faults.md).
//!
//! What is read, and nothing else:
//!
//! - the frontend's untyped startup messages (`SSLRequest` and
//!   `GSSENCRequest`, whose one-byte answer is framed apart; TLS or GSS
//!   accepted makes the connection opaque), then typed messages
//!   (`tag, int32 length, body`);
//! - a `Query` (`Q`) or `Parse` (`P`) message's SQL text, for a commit
//!   statement: `COMMIT`, `END`, `COMMIT WORK|TRANSACTION`, `COMMIT AND
//!   NO CHAIN`, `COMMIT PREPARED '...'` (case-insensitive, comments and
//!   blanks skipped, one statement of a `;`-separated Query; quotes are
//!   respected, dollar quotes are not);
//! - which frontend messages the backend answers with a `ReadyForQuery`
//!   (`Q`, `S` Sync, `F` FunctionCall): one group of answers each;
//! - the backend's `ReadyForQuery` (`Z`) and its transaction status
//!   (`I` idle, `T` in a transaction, `E` in a failed one).
//!
//! Every message is held whole only up to [`MAX_MESSAGE_BYTES`]; a longer
//! one makes the connection opaque (bytes pass, no fault can strike it).

/// The longest message the nemesis frames; longer ones make the
/// connection opaque.
pub const MAX_MESSAGE_BYTES: usize = 8 << 20;

const SSL_REQUEST: u32 = 80_877_103;
/// A StartupMessage's protocol version 3.0.
const PROTOCOL_3: u32 = 196_608;
const GSSENC_REQUEST: u32 = 80_877_104;

/// One frontend message, framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend {
    pub bytes: Vec<u8>,
    /// Its tag (`None` for a startup-phase message).
    pub tag: Option<u8>,
    /// Does the backend answer it with a `ReadyForQuery`?
    pub opens_group: bool,
    /// Is it a commit (a `Query` or `Parse` holding a commit statement)?
    pub commit: bool,
    /// Is it a `Query` holding exactly one statement, a plain commit, so
    /// that a `ROLLBACK` can be sent in its place?
    pub lone_commit_query: bool,
}

/// One backend message, framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub bytes: Vec<u8>,
    /// `ReadyForQuery`: the end of a group, with the transaction status.
    pub ready: Option<u8>,
}

/// Why a connection stops being framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opaque {
    TooLong(usize),
    Malformed(&'static str),
    /// TLS or GSS encryption was accepted: the bytes are no longer readable.
    Encrypted,
}

impl std::fmt::Display for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opaque::TooLong(n) => write!(
                f,
                "a message of {n} bytes (over {MAX_MESSAGE_BYTES}) is passed unread"
            ),
            Opaque::Malformed(why) => write!(f, "not PostgreSQL protocol 3: {why}"),
            Opaque::Encrypted => f.write_str("the connection is encrypted (TLS or GSS)"),
        }
    }
}

/// The framing state of one connection, both ways.
#[derive(Debug, Default)]
pub struct PgWire {
    from_client: Vec<u8>,
    from_server: Vec<u8>,
    /// Still in the startup phase (untyped frontend messages).
    typed: bool,
    /// The frontend asked for TLS or GSS: the backend's next byte answers.
    awaiting_one_byte: bool,
}

fn be32(bytes: &[u8]) -> usize {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(b) as usize
}

impl PgWire {
    pub fn new() -> PgWire {
        PgWire::default()
    }

    /// Takes bytes from the frontend; the messages now complete, and why
    /// framing stops (the unframed rest stays for [`PgWire::take_unframed`]).
    pub fn client_bytes(&mut self, data: &[u8]) -> (Vec<Frontend>, Option<Opaque>) {
        self.from_client.extend_from_slice(data);
        let mut out = Vec::new();
        let error = self.frame_client(&mut out).err();
        (out, error)
    }

    fn frame_client(&mut self, out: &mut Vec<Frontend>) -> Result<(), Opaque> {
        loop {
            let buf = &self.from_client;
            let header = if self.typed { 5 } else { 4 };
            if buf.len() < header {
                break;
            }
            let tag = self.typed.then(|| buf[0]);
            let declared = be32(&buf[header - 4..header]);
            if declared < 4 {
                return Err(Opaque::Malformed("a message length under 4"));
            }
            let total = declared + header - 4;
            if total > MAX_MESSAGE_BYTES {
                return Err(Opaque::TooLong(total));
            }
            if buf.len() < total {
                break;
            }
            let bytes: Vec<u8> = self.from_client.drain(..total).collect();
            let message = match tag {
                Some(tag) => frontend(tag, bytes),
                None => {
                    let code = if bytes.len() >= 8 {
                        be32(&bytes[4..8]) as u32
                    } else {
                        0
                    };
                    let one_byte = code == SSL_REQUEST || code == GSSENC_REQUEST;
                    if one_byte {
                        self.awaiting_one_byte = true;
                    } else {
                        // A StartupMessage or a CancelRequest: what
                        // follows (if anything) is typed.
                        self.typed = true;
                    }
                    Frontend {
                        bytes,
                        tag: None,
                        // The backend ends a startup with a ReadyForQuery.
                        opens_group: code == PROTOCOL_3,
                        commit: false,
                        lone_commit_query: false,
                    }
                }
            };
            out.push(message);
        }
        Ok(())
    }

    /// Takes bytes from the backend; the messages now complete, and why
    /// framing stops.
    pub fn server_bytes(&mut self, data: &[u8]) -> (Vec<Backend>, Option<Opaque>) {
        self.from_server.extend_from_slice(data);
        let mut out = Vec::new();
        let error = self.frame_server(&mut out).err();
        (out, error)
    }

    fn frame_server(&mut self, out: &mut Vec<Backend>) -> Result<(), Opaque> {
        loop {
            if self.awaiting_one_byte {
                let Some(&answer) = self.from_server.first() else {
                    break;
                };
                self.from_server.drain(..1);
                self.awaiting_one_byte = false;
                out.push(Backend {
                    bytes: vec![answer],
                    ready: None,
                });
                if answer != b'N' {
                    return Err(Opaque::Encrypted);
                }
                continue;
            }
            let buf = &self.from_server;
            if buf.len() < 5 {
                break;
            }
            let declared = be32(&buf[1..5]);
            if declared < 4 {
                return Err(Opaque::Malformed("a message length under 4"));
            }
            let total = declared + 1;
            if total > MAX_MESSAGE_BYTES {
                return Err(Opaque::TooLong(total));
            }
            if buf.len() < total {
                break;
            }
            let bytes: Vec<u8> = self.from_server.drain(..total).collect();
            let ready = (bytes[0] == b'Z' && bytes.len() == 6).then(|| bytes[5]);
            out.push(Backend { bytes, ready });
        }
        Ok(())
    }

    /// Bytes received and not yet framed (passed on as they are when the
    /// connection turns opaque).
    pub fn take_unframed(&mut self) -> (Vec<u8>, Vec<u8>) {
        (
            std::mem::take(&mut self.from_client),
            std::mem::take(&mut self.from_server),
        )
    }
}

fn frontend(tag: u8, bytes: Vec<u8>) -> Frontend {
    let body = &bytes[5..];
    let (commit, lone) = match tag {
        b'Q' => {
            let sql = cstr(body);
            let statements = statements(sql);
            let commit = statements.iter().any(|s| is_commit(s));
            (commit, commit && statements.len() == 1)
        }
        b'P' => {
            // Parse: statement name, then the query text.
            let name_end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
            let sql = cstr(body.get(name_end + 1..).unwrap_or_default());
            (statements(sql).iter().any(|s| is_commit(s)), false)
        }
        _ => (false, false),
    };
    Frontend {
        opens_group: matches!(tag, b'Q' | b'S' | b'F'),
        tag: Some(tag),
        commit,
        lone_commit_query: lone,
        bytes,
    }
}

/// The text up to the first NUL.
fn cstr(body: &[u8]) -> &[u8] {
    let end = body.iter().position(|b| *b == 0).unwrap_or(body.len());
    &body[..end]
}

/// The statements of a SQL text, each normalized: comments dropped, words
/// lower-cased and joined by one blank, quoted text kept as `'...'`.
/// Empty statements are left out.
fn statements(sql: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut i = 0;
    let mut pending_blank = false;
    let push_char = |current: &mut String, c: char, pending_blank: &mut bool| {
        if *pending_blank && !current.is_empty() {
            current.push(' ');
        }
        *pending_blank = false;
        current.push(c);
    };
    while i < sql.len() {
        let c = sql[i];
        match c {
            b'-' if sql.get(i + 1) == Some(&b'-') => {
                while i < sql.len() && sql[i] != b'\n' {
                    i += 1;
                }
                pending_blank = true;
            }
            b'/' if sql.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < sql.len() && !(sql[i] == b'*' && sql.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
                pending_blank = true;
                continue;
            }
            b'\'' | b'"' => {
                let quote = c;
                push_char(&mut current, char::from(quote), &mut pending_blank);
                i += 1;
                while i < sql.len() {
                    if sql[i] == quote {
                        if sql.get(i + 1) == Some(&quote) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                current.push(char::from(quote));
            }
            b';' => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
                pending_blank = false;
            }
            c if c.is_ascii_whitespace() => pending_blank = true,
            c => push_char(
                &mut current,
                char::from(c.to_ascii_lowercase()),
                &mut pending_blank,
            ),
        }
        i += 1;
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Is a normalized statement a commit?
fn is_commit(statement: &str) -> bool {
    matches!(
        statement,
        "commit"
            | "end"
            | "commit work"
            | "commit transaction"
            | "end work"
            | "end transaction"
            | "commit and no chain"
            | "commit work and no chain"
            | "commit transaction and no chain"
    ) || statement.starts_with("commit prepared '")
}

/// A `Query` message sending `sql`.
pub fn query(sql: &str) -> Vec<u8> {
    let mut out = vec![b'Q'];
    let len = u32::try_from(4 + sql.len() + 1).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(sql.as_bytes());
    out.push(0);
    out
}

/// The backend's answer to a commit the database refused with `code`: an
/// `ErrorResponse` and a `ReadyForQuery` that says no transaction is open.
pub fn refusal(code: &str, message: &str) -> Vec<u8> {
    let mut fields = Vec::new();
    for (field, value) in [
        (b'S', "ERROR"),
        (b'V', "ERROR"),
        (b'C', code),
        (b'M', message),
    ] {
        fields.push(field);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut out = vec![b'E'];
    let len = u32::try_from(4 + fields.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&fields);
    out.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn startup() -> Vec<u8> {
        let body = b"\x00\x03\x00\x00user\x00postgres\x00\x00";
        let mut m = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        m.extend_from_slice(body);
        m
    }

    fn parse(name: &str, sql: &str) -> Vec<u8> {
        let mut body = name.as_bytes().to_vec();
        body.push(0);
        body.extend_from_slice(sql.as_bytes());
        body.extend_from_slice(&[0, 0, 0]);
        let mut m = vec![b'P'];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(&body);
        m
    }

    #[test]
    fn commits_are_recognised_in_queries_and_parses_and_nothing_else_is() {
        let commit = |sql: &str| {
            let mut wire = PgWire::new();
            wire.client_bytes(&startup());
            wire.client_bytes(&query(sql)).0.remove(0)
        };
        for sql in [
            "COMMIT",
            "commit;",
            "  End ",
            "COMMIT TRANSACTION",
            "/* done */ COMMIT -- now\n",
            "commit\twork",
            "COMMIT AND NO CHAIN",
            "COMMIT PREPARED 'tx1'",
        ] {
            let m = commit(sql);
            assert!(m.commit && m.lone_commit_query, "{sql:?}");
        }
        let m = commit("INSERT INTO t VALUES (1); COMMIT");
        assert!(m.commit && !m.lone_commit_query);
        for sql in [
            "SELECT 'COMMIT'",
            "INSERT INTO t VALUES ('x;commit')",
            "-- COMMIT\nSELECT 1",
            "ROLLBACK",
            "BEGIN",
            "COMMITTED",
            "SELECT \"commit\" FROM t",
        ] {
            assert!(!commit(sql).commit, "{sql:?}");
        }
        let mut wire = PgWire::new();
        wire.client_bytes(&startup());
        let p = wire.client_bytes(&parse("s1", "COMMIT")).0.remove(0);
        assert!(p.commit && !p.lone_commit_query && !p.opens_group);
        let q = wire.client_bytes(&parse("s2", "SELECT 1")).0.remove(0);
        assert!(!q.commit);
    }

    #[test]
    fn messages_are_framed_across_reads_and_groups_are_counted() {
        let mut wire = PgWire::new();
        let mut bytes = startup();
        bytes.extend(query("BEGIN"));
        bytes.extend([b'S', 0, 0, 0, 4]);
        let (a, b) = bytes.split_at(7);
        assert!(wire.client_bytes(a).0.is_empty());
        let got = wire.client_bytes(b).0;
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].tag, None);
        assert!(
            got[0].opens_group,
            "a startup is answered by a ReadyForQuery"
        );
        assert!(got[1].opens_group && got[2].opens_group);
        let backend = [
            b'C', 0, 0, 0, 10, b'B', b'E', b'G', b'I', b'N', 0, b'Z', 0, 0, 0, 5, b'T',
        ];
        let got = wire.server_bytes(&backend[..12]).0;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].ready, None);
        let got = wire.server_bytes(&backend[12..]).0;
        assert_eq!(got[0].ready, Some(b'T'));
    }

    #[test]
    fn an_ssl_request_is_answered_by_one_byte_and_tls_makes_it_opaque() {
        let mut wire = PgWire::new();
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(wire.client_bytes(&ssl).0.len(), 1);
        let got = wire.server_bytes(b"N").0;
        assert_eq!(got[0].bytes, b"N");
        assert!(wire.client_bytes(&startup()).0[0].tag.is_none());
        let mut tls = PgWire::new();
        tls.client_bytes(&ssl);
        let (got, opaque) = tls.server_bytes(b"S\x16\x03");
        assert_eq!(got[0].bytes, b"S", "the answer goes to the frontend");
        assert_eq!(opaque, Some(Opaque::Encrypted));
        assert_eq!(tls.take_unframed().1, b"\x16\x03");
    }

    #[test]
    fn bad_and_overlong_lengths_make_the_connection_opaque() {
        let mut wire = PgWire::new();
        wire.client_bytes(&startup());
        let mut bytes = query("SELECT 1");
        bytes.extend([b'Q', 0, 0, 0, 2]);
        let (got, opaque) = wire.client_bytes(&bytes);
        assert_eq!(got.len(), 1, "the whole message before the bad one is kept");
        assert_eq!(opaque, Some(Opaque::Malformed("a message length under 4")));
        assert_eq!(wire.take_unframed().0, [b'Q', 0, 0, 0, 2]);
        let mut wire = PgWire::new();
        wire.client_bytes(&startup());
        let huge = u32::try_from(MAX_MESSAGE_BYTES + 10).unwrap().to_be_bytes();
        let mut m = vec![b'Q'];
        m.extend_from_slice(&huge);
        assert!(matches!(wire.client_bytes(&m).1, Some(Opaque::TooLong(_))));
    }

    #[test]
    fn a_refusal_is_an_error_response_then_ready_for_query_idle() {
        let bytes = refusal("40P01", "deadlock");
        let mut wire = PgWire::new();
        let got = wire.server_bytes(&bytes).0;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].bytes[0], b'E');
        assert!(got[0].bytes.windows(6).any(|w| w == b"C40P01"));
        assert_eq!(got[1].ready, Some(b'I'));
    }
}
