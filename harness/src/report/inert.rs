//! Text a target controls, made inert for each format.
//!
//! A target writes its own `/health` identity, its answers, its headers and
//! its error messages; every report quotes some of them. A hostile target
//! can put a newline and a forged "**CONFORMS**" line in its name, raw
//! HTML, an ANSI escape that rewrites the terminal, or a bidi control that
//! reorders what a reader sees. So every format gets quoted text through
//! one of these functions, which show a control character as an escape
//! (`\n`, `\u{1b}`, `\u{202e}`) instead of acting on it:
//!
//! - Markdown: [`code_span`] (one line, in a code span no content can
//!   close: the fence is longer than any run of backticks inside) and
//!   [`code_cell`] (the same, pipes escaped for a table cell); [`fenced`]
//!   for a block, whose fence no line of the content can close.
//! - HTML: [`html`] escapes markup and shows control characters.
//! - JUnit XML: [`xml_text`] (quick-junit escapes markup; characters XML
//!   1.0 cannot carry are shown escaped instead of breaking the file).
//! - Terminal: [`terminal`] (one line, no escape sequence reaches the tty).
//!
//! Each primitive also hides any secret the user typed that reappears in
//! the text (`crate::secrets::scrub`): error messages quote URLs and
//! command lines from sources that cannot all be audited.

/// Is `c` a character that acts instead of showing: a C0 or C1 control,
/// DEL, a bidi control or isolate, a zero-width or invisible formatter, a
/// line or paragraph separator, a byte-order mark?
pub fn is_active(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

/// `c` as a visible escape.
fn escaped(c: char) -> String {
    match c {
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        c => format!("\\u{{{:x}}}", u32::from(c)),
    }
}

/// One line: every active character shown as an escape.
pub fn one_line(text: &str) -> String {
    let text = crate::secrets::scrub(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_active(c) {
            out.push_str(&escaped(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Lines kept, every other active character shown as an escape (a block's
/// content: its line breaks are layout, the rest is data).
pub fn lines_kept(text: &str) -> String {
    text.split('\n')
        .map(|line| one_line(line.strip_suffix('\r').unwrap_or(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

fn longest_backtick_run(text: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// Text for Markdown outside a code span, as one inert line: every
/// character that opens an inline construct (emphasis, strike-through,
/// links, images, raw HTML, entities, code) or a heading, or ends a table
/// cell is backslash-escaped (it never starts a line: lists and quotes
/// need not be),
/// so that it renders as the characters written. For the harness's own
/// sentences; text a target controls goes in a [`code_span`], which no
/// content can leave.
pub fn markdown_text(text: &str) -> String {
    let text = one_line(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(
            c,
            '\\' | '`' | '*' | '_' | '~' | '[' | ']' | '<' | '>' | '!' | '#' | '|' | '&'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A Markdown code span holding `text` as one inert line: whatever it
/// holds (backticks, `|`, `<script>`, `**`), it renders as literal text
/// and cannot end the span early.
pub fn code_span(text: &str) -> String {
    let text = one_line(text);
    let fence = "`".repeat(longest_backtick_run(&text) + 1);
    // A space on each side when the content touches a backtick or a space
    // (CommonMark strips exactly one from each side).
    let pad = if text.starts_with('`')
        || text.ends_with('`')
        || text.starts_with(' ')
        || text.ends_with(' ')
        || text.is_empty()
    {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// [`code_span`] for a table cell: a `|` inside a code span still ends a
/// GFM table cell unless escaped.
pub fn code_cell(text: &str) -> String {
    code_span(text).replace('|', "\\|")
}

/// A fenced Markdown block of `lang` holding `text`: its fence is longer
/// than any run of backticks in the text, so no line of it can close the
/// block; control characters other than line breaks are shown escaped.
pub fn fenced(lang: &str, text: &str) -> String {
    let text = lines_kept(text.trim_end());
    let fence = "`".repeat((longest_backtick_run(&text) + 1).max(3));
    format!("{fence}{lang}\n{text}\n{fence}")
}

/// HTML text: markup escaped, control characters shown.
pub fn html(text: &str) -> String {
    let text = crate::secrets::scrub(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' => out.push('\n'),
            c if is_active(c) => out.push_str(&escaped(c)),
            c => out.push(c),
        }
    }
    out
}

/// Text for an XML document (quick-junit escapes `<`, `&` and quotes):
/// line breaks kept, every other active character shown escaped, so the
/// file stays well-formed XML 1.0 and shows what was sent.
pub fn xml_text(text: &str) -> String {
    lines_kept(text)
}

/// Serialized JSON with every active character the serializer leaves
/// raw (DEL, C1 controls, bidi and invisible formatters) written as a
/// `\uXXXX` escape: the same data once parsed, but a person who opens the
/// file sees no reordered or hidden text. (Outside strings JSON is ASCII,
/// so every such character stands inside a string.)
pub fn json_text(serialized: &str) -> String {
    let serialized = crate::secrets::scrub_json(serialized);
    let mut out = String::with_capacity(serialized.len());
    for c in serialized.chars() {
        if is_active(c) && !matches!(c, '\n' | '\r' | '\t' | ' ') && u32::from(c) >= 0x20 {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// One terminal line: no escape sequence, carriage return or line break
/// from a target reaches the terminal.
pub fn terminal(text: &str) -> String {
    one_line(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTILE: &str = "x\n**CONFORMS**: every scenario passed\n| verdict | CONFORMS |\n`` ` <script>alert(1)</script> \u{1b}[2J\u{202e}gnp.exe\u{7}";

    #[test]
    fn a_code_span_is_one_line_and_cannot_be_closed_by_its_content() {
        let span = code_span(HOSTILE);
        assert!(!span.contains('\n'));
        assert!(!span.chars().any(is_active), "{span}");
        let fence_len = span.chars().take_while(|c| *c == '`').count();
        assert!(fence_len > longest_backtick_run(HOSTILE));
        assert!(span.ends_with(&"`".repeat(fence_len)));
        assert!(span.contains("\\u{1b}[2J") && span.contains("\\u{202e}") && span.contains("\\n"));
        // Spaces pad content that touches a backtick.
        assert_eq!(code_span("`a`"), "`` `a` ``");
        assert_eq!(code_span("plain"), "`plain`");
        assert_eq!(code_span(""), "`  `");
    }

    #[test]
    fn a_cell_escapes_pipes_and_a_fence_outlasts_the_content() {
        assert!(!code_cell("a|b").contains("a|b"));
        let block = fenced("text", "line one\n````\nline three \u{1b}[31m");
        let fence = block.lines().next().unwrap_or_default();
        assert_eq!(fence, "`````text");
        assert!(block.ends_with("\n`````"));
        assert!(!block.contains('\u{1b}'));
    }

    #[test]
    fn html_xml_and_terminal_forms_show_active_characters() {
        let h = html(HOSTILE);
        assert!(!h.contains("<script>") && h.contains("&lt;script&gt;"));
        assert!(!h.contains('\u{1b}') && !h.contains('\u{202e}'));
        let x = xml_text(HOSTILE);
        assert!(x.contains('\n') && !x.contains('\u{7}'));
        let j = json_text(&serde_json::Value::String(HOSTILE.into()).to_string());
        assert!(!j.contains('\u{202e}') && j.contains("\\u202e"));
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&j).ok(),
            Some(serde_json::Value::String(HOSTILE.into())),
            "the same data once parsed"
        );
        let t = terminal(HOSTILE);
        assert!(!t.contains('\n') && !t.contains('\u{1b}'));
    }
}
