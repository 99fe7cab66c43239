//! The Wing & Gong search with Lowe's memoization over one session's operations.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

#[cfg(doc)]
use reqkey_model::seq::SeqStore;
use reqkey_model::seq::{SessionState, StoreOp, StoreReply};
use reqkey_model::{CommitOutcome, DeleteResult, RunMetadata, RunStatus, StoreError};

use super::item::{Item, NONE};
use super::pending::{role, PendingPool, Role};
use super::prepare::{answers_match, Observed};

/// Steps between two questions to [`super::CheckOptions::over_memory`].
pub const MEMORY_CHECK_STEPS: u64 = 1 << 16;

#[derive(Debug)]
pub(super) enum Search {
    Linearizable,
    NotLinearizable,
    OutOfBudget,
    /// The caller's memory gauge said stop ([`super::CheckOptions::over_memory`]).
    OverMemory,
}

/// How to take back one linearized operation.
#[derive(Debug)]
pub(super) enum Undo {
    /// The op left the state as it was.
    Nothing,
    /// It started a run (the last one).
    Start,
    /// It changed the status of the run at this index from this one.
    Status(usize, RunStatus),
    /// It deleted the session, which was this.
    Session(Box<SessionState>),
}

pub(super) fn undo(state: &mut SessionState, undo: Undo) {
    match undo {
        Undo::Nothing => {}
        Undo::Start => state.undo_last_start(),
        Undo::Status(index, status) => state.undo_status_change(index, status),
        Undo::Session(old) => *state = *old,
    }
}

/// Applies `item`'s operation to `state` (one session) if the spec's answer
/// there matches the recorded one; updates `fp`, the state's fingerprint.
/// `None`: no match, and `state` and `fp` are as they were. Every answer
/// comes from the model's [`SessionState`], the same methods [`SeqStore`]
/// calls (`the_session_evaluation_agrees_with_seq_store` checks it); reads
/// are compared in place instead of cloned.
pub(super) fn evaluate(state: &mut SessionState, fp: &mut u128, item: &Item<'_>) -> Option<Undo> {
    let observed = item.observed();
    let p = item.prepared;
    let op = p.op.as_ref()?;
    let pending = matches!(observed, Observed::Pending);
    let read_ok = |spec: Option<&RunMetadata>| match observed {
        Observed::Pending => true,
        Observed::Answer(Ok(StoreReply::Run(o))) => o.as_ref() == spec,
        _ => false,
    };
    let matched = match op {
        StoreOp::CommitRunStart(_) => {
            let prepared = p.commit.as_ref()?;
            let spec = state.commit_prepared(prepared);
            let started = matches!(&spec, Ok(c) if c.outcome == CommitOutcome::Started);
            let ok = pending || answers_match(&spec.map(StoreReply::Commit), observed);
            if !started {
                return ok.then_some(Undo::Nothing);
            }
            if !ok {
                state.undo_last_start();
                return None;
            }
            let index = state.run_count() - 1;
            *fp = fp.wrapping_add(entry_term(state, index));
            return Some(Undo::Start);
        }
        StoreOp::GetRun(a) => read_ok(state.run(&a.run_id)),
        StoreOp::GetCurrentRun(_) => read_ok(state.current_run()),
        StoreOp::GetRunByRequestKey(a) => read_ok(state.run_by_request_key(&a.request_key)),
        StoreOp::ListRuns(_) => match observed {
            Observed::Pending => true,
            Observed::Answer(Ok(StoreReply::Runs(v))) => v.iter().eq(state.runs()),
            _ => false,
        },
        StoreOp::ListInputs(_) => match (observed, &p.inputs) {
            (Observed::Pending, _) => true,
            (Observed::Answer(Ok(StoreReply::Inputs(_))), Some(inputs)) => inputs
                .iter()
                .map(|(r, i)| (r.as_str(), i.as_str()))
                .eq(state.inputs_canonical()),
            _ => false,
        },
        StoreOp::SetRunStatus(a) => {
            let Some(index) = state.run_index(&a.run_id) else {
                let spec = Err(StoreError::NotFound(String::new()));
                return (pending || answers_match(&spec, observed)).then_some(Undo::Nothing);
            };
            let before_term = entry_term(state, index);
            let before = state.entry(index).map(|(m, _, _)| m.status)?;
            let spec = state.set_run_status(&a.run_id, a.status);
            let changed = spec.is_ok() && before != a.status;
            let ok = pending || answers_match(&spec.map(|r| StoreReply::Run(Some(r))), observed);
            if !changed {
                if !ok {
                    // A same-status change writes nothing; nothing to undo.
                    return None;
                }
                return Some(Undo::Nothing);
            }
            if !ok {
                state.undo_status_change(index, before);
                return None;
            }
            *fp = fp
                .wrapping_sub(before_term)
                .wrapping_add(entry_term(state, index));
            return Some(Undo::Status(index, before));
        }
        StoreOp::DeleteSession(_) => {
            let deleted = !state.is_empty();
            let spec = Ok(StoreReply::Deleted(DeleteResult { deleted }));
            if !(pending || answers_match(&spec, observed)) {
                return None;
            }
            if !deleted {
                return Some(Undo::Nothing);
            }
            *fp = 0;
            return Some(Undo::Session(Box::new(std::mem::take(state))));
        }
    };
    matched.then_some(Undo::Nothing)
}

