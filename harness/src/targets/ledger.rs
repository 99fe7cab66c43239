//! The effect oracle of an app played through an API map (`--api`): what
//! ran, as the contract's `GET /.reqkey/effects` says it, worked out from
//! what the app shows instead of a counter it does not have.
//!
//! Every request the map plays is an *identity* (contract method and path,
//! the scenario's caller, the raw key, the SHA-256 of the scenario's body:
//! the effect entry's fields, SPEC 10). The ledger keeps, per identity,
//! the ids its answers carried (an id first seen is owned by the identity
//! that got it: a replay carries its owner's id) and the answers that
//! carried none. Two oracles count effects from it:
//!
//! - **reads** (the app's own routes, summed, as each caller): the
//!   resources that appeared since the target opened, less those an
//!   answer named, are effects no answer named; those that appeared since
//!   the last effect query are given to the one identity of the window
//!   (the requests since that query) whose credential saw them. With two
//!   or more identities there, nobody can say whose they are: those
//!   identities are *not judged* (never passed).
//! - **answer ids** (no read route): an identity's effects are its
//!   distinct ids when every answer it got carried one; an answer without
//!   an id (an error, a refusal) may hide an effect: not judged.
//!
//! An effect query whose window holds an identity the oracle cannot count
//! is refused with the reason (`TargetError::Oracle`, exit 2 for that
//! step), so a scenario is never passed on a count nobody knows. Pure: the
//! counts are handed in by `mapped.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The most identities a ledger keeps (a certification sends a few
/// hundred); past it a request is not recorded and its effect queries are
/// not judged.
pub const MAX_IDENTITIES: usize = 100_000;

/// The fields of one effect entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub method: String,
    pub path: String,
    pub caller: Option<String>,
    /// The raw `Idempotency-Key` value, `None` without one.
    pub key: Option<Vec<u8>>,
    pub body_sha256: String,
}

impl Identity {
    pub fn new(
        method: &str,
        path: &str,
        caller: Option<String>,
        key: Option<Vec<u8>>,
        body: Option<&[u8]>,
    ) -> Identity {
        Identity {
            method: method.to_owned(),
            path: path.split('?').next().unwrap_or(path).to_owned(),
            caller,
            key,
            body_sha256: hex(&Sha256::digest(body.unwrap_or_default())),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug)]
struct Entry {
    identity: Identity,
    /// The map's caller whose credentials it was sent with.
    credential: String,
    /// The (app path, id) pairs it owns: ids first answered to it.
    owned: BTreeSet<(String, String)>,
    /// Answers that carried no id.
    unnamed: u32,
    /// Exchanges that broke (no whole answer).
    lost: u32,
    /// Effects no answer named, given to it.
    attributed: u64,
    /// Why its count is not known, if it is not.
    unknown: Option<String>,
    /// The scenario's body of its first request (the contract's `echo`).
    body: Value,
}

/// What an answer's id belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// The scenario's caller the id was first answered to.
    pub caller: Option<String>,
    /// That request's body.
    pub body: Value,
}

/// A request recorded, for [`Ledger::answered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(Option<usize>);

/// The ledger of one target.
#[derive(Debug, Default)]
pub struct Ledger {
    entries: Vec<Entry>,
    index: HashMap<Identity, usize>,
    owners: HashMap<(String, String), usize>,
    /// The identities sent since the last effect query (kept through
    /// queries in a row: a scenario's several queries share one window).
    window: BTreeSet<usize>,
    window_closed: bool,
    /// Per credential: the count when the target opened, and the effects
    /// no answer named at the last query.
    baseline: BTreeMap<String, u64>,
    unnamed_at_last: BTreeMap<String, u64>,
    /// Set once the ledger is full: nothing can be counted any more.
    overflowed: bool,
    /// Requests whose exchange broke (a timeout, a closed connection):
    /// their effect may still appear, in any later window.
    lost: u32,
}

impl Ledger {
    /// The read routes' counts when the target opened.
    pub fn set_baseline(&mut self, counts: BTreeMap<String, u64>) {
        self.baseline = counts;
    }

