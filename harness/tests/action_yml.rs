//! The GitHub Action's `action.yml` is YAML GitHub can load, and it runs
//! the target through `reqkey certify --start` with a cached build
//! (issue 41). A description holding `: ` unquoted made the whole file
//! invalid YAML before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_yaml::Value;

#[test]
fn action_yml_loads_and_caches_the_build() {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../action.yml")).unwrap();
    let action: Value = serde_yaml::from_str(&text).expect("action.yml is valid YAML");
    let steps = action["runs"]["steps"].as_sequence().unwrap();
    let uses: Vec<&str> = steps.iter().filter_map(|s| s["uses"].as_str()).collect();
    assert!(
        uses.iter().any(|u| u.starts_with("actions/cache@")),
        "{uses:?}"
    );
    for input in ["target", "start", "seed", "out"] {
        assert!(
            action["inputs"][input]["description"].as_str().is_some(),
            "input {input} has a description"
        );
    }
    let certify =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../action/certify.sh"))
            .unwrap();
    assert!(
        certify.contains(r#"start_args=(--start "$start""#),
        "reqkey starts the target"
    );
}
