//! `reqkey`: see `reqkey --help`. Exit codes: 0 pass, 1 a scenario failed,
//! 2 the harness could not judge. Parses the arguments and dispatches;
//! everything else lives in the library (`cmd/` has one file per command).

fn main() -> std::process::ExitCode {
    match reqkey_harness::cmd::parse() {
        Ok(cli) => reqkey_harness::cmd::dispatch(cli),
        Err(code) => code,
    }
}
