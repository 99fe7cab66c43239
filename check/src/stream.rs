//! Histories read from a file one entry at a time, never the whole text, whatever the file's size.
//!
//! # Why
//!
//! [`crate::history`] reads a history from its text, which the caller
//! holds whole: a file of a million operations (330 MB) is then held
//! twice over, as text and as what is read from it, and `reqkey check
//! history` had to refuse files over 64 MiB. Here the file is read
//! through a [`BufRead`], one entry (reqkey's form: one element of the
//! array; Jepsen's: one line) at a time, each entry's text dropped once
//! it is read; the same entry parser ([`crate::history`]'s), so the same
//! operations and the same mistakes at the same lines and columns.
//!
//! - [`read_history`] gives each operation to a sink, as
//!   `parse_history_into` does.
//! - [`read_partitioned`] reads straight into
//!   [`PartitionedHistory`] (typed, by session: what the check needs and
//!   nothing for a report); [`read_operations_at`] reads the file again
//!   for the few operations a report shows.
//!
//! Bounded: an entry's text is held while it is read (a single entry as
//! large as the file is held whole, as it must be to be parsed), and an
//! open Jepsen operation until it completes; there is no cap on the
//! number of entries beyond the memory their typed form takes.

use std::collections::BTreeMap;
use std::io::BufRead;

use crate::history::{entry_operation, parse_jepsen_lines, HistoryError, HistoryFormat};
use crate::lin::{Operation, PartitionedHistory, PartitionedHistoryBuilder};

/// A byte reader that knows the 1-based line and column (in characters)
/// of the next byte.
struct Cursor<R> {
    reader: R,
    line: usize,
    column: usize,
}

impl<R: BufRead> Cursor<R> {
    fn new(reader: R) -> Self {
        Self {
            reader,
            line: 1,
            column: 1,
        }
    }

    fn io(&self, e: &std::io::Error) -> HistoryError {
        HistoryError::at(self.line, self.column, format!("cannot read the file: {e}"))
    }

    /// The next byte, not consumed (`None` at the end).
    fn peek(&mut self) -> Result<Option<u8>, HistoryError> {
        loop {
            match self.reader.fill_buf() {
                Ok(buf) => return Ok(buf.first().copied()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io(&e)),
            }
        }
    }

    /// Consumes the byte [`Cursor::peek`] gave.
    fn bump(&mut self, b: u8) {
        self.reader.consume(1);
        if b == b'\n' {
            self.line += 1;
            self.column = 1;
        } else if b & 0xC0 != 0x80 {
            // A character's first byte (not a UTF-8 continuation).
            self.column += 1;
        }
    }

    fn next(&mut self) -> Result<Option<u8>, HistoryError> {
        let b = self.peek()?;
        if let Some(b) = b {
            self.bump(b);
        }
        Ok(b)
    }

    /// Moves the position over `b` (already consumed).
    fn advance(line: &mut usize, column: &mut usize, b: u8) {
        if b == b'\n' {
            *line += 1;
            *column = 1;
        } else if b & 0xC0 != 0x80 {
            *column += 1;
        }
    }

