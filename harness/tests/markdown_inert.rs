//! Whatever a target writes stays text in the Markdown certificate, in
//! every context (table cells, headings, lists, the profile row, warnings,
//! blocks): checked by rendering the certificate with a real CommonMark +
//! GFM parser (comrak, with GitHub's extensions) and walking the tree, not
//! by looking for characters (issue 51: a declared `replayHeader` of
//! `**Conforms**~~x~~` rendered bold and struck through on GitHub).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use comrak::nodes::{AstNode, NodeValue};
use comrak::{parse_document, Arena, Options};
use serde_json::json;

use reqkey_harness::report::{certificate, ReportContext};
use reqkey_harness::run::event::{Reporter, RunSummary};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::run::select::NotApplicable;
use reqkey_harness::run::suite;
use reqkey_harness::targets::latency::TargetWarning;
use reqkey_harness::targets::profile::resolve_profile;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{Level, TargetOptions};

/// Every target text carries this, so that it can be found in the tree.
const MARK: &str = "EVIL";

/// Markdown that acts when it is not made inert: emphasis, strong,
/// strike-through, links (inline, reference, autolinks of every GFM
/// kind), images, raw HTML, entities, headings and lists at a line's
/// start, a table cell's end, code fences, backticks, line breaks.
fn hostile() -> Vec<String> {
    [
        "**EVIL-bold**~~EVIL-strike~~",
        "*EVIL-em* _EVIL-em_ __EVIL__",
        "[EVIL-link](https://evil.example/)",
        "![EVIL-image](https://evil.example/x.png)",
        "<b>EVIL-html</b><script>alert(1)</script>",
        "https://EVIL.example/autolink",
        "www.EVIL.example",
        "EVIL@evil.example",
        "<https://EVIL.example/>",
        "&lt;EVIL&gt; &amp;",
        "a | EVIL | cell | breaker",
        "`EVIL` `` ` `` ```",
        "\n# EVIL heading\n- EVIL item\n> EVIL quote\n",
        "EVIL\r\n\r\n**EVIL after a blank line**",
        "[EVIL]: https://evil.example/ref",
        "\\*EVIL backslash\\*",
        "~EVIL~ ~~~EVIL~~~",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

fn gfm() -> Options<'static> {
    let mut o = Options::default();
    o.extension.table = true;
    o.extension.strikethrough = true;
    o.extension.autolink = true;
    o.extension.tagfilter = true;
    o.extension.tasklist = true;
    o.extension.footnotes = true;
    o.render.unsafe_ = true;
    o
}

/// The text of a node's subtree that is not code (a code span or block
/// is where target text belongs), with raw HTML and link targets.
fn text_of<'a>(node: &'a AstNode<'a>) -> String {
    let mut out = String::new();
    for n in node.descendants() {
        match &n.data.borrow().value {
            NodeValue::Text(t) => out.push_str(t),
            NodeValue::HtmlInline(h) => out.push_str(h),
            NodeValue::HtmlBlock(h) => out.push_str(&h.literal),
            NodeValue::Link(l) | NodeValue::Image(l) => out.push_str(&l.url),
            _ => {}
        }
    }
    out
}

/// Every place target text acted in `markdown`: an element made of it
/// (emphasis, strong, strike-through, link, image, raw HTML, heading, list
/// item, quote), or target text standing as plain text outside a code span
/// or block.
fn acting(markdown: &str) -> Vec<String> {
    let arena = Arena::new();
    let root = parse_document(&arena, markdown, &gfm());
    let mut found = Vec::new();
    for node in root.descendants() {
        let value = node.data.borrow().value.clone();
        let kind = match &value {
            NodeValue::Emph => "emphasis",
            NodeValue::Strong => "strong",
            NodeValue::Strikethrough => "strike-through",
            NodeValue::Link(_) => "link",
            NodeValue::Image(_) => "image",
            NodeValue::HtmlInline(_) => "inline HTML",
            NodeValue::HtmlBlock(_) => "HTML block",
            NodeValue::Heading(_) => "heading",
            NodeValue::Item(_) => "list item",
            NodeValue::BlockQuote => "quote",
            NodeValue::FootnoteDefinition(_) => "footnote",
            NodeValue::Text(t) if t.contains(MARK) => {
                found.push(format!("plain text outside code: {t:?}"));
                continue;
            }
            _ => continue,
        };
        // An element is the target's when target text stands in it
        // outside code (a heading or list item of the harness's own that
        // quotes target text in a code span is not).
        let text = text_of(node);
        if text.contains(MARK) {
            found.push(format!("{kind} made of target text: {text:?}"));
        }
    }
    found
}

/// A failing run of one embedded store scenario, its result then given
/// hostile texts wherever a target's words reach a result.
async fn hostile_run(text: &str) -> RunSummary {
    let (_, scenarios) = suite::embedded_suite(Level::Store).unwrap();
    let chosen: Vec<_> = scenarios
        .into_iter()
        .filter(|s| s.id == "store.boundaries")
        .collect();
    let target = open_target("broken-memory:no-key-rule", TargetOptions::default())
        .await
        .unwrap();
    let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
    let mut summary = runner::run(target, &chosen, &RunConfig::new(3), &mut reporters).await;
    let r = &mut summary.results[0];
    r.id = format!("{} {text}", r.id);
    let f = r.failure.as_mut().expect("it failed");
    f.step = text.to_owned();
    f.message = text.to_owned();
    f.detail = Some(text.to_owned());
    f.expected = Some(json!({ "error": text }));
    f.actual = Some(json!({ text: text }));
    summary.warnings = vec![TargetWarning {
        code: "nagle_stall",
        message: text.to_owned(),
        fix: text.to_owned(),
    }];
    summary
}

async fn hostile_context(text: &str) -> ReportContext {
    let mut ctx = ReportContext::new("certify", text);
    ctx.health = Some(json!({
        "name": text, "version": text, "protocol": text,
        "replicas": [text, text],
    }));
    let idem = open_target("reference-idem", TargetOptions::default())
        .await
        .unwrap();
    let mut profile = resolve_profile(idem.as_ref(), None, 10_000).await.unwrap();
    let declared = profile.idem.as_mut().expect("an idem profile");
    declared.replay_header = Some(text.to_owned());
    ctx.profile = Some(profile);
    ctx.not_applicable = vec![NotApplicable {
        id: format!("idem.x {text}"),
        file: "x.yaml".into(),
        requires: format!("replayHeader {text}"),
    }];
    ctx
}

#[tokio::test]
async fn no_target_text_renders_as_markdown_in_any_context() {
    for text in hostile() {
        let ctx = hostile_context(&text).await;
        let summary = hostile_run(&text).await;
        let md = certificate::render(&ctx, &summary);
        assert!(md.contains(MARK), "the target's text is quoted");
        let acting = acting(&md);
        assert!(
            acting.is_empty(),
            "{text:?} acted in the certificate:\n{}\n\n{md}",
            acting.join("\n")
        );
    }
}

#[test]
fn the_check_sees_markdown_that_acts() {
    // The walk itself must be able to fail: unescaped target text in a
    // cell, a heading, a list and a warning line is found.
    let md = "| a | b |\n|---|---|\n| x | **EVIL** |\n\n# EVIL\n\n- EVIL\n\n**warning: www.EVIL.example**\n";
    let found = acting(md);
    for kind in ["strong made", "heading", "list item", "link"] {
        assert!(
            found.iter().any(|f| f.starts_with(kind)),
            "{kind}: {found:?}"
        );
    }
    assert!(acting("`**EVIL**` and ``a`EVIL`b``").is_empty());
}
