//! The loader's bounds, checked before the YAML parser sees a byte: a file
//! is at most [`MAX_SCENARIO_BYTES`] and nests at most [`MAX_DEPTH`] levels,
//! so no input (a million unclosed `[`, 40 000 closed levels, a 2 GiB file)
//! costs more than one linear scan of at most 4 MiB before it is refused
//! with `file:line:col`. Also: turning a byte offset into a position, and
//! finding where a second YAML document starts (for the one parser error
//! that carries no position).

/// The largest scenario file the loader reads, in bytes.
pub const MAX_SCENARIO_BYTES: usize = 1024 * 1024;
/// The deepest nesting of collections a scenario may have (block and flow
/// levels together; the corpus needs about 12).
pub const MAX_DEPTH: usize = 64;

/// A 1-based line and column (in characters) of a byte offset of `text`.
pub fn position_at(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The position just past the end of `text` (where the parser stopped on
/// an error that names no position).
pub fn end_position(text: &str) -> (usize, usize) {
    position_at(text, text.len())
}

/// The position of the marker (`---`) that starts a second document, if
/// there is one after some content.
pub fn second_document(text: &str) -> Option<(usize, usize)> {
    let mut content = false;
    for (i, line) in text.lines().enumerate() {
        let marker = line.starts_with("---")
            && matches!(line.as_bytes().get(3), None | Some(b' ' | b'\t' | b'\r'));
        if marker && content {
            return Some((i + 1, 1));
        }
        let trimmed = line.trim_start();
        if !marker && !trimmed.is_empty() && !trimmed.starts_with('#') && !line.starts_with('%') {
            content = true;
        }
    }
    None
}

/// Where the text nests deeper than `max` levels, and how deep it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
    pub column: usize,
}

/// A linear scan that over-approximates the nesting of a YAML text: block
/// levels by indentation (and `- ` entries on one line), flow levels by
/// `[` / `{` outside quotes and comments. It stops at the first node
/// deeper than `max`. Block scalars (`|`, `>`) and quoted text are skipped.
pub fn check_depth(text: &str, max: usize) -> Result<(), TooDeep> {
    let bytes = text.as_bytes();
    let mut block: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // Inside a quoted scalar: the quote byte.
    let mut quote: Option<u8> = None;
    // Lines indented deeper than this belong to a block scalar.
    let mut block_scalar: Option<usize> = None;
    let mut line_start = 0usize;
    while line_start < bytes.len() {
        let line_end = text[line_start..]
            .find('\n')
            .map_or(bytes.len(), |i| line_start + i);
        let line = &bytes[line_start..line_end];
        let indent = line.iter().take_while(|&&b| b == b' ').count();
        let blank = line[indent..]
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | b'\r'));
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                line_start = line_end + 1;
                continue;
            }
            block_scalar = None;
        }
        let too_deep = |at: usize| {
            let (line, column) = position_at(text, line_start + at);
            TooDeep { line, column }
        };
        let mut i = 0;
        if quote.is_none() && flow == 0 && !blank && line.get(indent) != Some(&b'#') {
            // Block structure: this line's node columns, `- ` entries included.
            while block.last().is_some_and(|&top| top > indent) {
                block.pop();
            }
            if block.last() != Some(&indent) {
                block.push(indent);
            }
            i = indent;
            while line.get(i) == Some(&b'-') && matches!(line.get(i + 1), Some(b' ') | None) {
                i += 1;
                while line.get(i) == Some(&b' ') {
                    i += 1;
                }
                block.push(i);
                if block.len() > max {
                    return Err(too_deep(i));
                }
            }
            if block.len() > max {
                return Err(too_deep(indent));
            }
        }
        // Flow structure, quotes and comments along the line.
        let mut node_start = true;
        while i < line.len() {
            let b = line[i];
            if let Some(q) = quote {
                if b == b'\\' && q == b'"' {
                    i += 2;
                    continue;
                }
                if b == q {
                    if q == b'\'' && line.get(i + 1) == Some(&b'\'') {
                        i += 2;
                        continue;
                    }
                    quote = None;
                    node_start = false;
                }
                i += 1;
                continue;
            }
            match b {
                b'#' if i == 0 || matches!(line[i - 1], b' ' | b'\t') => break,
                b'"' | b'\'' if node_start => quote = Some(b),
                b'[' | b'{' if node_start || flow > 0 => {
                    flow += 1;
                    if block.len() + flow > max {
                        return Err(too_deep(i));
                    }
                    node_start = true;
                    i += 1;
                    continue;
                }
                b']' | b'}' if flow > 0 => flow -= 1,
                b',' if flow > 0 => {
                    node_start = true;
                    i += 1;
                    continue;
                }
                b'|' | b'>' if node_start && flow == 0 => {
                    block_scalar = Some(indent);
                    break;
                }
                b' ' | b'\t' | b'\r' => {
                    i += 1;
                    continue;
                }
                b':' | b'-' | b'?' if matches!(line.get(i + 1), None | Some(b' ' | b'\t')) => {
                    node_start = true;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            node_start = false;
            i += 1;
        }
        line_start = line_end + 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_lines_and_character_columns() {
        assert_eq!(position_at("ab\ncd", 0), (1, 1));
        assert_eq!(position_at("ab\ncd", 4), (2, 2));
        assert_eq!(position_at("é\nx", 1), (1, 1));
        assert_eq!(end_position("a\n"), (2, 1));
    }

    #[test]
    fn a_second_document_is_found_after_content() {
        assert_eq!(second_document("---\na: 1\n---\nb: 2\n"), Some((3, 1)));
        assert_eq!(second_document("# c\n---\na: 1\n"), None);
        assert_eq!(second_document("a: ---x\n"), None);
    }

    #[test]
    fn flow_nesting_past_the_limit_is_refused_where_it_happens() {
        let text = format!("a: {}", "[".repeat(1_000_000));
        assert_eq!(
            check_depth(&text, 64),
            Err(TooDeep {
                line: 1,
                column: 4 + 63
            })
        );
        let closed = format!("a: {}{}", "[".repeat(40_000), "]".repeat(40_000));
        assert!(check_depth(&closed, 64).is_err());
        assert!(check_depth("a: [[1], {b: [2]}]\n", 64).is_ok());
    }

    #[test]
    fn block_nesting_counts_indentation_and_dashes() {
        let mut deep = String::new();
        for i in 0..100 {
            deep.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
        }
        let e = check_depth(&deep, 64).unwrap_err();
        assert_eq!(e.line, 65);
        assert!(check_depth(&format!("a: {}x\n", "- ".repeat(100)), 64).is_ok());
        assert!(check_depth(&format!("{}x\n", "- ".repeat(100)), 64).is_err());
    }

    #[test]
    fn brackets_in_plain_text_quotes_comments_and_block_scalars_do_not_count() {
        let many = "[".repeat(200);
        for text in [
            format!("summary: a {many}\n"),
            format!("summary: \"{many}\"\n"),
            format!("summary: '{many}'\n"),
            format!("# {many}\nx: 1\n"),
            format!("summary: |\n  {many}\n  more\nx: 1\n"),
            format!("summary: it's {many}\n"),
        ] {
            assert!(check_depth(&text, 64).is_ok(), "{text}");
        }
    }
}