    /// Records a request about to be sent; opens a new window after an
    /// effect query.
    pub fn sent(&mut self, identity: Identity, credential: &str, body: Option<&[u8]>) -> Ticket {
        if std::mem::take(&mut self.window_closed) {
            self.window.clear();
        }
        let i = match self.index.get(&identity) {
            Some(i) => *i,
            None if self.entries.len() >= MAX_IDENTITIES => {
                self.overflowed = true;
                return Ticket(None);
            }
            None => {
                self.entries.push(Entry {
                    identity: identity.clone(),
                    credential: credential.to_owned(),
                    owned: BTreeSet::new(),
                    unnamed: 0,
                    lost: 0,
                    attributed: 0,
                    unknown: None,
                    body: body
                        .and_then(|b| serde_json::from_slice(b).ok())
                        .unwrap_or(Value::Null),
                });
                self.index.insert(identity, self.entries.len() - 1);
                self.entries.len() - 1
            }
        };
        self.window.insert(i);
        Ticket(Some(i))
    }

    /// Records the answer to a request: the id it carried (with the app
    /// path it was created on), or none. Returns who owns the id.
    pub fn answered(&mut self, ticket: Ticket, id: Option<(String, String)>) -> Option<Owner> {
        let i = ticket.0?;
        let Some(id) = id else {
            self.entries[i].unnamed += 1;
            return None;
        };
        let owner = *self.owners.entry(id.clone()).or_insert(i);
        self.entries[owner].owned.insert(id);
        let o = &self.entries[owner];
        Some(Owner {
            caller: o.identity.caller.clone(),
            body: o.body.clone(),
        })
    }

    /// Records an answer the app marked as a replay (the declared
    /// `replayHeader`) carrying `id`: a replay never owns the id it
    /// carries, even when it is recorded before the answer of the request
    /// that ran (concurrent requests answered in any order, issue 57).
    /// Returns who owns the id, if known yet.
    pub fn answered_replay(&mut self, ticket: Ticket, id: (String, String)) -> Option<Owner> {
        ticket.0?;
        let owner = *self.owners.get(&id)?;
        let o = &self.entries[owner];
        Some(Owner {
            caller: o.identity.caller.clone(),
            body: o.body.clone(),
        })
    }

    /// Records a request whose exchange broke (no answer, or half of one):
    /// its handler may still run, so an effect no answer named, now or
    /// later, cannot be told from its own.
    pub fn lost(&mut self, ticket: Ticket) {
        if let Some(i) = ticket.0 {
            self.entries[i].unnamed += 1;
            self.entries[i].lost += 1;
            self.lost += 1;
        }
    }

    /// The ids the run created, each with the credential it was created
    /// with (for the clean-up).
    pub fn created(&self) -> Vec<(String, String, String)> {
        self.entries
            .iter()
            .flat_map(|e| {
                e.owned
                    .iter()
                    .map(|(path, id)| (e.credential.clone(), path.clone(), id.clone()))
            })
            .collect()
    }

    /// How many effects no answer named there are now (the read routes'
    /// counts since the target opened, less the ids answers named).
    fn unnamed_now(&self, credential: &str, count: u64) -> Result<u64, String> {
        let before = self.baseline.get(credential).copied().unwrap_or(0);
        let appeared = count.checked_sub(before).ok_or_else(|| {
            format!(
                "the read routes count {count} resources of {credential}, fewer than the {before} \
                 there were when the run began (something else deletes them)"
            )
        })?;
        let named = self
            .entries
            .iter()
            .filter(|e| e.credential == credential)
            .map(|e| e.owned.len() as u64)
            .sum::<u64>();
        appeared.checked_sub(named).ok_or_else(|| {
            format!(
                "the answers named {named} resources of {credential} but the read routes count \
                 {appeared} new ones (do the reads count what every route creates?)"
            )
        })
    }

    /// The effect document (`{"effects": [...]}`) by the read routes'
    /// counts now, per credential; `Err` when the window holds an identity
    /// whose effects cannot be counted.
    pub fn by_reads(&mut self, counts: &BTreeMap<String, u64>) -> Result<Value, String> {
        self.window_closed = true;
        let broke: Vec<usize> = self
            .window
            .iter()
            .copied()
            .filter(|i| self.entries[*i].lost > 0)
            .collect();
        self.unknown(
            &broke,
            "its exchange broke before a whole answer: its effect may still appear",
        );
        for (credential, count) in counts {
            let window: Vec<usize> = self
                .window
                .iter()
                .copied()
                .filter(|i| self.entries[*i].credential == *credential)
                .collect();
            let unnamed = match self.unnamed_now(credential, *count) {
                Ok(n) => n,
                Err(why) => {
                    self.unknown(&window, &why);
                    continue;
                }
            };
            let last = self.unnamed_at_last.get(credential).copied().unwrap_or(0);
            self.unnamed_at_last.insert(credential.clone(), unnamed);
            match unnamed.checked_sub(last) {
                Some(0) => {}
                Some(new) if self.lost > 0 => {
                    let why = format!(
                        "{new} effects no answer named appeared after {} requests of the run \
                         got no whole answer (theirs may be among them)",
                        self.lost
                    );
                    self.unknown(&window, &why);
                }
                Some(new) if window.len() == 1 => self.entries[window[0]].attributed += new,
                Some(new) => {
                    let why = format!(
                        "{new} effects no answer named appeared while {} requests with other \
                         keys, payloads or routes were sent: whose they are cannot be told",
                        window.len()
                    );
                    self.unknown(&window, &why);
                }
                None => self.unknown(
                    &window,
                    "resources no answer named disappeared between two effect queries",
                ),
            }
        }
        self.document(|e| e.owned.len() as u64 + e.attributed)
    }

