//! `reqkey`: see `reqkey --help`. Exit codes: 0 pass, 1 a scenario failed,
//! 2 the harness could not judge. Parses the arguments and dispatches;
//! everything else lives in the library (`cmd/` has one file per command).

/// jemalloc rather than the system allocator (issue 29): after a burst of
/// large requests glibc's malloc kept the freed memory in its per-thread
/// arenas (`reqkey serve` stayed at 75-140 MB after load, from 20-30 MB),
/// and handing it back needs `malloc_trim`, unsafe code this workspace
/// forbids. Built with background threads on (the `background_threads`
/// feature), jemalloc gives freed pages back to the system by itself, over
/// its 10 s decay, even when no request comes after the load. mimalloc,
/// measured too, left the servers at 58-64 MB after the same load.
/// docs/benchmarks.md ("Hostile clients") has the figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    match reqkey_harness::cmd::parse() {
        Ok(cli) => reqkey_harness::cmd::dispatch(cli),
        Err(code) => code,
    }
}
