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
    if checked_in != generated && std::env::var_os("REQKEY_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("scenarios/scenario.schema.json is writable");
        return;
    }
    assert!(
        checked_in == generated,
        "scenarios/scenario.schema.json is stale: regenerate it with\n  \
         cargo run -p reqkey-harness -- schema > scenarios/scenario.schema.json\n  \
         (or REQKEY_BLESS=1 cargo test -p reqkey-harness --test schema)"
    );
}
