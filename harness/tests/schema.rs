//! The checked-in scenario schema is the one the loader's types generate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn the_checked_in_scenario_schema_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/scenario.schema.json");
    let checked_in = std::fs::read_to_string(&path).expect("scenarios/scenario.schema.json exists");
    let generated = format!(
        "{}\n",
        reqkey_harness::scenario::schema::scenario_schema_json()
    );
    assert!(
        checked_in == generated,
        "scenarios/scenario.schema.json is stale: regenerate it with\n  \
         cargo run -p reqkey-harness -- schema > scenarios/scenario.schema.json"
    );
}