/// Where one linearized operation came from, and so where the search
/// resumes when it is taken back.
#[derive(Debug, Clone, Copy)]
enum At {
    /// An answered op: its call entry in the list.
    List(usize),
    /// An unanswered write: its position in the pool, the instant of the
    /// first return at the configuration it was tried at, and the pass.
    Pool(usize, u64, Pass),
}

/// One linearized operation on the search's stack.
#[derive(Debug)]
pub(super) struct Frame {
    at: At,
    /// Linearized because it was callable, matched and wrote nothing: then
    /// it may come first among what is left, so if the configuration after
    /// it fails, so does the one before it (see [`search`]).
    forced: bool,
    undo: Undo,
    fp_before: u128,
}

/// Where the ordinary iteration is at a configuration: an answered call
/// in the list, or (once the list's callable ops are exhausted) a
/// position in the pool of unanswered writes callable by `limit_ns`.
#[derive(Debug, Clone, Copy)]
enum Cursor {
    List(usize),
    Pool {
        from: usize,
        limit_ns: u64,
        pass: Pass,
    },
}

/// The pool is walked twice at a configuration: first the unanswered
/// writes after which some callable answered op matches (the likely
/// ones: a read that sees a timed-out commit finds it at once), then the
/// others. Every candidate is in exactly one pass, so the search stays
/// complete; the order only makes a witness come sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Enabling,
    Rest,
}

/// The most configurations the cache keeps (about 16-32 bytes each):
/// past it the search goes on without remembering more, slower but in
/// bounded memory (the cache only prunes; the verdict does not need it).
pub(super) const MAX_CACHE_ENTRIES: usize = 1 << 24;

/// Entries a fresh configuration's scan for a quiet op may walk per step
/// counted: a scan longer than this costs a step more per this many.
const SCAN_ENTRIES_PER_STEP: u64 = 32;

