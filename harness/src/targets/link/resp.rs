//! The Redis protocol (RESP2 and RESP3) as far as the link nemesis reads
//! it (docs/link-faults.md):
//!
//! - requests framed (arrays of bulk strings, or inline lines) and their
//!   command name read: a commit is `EVAL`, `EVALSHA`, `FCALL` or `EXEC`
//!   (a script, a function or a transaction: what a store writes with),
//!   `MULTI` opens a transaction and `EXEC`/`DISCARD` close it;
//! - replies framed (every RESP3 type), each answering the oldest request
//!   not yet answered; out-of-band pushes (`>`) answer none;
//! - the node addresses a Redis Cluster announces, rewritten to the
//!   harness's proxies so that a cluster client reaches every node through
//!   one: the `-MOVED` and `-ASK` redirections (`SLOT HOST:PORT`) and the
//!   reply to `CLUSTER SLOTS` (each node's IP and port). `CLUSTER SHARDS`
//!   and `CLUSTER NODES` are passed as they are: a client that learns its
//!   nodes from them reaches them directly, and no fault strikes those
//!   links (the fault then never strikes: not judged, never a pass).
//!
//! A frame is held whole only up to [`MAX_FRAME_BYTES`], nested at most
//! [`MAX_DEPTH`] deep; past either, the connection turns opaque.

/// The longest frame the nemesis holds whole.
pub const MAX_FRAME_BYTES: usize = 8 << 20;
/// The deepest nesting of a frame.
pub const MAX_DEPTH: usize = 64;
/// The longest header or simple line.
const MAX_LINE_BYTES: usize = 64 * 1024;

/// Why a connection stops being framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opaque {
    TooLong(usize),
    TooDeep,
    Malformed(&'static str),
}

impl std::fmt::Display for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Opaque::TooLong(n) => write!(
                f,
                "a frame of {n} bytes or more (over {MAX_FRAME_BYTES}) is passed unread"
            ),
            Opaque::TooDeep => write!(f, "a frame nested deeper than {MAX_DEPTH}"),
            Opaque::Malformed(why) => write!(f, "not RESP: {why}"),
        }
    }
}

/// What a request is to the nemesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `EVAL`, `EVALSHA`, `FCALL`, `EXEC`: a write commits.
    Commit,
    /// `MULTI`: a transaction opens.
    Multi,
    /// `DISCARD`: a transaction closes without a commit.
    Discard,
    /// `CLUSTER SLOTS`: its reply names nodes.
    ClusterSlots,
    Other,
}

/// One framed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub bytes: Vec<u8>,
    pub kind: RequestKind,
}

/// How far a scan of a buffer got.
enum Scan {
    /// The first frame ends at this offset.
    Complete(usize),
    /// Not complete: do not scan again before the buffer holds this many bytes.
    Need(usize),
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|p| from + p)
}

fn number(line: &[u8]) -> Result<i64, Opaque> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(Opaque::Malformed("a length that is not a number"))
}