    /// Skips JSON whitespace; the next byte after it.
    fn skip_space(&mut self) -> Result<Option<u8>, HistoryError> {
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(HistoryError::at(
                        self.line,
                        self.column,
                        format!("cannot read the file: {e}"),
                    ))
                }
            };
            if buf.is_empty() {
                return Ok(None);
            }
            let mut n = 0;
            let mut found = None;
            for &b in buf {
                if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                    found = Some(b);
                    break;
                }
                Self::advance(&mut self.line, &mut self.column, b);
                n += 1;
            }
            self.reader.consume(n);
            if found.is_some() {
                return Ok(found);
            }
        }
    }

    fn here(&self, message: impl Into<String>) -> HistoryError {
        HistoryError::at(self.line, self.column, message)
    }

    /// One JSON value's text into `out` (its structure only: brackets
    /// and strings matched; the entry parser judges the rest), a buffer
    /// at a time.
    fn value(&mut self, out: &mut Vec<u8>) -> Result<(), HistoryError> {
        let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
        let mut started = !out.is_empty();
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(HistoryError::at(
                        self.line,
                        self.column,
                        format!("cannot read the file: {e}"),
                    ))
                }
            };
            if buf.is_empty() {
                return if depth == 0 && !in_string && started {
                    Ok(())
                } else {
                    Err(self.here("EOF while parsing a value"))
                };
            }
            // How much of `buf` belongs to the value, and whether it ends
            // there (or is a mistake).
            let mut n = 0;
            let mut done = false;
            let mut broken = false;
            for &b in buf {
                if !in_string && depth == 0 && started && is_delimiter(b) {
                    // The end of a scalar (the delimiter is not its).
                    done = true;
                    break;
                }
                started = true;
                n += 1;
                Self::advance(&mut self.line, &mut self.column, b);
                if in_string {
                    match (escaped, b) {
                        (true, _) => escaped = false,
                        (false, b'\\') => escaped = true,
                        (false, b'"') => {
                            in_string = false;
                            if depth == 0 {
                                done = true;
                                break;
                            }
                        }
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth == 0 => {
                        broken = true;
                        break;
                    }
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            done = true;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            out.extend_from_slice(&buf[..n]);
            self.reader.consume(n);
            if broken {
                return Err(self.here("expected value"));
            }
            if done {
                return Ok(());
            }
        }
    }
}

fn is_delimiter(b: u8) -> bool {
    matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
}

/// Reads a history from `reader` in `format` (or the form its first
/// non-space byte tells), giving each operation to `sink` with its index
/// as [`crate::history::parse_history`] reads them (an operation of
/// Jepsen's form is given when invoked and again when completed).
/// Returns how many operations there are.
pub fn read_history(
    reader: impl BufRead,
    format: Option<HistoryFormat>,
    sink: &mut dyn FnMut(usize, Operation),
) -> Result<usize, HistoryError> {
    let mut cursor = Cursor::new(reader);
    let first = cursor.skip_space()?;
    let detected = match first {
        Some(b'[') => Some(HistoryFormat::Json),
        Some(b'{') => Some(HistoryFormat::Jepsen),
        _ => None,
    };
    let format = match (format.or(detected), first) {
        (Some(f), _) => f,
        (None, None) => return Err(HistoryError::at(1, 1, "the history is empty")),
        (None, Some(_)) => {
            return Err(cursor.here(
                "not a history: reqkey's form starts with `[`, Jepsen's event form with `{`",
            ))
        }
    };
    let count = match format {
        HistoryFormat::Json => read_json(&mut cursor, sink)?,
        HistoryFormat::Jepsen => {
            // Lines from the first one: the cursor has consumed only
            // blank space, so the lines skipped are blank (counted), and
            // the space before the first event is put back as spaces
            // (columns stay where they were).
            let skipped = cursor.line - 1;
            let pad = " ".repeat(cursor.column - 1);
            let lines = (0..skipped)
                .map(|_| Ok(String::new()))
                .chain(Lines(&mut cursor, Some(pad)));
            parse_jepsen_lines(lines, usize::MAX, sink)?
        }
    };
    if count == 0 {
        return Err(HistoryError::at(
            1,
            1,
            "the history has no operations: nothing to judge",
        ));
    }
    Ok(count)
}

/// The rest of a cursor's text, a line at a time (Jepsen's form).
struct Lines<'c, R>(&'c mut Cursor<R>, Option<String>);

impl<R: BufRead> Iterator for Lines<'_, R> {
    type Item = Result<String, HistoryError>;

    fn next(&mut self) -> Option<Self::Item> {
        let c = &mut *self.0;
        let (line, column) = (c.line, c.column);
        let mut bytes = self.1.take().map(String::into_bytes).unwrap_or_default();
        let column = column - bytes.len();
        match c.reader.read_until(b'\n', &mut bytes) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return Some(Err(c.io(&e))),
        }
        c.line += 1;
        c.column = 1;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        Some(String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            let before = String::from_utf8_lossy(valid).chars().count();
            HistoryError::at(line, column + before, "not UTF-8 text")
        }))
    }
}