/// Wing & Gong search with Lowe's memoization over one partition.
/// Returns the outcome, the steps spent and the configurations cached.
///
/// On top of the plain search, **quiet operations go first**: at a
/// configuration reached for the first time, a callable operation that
/// matches and leaves the state as it is (a read, a refusal, a replay)
/// is linearized at once, and if what follows fails, the configuration
/// fails too without trying anything else. That is complete: in any
/// linearization extending the configuration, that op can be moved to
/// the front (it is callable, so nothing left precedes it in real time;
/// it answers the same on the same state; and it changes nothing, so
/// every later answer stays). The same argument lets the ordinary
/// iteration skip quiet ops: at a configuration where none matched, none
/// will.
///
/// **Unanswered operations are a class** ([`super::pending`]): reads
/// dropped, writes kept out of the list in a pool tried after the list's
/// callable ops, one per class of equal requests, and only when they
/// would change the state. The list then holds answered ops only, and
/// the search ends linearizable when it is empty.
///
/// **Bounded whatever the history**: every configuration visited, every
/// pool position looked at, and every [`SCAN_ENTRIES_PER_STEP`] entries
/// a scan walks count as steps, so `budget_steps` bounds the time; the
/// cache holds at most `budget_steps` and [`MAX_CACHE_ENTRIES`]
/// configurations, the stack at most one frame per op.
/// A history with no two operations overlapping in real time (each
/// called after the one before returned, every one answered) has exactly
/// one order real time allows: it is decided by one replay through the
/// spec, in that order, whatever its length, with no search (`None` for a
/// history with an overlap or an unanswered op: the search decides those).
/// Steps: the operations replayed; a verdict whatever the budget.
fn sequential(items: &[Item<'_>], listed: &[usize]) -> Option<(Search, u64, usize)> {
    if listed.len() != items.len() {
        return None;
    }
    match replay_in_order(items)? {
        (None, replayed) => Some((Search::Linearizable, replayed, 0)),
        (Some(_), replayed) => Some((Search::NotLinearizable, replayed, 0)),
    }
}

/// Replays `items` in real-time order when no two overlap and every one
/// is answered (`None` otherwise): `(None, n)` when every answer is the
/// spec's, else `(Some(subset), n)`: the failing operation and the ones
/// before it that changed the state (positions in `items`), a failing
/// subset a report can show (the reads before it change nothing).
pub(super) fn replay_in_order(items: &[Item<'_>]) -> Option<(Option<Vec<usize>>, u64)> {
    if items.iter().any(|it| it.end_ns == u64::MAX) {
        return None;
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| (items[i].invoke_ns, items[i].end_ns, i));
    // Ties overlap (as in the search's order): strictly after.
    if order
        .windows(2)
        .any(|w| items[w[1]].invoke_ns <= items[w[0]].end_ns)
    {
        return None;
    }
    let mut state = SessionState::default();
    let mut fp: u128 = 0;
    let mut wrote: Vec<usize> = Vec::new();
    for (step, &i) in order.iter().enumerate() {
        match evaluate(&mut state, &mut fp, &items[i]) {
            None => {
                wrote.push(i);
                wrote.sort_unstable();
                return Some((Some(wrote), step as u64 + 1));
            }
            Some(Undo::Nothing) => {}
            Some(_) => wrote.push(i),
        }
    }
    Some((None, order.len() as u64))
}

pub(super) fn search(
    items: &[Item<'_>],
    budget_steps: u64,
    over_memory: Option<fn() -> bool>,
) -> (Search, u64, usize) {
    let n = items.len();
    let mut pool = PendingPool::new(items);
    let listed: Vec<usize> = (0..n)
        .filter(|&i| role(&items[i]) == Role::Listed)
        .collect();
    if listed.is_empty() {
        return (Search::Linearizable, 0, 0);
    }
    if let Some(decided) = sequential(items, &listed) {
        return decided;
    }
    // Entries: 2 per op. Entry 2i is the call of op i, 2i+1 its return.
    // Time order; at equal instants calls come first (ties overlap).
    // Only answered ops are listed (the others are in `pool` or dropped).
    let mut order: Vec<usize> = listed.iter().flat_map(|&i| [2 * i, 2 * i + 1]).collect();
    order.sort_by_key(|&e| {
        let it = &items[e / 2];
        if e % 2 == 0 {
            (it.invoke_ns, 0u8, e)
        } else {
            (it.end_ns, 1u8, e)
        }
    });
    // A doubly linked list over the entries, with a head sentinel at 2n.
    let head = 2 * n;
    let mut next = vec![NONE; 2 * n + 1];
    let mut prev = vec![NONE; 2 * n + 1];
    let mut last = head;
    for &e in &order {
        next[last] = e;
        prev[e] = last;
        last = e;
    }
    let quiet: Vec<bool> = items.iter().map(Item::quiet).collect();

    // The configuration: the linearized set as a Zobrist hash (the XOR of
    // one random 128-bit word per linearized op, updated in O(1)) and the
    // state with its fingerprint (a sum of one term per run, also
    // updated in O(1)); the cache holds 16 bytes per configuration.
    let mut linearized: u128 = 0;
    let mut state = SessionState::default();
    let mut fp: u128 = 0;
    let mut stack: Vec<Frame> = Vec::new();
    let mut cache: HashSet<u128, BuildHasherDefault<FoldHasher>> = HashSet::default();
    let cache_cap = usize::try_from(budget_steps)
        .unwrap_or(usize::MAX)
        .min(MAX_CACHE_ENTRIES);
    // `true` for a configuration not seen before (and now remembered,
    // while there is room; past it, every one counts as new).
    let remember = |cache: &mut HashSet<_, _>, linearized: u128, fp: u128| {
        let key = linearized ^ mix128(fp);
        if cache.len() < cache_cap {
            cache.insert(key)
        } else {
            !cache.contains(&key)
        }
    };
    let mut steps = 0u64;
    let mut cursor = Cursor::List(next[head]);
    // A configuration reached for the first time: look for a quiet op.
    let mut fresh = true;

    macro_rules! lift {
        ($e:expr) => {
            for e in [$e, $e + 1] {
                next[prev[e]] = next[e];
                if next[e] != NONE {
                    prev[next[e]] = prev[e];
                }
            }
        };
    }
    // Backtracks to the last configuration not known to fail; `false`
    // when there is none (the history is not linearizable).
    macro_rules! backtrack {
        () => {{
            let mut resumed = false;
            while let Some(frame) = stack.pop() {
                undo(&mut state, frame.undo);
                fp = frame.fp_before;
                match frame.at {
                    At::List(call) => {
                        linearized ^= zobrist(call / 2);
                        // Put the return back, then the call (reverse of
                        // lifting).
                        for e in [call + 1, call] {
                            if next[e] != NONE {
                                prev[next[e]] = e;
                            }
                            next[prev[e]] = e;
                        }
                        cursor = Cursor::List(next[call]);
                    }
                    At::Pool(k, limit_ns, pass) => {
                        linearized ^= zobrist(pool.item(k));
                        pool.set_done(k, false);
                        cursor = Cursor::Pool {
                            from: k + 1,
                            limit_ns,
                            pass,
                        };
                    }
                }
                if !frame.forced {
                    resumed = true;
                    break;
                }
            }
            resumed
        }};
    }

    let mut gauged_at = 0u64;
    while next[head] != NONE {
        steps += 1;
        if steps > budget_steps {
            return (Search::OutOfBudget, budget_steps, cache.len());
        }
        if steps - gauged_at >= MEMORY_CHECK_STEPS {
            gauged_at = steps;
            if over_memory.is_some_and(|over| over()) {
                return (Search::OverMemory, steps, cache.len());
            }
        }
        if fresh {
            fresh = false;
            let mut e = next[head];
            let mut forced = None;
            let mut walked = 0u64;
            while e != NONE && e % 2 == 0 {
                walked += 1;
                if quiet[e / 2] {
                    let fp_before = fp;
                    match evaluate(&mut state, &mut fp, &items[e / 2]) {
                        Some(Undo::Nothing) => {
                            forced = Some(e);
                            break;
                        }
                        Some(other) => {
                            // Not quiet after all (cannot happen for a
                            // matched answer that claims no write).
                            undo(&mut state, other);
                            fp = fp_before;
                        }
                        None => {}
                    }
                }
                e = next[e];
            }
            steps += walked / SCAN_ENTRIES_PER_STEP;
            if let Some(e) = forced {
                let bits = linearized ^ zobrist(e / 2);
                if remember(&mut cache, bits, fp) {
                    stack.push(Frame {
                        at: At::List(e),
                        forced: true,
                        undo: Undo::Nothing,
                        fp_before: fp,
                    });
                    linearized = bits;
                    lift!(e);
                    fresh = true;
                } else if !backtrack!() {
                    // Explored before and failed: so does this one.
                    return (Search::NotLinearizable, steps, cache.len());
                }
                continue;
            }
            cursor = Cursor::List(next[head]);
            continue;
        }
        match cursor {
            Cursor::List(NONE) => {
                // Cannot happen: a list that is not empty ends with a return.
                return (Search::NotLinearizable, steps, cache.len());
            }
            Cursor::List(entry) if entry % 2 == 0 => {
                let i = entry / 2;
                if !quiet[i] {
                    let fp_before = fp;
                    if let Some(u) = evaluate(&mut state, &mut fp, &items[i]) {
                        let bits = linearized ^ zobrist(i);
                        if remember(&mut cache, bits, fp) {
                            stack.push(Frame {
                                at: At::List(entry),
                                forced: false,
                                undo: u,
                                fp_before,
                            });
                            linearized = bits;
                            lift!(entry);
                            fresh = true;
                            continue;
                        }
                        undo(&mut state, u);
                        fp = fp_before;
                    }
                }
                cursor = Cursor::List(next[entry]);
            }
            Cursor::List(entry) => {
                // The first return: the answered calls before it are
                // tried; now the unanswered writes called by then.
                cursor = Cursor::Pool {
                    from: 0,
                    limit_ns: items[entry / 2].end_ns,
                    pass: Pass::Enabling,
                };
            }
            Cursor::Pool {
                from,
                limit_ns,
                pass,
            } => {
                let (candidate, looked) = if pool.is_empty() {
                    (None, 0)
                } else {
                    pool.next_candidate(from, limit_ns)
                };
                steps += looked.saturating_sub(1);
                let Some(k) = candidate else {
                    if pass == Pass::Enabling && !pool.is_empty() {
                        cursor = Cursor::Pool {
                            from: 0,
                            limit_ns,
                            pass: Pass::Rest,
                        };
                    } else if !backtrack!() {
                        // The first return's call is still in the list,
                        // and nothing to take back.
                        return (Search::NotLinearizable, steps, cache.len());
                    }
                    continue;
                };
                cursor = Cursor::Pool {
                    from: k + 1,
                    limit_ns,
                    pass,
                };
                let i = pool.item(k);
                let fp_before = fp;
                match evaluate(&mut state, &mut fp, &items[i]) {
                    // Changes nothing here: no use (see `pending`).
                    Some(Undo::Nothing) | None => {}
                    Some(u) => {
                        // In the pass it belongs to? (The callable answered
                        // ops are walked once more: counted.)
                        let mut fp_probe = fp;
                        let (enabling, walked) =
                            enables(&mut state, &mut fp_probe, items, &next, head);
                        steps += walked / SCAN_ENTRIES_PER_STEP;
                        if enabling != (pass == Pass::Enabling) {
                            undo(&mut state, u);
                            fp = fp_before;
                            continue;
                        }
                        let bits = linearized ^ zobrist(i);
                        if remember(&mut cache, bits, fp) {
                            stack.push(Frame {
                                at: At::Pool(k, limit_ns, pass),
                                forced: false,
                                undo: u,
                                fp_before,
                            });
                            linearized = bits;
                            pool.set_done(k, true);
                            fresh = true;
                            continue;
                        }
                        undo(&mut state, u);
                        fp = fp_before;
                    }
                }
            }
        }
    }
    (Search::Linearizable, steps, cache.len())
}

/// Does some callable answered op (a call before the list's first
/// return) match in `state`? The state is left as it was. Returns the
/// answer and the entries walked.
fn enables(
    state: &mut SessionState,
    fp: &mut u128,
    items: &[Item<'_>],
    next: &[usize],
    head: usize,
) -> (bool, u64) {
    let mut e = next[head];
    let mut walked = 0u64;
    while e != NONE && e % 2 == 0 {
        walked += 1;
        if let Some(u) = evaluate(state, fp, &items[e / 2]) {
            undo(state, u);
            return (true, walked);
        }
        e = next[e];
    }
    (false, walked)
}

/// The fingerprint term of the run at `index`: a 128-bit hash of everything
/// the state's equality looks at for it, and of its position.
pub(super) fn entry_term(state: &SessionState, index: usize) -> u128 {
    let mut h = Hash128::new(0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344);
    index.hash(&mut h);
    if let Some((meta, digest, input)) = state.entry(index) {
        meta.hash(&mut h);
        digest.hash(&mut h);
        input.hash(&mut h);
    }
    h.finish128()
}

/// The Zobrist word of op `i`: two rounds of splitmix64 per half.
pub(super) fn zobrist(i: usize) -> u128 {
    let i = i as u64;
    (u128::from(splitmix(i ^ 0x9e37_79b9_7f4a_7c15)) << 64)
        | u128::from(splitmix(i.rotate_left(32) ^ 0xd1b5_4a32_d192_ed03))
}

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mixes a state fingerprint before it meets the Zobrist word, so that the
/// two additive/XOR structures do not line up.
pub(super) fn mix128(x: u128) -> u128 {
    let (hi, lo) = ((x >> 64) as u64, x as u64);
    (u128::from(splitmix(hi ^ lo.rotate_left(17))) << 64)
        | u128::from(splitmix(lo ^ 0x5851_f42d_4c95_7f2d ^ hi))
}

/// A fast 128-bit hasher for fingerprint terms (two multiply-rotate lanes,
/// finished with splitmix); the data is the checker's own, not an
/// adversary's, so it needs spread, not resistance.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hash128 {
    a: u64,
    b: u64,
}

impl Hash128 {
    fn new(a: u64, b: u64) -> Self {
        Self { a, b }
    }

    fn word(&mut self, w: u64) {
        self.a = (self.a ^ w)
            .wrapping_mul(0x9fb2_1c65_1e98_df25)
            .rotate_left(29);
        self.b = (self.b ^ w.rotate_left(32))
            .wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            .rotate_left(31);
    }

    fn finish128(&self) -> u128 {
        (u128::from(splitmix(self.a ^ self.b.rotate_left(7))) << 64)
            | u128::from(splitmix(self.b ^ 0x2545_f491_4f6c_dd1d ^ self.a))
    }
}

impl Hasher for Hash128 {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        self.word(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
    }

    fn write_u8(&mut self, i: u8) {
        self.word(u64::from(i) | 0x100);
    }

    fn write_u64(&mut self, i: u64) {
        self.word(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.word(i as u64);
    }

    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

/// The cache's hasher: its keys are already uniform 128-bit words, so it
/// folds them instead of hashing them again.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FoldHasher(u64);

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, i: u128) {
        self.0 ^= (i as u64) ^ ((i >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
