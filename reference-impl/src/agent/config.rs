//! How an executor behaves: its policy, key support, leases, admission,
//! and the deliberately broken variants (`ExecutorDefect`) that prove the
//! agent corpus has teeth.

/// What the executor does when a new entry meets a `running` current run:
/// the spec's word for it (`concurrentEntry`), shared with the harness.
pub use reqkey_model::vocab::ConcurrentEntry;

/// A deliberate bug, for testing the tests. Never a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExecutorDefect {
    /// The concurrency policy runs before the key lookup, so a keyed retry
    /// of a start or a resume meets `state_session_exists` /
    /// `state_already_running` instead of attaching.
    PolicyBeforeKey,
    /// After `request_key_taken` the entry decides again without the key,
    /// so a duplicate that lost the race is refused instead of attaching.
    NoReplanAfterKeyTaken,
    /// The holder is planned against its own digest: a different input
    /// under a taken key attaches instead of answering the conflict.
    IgnoreDigest,
    /// An attached chat stream starts at the holder's *current* position,
    /// not at its start, so a retried send misses events it should replay.
    AttachStreamsFromNow,
    /// Declares `supportsRequestKey: false` (keys ignored) but records and
    /// dedupes keys anyway: a server claiming a profile it does not keep.
    DedupesWhileIgnoringKeys,
    /// Under `interrupt_previous`, a keyless chat send interrupts the
    /// running run too, where it must be refused `state_already_running`.
    InterruptsKeylessChat,
    /// A retry re-runs the session's first input instead of its last.
    RetryRerunsFirstInput,
    /// A keyed entry that is not a duplicate skips the session-exists and
    /// already-running refusals (as if every keyed entry were a retry).
    KeyedSkipsPolicy,
    /// A finished holder always replays, even behind a later run (no
    /// `state_request_already_completed`).
    FinishedHolderReplays,
    /// A resume while the current run is `running` completes it and starts
    /// (no `state_already_running`).
    ResumeWhileRunning,
    /// The server's 400 for a malformed key quotes the raw header value.
    EchoMalformedKey,
    /// The server reads bodies over 1 MiB (no 413).
    NoBodyLimit,
    /// The server's `/health` lacks `supportsRequestKey`.
    HealthWithoutKeyFlag,
    /// An unknown run of a known session is 404 `state_session_not_found`.
    UnknownRunIsUnknownSession,
    /// A commit refused `cas_mismatch` is not decided again: the entry
    /// answers the retryable contention refusal instead of the policy's.
    NoCasRedecide,
    /// `waitMs` waits while the run is live (suspended too), not only while
    /// it is `running`.
    WaitWhileLive,
    /// Runs are looked up by run id alone (run ids are unique anyway, the
    /// bug reasons): `GET /sessions/{B}/runs/{a run of A}` answers A's run.
    RunLookupIgnoresSession,
    /// A chat send whose last message has role `tool` honours its key
    /// (it must be keyless): a retried tool result attaches or conflicts.
    ToolSendKeyed,
    /// The policy trusts the current run read before the holder lookup even
    /// when the session changed in between (a pause between the two reads
    /// lets a DELETE land there): a keyed duplicate racing a DELETE is
    /// refused `state_session_exists` by runs that are gone.
    StaleCurrentAfterDelete,
    /// A chat reconnect (`GET /sessions/{id}/chat`) is handled as a send of
    /// the session's last input: it reads and plans the key and starts a
    /// run (SPEC 7: a reconnect reads no key and starts nothing).
    ReconnectIsASend,
    /// A chat reconnect parses the key header and refuses a malformed one
    /// 400 (SPEC 7: a reconnect ignores a key, valid or not).
    ReconnectRefusesMalformedKey,
    /// A send whose run cannot be identified (the test agent's
    /// `[lose-run]`) streams the session's current run from the stream
    /// head instead of answering `transport_error`.
    LostRunStreamsFromHead,
    /// Declares `entryWaitMs` but answers a keyed entry that meets another
    /// admission busy at once (SPEC 7: it waits for the admission).
    BusyAtOnce,
    /// Declares `entryWaitMs` and makes a keyless entry that meets another
    /// admission wait too (SPEC 7: it is answered busy at once).
    KeylessWaits,
    /// Every 409 refusal's `message` is an object (`{"text": ...}`), not
    /// a string (SPEC 7 `[[agent.error.shape]]`): a bug only the universal
    /// invariants see, as scenarios match messages with `$any`.
    ErrorMessageNotString,
    /// A chat send's stream goes on after its `finish` with an empty
    /// `text` event (SPEC 7 `[[agent.chat.sse-events]]`: `finish` is last).
    EventAfterFinish,
    /// A correlation layer copies the request's `X-Helix-Request-Key`
    /// into an `x-request-key` header of every successful answer, the
    /// malformed key a chat reconnect ignores included (SPEC 2
    /// `[[key.parse.not-echoed]]`).
    EchoKeyHeader,
    /// Reads the key header only in the lower-case spelling its HTTP
    /// library sends (a raw header list compared byte for byte): a key
    /// sent as `X-HELIX-REQUEST-KEY` is not seen (RFC 9110: names are
    /// case-insensitive; SPEC 7 `[[agent.keys.wire-forms]]`).
    KeyHeaderCaseSensitive,
    /// Keeps blanks beyond the first space around the key header's value
    /// as part of it, so `X-Helix-Request-Key:  k ` is malformed (RFC
    /// 9110 OWS is not part of a value; `[[agent.keys.wire-forms]]`).
    KeyKeepsBlanks,
    /// Reads only the first of repeated key header lines (SPEC 7
    /// `[[agent.keys.repeated-header]]`: two lines are 400).
    FirstKeyHeaderWins,
    /// Routes by the raw request target: an absolute-form target
    /// (`POST http://host/sessions/...`) is 404 `not_found`
    /// (`[[agent.keys.wire-forms]]`).
    AbsoluteFormNotFound,
    /// Orphaned runs are never expired: a run whose server died stays
    /// `running` forever (SPEC 5, `[[plan.orphaned.not-running-forever]]`).
    NoOrphanExpiry,
    /// A reader that finds a `running` run it does not execute renews its
    /// lease in the owner's name instead of expiring it: a renewal by a
    /// non-owner, so an orphan read now and then never runs out
    /// (`[[lease.renew.owner-only]]`).
    ReaderRenewsLease,
    /// A reader expires a `running` run it does not execute without
    /// comparing its lease: a live replica's run is interrupted by the
    /// first read from another replica (`[[lease.expire.compare]]`).
    ExpiryWithoutLeaseCompare,
    /// The owner takes the lease once and never renews it: a run longer
    /// than the lease is interrupted by a reader while its owner lives
    /// (`[[lease.length]]`).
    NeverRenews,
    /// The lease is taken only at the first renewal, a third of the lease
    /// after the commit, not before it: a run is `running` without a
    /// lease, and a reader in that window interrupts it
    /// (`[[lease.taken-before-commit]]`).
    LeaseAfterCommit,
    /// A keyed entry whose holder is `interrupted` runs its input again,
    /// keyless, instead of replaying the holder
    /// (`[[plan.orphaned.retry-replays]]`).
    OrphanRetryReexecutes,
    /// A keyless entry decides on the current run as read, without expiring
    /// an orphan first: it is refused `state_already_running` by a run
    /// whose server died (`[[plan.orphaned.retry-replays]]`).
    KeylessRefusedByOrphan,
    /// `/health` declares `durable: true` whatever the store (over the
    /// memory store, a restart loses every key; `[[agent.durable]]`).
    ClaimsDurable,
    /// The stream of a run another replica executes is built from one read
    /// of the store: it ends at once with the status read, `running`
    /// included, instead of following the run to its end
    /// (`[[agent.chat.reconnect]]` through a second replica).
    StoreStreamDoesNotWait,
    /// Keys are kept to their first 64 characters, as a `VARCHAR(64)`
    /// column keeps them: two keys that differ only past the 64th are one
    /// key (`[[key.compare.byte-exact]]`).
    KeyTruncatedAt64,
    /// The server percent-decodes the request path once more after its
    /// router did: `/sessions/ab%2578` names the session `abx` instead
    /// of the id `ab%78`, which is outside the limits and refused
    /// (`[[agent.path.percent-decoded-once]]`).
    PathIdsDecodedTwice,
    /// Keys are read after a Unicode compatibility fold (NFKC's, on the
    /// fullwidth forms U+FF01-U+FF5E): the fullwidth `ｋ１` is taken for
    /// the key `k1` instead of being refused (`[[key.parse.charset]]`).
    KeysFullwidthFolded,
    /// The snapshot lists the session's last 256 runs and inputs, as a
    /// query with `LIMIT 256` does: right for every session of fewer runs
    /// (`[[agent.route.snapshot]]`).
    SnapshotCapped,
    /// A key index cached in front of the store is never cleared on a
    /// delete: after the session is deleted and created again, a keyed
    /// entry finds the deleted run as its key's holder and replays or
    /// refuses on it (SPEC 4 `[[store.delete.key-reusable]]`; a sequence:
    /// keyed start, delete, the same keyed start).
    KeyCacheKeptOnDelete,
    /// The request digest of a key is cached per key, not per (session,
    /// key): once one session used a key, a duplicate in another session
    /// is planned against the first session's digest and refused as a
    /// conflict (`[[store.key.per-session]]`, `[[plan.row.attach]]`).
    DigestCachedPerKey,
    /// The input log is cached per session id and never cleared on a
    /// delete: a session created again shows (and a retry may re-run) the
    /// deleted session's inputs (`[[store.delete.removes-all]]`,
    /// `[[agent.route.snapshot]]`).
    InputsKeptOnDelete,
    /// The current-run pointer is cached per session id and never cleared
    /// on a delete: a start after the delete meets the deleted run and is
    /// refused `state_session_exists` (`[[store.delete.fresh-session]]`).
    CurrentRunKeptOnDelete,
    /// A run read that misses the store falls back to a cache a delete
    /// never cleared: a deleted session's run still reads 200
    /// (`[[agent.route.run]]`, `[[store.delete.removes-all]]`).
    DeletedRunsStillRead,
    /// A chat reconnect streams the session's first run instead of its
    /// current one: right until the session has a second run
    /// (`[[agent.chat.reconnect.streams-current]]`).
    ReconnectStreamsFirstRun,
    /// A chat send over a suspended current run starts its run but leaves
    /// the suspended one `suspended_input` (a resume completes it): two
    /// live runs (`[[agent.route.chat]]`).
    ChatLeavesSuspendedRun,
    /// A key conflict names the session's current run instead of the
    /// key's holder: right while the holder is the latest run
    /// (`[[plan.row.key-conflict]]`, `[[agent.keys.conflict-run-id]]`).
    ConflictNamesCurrentRun,
    // The defects below pass the whole suite; only a dimension of the
    // fuzzer's alphabet finds each (docs/fuzz.md, `reqkey coverage --fuzz`).
    /// `DELETE` on any path under a session deletes the session, as a
    /// router that matches `DELETE /sessions/:id*` does: `DELETE
    /// /sessions/{id}/runs/{run}` answers 204 instead of 405
    /// (`[[agent.refusal.method]]`; dimension `agent.routes.other`).
    DeleteMatchesSubRoutes,
    /// The key header is read case-sensitively on `resume` and `retry` (a
    /// handler that reads the raw head), in any spelling elsewhere: a key
    /// spelt `X-HELIX-REQUEST-KEY` on a resume is not read
    /// (`[[agent.keys.wire-forms]]`; dimension `agent.wire.spellings`).
    KeySpellingIgnoredOnResumeAndRetry,
    /// An entry whose `Content-Type` is not exactly `application/json`
    /// (`application/json; charset=utf-8`, `Application/JSON`) is refused
    /// 400; none at all is read as JSON (`[[agent.wire.http-semantics]]`;
    /// dimension `agent.headers.http`).
    ContentTypeComparedExactly,
    /// A chat reconnect that carries `Last-Event-ID` (as EventSource sends
    /// on every reconnect) streams the run from now, not from its start:
    /// for a finished run, a `run-start` and nothing else
    /// (`[[agent.chat.reconnect.streams-current]]`; dimension
    /// `agent.headers.sse`).
    LastEventIdResumesLive,
    /// A body sent `Transfer-Encoding: chunked` is read as empty (only
    /// `Content-Length` is read): a valid entry is refused 400
    /// (`[[agent.wire.http-semantics]]`; dimension `agent.body.chunked`).
    ChunkedBodyUnread,
    /// The request digest's canonical form copies string tokens as
    /// written: the same input with `é` spelt `\u00e9` (or `/` spelt `\/`)
    /// is another digest, so a client's retry in that spelling is a 409
    /// conflict (`[[agent.keys.digest-input]]`, `[[digest.black-box]]`;
    /// dimension `agent.json.type-and-spelling`).
    DigestKeepsStringEscapes,
    /// The 1 MiB body limit counts characters, not bytes: a body of
    /// 1 MiB + 1 bytes of multi-byte text is accepted instead of 413
    /// (`[[agent.refusal.too-large]]`; dimension `agent.limits.body`).
    BodyLimitInCharacters,
    /// A session id of 256 characters (SPEC 1's longest) is refused 400
    /// on every route, as a `VARCHAR(255)` column or a `{1,255}` route
    /// pattern does (`[[agent.route.start]]`; dimension
    /// `agent.limits.ids`).
    SessionIdLimit255,
    /// `DELETE` stops no live run; a run that ends after its session was
    /// deleted writes itself back (an upsert of its row), so the deleted
    /// session, or the one created in its place, holds it again
    /// (`[[agent.route.delete]]`). The suite's delete scenarios find it
    /// (`agent.delete-frees-keys`), and so does the fuzzer's timers
    /// dimension.
    DeleteLeavesRunsExecuting,
    /// The test agent's `[sleep:N]` sleeps half of N, as a timer
    /// written in the wrong unit does: a run seen ended before its timer
    /// ran out (`[[agent.test-agent.sleep]]`; dimension
    /// `agent.timers.run-end`, which judges time from below).
    SleepCutShort,
    /// A run read that waits (`waitMs` > 0) answers from another query
    /// that has no key columns: a keyed run without `requestKey` and
    /// `requestDigest` (`[[agent.route.run]]`; dimension
    /// `agent.timers.wait-ms`).
    WaitDropsKeyFields,
    /// A stream's `text` event turns every character outside the Basic
    /// Multilingual Plane into U+FFFD, as a writer that cuts text in
    /// UTF-16 units does (`[[agent.test-agent.echo]]`; dimension
    /// `agent.stream.events`).
    StreamTextDropsNonBmp,
    /// Acts on a cache's convention where SPEC 7 excludes it: a `POST`
    /// carrying `If-None-Match` whose answer would be 200 (a chat send's
    /// stream, an attach, a replay) is answered `304 Not Modified` with no
    /// body, as if the entry were a conditional read
    /// (`[[agent.wire.conditional-ignored]]`; dimension
    /// `agent.headers.caches`).
    ConditionalEntryNotModified,
    /// Acts on EventSource's convention where SPEC 7 excludes it: a chat
    /// send carrying `Last-Event-ID` is taken for a fresh turn of a
    /// resumed stream and its key is dropped, so a client's resent send
    /// starts a new run (or is refused as already running) instead of
    /// attaching (`[[agent.wire.last-event-id-on-entry]]`; dimension
    /// `agent.headers.sse`).
    LastEventIdSendIsNew,
    // The defects below pass the whole suite and the fuzz pass's programs:
    // each breaks a promise only at its own scale, thousands of keys or
    // seconds after the requests that cause it (issue 55); the fuzz
    // pass's probes at scale find them.
    /// The executor's store keeps only the 1,000 most recently taken keys
    /// in its key index (the memory store's `keys-evicted-beyond-1000`,
    /// whatever store is named): a keyed retry of an older run starts
    /// another run (`[[agent.keys.kept-at-scale]]`).
    KeysEvictedBeyond1000,
    /// The executor's store expires its key index entries 5 s after they
    /// were taken (the memory store's `key-index-ttl-5s`): a keyed retry
    /// seconds later starts another run
    /// (`[[agent.state.changes-only-by-requests]]`).
    KeyIndexTtl5s,
    /// A scheduler resumes every run that ended `suspended_input`
    /// [`SUSPENDED_RESUMED_AFTER_MS`] later, without checking that its
    /// session still exists: a run no request started appears, in a
    /// deleted session too (`[[agent.state.changes-only-by-requests]]`).
    SuspendedResumedByTimer,
}