/// Where the first whole RESP frame of `buf` ends.
fn scan(buf: &[u8]) -> Result<Scan, Opaque> {
    // How many elements each open aggregate still waits for.
    let mut open: Vec<u64> = Vec::new();
    let mut pos = 0usize;
    loop {
        if pos > MAX_FRAME_BYTES {
            return Err(Opaque::TooLong(pos));
        }
        let Some(&tag) = buf.get(pos) else {
            return Ok(Scan::Need(pos + 1));
        };
        let Some(eol) = line_end(buf, pos + 1) else {
            if buf.len() - pos > MAX_LINE_BYTES {
                return Err(Opaque::Malformed("a line longer than 64 KiB"));
            }
            return Ok(Scan::Need(buf.len() + 1));
        };
        let line = &buf[pos + 1..eol];
        pos = eol + 2;
        let children: u64 = match tag {
            b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => 0,
            b'$' | b'!' | b'=' => {
                let len = number(line)?;
                if len >= 0 {
                    let len = usize::try_from(len).map_err(|_| Opaque::TooLong(usize::MAX))?;
                    if len > MAX_FRAME_BYTES {
                        return Err(Opaque::TooLong(len));
                    }
                    let end = pos + len + 2;
                    if buf.len() < end {
                        return Ok(Scan::Need(end));
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(Opaque::Malformed("a bulk string not ended by CRLF"));
                    }
                    pos = end;
                }
                0
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = number(line)?;
                let n = u64::try_from(n).unwrap_or(0);
                match tag {
                    b'%' => n.saturating_mul(2),
                    // An attribute map annotates the value that follows it.
                    b'|' => n.saturating_mul(2).saturating_add(1),
                    _ => n,
                }
            }
            _ => return Err(Opaque::Malformed("an unknown type byte")),
        };
        if children > 0 {
            if open.len() >= MAX_DEPTH {
                return Err(Opaque::TooDeep);
            }
            open.push(children);
            continue;
        }
        // One value complete: count it against the aggregates it closes.
        loop {
            match open.last_mut() {
                None => return Ok(Scan::Complete(pos)),
                Some(left) => {
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    open.pop();
                }
            }
        }
    }
}

/// Frames one direction of a connection.
#[derive(Debug, Default)]
struct Framer {
    buf: Vec<u8>,
    need: usize,
}

impl Framer {
    /// The frames now complete, and why framing stops; `inline` accepts
    /// an inline command (a line that is not a RESP array), as a server
    /// does from clients.
    fn frames(&mut self, data: &[u8], inline: bool) -> (Vec<Vec<u8>>, Option<Opaque>) {
        self.buf.extend_from_slice(data);
        let mut out = Vec::new();
        let error = self.frame(&mut out, inline).err();
        (out, error)
    }

    fn frame(&mut self, out: &mut Vec<Vec<u8>>, inline: bool) -> Result<(), Opaque> {
        while !self.buf.is_empty() && self.buf.len() >= self.need {
            if inline && self.buf[0] != b'*' {
                let Some(nl) = self.buf.iter().position(|b| *b == b'\n') else {
                    if self.buf.len() > MAX_LINE_BYTES {
                        return Err(Opaque::Malformed("an inline command longer than 64 KiB"));
                    }
                    break;
                };
                out.push(self.buf.drain(..=nl).collect());
                continue;
            }
            match scan(&self.buf)? {
                Scan::Complete(end) => {
                    out.push(self.buf.drain(..end).collect());
                    self.need = 0;
                }
                Scan::Need(n) => {
                    self.need = n;
                    break;
                }
            }
        }
        Ok(())
    }
}

/// The framing state of one connection, both ways.
#[derive(Debug, Default)]
pub struct RespWire {
    from_client: Framer,
    from_server: Framer,
}

/// The first `count` bulk strings of a request array (or words of an
/// inline command), upper-cased, each cut to 32 bytes.
fn words(frame: &[u8], count: usize) -> Vec<String> {
    let mut out = Vec::new();
    if frame.first() != Some(&b'*') {
        let line = String::from_utf8_lossy(frame);
        return line
            .split_whitespace()
            .take(count)
            .map(|w| w.chars().take(32).collect::<String>().to_ascii_uppercase())
            .collect();
    }
    let Some(mut pos) = line_end(frame, 0).map(|e| e + 2) else {
        return out;
    };
    while out.len() < count && frame.get(pos) == Some(&b'$') {
        let Some(eol) = line_end(frame, pos + 1) else {
            break;
        };
        let Ok(len) = number(&frame[pos + 1..eol]) else {
            break;
        };
        let Ok(len) = usize::try_from(len) else {
            break;
        };
        let start = eol + 2;
        let Some(word) = frame.get(start..start + len) else {
            break;
        };
        out.push(String::from_utf8_lossy(&word[..len.min(32)]).to_ascii_uppercase());
        pos = start + len + 2;
    }
    out
}