    /// The effect document by the answers' ids alone.
    pub fn by_answer_ids(&mut self) -> Result<Value, String> {
        self.window_closed = true;
        let window: Vec<usize> = self.window.iter().copied().collect();
        for i in window {
            let e = &mut self.entries[i];
            if e.unnamed > 0 && e.unknown.is_none() {
                e.unknown = Some(format!(
                    "{} of its answers carried no id, and without a read route an effect \
                     behind such an answer cannot be seen",
                    e.unnamed
                ));
            }
        }
        self.document(|e| e.owned.len() as u64)
    }

    fn unknown(&mut self, entries: &[usize], why: &str) {
        for i in entries {
            self.entries[*i]
                .unknown
                .get_or_insert_with(|| why.to_owned());
        }
    }

    fn document(&self, count: impl Fn(&Entry) -> u64) -> Result<Value, String> {
        if self.overflowed {
            return Err(format!(
                "the run sent more than {MAX_IDENTITIES} distinct requests: the ledger is full"
            ));
        }
        let unknown: Vec<String> = self
            .window
            .iter()
            .filter_map(|i| {
                let e = &self.entries[*i];
                e.unknown.as_ref().map(|why| {
                    format!(
                        "{} {} (caller {}): {why}",
                        e.identity.method,
                        e.identity.path,
                        e.identity.caller.as_deref().unwrap_or("none")
                    )
                })
            })
            .collect();
        if let Some(first) = unknown.first() {
            return Err(format!(
                "the effects of {} requests of this window cannot be counted; {first}",
                unknown.len()
            ));
        }
        let effects: Vec<Value> = self
            .entries
            .iter()
            .filter(|e| e.unknown.is_none())
            .filter_map(|e| {
                let n = count(e);
                (n > 0).then(|| {
                    json!({
                        "method": e.identity.method,
                        "path": e.identity.path,
                        "caller": e.identity.caller,
                        "key": e.identity.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
                        "bodySha256": e.identity.body_sha256,
                        "count": n,
                    })
                })
            })
            .collect();
        Ok(json!({ "effects": effects }))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn who(caller: &str, key: &str) -> Identity {
        Identity::new(
            "POST",
            "/orders",
            Some(caller.into()),
            Some(key.as_bytes().to_vec()),
            Some(b"{}"),
        )
    }

    fn id(n: u32) -> Option<(String, String)> {
        Some(("/v1/orders".into(), format!("ord_{n}")))
    }

    fn counts(alice: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("alice".to_owned(), alice)])
    }

    #[test]
    fn a_replay_is_one_effect_and_its_owner_is_the_first_caller() {
        let mut l = Ledger::default();
        l.set_baseline(counts(5));
        let t = l.sent(who("alice", "k1"), "alice", Some(br#"{"a":1}"#));
        assert_eq!(
            l.answered(t, id(1)).unwrap().caller.as_deref(),
            Some("alice")
        );
        let t = l.sent(who("alice", "k1"), "alice", Some(br#"{"a":1}"#));
        l.answered(t, id(1));
        // Mallory gets alice's id: the owner says so, and it is no effect of hers.
        let t = l.sent(who("mallory", "k1"), "alice", None);
        let owner = l.answered(t, id(1)).unwrap();
        assert_eq!(
            (owner.caller.as_deref(), owner.body["a"].as_u64()),
            (Some("alice"), Some(1))
        );
        let doc = l.by_reads(&counts(6)).unwrap();
        assert_eq!(doc["effects"].as_array().unwrap().len(), 1);
        assert_eq!(doc["effects"][0]["count"], 1);
        assert_eq!(doc["effects"][0]["caller"], "alice");
    }

    #[test]
    fn an_effect_no_answer_named_goes_to_the_one_identity_of_the_window() {
        let mut l = Ledger::default();
        l.set_baseline(counts(0));
        for _ in 0..8 {
            let t = l.sent(who("alice", "burst"), "alice", None);
            l.answered(t, None);
        }
        let t = l.sent(who("alice", "burst"), "alice", None);
        l.answered(t, id(1));
        let doc = l.by_reads(&counts(2)).unwrap();
        assert_eq!(doc["effects"][0]["count"], 2, "{doc}");
        // A second query in a row: the same window, nothing new.
        assert_eq!(l.by_reads(&counts(2)).unwrap(), doc);
    }

    #[test]
    fn an_effect_among_several_identities_is_not_judged_and_later_windows_are() {
        let mut l = Ledger::default();
        l.set_baseline(counts(0));
        for key in ["A", "a"] {
            let t = l.sent(who("alice", key), "alice", None);
            l.answered(t, None);
        }
        let e = l.by_reads(&counts(1)).unwrap_err();
        assert!(e.contains("cannot be told"), "{e}");
        let t = l.sent(who("alice", "next"), "alice", None);
        l.answered(t, id(9));
        let doc = l.by_reads(&counts(2)).unwrap();
        assert_eq!(doc["effects"].as_array().unwrap().len(), 1, "{doc}");
    }

    #[test]
    fn without_reads_an_answer_without_an_id_is_not_judged_and_two_ids_are_two_effects() {
        let mut l = Ledger::default();
        let t = l.sent(who("alice", "k"), "alice", None);
        l.answered(t, id(1));
        let t = l.sent(who("alice", "k"), "alice", None);
        l.answered(t, id(2));
        let doc = l.by_answer_ids().unwrap();
        assert_eq!(doc["effects"][0]["count"], 2);
        let t = l.sent(who("alice", "refused"), "alice", None);
        l.answered(t, None);
        let e = l.by_answer_ids().unwrap_err();
        assert!(e.contains("carried no id"), "{e}");
    }

    #[test]
    fn after_a_request_got_no_answer_an_unnamed_effect_is_nobodys() {
        let mut l = Ledger::default();
        l.set_baseline(counts(0));
        let t = l.sent(who("alice", "timed-out"), "alice", None);
        l.lost(t);
        let e = l.by_reads(&counts(0)).unwrap_err();
        assert!(e.contains("may still appear"), "{e}");
        // Its handler finished late: the effect shows up in the next window.
        let t = l.sent(who("alice", "next"), "alice", None);
        l.answered(t, None);
        let e = l.by_reads(&counts(1)).unwrap_err();
        assert!(e.contains("got no whole answer"), "{e}");
    }

    #[test]
    fn reads_that_miss_what_answers_named_are_not_judged() {
        let mut l = Ledger::default();
        l.set_baseline(counts(3));
        let t = l.sent(who("alice", "k"), "alice", None);
        l.answered(t, id(1));
        assert!(l.by_reads(&counts(3)).unwrap_err().contains("new ones"));
        let t = l.sent(who("alice", "j"), "alice", None);
        l.answered(t, id(2));
        assert!(l.by_reads(&counts(2)).unwrap_err().contains("fewer than"));
    }

    /// Two payloads equal as JSON with one key, sent together: the replay's
    /// answer recorded first no longer takes the effect from the request
    /// that ran.
    #[test]
    fn a_replay_recorded_first_owns_nothing() {
        let mut l = Ledger::default();
        l.set_baseline(counts(0));
        let ran = l.sent(who("alice", "k"), "alice", Some(br#"{"a":1}"#));
        let spaced = Identity::new(
            "POST",
            "/orders",
            Some("alice".into()),
            Some(b"k".to_vec()),
            Some(br#"{ "a" : 1 }"#),
        );
        let replay = l.sent(spaced, "alice", Some(br#"{ "a" : 1 }"#));
        let id = id(1).unwrap();
        assert!(l.answered_replay(replay, id.clone()).is_none());
        assert_eq!(
            l.answered(ran, Some(id.clone())).unwrap().caller.as_deref(),
            Some("alice")
        );
        let doc = l.by_reads(&counts(1)).unwrap();
        let effects = doc["effects"].as_array().unwrap();
        assert_eq!(effects.len(), 1, "{doc}");
        assert_eq!(effects[0]["bodySha256"], who("alice", "k").body_sha256);
        // Recorded after, a replay names the owner.
        assert!(l.answered_replay(replay, id).is_some());
    }
}