/// When `suspended-resumed-by-timer`'s scheduler resumes a suspended run.
pub const SUSPENDED_RESUMED_AFTER_MS: u64 = 3_000;

impl ExecutorDefect {
    pub const ALL: [ExecutorDefect; 69] = [
        ExecutorDefect::PolicyBeforeKey,
        ExecutorDefect::NoReplanAfterKeyTaken,
        ExecutorDefect::IgnoreDigest,
        ExecutorDefect::AttachStreamsFromNow,
        ExecutorDefect::DedupesWhileIgnoringKeys,
        ExecutorDefect::InterruptsKeylessChat,
        ExecutorDefect::RetryRerunsFirstInput,
        ExecutorDefect::KeyedSkipsPolicy,
        ExecutorDefect::FinishedHolderReplays,
        ExecutorDefect::ResumeWhileRunning,
        ExecutorDefect::EchoMalformedKey,
        ExecutorDefect::NoBodyLimit,
        ExecutorDefect::HealthWithoutKeyFlag,
        ExecutorDefect::UnknownRunIsUnknownSession,
        ExecutorDefect::NoCasRedecide,
        ExecutorDefect::WaitWhileLive,
        ExecutorDefect::RunLookupIgnoresSession,
        ExecutorDefect::ToolSendKeyed,
        ExecutorDefect::StaleCurrentAfterDelete,
        ExecutorDefect::ReconnectIsASend,
        ExecutorDefect::ReconnectRefusesMalformedKey,
        ExecutorDefect::LostRunStreamsFromHead,
        ExecutorDefect::BusyAtOnce,
        ExecutorDefect::KeylessWaits,
        ExecutorDefect::ErrorMessageNotString,
        ExecutorDefect::EventAfterFinish,
        ExecutorDefect::EchoKeyHeader,
        ExecutorDefect::KeyHeaderCaseSensitive,
        ExecutorDefect::KeyKeepsBlanks,
        ExecutorDefect::FirstKeyHeaderWins,
        ExecutorDefect::AbsoluteFormNotFound,
        ExecutorDefect::NoOrphanExpiry,
        ExecutorDefect::ReaderRenewsLease,
        ExecutorDefect::ExpiryWithoutLeaseCompare,
        ExecutorDefect::NeverRenews,
        ExecutorDefect::LeaseAfterCommit,
        ExecutorDefect::OrphanRetryReexecutes,
        ExecutorDefect::KeylessRefusedByOrphan,
        ExecutorDefect::ClaimsDurable,
        ExecutorDefect::StoreStreamDoesNotWait,
        ExecutorDefect::KeyTruncatedAt64,
        ExecutorDefect::PathIdsDecodedTwice,
        ExecutorDefect::KeysFullwidthFolded,
        ExecutorDefect::SnapshotCapped,
        ExecutorDefect::KeyCacheKeptOnDelete,
        ExecutorDefect::DigestCachedPerKey,
        ExecutorDefect::InputsKeptOnDelete,
        ExecutorDefect::CurrentRunKeptOnDelete,
        ExecutorDefect::DeletedRunsStillRead,
        ExecutorDefect::ReconnectStreamsFirstRun,
        ExecutorDefect::ChatLeavesSuspendedRun,
        ExecutorDefect::ConflictNamesCurrentRun,
        ExecutorDefect::DeleteMatchesSubRoutes,
        ExecutorDefect::KeySpellingIgnoredOnResumeAndRetry,
        ExecutorDefect::ContentTypeComparedExactly,
        ExecutorDefect::LastEventIdResumesLive,
        ExecutorDefect::ChunkedBodyUnread,
        ExecutorDefect::DigestKeepsStringEscapes,
        ExecutorDefect::BodyLimitInCharacters,
        ExecutorDefect::SessionIdLimit255,
        ExecutorDefect::DeleteLeavesRunsExecuting,
        ExecutorDefect::WaitDropsKeyFields,
        ExecutorDefect::StreamTextDropsNonBmp,
        ExecutorDefect::ConditionalEntryNotModified,
        ExecutorDefect::LastEventIdSendIsNew,
        ExecutorDefect::SleepCutShort,
        ExecutorDefect::KeysEvictedBeyond1000,
        ExecutorDefect::KeyIndexTtl5s,
        ExecutorDefect::SuspendedResumedByTimer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ExecutorDefect::PolicyBeforeKey => "policy-before-key",
            ExecutorDefect::NoReplanAfterKeyTaken => "no-replan-after-key-taken",
            ExecutorDefect::IgnoreDigest => "ignore-digest",
            ExecutorDefect::AttachStreamsFromNow => "attach-streams-from-now",
            ExecutorDefect::DedupesWhileIgnoringKeys => "dedupes-while-ignoring-keys",
            ExecutorDefect::InterruptsKeylessChat => "interrupts-keyless-chat",
            ExecutorDefect::RetryRerunsFirstInput => "retry-reruns-first-input",
            ExecutorDefect::KeyedSkipsPolicy => "keyed-skips-policy",
            ExecutorDefect::FinishedHolderReplays => "finished-holder-replays",
            ExecutorDefect::ResumeWhileRunning => "resume-while-running",
            ExecutorDefect::EchoMalformedKey => "echo-malformed-key",
            ExecutorDefect::NoBodyLimit => "no-body-limit",
            ExecutorDefect::HealthWithoutKeyFlag => "health-without-key-flag",
            ExecutorDefect::UnknownRunIsUnknownSession => "unknown-run-is-unknown-session",
            ExecutorDefect::NoCasRedecide => "no-cas-redecide",
            ExecutorDefect::WaitWhileLive => "wait-while-live",
            ExecutorDefect::RunLookupIgnoresSession => "run-lookup-ignores-session",
            ExecutorDefect::ToolSendKeyed => "tool-send-keyed",
            ExecutorDefect::StaleCurrentAfterDelete => "stale-current-after-delete",
            ExecutorDefect::ReconnectIsASend => "reconnect-is-a-send",
            ExecutorDefect::ReconnectRefusesMalformedKey => "reconnect-refuses-malformed-key",
            ExecutorDefect::LostRunStreamsFromHead => "lost-run-streams-from-head",
            ExecutorDefect::BusyAtOnce => "busy-at-once",
            ExecutorDefect::KeylessWaits => "keyless-waits",
            ExecutorDefect::ErrorMessageNotString => "error-message-not-string",
            ExecutorDefect::EventAfterFinish => "event-after-finish",
            ExecutorDefect::EchoKeyHeader => "echo-key-header",
            ExecutorDefect::KeyHeaderCaseSensitive => "key-header-case-sensitive",
            ExecutorDefect::KeyKeepsBlanks => "key-keeps-blanks",
            ExecutorDefect::FirstKeyHeaderWins => "first-key-header-wins",
            ExecutorDefect::AbsoluteFormNotFound => "absolute-form-not-found",
            ExecutorDefect::NoOrphanExpiry => "no-orphan-expiry",
            ExecutorDefect::ReaderRenewsLease => "reader-renews-lease",
            ExecutorDefect::ExpiryWithoutLeaseCompare => "expiry-without-lease-compare",
            ExecutorDefect::NeverRenews => "never-renews",
            ExecutorDefect::LeaseAfterCommit => "lease-after-commit",
            ExecutorDefect::OrphanRetryReexecutes => "orphan-retry-reexecutes",
            ExecutorDefect::KeylessRefusedByOrphan => "keyless-refused-by-orphan",
            ExecutorDefect::ClaimsDurable => "claims-durable",
            ExecutorDefect::StoreStreamDoesNotWait => "store-stream-does-not-wait",
            ExecutorDefect::KeyTruncatedAt64 => "key-truncated-at-64",
            ExecutorDefect::PathIdsDecodedTwice => "path-ids-decoded-twice",
            ExecutorDefect::KeysFullwidthFolded => "keys-fullwidth-folded",
            ExecutorDefect::SnapshotCapped => "snapshot-capped",
            ExecutorDefect::KeyCacheKeptOnDelete => "key-cache-kept-on-delete",
            ExecutorDefect::DigestCachedPerKey => "digest-cached-per-key",
            ExecutorDefect::InputsKeptOnDelete => "inputs-kept-on-delete",
            ExecutorDefect::CurrentRunKeptOnDelete => "current-run-kept-on-delete",
            ExecutorDefect::DeletedRunsStillRead => "deleted-runs-still-read",
            ExecutorDefect::ReconnectStreamsFirstRun => "reconnect-streams-first-run",
            ExecutorDefect::ChatLeavesSuspendedRun => "chat-leaves-suspended-run",
            ExecutorDefect::ConflictNamesCurrentRun => "conflict-names-current-run",
            ExecutorDefect::DeleteMatchesSubRoutes => "delete-matches-sub-routes",
            ExecutorDefect::KeySpellingIgnoredOnResumeAndRetry => {
                "key-spelling-ignored-on-resume-and-retry"
            }
            ExecutorDefect::ContentTypeComparedExactly => "content-type-compared-exactly",
            ExecutorDefect::LastEventIdResumesLive => "last-event-id-resumes-live",
            ExecutorDefect::ChunkedBodyUnread => "chunked-body-unread",
            ExecutorDefect::DigestKeepsStringEscapes => "digest-keeps-string-escapes",
            ExecutorDefect::BodyLimitInCharacters => "body-limit-in-characters",
            ExecutorDefect::SessionIdLimit255 => "session-id-limit-255",
            ExecutorDefect::DeleteLeavesRunsExecuting => "delete-leaves-runs-executing",
            ExecutorDefect::WaitDropsKeyFields => "wait-drops-key-fields",
            ExecutorDefect::StreamTextDropsNonBmp => "stream-text-drops-non-bmp",
            ExecutorDefect::ConditionalEntryNotModified => "conditional-entry-not-modified",
            ExecutorDefect::LastEventIdSendIsNew => "last-event-id-send-is-new",
            ExecutorDefect::SleepCutShort => "sleep-cut-short",
            ExecutorDefect::KeysEvictedBeyond1000 => "keys-evicted-beyond-1000",
            ExecutorDefect::KeyIndexTtl5s => "key-index-ttl-5s",
            ExecutorDefect::SuspendedResumedByTimer => "suspended-resumed-by-timer",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Whether only the fuzz pass's probes at scale find it (issue 55).
    pub fn at_scale(self) -> bool {
        self.store_defect().is_some() || self == ExecutorDefect::SuspendedResumedByTimer
    }

    /// The broken memory store this defect puts under the executor in
    /// place of the store it was given (its bug lives in the key index).
    pub fn store_defect(self) -> Option<crate::store::MemoryDefect> {
        match self {
            ExecutorDefect::KeysEvictedBeyond1000 => {
                Some(crate::store::MemoryDefect::KeysEvictedBeyond1000)
            }
            ExecutorDefect::KeyIndexTtl5s => Some(crate::store::MemoryDefect::KeyIndexTtl5s),
            _ => None,
        }
    }

    /// The configuration this defect is a broken version of: a server
    /// that claims keys are ignored, or one on `interrupt_previous`.
    pub fn config(self) -> ExecutorConfig {
        let mut config = ExecutorConfig {
            defect: Some(self),
            // Widen the decide-to-commit window so races really happen.
            commit_delay_ms: 2,
            ..ExecutorConfig::default()
        };
        match self {
            ExecutorDefect::DedupesWhileIgnoringKeys => config.supports_request_key = false,
            ExecutorDefect::InterruptsKeylessChat => {
                config.policy = ConcurrentEntry::InterruptPrevious;
            }
            ExecutorDefect::BusyAtOnce | ExecutorDefect::KeylessWaits => {
                config.entry_wait_ms = Some(ENTRY_WAIT_MS);
            }
            ExecutorDefect::NoOrphanExpiry => config.orphans = OrphanRule::Never,
            _ => {}
        }
        config
    }
}

/// The default lease on a running run, in ms (SPEC 5, `[[lease.length]]`).
pub const LEASE_MS: u64 = 3_000;

/// Who decides that a `running` run is orphaned (SPEC 5, `[[lease.expire.any-reader]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OrphanRule {
    /// A `running` run this executor is not executing is orphaned when its
    /// lease is absent or expired (its executor died or stopped renewing):
    /// the store's `expire_lease` makes it `interrupted`. Safe with any
    /// number of replicas over one store.
    #[default]
    Lease,
    /// Never: a `running` run of another process is left as it is (only
    /// the tests use this, to see the lease rule matter).
    Never,
}

