//! The names of the system model's properties, shared by the model, its
//! mutants, the scenario exporter, the CLI and the tests. A file of its own
//! so that the model and its mutants both depend on it, not on each other.

pub const ONE_RUN_PER_KEY: &str = "at most one run per (session, key)";
pub const INPUT_ONCE: &str = "a logical request's input is appended at most once";
pub const KEY_PER_SESSION: &str = "a key never resolves to another session's run";
pub const NAMES_HOLDER: &str = "every attach, replay and typed 409 names the key's holder";
pub const DELETE_FREES_KEYS: &str = "after deleteSession the session holds no key";
pub const KEYLESS_NEVER_ATTACHED: &str = "a keyless entry is never attached";
pub const ATTACH_SAME_INPUT: &str = "an attach or replay is for the holder's own input";
pub const KEY_REFUSAL: &str =
    "a commit of a taken key is refused request_key_taken naming the holder";
pub const LOST_RACE_ATTACHES: &str =
    "a lost race never surfaces request_key_taken (unless the session was deleted meanwhile)";

pub const SOMETIMES_NEW: &str = "new";
pub const SOMETIMES_ATTACH: &str = "attach";
pub const SOMETIMES_REPLAY: &str = "replay";
pub const SOMETIMES_CONFLICT: &str = "state_request_key_conflict";
pub const SOMETIMES_ALREADY_COMPLETED: &str = "state_request_already_completed";
pub const SOMETIMES_LOST_RACE: &str = "lost race re-plans and attaches";
pub const SOMETIMES_REUSED: &str = "key re-used after delete";
/// Only with `expiries > 0`: a keyed retry of a run whose lease expired
/// gets the replay answer on the interrupted run (never a second run).
pub const SOMETIMES_EXPIRED_REPLAY: &str = "a retry of an expired run replays it interrupted";

/// Sometimes-property name -> the id suffix of its exported scenario.
pub const SOMETIMES_IDS: [(&str, &str); 7] = [
    (SOMETIMES_NEW, "new"),
    (SOMETIMES_ATTACH, "attach"),
    (SOMETIMES_REPLAY, "replay"),
    (SOMETIMES_CONFLICT, "key-conflict"),
    (SOMETIMES_ALREADY_COMPLETED, "already-completed"),
    (SOMETIMES_LOST_RACE, "lost-race-attaches"),
    (SOMETIMES_REUSED, "key-reused-after-delete"),
];