fn kind_of(frame: &[u8]) -> RequestKind {
    let w = words(frame, 2);
    match w.first().map(String::as_str) {
        Some("EVAL" | "EVALSHA" | "FCALL" | "EXEC") => RequestKind::Commit,
        Some("MULTI") => RequestKind::Multi,
        Some("DISCARD") => RequestKind::Discard,
        Some("CLUSTER") if w.get(1).map(String::as_str) == Some("SLOTS") => {
            RequestKind::ClusterSlots
        }
        _ => RequestKind::Other,
    }
}

impl RespWire {
    pub fn new() -> RespWire {
        RespWire::default()
    }

    /// Takes bytes from the client; the requests now complete, and why
    /// framing stops.
    pub fn client_bytes(&mut self, data: &[u8]) -> (Vec<Request>, Option<Opaque>) {
        let (frames, error) = self.from_client.frames(data, true);
        let requests = frames
            .into_iter()
            .map(|bytes| Request {
                kind: kind_of(&bytes),
                bytes,
            })
            .collect();
        (requests, error)
    }

    /// Takes bytes from the server; the frames now complete, and why
    /// framing stops.
    pub fn server_bytes(&mut self, data: &[u8]) -> (Vec<Vec<u8>>, Option<Opaque>) {
        self.from_server.frames(data, false)
    }

    /// Bytes received and not yet framed.
    pub fn take_unframed(&mut self) -> (Vec<u8>, Vec<u8>) {
        (
            std::mem::take(&mut self.from_client.buf),
            std::mem::take(&mut self.from_server.buf),
        )
    }
}

/// Is a server frame an out-of-band push (it answers no request)?
pub fn is_push(frame: &[u8]) -> bool {
    frame.first() == Some(&b'>')
}

/// `host:port` as a node address, the host as given (may be empty).
fn split_address(text: &str) -> Option<(&str, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// A `-MOVED SLOT HOST:PORT` or `-ASK SLOT HOST:PORT` error with its
/// address mapped by `map(host, port)` (an empty host is the answering
/// node's `own_host`); `None` when the frame is neither or the address is
/// not mapped.
pub fn rewrite_redirect(
    frame: &[u8],
    own_host: &str,
    map: &mut dyn FnMut(&str, u16) -> Option<u16>,
) -> Option<Vec<u8>> {
    let line = frame.strip_prefix(b"-")?.strip_suffix(b"\r\n")?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    let (word, slot, address) = (parts.next()?, parts.next()?, parts.next()?);
    if !matches!(word, "MOVED" | "ASK") || parts.next().is_some() {
        return None;
    }
    let (host, port) = split_address(address)?;
    let host = if host.is_empty() { own_host } else { host };
    let local = map(host, port)?;
    Some(format!("-{word} {slot} 127.0.0.1:{local}\r\n").into_bytes())
}

/// One decoded RESP value (only replies to `CLUSTER SLOTS` are decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Line(u8, Vec<u8>),
    Blob(u8, Option<Vec<u8>>),
    /// An aggregate: its type byte and its elements (a map's keys and
    /// values in turn); `None`: a null aggregate.
    Aggregate(u8, Option<Vec<Value>>),
}

fn decode(buf: &[u8], pos: &mut usize, depth: usize) -> Option<Value> {
    if depth > MAX_DEPTH {
        return None;
    }
    let tag = *buf.get(*pos)?;
    let eol = line_end(buf, *pos + 1)?;
    let line = buf[*pos + 1..eol].to_vec();
    *pos = eol + 2;
    match tag {
        b'$' | b'!' | b'=' => {
            let len = number(&line).ok()?;
            if len < 0 {
                return Some(Value::Blob(tag, None));
            }
            let len = usize::try_from(len).ok()?;
            let body = buf.get(*pos..*pos + len)?.to_vec();
            *pos += len + 2;
            Some(Value::Blob(tag, Some(body)))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number(&line).ok()?;
            if n < 0 {
                return Some(Value::Aggregate(tag, None));
            }
            let n = usize::try_from(n).ok()?;
            let n = if matches!(tag, b'%' | b'|') { n * 2 } else { n };
            let mut items = Vec::with_capacity(n.min(1024));
            for _ in 0..n {
                items.push(decode(buf, pos, depth + 1)?);
            }
            Some(Value::Aggregate(tag, Some(items)))
        }
        _ => Some(Value::Line(tag, line)),
    }
}

fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Line(tag, line) => {
            out.push(*tag);
            out.extend_from_slice(line);
            out.extend_from_slice(b"\r\n");
        }
        Value::Blob(tag, None) => {
            out.push(*tag);
            out.extend_from_slice(b"-1\r\n");
        }
        Value::Blob(tag, Some(body)) => {
            out.push(*tag);
            out.extend_from_slice(body.len().to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            out.extend_from_slice(body);
            out.extend_from_slice(b"\r\n");
        }
        Value::Aggregate(tag, None) => {
            out.push(*tag);
            out.extend_from_slice(b"-1\r\n");
        }
        Value::Aggregate(tag, Some(items)) => {
            let n = if matches!(tag, b'%' | b'|') {
                items.len() / 2
            } else {
                items.len()
            };
            out.push(*tag);
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            for item in items {
                encode(item, out);
            }
        }
    }
}

/// The reply to `CLUSTER SLOTS` with every node's IP and port mapped by
/// `map(host, port)` to a proxy on 127.0.0.1 (an empty or null IP is the
/// answering node's `own_host`; `?`, an unknown node, is left alone);
/// `None` when the frame is not such a reply. Also counts the nodes left
/// unmapped in `unmapped`.
pub fn rewrite_cluster_slots(
    frame: &[u8],
    own_host: &str,
    map: &mut dyn FnMut(&str, u16) -> Option<u16>,
    unmapped: &mut usize,
) -> Option<Vec<u8>> {
    let mut pos = 0;
    let mut value = decode(frame, &mut pos, 0)?;
    let Value::Aggregate(_, Some(ranges)) = &mut value else {
        return None;
    };
    for range in ranges.iter_mut() {
        let Value::Aggregate(_, Some(items)) = range else {
            continue;
        };
        for node in items.iter_mut().skip(2) {
            let Value::Aggregate(_, Some(fields)) = node else {
                continue;
            };
            if fields.len() < 2 {
                continue;
            }
            let host = match &fields[0] {
                Value::Blob(_, Some(ip)) => String::from_utf8_lossy(ip).into_owned(),
                Value::Blob(_, None) | Value::Line(b'_', _) => String::new(),
                _ => continue,
            };
            if host == "?" {
                continue;
            }
            let host = if host.is_empty() {
                own_host.to_owned()
            } else {
                host
            };
            let port = match &fields[1] {
                Value::Line(b':', p) => std::str::from_utf8(p)
                    .ok()
                    .and_then(|p| p.parse::<u16>().ok()),
                _ => None,
            };
            let Some(port) = port else {
                continue;
            };
            match map(&host, port) {
                Some(local) => {
                    fields[0] = Value::Blob(b'$', Some(b"127.0.0.1".to_vec()));
                    fields[1] = Value::Line(b':', local.to_string().into_bytes());
                }
                None => *unmapped += 1,
            }
        }
    }
    let mut out = Vec::with_capacity(frame.len());
    encode(&value, &mut out);
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cmd(args: &[&str]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend(format!("${}\r\n{a}\r\n", a.len()).into_bytes());
        }
        out
    }

    #[test]
    fn requests_are_framed_across_reads_and_commits_named() {
        let mut wire = RespWire::new();
        let mut bytes = cmd(&["evalsha", "abc", "1", "k"]);
        bytes.extend(cmd(&["MULTI"]));
        bytes.extend(b"PING\r\n");
        bytes.extend(cmd(&["cluster", "slots"]));
        bytes.extend(cmd(&["GET", "x"]));
        let mut got = Vec::new();
        for chunk in bytes.chunks(3) {
            got.extend(wire.client_bytes(chunk).0);
        }
        let kinds: Vec<RequestKind> = got.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [
                RequestKind::Commit,
                RequestKind::Multi,
                RequestKind::Other,
                RequestKind::ClusterSlots,
                RequestKind::Other
            ]
        );
        assert_eq!(
            got.iter()
                .flat_map(|r| r.bytes.clone())
                .collect::<Vec<u8>>(),
            bytes
        );
        for name in ["EVAL", "FCALL", "exec"] {
            assert_eq!(kind_of(&cmd(&[name, "x"])), RequestKind::Commit);
        }
        assert_eq!(kind_of(&cmd(&["EVALSHA_RO", "x"])), RequestKind::Other);
    }

    #[test]
    fn replies_of_every_type_are_framed_whole() {
        let mut wire = RespWire::new();
        let replies: Vec<&[u8]> = vec![
            b"+OK\r\n",
            b"-ERR x\r\n",
            b":42\r\n",
            b"$3\r\nabc\r\n",
            b"$-1\r\n",
            b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n",
            b"*0\r\n",
            b"*-1\r\n",
            b"%1\r\n+k\r\n$1\r\nv\r\n",
            b"_\r\n",
            b">2\r\n+message\r\n+x\r\n",
            b"|1\r\n+ttl\r\n:3\r\n+OK\r\n",
        ];
        let all: Vec<u8> = replies.concat();
        let mut got = Vec::new();
        for chunk in all.chunks(2) {
            got.extend(wire.server_bytes(chunk).0);
        }
        assert_eq!(got, replies.iter().map(|r| r.to_vec()).collect::<Vec<_>>());
        assert!(is_push(&got[10]) && !is_push(&got[5]));
    }

    #[test]
    fn bad_frames_make_the_connection_opaque() {
        let mut wire = RespWire::new();
        let (got, opaque) = wire.server_bytes(b"+OK\r\n?x\r\n");
        assert_eq!(got, vec![b"+OK\r\n".to_vec()]);
        assert_eq!(opaque, Some(Opaque::Malformed("an unknown type byte")));
        assert_eq!(wire.take_unframed().1, b"?x\r\n");
        let mut wire = RespWire::new();
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert_eq!(wire.server_bytes(deep.as_bytes()).1, Some(Opaque::TooDeep));
        let mut wire = RespWire::new();
        let huge = format!("${}\r\n", MAX_FRAME_BYTES + 1);
        assert!(matches!(
            wire.server_bytes(huge.as_bytes()).1,
            Some(Opaque::TooLong(_))
        ));
    }

    #[test]
    fn redirections_and_cluster_slots_name_the_proxies() {
        let mut map = |host: &str, port: u16| (host == "10.0.0.2").then_some(port + 1);
        assert_eq!(
            rewrite_redirect(b"-MOVED 3999 10.0.0.2:7001\r\n", "10.0.0.1", &mut map),
            Some(b"-MOVED 3999 127.0.0.1:7002\r\n".to_vec())
        );
        assert_eq!(
            rewrite_redirect(b"-ASK 1 :7001\r\n", "10.0.0.2", &mut map),
            Some(b"-ASK 1 127.0.0.1:7002\r\n".to_vec())
        );
        assert_eq!(rewrite_redirect(b"-ERR x\r\n", "h", &mut map), None);
        let slots = b"*2\r\n\
            *3\r\n:0\r\n:8191\r\n*3\r\n$8\r\n10.0.0.2\r\n:7001\r\n$2\r\nid\r\n\
            *4\r\n:8192\r\n:16383\r\n*2\r\n$0\r\n\r\n:7003\r\n*2\r\n$1\r\n?\r\n:7004\r\n";
        let mut unmapped = 0;
        let out = rewrite_cluster_slots(slots, "10.0.0.2", &mut map, &mut unmapped).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "*2\r\n\
            *3\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7002\r\n$2\r\nid\r\n\
            *4\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7004\r\n*2\r\n$1\r\n?\r\n:7004\r\n"
        );
        assert_eq!(unmapped, 0);
        let mut none = |_: &str, _: u16| None;
        rewrite_cluster_slots(slots, "10.0.0.9", &mut none, &mut unmapped).unwrap();
        assert_eq!(unmapped, 2);
    }
}
