//! Scenarios: loading and validating the YAML corpus.
//!
//! The format is documented in `docs/scenario-format.md`. A step is a map
//! with exactly one action key plus modifiers; it is read by a hand-written
//! map visitor rather than a derived enum so that every mistake — an unknown
//! key, two actions, none — is a serde error raised while the YAML parser
//! still knows where it is, and so reaches the user as `file:line:col`.

pub mod agent_step;
pub mod clause;
pub mod fault;
pub mod idem;
pub mod judges;
pub mod limits;
pub mod link;
pub mod locate;
pub mod pattern;
pub mod raw;
pub mod schema;
pub mod spelling;
pub mod vars;

pub mod load;
pub mod requires;
pub mod scenario;
pub mod step;
mod step_visitor;
pub mod validate;

pub use load::{
    load_paths, parse_all, parse_scenario, read_bounded, read_scenario_file, scenario_files,
    LoadError,
};
pub use requires::Requires;
pub use scenario::{
    ClauseRef, MixedHistoriesSpec, Scenario, MAX_COPIES, MAX_MIXED_IN_FLIGHT, MAX_MIXED_PROGRAMS,
    MAX_REPEAT, MAX_SLEEP_MS,
};
pub use step::{
    all_step_keys, Action, GroupCount, GroupRule, Step, MODIFIERS, OTHER_ACTIONS, STORE_ACTIONS,
};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use reqkey_model::vocab::{ConcurrentEntry, Profile};
    use serde_json::Value;
    use std::path::Path;

    fn err(text: &str) -> String {
        parse_scenario(Path::new("x.yaml"), text)
            .unwrap_err()
            .to_string()
    }

    const HEAD: &str = "id: t\nlevel: store\nsummary: s\nsteps:\n";
    /// A head whose one clause the steps' `judges:` name (`J`).
    const HEAD_CHECKS: &str =
        "id: t\nlevel: store\nsummary: s\nchecks: [store.reads.list-runs-order]\nsteps:\n";
    const J: &str = "    judges: [store.reads.list-runs-order]\n";

    #[test]
    fn a_profile_field_the_level_does_not_declare_is_refused_at_its_step() {
        let idem = "id: t\nlevel: idem\nsummary: s\nsteps:\n  - http: {method: POST, path: /orders, headers: [[Idempotency-Key, '${key.k}']]}\n    expect: {status: $profile.concurrentStatus}\n";
        parse_scenario(
            Path::new("x.yaml"),
            &idem
                .replace("steps:", "checks: [idem.concurrent.declared]\nsteps:")
                .replace(
                    "Status}\n",
                    "Status}\n    judges: [idem.concurrent.declared]\n",
                ),
        )
        .unwrap();
        let e = err(&idem.replace("concurrentStatus", "concurrentStatuss"));
        assert!(e.starts_with("x.yaml:5:"), "{e}");
        assert!(
            e.contains("`$profile.concurrentStatuss` names no field of the idem profile"),
            "{e}"
        );
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: $profile.durable}}\n"
        ));
        assert!(e.contains("a store declares none"), "{e}");
        let e = err(&idem
            .replace("level: idem", "level: agent")
            .replace("$profile.concurrentStatus", "201"));
        assert!(e.contains("idem scenarios only"), "{e}");
    }

    #[test]
    fn an_unknown_step_kind_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: $s, runId: r}}\n    expect: any\n  - frobnicate: {{}}\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:5: steps[1]: unknown field `frobnicate`"),
            "{e}"
        );
    }

    #[test]
    fn two_actions_in_one_step_are_refused() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.contains("exactly one action"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn an_unknown_clause_names_file_line_and_column() {
        let e = err("id: t\nlevel: store\nchecks: [store.commit.key-holder, store.nope]\nsummary: s\nsteps: []\n");
        assert!(e.starts_with("x.yaml:3:"), "{e}");
        assert!(e.contains("`store.nope` is not a clause id"), "{e}");
    }

    #[test]
    fn a_clause_of_another_level_or_listed_twice_is_refused() {
        let e = err(
            "id: t\nlevel: store\nchecks: [agent.route.start]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: any\n",
        );
        assert!(e.contains("not certified at the store level"), "{e}");
        let e = err(
            "id: t\nlevel: store\nchecks: [store.commit.cas, store.commit.cas]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: any\n",
        );
        assert!(e.contains("listed twice"), "{e}");
        let ok = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: store\nchecks: [store.commit.cas]\nsummary: s\nsteps:\n  - getRun: {sessionId: s, runId: r}\n    expect: {ok: null}\n    judges: [store.commit.cas]\n",
        )
        .unwrap();
        assert_eq!(ok.checks, vec![ClauseRef("store.commit.cas".into())]);
    }

    #[test]
    fn malformed_yaml_names_the_line() {
        let e = err("id: t\nlevel: store\nsummary: [unclosed\n");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn unknown_top_level_fields_are_refused() {
        let e = err("id: t\nlevel: store\nsummary: s\nstepz: []\n");
        assert!(e.contains("unknown field `stepz`"), "{e}");
    }

    #[test]
    fn an_unknown_top_level_field_names_file_line_and_column() {
        let e = err("id: t\nlevel: store\nsummary: s\nrepeats: 3\nsteps: []\n");
        assert!(e.starts_with("x.yaml:4:1: unknown field `repeats`"), "{e}");
    }

    #[test]
    fn an_unknown_field_in_an_expect_group_rule_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n    expect_group:\n      - count: 1\n        matches: {{ok: null}}\n"
        ));
        assert!(e.starts_with("x.yaml:9:9:"), "{e}");
        assert!(e.contains("unknown field `matches`"), "{e}");
    }

    #[test]
    fn an_unknown_modifier_inside_a_parallel_item_names_file_line_and_column() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n        expext: {{ok: null}}\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:9: steps[0].parallel[0]: unknown field `expext`"),
            "{e}"
        );
    }

    #[test]
    fn a_step_without_an_expectation_is_refused_at_its_line() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    expect: {{ok: null}}\n  - listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.starts_with("x.yaml:7:"), "{e}");
        assert!(e.contains("has no expectation"), "{e}");
        assert!(e.contains("`expect: any`"), "{e}");
        // A bind alone checks nothing either.
        let e = err(&format!(
            "{HEAD}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: 1}}\n    bind: {{x: ok.run.runId}}\n"
        ));
        assert!(e.contains("has no expectation"), "{e}");
        let e = err(&format!("{AGENT}  - http: {{path: /health}}\n"));
        assert!(e.contains("has no expectation"), "{e}");
    }

    #[test]
    fn expect_any_says_on_purpose_that_nothing_is_checked() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!("{HEAD}  - listRuns: {{sessionId: s}}\n    expect: any\n"),
        )
        .unwrap();
        assert!(s.steps[0].expect_any);
        assert_eq!(s.steps[0].expect, None);
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    expect: any\n    expect_raw: '{{}}'\n"
        ));
        assert!(e.contains("cannot go with"), "{e}");
    }

    #[test]
    fn a_named_answer_nothing_judges_is_refused() {
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    as: a\n"
        ));
        assert!(e.contains("the answer `a` has no expectation"), "{e}");
        parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD_CHECKS}  - parallel:\n      - copies: 2\n        as: c\n        listRuns: {{sessionId: s}}\n  - expect_one_of: [{{c.0: {{ok: []}}}}]\n{J}"
            ),
        )
        .unwrap();
    }

    #[test]
    fn a_parallel_group_that_judges_nothing_is_refused() {
        let e = err(&format!(
            "{HEAD}  - parallel:\n      - copies: 2\n        listRuns: {{sessionId: s}}\n"
        ));
        assert!(e.contains("parallel[0] has no expectation"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
        for judged in [
            "    linearizable: true\n",
            "    expect_group: [{count: rest, match: {ok: []}}]\n",
        ] {
            parse_scenario(
                Path::new("x.yaml"),
                &format!(
                    "{HEAD_CHECKS}  - parallel:\n      - copies: 2\n        listRuns: {{sessionId: s}}\n{judged}{J}"
                ),
            )
            .unwrap();
        }
    }

    #[test]
    fn raw_steps_parse_and_their_expectations_must_be_json() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD_CHECKS}  - raw: '{{\"op\":\"listRuns\",\"args\":{{\"sessionId\":\"${{s}}\"}}}}'\n    expect_raw: '{{\"ok\":[]}}'\n{J}"
            ),
        )
        .unwrap();
        assert!(matches!(&s.steps[0].action, Action::Raw(t) if t.contains("${s}")));
        assert_eq!(s.steps[0].expect_raw.as_deref(), Some("{\"ok\":[]}"));
        let e = err(&format!(
            "{HEAD}  - listRuns: {{sessionId: s}}\n    expect_raw: '{{\"ok\": ['\n"
        ));
        assert!(e.contains("expect_raw is not JSON"), "{e}");
        assert!(e.starts_with("x.yaml:"), "{e}");
    }

    #[test]
    fn a_second_document_names_where_it_starts() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    expect: any\n---\nid: u\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:1: ") && e.contains("more than one document"),
            "{e}"
        );
    }

    #[test]
    fn checks_on_the_loaded_scenario_name_the_node_they_are_about() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{sessionId: s, runId: r}}\n    as: a\n    expect: any\n  - parallel:\n      - getRun: {{sessionId: s, runId: r}}\n        expect: any\n      - getRun: {{sessionId: s, runId: r}}\n        as: a\n        expect: any\n"
        ));
        assert!(
            e.starts_with("x.yaml:11:9: steps[1]: the answer name `a`"),
            "{e}"
        );
        let e = err(
            "id: t\nlevel: store\nsummary: s\nrepeat: 0\nsteps:\n  - getRun: {}\n    expect: any\n",
        );
        assert!(e.starts_with("x.yaml:4:9: repeat must be"), "{e}");
        let e = err("id: t\nlevel: store\nsummary: s\nsteps: []\n");
        assert!(e.starts_with("x.yaml:4:8: a scenario needs"), "{e}");
    }

    #[test]
    fn oversized_or_too_deep_texts_are_refused_before_parsing() {
        let e = err(&format!(
            "{HEAD}  - getRun: {{x: {}}}\n",
            "[".repeat(1_000_000)
        ));
        assert!(
            e.starts_with("x.yaml:5:") && e.contains("nested deeper than 64"),
            "{e}"
        );
        let e = err(&format!(
            "{HEAD}{}",
            "  - getRun: {sessionId: s, runId: r}\n".repeat(40_000)
        ));
        assert!(e.contains("at most 1048576 bytes"), "{e}");
        assert!(!e.starts_with("x.yaml:0:0"), "{e}");
    }

    #[test]
    fn a_file_over_the_limit_is_not_read_whole_and_bad_utf8_has_a_position() {
        let dir = std::env::temp_dir().join(format!("reqkey-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.yaml");
        let file = std::fs::File::create(&big).unwrap();
        // Sparse: 2 GiB on paper, nothing on disk.
        file.set_len(2 << 30).unwrap();
        let e = read_scenario_file(&big).unwrap_err().to_string();
        assert!(e.contains("at most 1048576 bytes"), "{e}");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, b"id: t\nsummary: \xff\n").unwrap();
        let e = read_scenario_file(&bad).unwrap_err().to_string();
        assert!(
            e.ends_with("bad.yaml:2:10: the file is not UTF-8 from here"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn expect_one_of_must_name_earlier_answers() {
        let e = err(&format!("{HEAD}  - expect_one_of: [{{a: {{ok: null}}}}]\n"));
        assert!(e.contains("no earlier step answers as"), "{e}");
    }

    #[test]
    fn requires_parses_and_says_what_a_profile_lacks() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: agent\nsummary: s\nrequires: {supportsRequestKey: true, concurrentEntry: interrupt_previous}\nsteps:\n  - sleep_ms: 1\n",
        )
        .unwrap();
        let ignored = Profile {
            supports_request_key: false,
            ..Profile::default()
        };
        assert_eq!(
            s.requires.unmet(&ignored).as_deref(),
            Some("supportsRequestKey: true, concurrentEntry: interrupt_previous")
        );
        let ip = Profile {
            concurrent_entry: ConcurrentEntry::InterruptPrevious,
            ..Profile::default()
        };
        assert_eq!(s.requires.unmet(&ip), None);
        let waits = parse_scenario(
            Path::new("x.yaml"),
            "id: t\nlevel: agent\nsummary: s\nrequires: {entryWaitMs: 1000}\nsteps:\n  - sleep_ms: 1\n",
        )
        .unwrap();
        assert_eq!(
            waits.requires.unmet(&Profile::default()).as_deref(),
            Some("entryWaitMs: at least 1000")
        );
        let declared = Profile {
            entry_wait_ms: 2000,
            ..Profile::default()
        };
        assert_eq!(waits.requires.unmet(&declared), None);
        let e = err("id: t\nlevel: agent\nsummary: s\nrequires: {concurrentEntry: queue}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.starts_with("x.yaml:4:"), "{e}");
        let e = err("id: t\nlevel: agent\nsummary: s\nrequires: {supportsRequestKeys: true}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.contains("unknown field"), "{e}");
        let e = err("id: t\nlevel: store\nsummary: s\nrequires: {supportsRequestKey: true}\nsteps:\n  - sleep_ms: 1\n");
        assert!(e.contains("a store's profile is fixed"), "{e}");
    }

    #[test]
    fn a_full_step_parses() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{HEAD_CHECKS}  - parallel:\n      - copies: 3\n        as: c\n        getRun: {{sessionId: $s, runId: r}}\n    linearizable: true\n    expect_group:\n      - count: rest\n        match: {{ok: null}}\n{J}"
            ),
        )
        .unwrap();
        let Action::Parallel(items) = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(items[0].copies, Some(3));
        assert!(s.steps[0].linearizable);
        assert_eq!(s.steps[0].expect_group[0].count, GroupCount::Rest);
    }

    const AGENT: &str = "id: t\nlevel: agent\nsummary: s\nsteps:\n";
    const AGENT_CHECKS: &str =
        "id: t\nlevel: agent\nsummary: s\nchecks: [agent.route.start]\nsteps:\n";
    const JA: &str = "    judges: [agent.route.start]\n";

    #[test]
    fn agent_steps_parse_with_their_modifiers() {
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!(
                "{AGENT_CHECKS}  - http: {{method: POST, path: \"/sessions/${{s}}/start\", headers: [[K, v], [K, {{hex: ff}}]], json: {{input: 1}}}}\n    expect: {{status: 201}}\n    expect_not_echoed: [v]\n{JA}  - wait_run: {{sessionId: $s, runId: $r, status: [completed, failed]}}\n{JA}"
            ),
        )
        .unwrap();
        assert!(matches!(s.steps[0].action, Action::Http(_)));
        assert_eq!(s.steps[0].expect_not_echoed, vec![Value::from("v")]);
        assert!(matches!(s.steps[1].action, Action::WaitRun(_)));
    }

    /// The numbers a body carries go on the wire as the file spells them
    /// (issue 15 F8: 2^64 went out as 1.8e19, `1e400` was refused).
    #[test]
    fn body_numbers_keep_their_spelling() {
        const NUMS: &str = "{big: 18446744073709551616, huge: 1e400, dec: 1.50, exp: 2E+3, neg: -0, list: [1.0, 10000000000000000000000001], str: '1.50'}";
        const WIRE: &str = r#"{"big":18446744073709551616,"dec":1.50,"exp":2E+3,"huge":1e400,"list":[1.0,10000000000000000000000001],"neg":-0,"str":"1.50"}"#;
        let text = format!(
            "{AGENT}  - http: {{method: POST, path: /sessions/s/start, json: {{input: {NUMS}}}}}\n    expect: any\n"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        let Action::Http(step) = &s.steps[0].action else {
            panic!()
        };
        let request = step.instantiate(&mut |v: &Value| v.clone()).unwrap();
        let body = String::from_utf8(request.body.unwrap()).unwrap();
        assert_eq!(body, format!(r#"{{"input":{WIRE}}}"#));
        // Store args, `rpc` and the steps of a `parallel` group likewise.
        let text = format!(
            "{HEAD_CHECKS}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: {NUMS}}}\n    expect: any\n  - rpc: {{op: getRun, args: {{n: 1.50}}}}\n    expect: any\n  - parallel:\n      - listRuns: {{sessionId: s, n: 1e400}}\n    expect_group:\n      - count: rest\n        match: {{ok: []}}\n{J}"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        let Action::Store { args, .. } = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(args["input"].to_string(), WIRE);
        let Action::Rpc(rpc) = &s.steps[1].action else {
            panic!()
        };
        assert_eq!(rpc.to_string(), r#"{"args":{"n":1.50},"op":"getRun"}"#);
        let Action::Parallel(items) = &s.steps[2].action else {
            panic!()
        };
        let Action::Store { args, .. } = &items[0].action else {
            panic!()
        };
        assert_eq!(args.to_string(), r#"{"n":1e400,"sessionId":"s"}"#);
    }

    /// An anchor and its aliases carry the spelling too.
    #[test]
    fn aliased_body_numbers_keep_their_spelling() {
        let text = format!(
            "{HEAD}  - commitRunStart: {{sessionId: s, runId: r, expectedCurrentRunId: null, input: &n {{x: 1.50}}}}\n    expect: any\n  - commitRunStart: {{sessionId: s, runId: r2, expectedCurrentRunId: r, input: *n}}\n    expect: any\n"
        );
        let s = parse_scenario(Path::new("x.yaml"), &text).unwrap();
        for step in &s.steps {
            let Action::Store { args, .. } = &step.action else {
                panic!()
            };
            assert_eq!(args["input"].to_string(), r#"{"x":1.50}"#);
        }
    }

    /// A YAML number JSON cannot spell is refused where it stands.
    #[test]
    fn yaml_only_numbers_in_bodies_are_load_errors() {
        for (n, col) in [("0x1F", 32), ("+1", 32), (".5", 32), (".inf", 32)] {
            let e = err(&format!(
                "{AGENT}  - http: {{path: /x, json: {{n: {n}}}}}\n    expect: any\n"
            ));
            assert!(
                e.starts_with(&format!("x.yaml:5:{col}:")) && e.contains("no JSON spelling"),
                "{n}: {e}"
            );
        }
        // Quoted, it is a string, sent as one.
        let s = parse_scenario(
            Path::new("x.yaml"),
            &format!("{AGENT}  - http: {{path: /x, json: {{n: '0x1F'}}}}\n    expect: any\n"),
        )
        .unwrap();
        let Action::Http(step) = &s.steps[0].action else {
            panic!()
        };
        assert_eq!(step.source["json"].to_string(), r#"{"n":"0x1F"}"#);
    }

    #[test]
    fn malformed_agent_steps_name_file_and_line() {
        let e = err(&format!("{AGENT}  - http: {{path: /x, jsn: {{}}}}\n"));
        assert!(
            e.starts_with("x.yaml:5:") && e.contains("no field `jsn`"),
            "{e}"
        );
        let e = err(&format!(
            "{AGENT}  - wait_run: {{sessionId: s, runId: r}}\n"
        ));
        assert!(e.contains("wait_run.status"), "{e}");
        let e = err(&format!(
            "{AGENT}  - parallel:\n      - http: {{path: /x}}\n    linearizable: true\n"
        ));
        assert!(e.contains("cannot take it"), "{e}");
    }
}
