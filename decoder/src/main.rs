//! `decoder`: the decodescope reference decoder. See `decoder --help`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = decoder::cli::Cli::parse();
    match decoder::cli::dispatch(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