/// Reads reqkey's form (the cursor at its `[`), an element at a time.
fn read_json<R: BufRead>(
    cursor: &mut Cursor<R>,
    sink: &mut dyn FnMut(usize, Operation),
) -> Result<usize, HistoryError> {
    match cursor.next()? {
        Some(b'[') => {}
        _ => {
            return Err(
                cursor.here("reqkey's form is a JSON array of operations: it starts with `[`")
            )
        }
    }
    let mut piece = Vec::new();
    let mut count = 0usize;
    if cursor.skip_space()? == Some(b']') {
        cursor.bump(b']');
        return trailing(cursor).map(|()| 0);
    }
    loop {
        match cursor.skip_space()? {
            None => return Err(cursor.here("EOF while parsing a list")),
            Some(b']') => return Err(cursor.here("trailing comma")),
            Some(_) => {}
        }
        let (line, column) = (cursor.line, cursor.column);
        piece.clear();
        cursor.value(&mut piece)?;
        let text = std::str::from_utf8(&piece).map_err(|e| {
            let valid = &piece[..e.valid_up_to()];
            let lines = valid.iter().filter(|&&b| b == b'\n').count();
            HistoryError::at(line + lines, column, "not UTF-8 text")
        })?;
        sink(count, entry_operation(count, text, || (line, column))?);
        count += 1;
        match cursor.skip_space()? {
            Some(b',') => cursor.bump(b','),
            Some(b']') => {
                cursor.bump(b']');
                return trailing(cursor).map(|()| count);
            }
            None => return Err(cursor.here("EOF while parsing a list")),
            Some(_) => return Err(cursor.here("expected `,` or `]`")),
        }
    }
}

/// Nothing but space after the array.
fn trailing<R: BufRead>(cursor: &mut Cursor<R>) -> Result<(), HistoryError> {
    match cursor.skip_space()? {
        None => Ok(()),
        Some(_) => Err(cursor.here("trailing characters")),
    }
}

/// Reads a history straight into the checker's form by session, keeping
/// nothing for a report ([`PartitionedHistory`]).
pub fn read_partitioned(
    reader: impl BufRead,
    format: Option<HistoryFormat>,
) -> Result<PartitionedHistory, HistoryError> {
    read_partitioned_bounded(reader, format, &ReadBounds::none())
}

/// The default bound on one session's history text (`reqkey check history
/// --max-session-bytes`): its typed form takes about 2.5 to 6 times the
/// text by what it holds (measured: a 62 MB session, 347 MB peak; 254 MB
/// of sequential commits, 1.24 GB peak with the search and the report),
/// so 256 MiB of one session is at most about 1.5 GB held.
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 256 * 1024 * 1024;

/// How often a reader asks its memory gauge: every this many bytes of
/// text read.
pub const GAUGE_EVERY_BYTES: u64 = 1 << 18;

/// A reader that counts what it gave, asks `over` every
/// [`GAUGE_EVERY_BYTES`] (what it answers is kept in `why`), and gives
/// nothing more once told to stop or once `over` said why.
struct Counted<'g, R> {
    inner: R,
    read: std::rc::Rc<std::cell::Cell<u64>>,
    stop: std::rc::Rc<std::cell::Cell<bool>>,
    over: &'g dyn Fn() -> Option<String>,
    gauged_at: u64,
    why: std::rc::Rc<std::cell::RefCell<Option<String>>>,
}

impl<R> Counted<'_, R> {
    fn counted(&mut self, amount: usize) {
        let read = self.read.get() + amount as u64;
        self.read.set(read);
        if read - self.gauged_at >= GAUGE_EVERY_BYTES {
            self.gauged_at = read;
            if let Some(why) = (self.over)() {
                self.stop.set(true);
                *self.why.borrow_mut() = Some(why);
            }
        }
    }
}

impl<R: std::io::Read> std::io::Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.get() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        self.counted(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Counted<'_, R> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.stop.get() {
            return Ok(&[]);
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        self.counted(amount);
        self.inner.consume(amount);
    }
}

