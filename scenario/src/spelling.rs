//! Numbers as written.
//!
//! serde_yaml hands a visitor a number already parsed: `1.50` arrives as
//! the double 1.5, 2^64 as a double (1.8e19), and `1e400`, which no finite
//! double holds, not as a number at all. A scenario that probes how a
//! target reads numbers needs them on the wire exactly as its author spelt
//! them. So the loader reads a scenario a second time with an event parser
//! that keeps every scalar's text (yaml-rust2), and puts each number of
//! every body a step sends (store args, `rpc`, `http.json`) back as
//! written; serde_json's `arbitrary_precision` keeps a `Number`'s spelling
//! to the wire.
//!
//! A number here is a plain scalar in JSON's number syntax (RFC 8259
//! section 6). A plain scalar that YAML reads as a number but JSON has no
//! spelling for (`0x1F`, `+1`, `.5`, `.inf`) is a load error at its
//! position: JSON cannot send it as written. Quote it for a string.
//!
//! Expectations are not touched: a pattern compares numbers by value
//! (SPEC 3 `[[digest.numbers]]`: numbers are values, not spellings).
//!
//! Bounded: the loader has refused texts over its size and depth limits
//! before this runs, the tree holds one node per event, and an alias is
//! followed only as deep as the value serde_yaml built from it.

use std::collections::HashMap;
use std::str::FromStr;

use serde_json::Value;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::scanner::TScalarStyle;

/// A YAML node with the text of its scalars as written.
#[derive(Debug)]
enum Node {
    /// `plain`: unquoted and untagged (only such a scalar can be a number).
    Scalar {
        text: String,
        plain: bool,
        line: usize,
        column: usize,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Alias(usize),
}

/// Where and why a body's number cannot go on the wire as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpellingError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Is `s` a JSON number (RFC 8259: `-? int frac? exp?`)?
pub fn is_json_number(s: &str) -> bool {
    let b = s.as_bytes();
    // Past the digits from `i`, and whether there was one.
    let digits = |i: usize| {
        let end = i + b[i.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        (end, end > i)
    };
    let mut i = usize::from(b.first() == Some(&b'-'));
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(i).0,
        _ => return false,
    }
    if b.get(i) == Some(&b'.') {
        let (end, any) = digits(i + 1);
        if !any {
            return false;
        }
        i = end;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let (end, any) = digits(i);
        if !any {
            return false;
        }
        i = end;
    }
    i == b.len()
}

#[derive(Debug)]
struct Tree {
    anchors: HashMap<usize, Node>,
}

/// Builds the node that starts with `first` at `line`:`column` (both
/// from 1; yaml-rust2 counts columns from 0), bounded by the loader's
/// depth limit, checked again here.
fn build(
    parser: &mut Parser<std::str::Chars<'_>>,
    first: Event,
    line: usize,
    column: usize,
    tree: &mut Tree,
    depth: usize,
) -> Result<Node, String> {
    if depth > super::limits::MAX_DEPTH {
        return Err("nested too deep".into());
    }
    let (node, anchor) = match first {
        Event::Scalar(text, style, anchor, tag) => (
            Node::Scalar {
                text,
                plain: style == TScalarStyle::Plain && tag.is_none(),
                line,
                column,
            },
            anchor,
        ),
        Event::Alias(id) => (Node::Alias(id), 0),
        Event::SequenceStart(anchor, _) => {
            let mut items = Vec::new();
            loop {
                let (ev, mark) = parser.next_token().map_err(|e| e.to_string())?;
                if ev == Event::SequenceEnd {
                    break;
                }
                items.push(build(
                    parser,
                    ev,
                    mark.line(),
                    mark.col() + 1,
                    tree,
                    depth + 1,
                )?);
            }
            (Node::Seq(items), anchor)
        }
        Event::MappingStart(anchor, _) => {
            let mut entries = Vec::new();
            loop {
                let (ev, mark) = parser.next_token().map_err(|e| e.to_string())?;
                if ev == Event::MappingEnd {
                    break;
                }
                let key = build(parser, ev, mark.line(), mark.col() + 1, tree, depth + 1)?;
                let (ev, mark) = parser.next_token().map_err(|e| e.to_string())?;
                let value = build(parser, ev, mark.line(), mark.col() + 1, tree, depth + 1)?;
                entries.push((key, value));
            }
            (Node::Map(entries), anchor)
        }
        other => return Err(format!("unexpected YAML event {other:?}")),
    };
    if anchor == 0 {
        Ok(node)
    } else {
        // The anchored node is kept once; its uses (here and every alias)
        // point at it.
        tree.anchors.insert(anchor, node);
        Ok(Node::Alias(anchor))
    }
}

/// The first document of `text` as a tree, or `None` when the event
/// parser cannot read what serde_yaml read (then nothing is restored, and
/// a body keeps serde_yaml's reading).
fn parse(text: &str) -> Option<(Node, Tree)> {
    let mut parser = Parser::new_from_str(text);
    let mut tree = Tree {
        anchors: HashMap::new(),
    };
    loop {
        let (ev, mark) = parser.next_token().ok()?;
        match ev {
            Event::StreamStart | Event::DocumentStart | Event::Nothing => {}
            Event::StreamEnd | Event::DocumentEnd => return None,
            first => {
                let root = build(
                    &mut parser,
                    first,
                    mark.line(),
                    mark.col() + 1,
                    &mut tree,
                    0,
                )
                .ok()?;
                return Some((root, tree));
            }
        }
    }
}

impl Tree {
    fn resolve<'a>(&'a self, mut node: &'a Node) -> Option<&'a Node> {
        // An alias names an anchor that was complete when it was used, so
        // one step resolves it; a bound guards a malformed chain.
        for _ in 0..4 {
            match node {
                Node::Alias(id) => node = self.anchors.get(id)?,
                other => return Some(other),
            }
        }
        None
    }

