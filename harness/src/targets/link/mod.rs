//! The link nemesis: foul weather between a started store and its
//! database (issue 49). With `--start` and `--db URL` the harness puts a
//! TCP proxy of its own in front of the database and gives the started
//! command the proxy's address in place of `{db}`; a scenario's `link`
//! steps then reset that link, stall it, silence it or have the database
//! refuse a commit, at a point of the database's own protocol: a commit
//! about to be sent, a commit sent and not yet answered, a transaction
//! open. That is the ambiguous failure a request key exists for, and the
//! only one a store's own process faults (`fault` steps) cannot make.
//!
//! Why a proxy that reads the protocol rather than one that cuts bytes at
//! random: the spec's requirements are about the outcome a store can or
//! cannot know (SPEC 4, "The database link"), so a fault must land on a
//! known side of the commit. The proxy frames just enough of each
//! protocol to know where a commit is and which answer is its answer
//! (`pg_wire`, `resp`), never more, and every read, buffer and wait of it
//! is bounded (`proxy`). A connection it cannot frame turns opaque: its
//! bytes pass, no fault strikes it, and a fault that never struck leaves
//! its trial not judged (`nemesis`), never passed.
//!
//! - `db.rs`: a `--db` URL, parsed once; what `{db}` becomes.
//! - `links.rs`: the links of a run: its proxies on a runtime of their own.
//! - `proxy.rs`: the proxies and the relay of one connection.
//! - `nemesis.rs`: the armed faults, which struck, what the proxies did.
//! - `pg_wire.rs`, `resp.rs`: the two protocols, framed.

pub mod db;
pub mod links;
pub mod nemesis;
pub mod pg_wire;
pub mod proxy;
pub mod resp;