/// What a history is read within: a bound on each session's text, and a
/// gauge of the reader's memory asked every [`GAUGE_EVERY_BYTES`] of text
/// (`Some(why)`: reading stops, the history is refused with `why`).
/// `reqkey check history` gives `--max-session-bytes` and its memory
/// ceiling (`--max-memory-bytes`).
#[allow(missing_debug_implementations)]
pub struct ReadBounds<'g> {
    pub max_session_bytes: u64,
    pub over_memory: &'g dyn Fn() -> Option<String>,
}

impl ReadBounds<'_> {
    /// No bound at all.
    pub fn none() -> ReadBounds<'static> {
        ReadBounds {
            max_session_bytes: u64::MAX,
            over_memory: &|| None,
        }
    }
}

/// [`read_history`] through a reader that asks `over` every
/// [`GAUGE_EVERY_BYTES`]: past it, reading stops and the history is
/// refused with what `over` said, placed where reading stopped.
pub fn read_history_gauged(
    reader: impl BufRead,
    format: Option<HistoryFormat>,
    over: &dyn Fn() -> Option<String>,
    sink: &mut dyn FnMut(usize, Operation),
) -> Result<usize, HistoryError> {
    let why = std::rc::Rc::new(std::cell::RefCell::new(None));
    let counted = Counted {
        inner: reader,
        read: std::rc::Rc::default(),
        stop: std::rc::Rc::default(),
        over,
        gauged_at: 0,
        why: std::rc::Rc::clone(&why),
    };
    let outcome = read_history(counted, format, sink);
    let stopped = why.borrow_mut().take();
    match (outcome, stopped) {
        (Err(e), Some(message)) => Err(HistoryError::at(e.line, e.column, message)),
        (Ok(_), Some(message)) => Err(HistoryError::at(1, 1, message)),
        (outcome, None) => outcome,
    }
}

/// [`read_partitioned`] within `bounds`: at most
/// `bounds.max_session_bytes` of history text held for any one session,
/// and the memory gauge asked as it reads. Past either, reading stops and
/// the history is refused (an error naming the bound, placed at the entry
/// where reading stopped) before more of it is held.
pub fn read_partitioned_bounded(
    reader: impl BufRead,
    format: Option<HistoryFormat>,
    bounds: &ReadBounds<'_>,
) -> Result<PartitionedHistory, HistoryError> {
    let max_session_bytes = bounds.max_session_bytes;
    let read = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let stop = std::rc::Rc::new(std::cell::Cell::new(false));
    let why = std::rc::Rc::new(std::cell::RefCell::new(None));
    let counted = Counted {
        inner: reader,
        read: std::rc::Rc::clone(&read),
        stop: std::rc::Rc::clone(&stop),
        over: bounds.over_memory,
        gauged_at: 0,
        why: std::rc::Rc::clone(&why),
    };
    let mut builder = PartitionedHistoryBuilder::default();
    let mut given = 0u64;
    let mut over: Option<String> = None;
    let outcome = read_history(counted, format, &mut |index, op| {
        if over.is_some() {
            return;
        }
        let bytes = read.get().saturating_sub(given);
        given = read.get();
        if let Some((session, held)) = builder.set_sized(index, &op, bytes) {
            if held > max_session_bytes {
                let shown: String = session.chars().take(64).collect();
                over = Some(format!(
                    "session {shown:?} holds more than {max_session_bytes} bytes of history \
                     (--max-session-bytes, default {DEFAULT_MAX_SESSION_BYTES}): not checked; \
                     check it with a larger bound, or a history split by session"
                ));
                stop.set(true);
            }
        }
    });
    let over = over.or_else(|| why.borrow_mut().take());
    match (outcome, over) {
        // Reading stopped right after the entry that crossed the bound:
        // the error is placed there.
        (Err(e), Some(message)) => Err(HistoryError::at(e.line, e.column, message)),
        (Ok(_), Some(message)) => Err(HistoryError::at(1, 1, message)),
        (Err(e), None) => Err(e),
        (Ok(_), None) => Ok(builder.finish()),
    }
}

