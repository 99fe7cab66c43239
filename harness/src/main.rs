//! `reqkey`: see `reqkey --help`. Exit codes: 0 pass, 1 a scenario failed,
//! 2 the harness could not judge. Everything lives in the library.

fn main() -> std::process::ExitCode {
    reqkey_harness::cli::main()
}