/// How an executor behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutorConfig {
    pub policy: ConcurrentEntry,
    /// `false` is the `--no-request-keys` mode: keys are ignored (with one
    /// `request_key.ignored` warning per executor), never half-honoured.
    pub supports_request_key: bool,
    pub defect: Option<ExecutorDefect>,
    /// A pause between an entry's decision and its commit, in ms. A real
    /// store has latency there; a test widens the window with it so that
    /// concurrent duplicates really race (0: only a task yield).
    pub commit_delay_ms: u64,
    /// How orphaned runs are recognised.
    pub orphans: OrphanRule,
    /// The lease on a running run, in ms; renewed every third of it.
    pub lease_ms: u64,
    /// `Some(ms)`: entries are admitted one at a time per session (SPEC 7,
    /// `entryWaitMs`); a keyed entry waits up to `ms` for another entry's
    /// admission, a keyless one is answered busy at once. `None` (the
    /// default): no admission claim; the store's CAS and key rule arbitrate
    /// concurrent entries, and `/health` declares no `entryWaitMs`.
    pub entry_wait_ms: Option<u64>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            policy: ConcurrentEntry::Reject,
            supports_request_key: true,
            defect: None,
            commit_delay_ms: 0,
            orphans: OrphanRule::Lease,
            lease_ms: LEASE_MS,
            entry_wait_ms: None,
        }
    }
}

/// The admission wait of the reference's `entry-wait` configuration, in ms
/// (what its `/health` declares as `entryWaitMs`).
pub const ENTRY_WAIT_MS: u64 = 2_000;