/// The operations at `indices` (sorted or not; each once), in that
/// order, read again from `reader`; an index past the end is left out.
pub fn read_operations_at(
    reader: impl BufRead,
    format: Option<HistoryFormat>,
    indices: &[usize],
) -> Result<Vec<Operation>, HistoryError> {
    let mut wanted: BTreeMap<usize, Option<Operation>> =
        indices.iter().map(|&i| (i, None)).collect();
    read_history(reader, format, &mut |index, op| {
        if let Some(slot) = wanted.get_mut(&index) {
            *slot = Some(op);
        }
    })?;
    Ok(indices
        .iter()
        .filter_map(|i| wanted.get_mut(i).and_then(Option::take))
        .collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::history::fixtures::*;
    use crate::history::{parse_history, parse_prepared, write_history};
    use serde_json::json;

    /// Every history the in-memory reader reads, and every mistake it
    /// places, the streaming reader reads and places the same, in both
    /// forms, whatever the buffer's size (entries cut across refills).
    #[test]
    fn streaming_reads_what_the_text_reader_reads() {
        let ok = [
            "[\n{\"process\": \"a\", \"call_ns\": 1, \"return_ns\": 2, \"op\": \"getRun\", \"args\": {\"sessionId\": \"s\", \"runId\": \"r\"}, \"answer\": {\"ok\": null}},\n {\"process\": 7, \"call_ns\": 3, \"op\": \"listRuns\", \"args\": {\"sessionId\": \"s]\\\"{\"}}\n]\n",
            "  [{\"process\": \"é\", \"call_ns\": 1, \"request\": \"raw\", \"return_ns\": 1, \"answer\": 5}]",
            "{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\", \"value\": {\"sessionId\": \"s\", \"runId\": \"r\"}}\n\n{\"process\": 0, \"type\": \"ok\", \"f\": \"getRun\", \"value\": null}\r\n{\"process\": 1, \"type\": \"invoke\", \"f\": \"listRuns\"}",
            "\n\n{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}",
        ];
        let bad = [
            "[\n{\"process\": \"a\", \"call_ns\": 1,,}\n]",
            "[\n{\"process\": \"a\", \"call_ns\": 1, \"op\": \"getRun\", \"answr\": {}}\n]",
            "[\n  {\"process\": \"a\", \"call_ns\": 9, \"return_ns\": 3, \"op\": \"getRun\", \"answer\": null}\n]",
            "[\n{\"process\": \"a\", \"call_ns\": 1, \"op\": \"getRun\", \"answer\": null}]",
            "[{\"process\": [], \"call_ns\": 1, \"op\": \"x\"}]",
            "[{\"process\": \"a\", \"call_ns\": -1, \"op\": \"x\"}]",
            "[]",
            "   ",
            "\n  hello",
            "{\"process\": 0, \"type\": \"ok\", \"f\": \"getRun\"}",
            "\n{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}",
            "{\"process\": 0, \"type\": \"invoke\", \"f\": \"getRun\"}\n{\"process\": 0, \"type\": ",
            "{:process 0, :type :invoke, :f :read}",
        ];
        for capacity in [1, 3, 8192] {
            for text in ok {
                let expected = parse_history(text, None).unwrap();
                let mut got: Vec<Operation> = Vec::new();
                let reader = std::io::BufReader::with_capacity(capacity, text.as_bytes());
                read_history(reader, None, &mut |i, op| match got.get_mut(i) {
                    Some(slot) => *slot = op,
                    None => got.push(op),
                })
                .unwrap();
                assert_eq!(got, expected, "{text}");
                let again = std::io::BufReader::with_capacity(capacity, text.as_bytes());
                let picked = read_operations_at(again, None, &[0]).unwrap();
                assert_eq!(picked.first(), expected.first(), "{text}");
            }
            for text in bad {
                let expected = parse_history(text, None).expect_err(text);
                let reader = std::io::BufReader::with_capacity(capacity, text.as_bytes());
                let got = read_history(reader, None, &mut |_, _| {}).expect_err(text);
                assert_eq!(got, expected, "{text}");
            }
        }
    }

    /// A written history streams back to what was written, in both forms.
    #[test]
    fn a_written_history_streams_back() {
        let text = "[\n{\"process\": \"a\", \"call_ns\": 1, \"return_ns\": 2, \"op\": \"getRun\", \"args\": {\"sessionId\": \"s\", \"runId\": \"r\"}, \"answer\": {\"ok\": null}}\n]";
        let h = parse_history(text, None).unwrap();
        for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
            let written = write_history(&h, format);
            let back = read_operations_at(written.as_bytes(), Some(format), &[0]).unwrap();
            assert_eq!(back, h, "{}", format.name());
        }
    }

    /// Sessions longer than a chunk of the partitioned builder, read in
    /// both forms (Jepsen's replaces each operation when it completes):
    /// the same verdict, steps and report as the history held whole.
    #[test]
    fn long_sessions_stream_to_the_same_report() {
        use crate::lin::{check_partitioned, check_prepared, CheckOptions, PreparedHistory};
        use serde_json::json;
        let mut h = Vec::new();
        for k in 0..700u64 {
            let session = if k % 3 == 0 { "b" } else { "a" };
            let seq = if session == "b" { k / 3 + 1 } else { k - k / 3 };
            let run = format!("r{k}");
            let mut answer_seq = seq;
            if k == 601 {
                answer_seq += 1; // one wrong start sequence, late in `a`
            }
            h.push(Operation {
                client: format!("c{}", k % 5),
                request: json!({"op": "commitRunStart", "args": {"startRun": {"sessionId": session, "runId": run, "expectedCurrentRunId": null, "input": {"text": "x"}}}}),
                invoke_ns: 10 * k,
                return_ns: 10 * k + 5,
                answer: Some(json!({"ok": {"outcome": "started", "run": {"sessionId": session, "runId": run, "status": "running", "startSequence": answer_seq}}})),
            });
        }
        let opts = CheckOptions {
            threads: 1,
            ..CheckOptions::default()
        };
        let whole = check_prepared(&PreparedHistory::new(&h), opts);
        for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
            let text = write_history(&h, format);
            let parts = read_partitioned(text.as_bytes(), Some(format)).unwrap();
            assert_eq!((parts.len(), parts.sessions()), (700, 2));
            let mut fetch =
                |at: &[usize]| read_operations_at(text.as_bytes(), Some(format), at).unwrap();
            let streamed = check_partitioned(parts, opts, Some(&mut fetch));
            assert_eq!(streamed.steps, whole.steps);
            assert_eq!(
                format!("{:?}", streamed.verdict),
                format!("{:?}", whole.verdict)
            );
            assert!(!streamed.verdict.is_linearizable());
        }
    }

    /// Structure the element scanner refuses, placed where it is found.
    #[test]
    fn broken_arrays_are_placed() {
        for (text, line, column, says) in [
            ("[{\"process\": \"a\"", 1, 17, "EOF while parsing a value"),
            (
                "[{\"process\": \"a\", \"call_ns\": 1, \"op\": \"x\"} {}]",
                1,
                44,
                "expected `,` or `]`",
            ),
            (
                "[{\"process\": \"a\", \"call_ns\": 1, \"op\": \"x\"},]",
                1,
                44,
                "trailing comma",
            ),
            (
                "[{\"process\": \"a\", \"call_ns\": 1, \"op\": \"x\"}] x",
                1,
                45,
                "trailing characters",
            ),
        ] {
            let e = read_history(text.as_bytes(), None, &mut |_, _| {}).expect_err(text);
            assert_eq!((e.line, e.column), (line, column), "{text}: {e}");
            assert!(e.message.contains(says), "{text}: {e}");
        }
    }

    /// The report `reqkey check history` gives from a file (the history
    /// read straight into the checker's form) is the one the same history
    /// gets checked in memory as `Operation`s: verdict, steps, the
    /// operations named, the shrunk subset and the timelines.
    #[test]
    fn a_history_read_from_a_file_gets_the_in_memory_report() {
        use crate::lin::{check_prepared, check_with, CheckOptions, CheckReport, Verdict};
        fn same(a: &CheckReport, b: &CheckReport, what: &str) {
            assert_eq!(a.steps, b.steps, "{what}");
            assert_eq!(a.partitions, b.partitions, "{what}");
            match (&a.verdict, &b.verdict) {
                (Verdict::Linearizable, Verdict::Linearizable) => {}
                (Verdict::NotLinearizable(x), Verdict::NotLinearizable(y)) => {
                    assert_eq!(x.session, y.session, "{what}");
                    assert_eq!(x.reason, y.reason, "{what}");
                    assert_eq!(x.partition, y.partition, "{what}");
                    assert_eq!(x.minimal, y.minimal, "{what}");
                    assert_eq!(x.minimal_in_flight, y.minimal_in_flight, "{what}");
                    assert_eq!(x.timeline, y.timeline, "{what}");
                    assert_eq!(x.minimal_timeline, y.minimal_timeline, "{what}");
                    assert_eq!(x.to_string(), y.to_string(), "{what}");
                }
                (x, y) => panic!("{what}: {x:?} against {y:?}"),
            }
        }
        let get = |session: &str, run: &str| json!({"op": "getRun", "args": {"sessionId": session, "runId": run}});
        let run_of =
            |session: &str, run: &str, key: &str| started(session, run, key)["ok"]["run"].clone();
        // Two sessions: `t` fine, `s` with both commits of one key started
        // (the key rule broken), reads around them and an unanswered op,
        // so the shrinking drops some and keeps the rest.
        let broken = vec![
            op(
                "a",
                commit("t", "r1", "k"),
                0,
                10,
                Some(started("t", "r1", "k")),
            ),
            op(
                "a",
                commit("s", "r1", "k"),
                11,
                20,
                Some(started("s", "r1", "k")),
            ),
            op(
                "b",
                get("s", "r1"),
                12,
                25,
                Some(json!({"ok": run_of("s", "r1", "k")})),
            ),
            op(
                "c",
                commit("s", "r2", "k"),
                13,
                30,
                Some(started("s", "r2", "k")),
            ),
            op("d", commit("s", "r3", "k"), 14, 40, None),
            op(
                "b",
                get("t", "r1"),
                31,
                45,
                Some(json!({"ok": run_of("t", "r1", "k")})),
            ),
            op("e", get("s", "r9"), 50, 60, Some(json!({"ok": null}))),
        ];
        let correct: Vec<Operation> = broken.iter().take(3).cloned().collect();
        let histories = [
            ("broken", broken),
            ("correct", correct),
            ("a lone bad answer", varied()),
        ];
        for (name, h) in &histories {
            for format in [HistoryFormat::Json, HistoryFormat::Jepsen] {
                let text = write_history(h, format);
                let in_memory = parse_history(&text, Some(format)).unwrap();
                if format == HistoryFormat::Json {
                    assert_eq!(&in_memory, h, "{name}");
                }
                let from_file = parse_prepared(&text, Some(format)).unwrap();
                assert_eq!(from_file.len(), in_memory.len());
                for (i, o) in in_memory.iter().enumerate() {
                    assert_eq!(from_file.operation(i).as_deref(), Some(o), "{name} #{i}");
                }
                for minimize in [true, false] {
                    let opts = CheckOptions {
                        minimize,
                        threads: 1,
                        ..CheckOptions::default()
                    };
                    let what = format!("{name}, {}, minimize {minimize}", format.name());
                    let a = check_with(&in_memory, opts);
                    let b = check_prepared(&from_file, opts);
                    same(&a, &b, &what);
                    // Streamed by session, the report's operations read again.
                    let by_session = read_partitioned(text.as_bytes(), Some(format)).unwrap();
                    let mut fetch = |at: &[usize]| {
                        read_operations_at(text.as_bytes(), Some(format), at).unwrap()
                    };
                    let c = crate::lin::check_partitioned(by_session, opts, Some(&mut fetch));
                    same(&a, &c, &format!("{what}, streamed"));
                    assert_eq!(a.verdict.is_linearizable(), *name == "correct", "{what}");
                }
            }
        }
    }
}