    fn get<'a>(&'a self, map: &'a Node, key: &str) -> Option<&'a Node> {
        let Node::Map(entries) = self.resolve(map)? else {
            return None;
        };
        entries.iter().find_map(|(k, v)| match self.resolve(k)? {
            Node::Scalar { text, .. } if text == key => Some(v),
            _ => None,
        })
    }

    /// Puts the numbers of `node` back into `value` as written.
    fn restore(&self, node: &Node, value: &mut Value) -> Result<(), SpellingError> {
        let Some(node) = self.resolve(node) else {
            return Ok(());
        };
        match (node, value) {
            (
                Node::Scalar {
                    text,
                    plain: true,
                    line,
                    column,
                },
                value,
            ) => {
                if is_json_number(text) {
                    *value = Value::Number(number_as_written(text));
                } else if value.is_number() || yaml_only_number(text) {
                    return Err(SpellingError {
                        line: *line,
                        column: *column,
                        message: format!(
                            "`{text}` is a YAML number with no JSON spelling; \
                             write it as a JSON number, or quote it for a string"
                        ),
                    });
                }
                Ok(())
            }
            (Node::Seq(items), Value::Array(values)) => {
                for (n, v) in items.iter().zip(values.iter_mut()) {
                    self.restore(n, v)?;
                }
                Ok(())
            }
            (Node::Map(entries), Value::Object(object)) => {
                for (k, n) in entries {
                    if let Some(Node::Scalar { text, .. }) = self.resolve(k) {
                        if let Some(v) = object.get_mut(text.as_str()) {
                            self.restore(n, v)?;
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The number `text` (already checked to be a JSON number) spelt as
/// written. serde_json's own parser (`Number::from_str`) keeps every digit
/// but writes an exponent its way (`2E+3` becomes `2e+3`, `1e400`
/// `1e+400`); `from_string_unchecked` keeps the text itself. It is hidden
/// from serde_json's docs, so the parser's reading is the fallback should
/// it ever change what it keeps (`numbers_keep_their_exponent` pins it).
fn number_as_written(text: &str) -> serde_json::Number {
    let n = serde_json::Number::from_string_unchecked(text.to_owned());
    if n.to_string() == text {
        n
    } else {
        serde_json::Number::from_str(text).unwrap_or(n)
    }
}

/// Plain scalars YAML 1.2 reads as numbers that JSON cannot spell: a
/// sign `+`, a leading or trailing `.`, `0x`/`0o`, `.inf`, `.nan`.
fn yaml_only_number(text: &str) -> bool {
    let t = text.strip_prefix(['+', '-']).unwrap_or(text);
    let lower = t.to_ascii_lowercase();
    if matches!(lower.as_str(), ".inf" | ".nan") {
        return true;
    }
    if let Some(hex) = lower.strip_prefix("0x") {
        return !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    if let Some(oct) = lower.strip_prefix("0o") {
        return !oct.is_empty() && oct.bytes().all(|b| (b'0'..=b'7').contains(&b));
    }
    // `+1`, `.5`, `1.`, `01`: digits and one dot, read as a number by YAML.
    !is_json_number(text)
        && t.bytes().any(|b| b.is_ascii_digit())
        && t.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && t.bytes().filter(|b| *b == b'.').count() <= 1
        && t.parse::<f64>().is_ok()
}

/// A scenario's text as written, to walk beside what serde_yaml read.
#[derive(Debug)]
pub struct Written {
    root: Node,
    tree: Tree,
}

/// A node of a [`Written`] text.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    node: &'a Node,
    tree: &'a Tree,
}

impl Written {
    /// The first document of `text`, or `None` when the event parser
    /// cannot read it (then a body keeps serde_yaml's reading).
    pub fn parse(text: &str) -> Option<Written> {
        parse(text).map(|(root, tree)| Written { root, tree })
    }

    pub fn root(&self) -> At<'_> {
        At {
            node: &self.root,
            tree: &self.tree,
        }
    }
}

impl<'a> At<'a> {
    /// The value of `key` in this map.
    pub fn get(self, key: &str) -> Option<At<'a>> {
        self.tree.get(self.node, key).map(|node| At {
            node,
            tree: self.tree,
        })
    }

    /// The items of this sequence (none if it is not one).
    pub fn items(self) -> Vec<At<'a>> {
        match self.tree.resolve(self.node) {
            Some(Node::Seq(items)) => items
                .iter()
                .map(|node| At {
                    node,
                    tree: self.tree,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Puts the numbers of this node back into `value` as written.
    pub fn restore(self, value: &mut Value) -> Result<(), SpellingError> {
        self.tree.restore(self.node, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_number_syntax() {
        for ok in [
            "0",
            "-0",
            "1",
            "1.50",
            "1e400",
            "18446744073709551616",
            "-1.0E-7",
            "2E+3",
        ] {
            assert!(is_json_number(ok), "{ok}");
        }
        for bad in [
            "", "-", "01", "+1", ".5", "1.", "1e", "0x1F", "1_000", "Infinity", "1.5.2",
        ] {
            assert!(!is_json_number(bad), "{bad}");
        }
    }

    #[test]
    fn numbers_keep_their_exponent() {
        for text in [
            "2E+3",
            "1e400",
            "1.50",
            "-0",
            "18446744073709551616",
            "1E-7",
        ] {
            assert_eq!(Value::Number(number_as_written(text)).to_string(), text);
        }
    }

    #[test]
    fn yaml_only_spellings() {
        for y in [
            "+1", ".5", "1.", "0x1F", "0o17", ".inf", "-.inf", ".NaN", "+.5",
        ] {
            assert!(yaml_only_number(y), "{y}");
        }
        for n in ["1", "abc", "1.2.3", "v1", "1_000", "1e400"] {
            assert!(!yaml_only_number(n), "{n}");
        }
    }
}
