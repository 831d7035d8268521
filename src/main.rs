//! The `egress-proxy` binary: parse the command line, start logging, dispatch, and map
//! the outcome to an exit code (0 ok, 1 denied or findings, 2 error).

use std::process::ExitCode;

use clap::Parser;
use egress_proxy::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EGRESS_PROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match cli.command {
        Command::Serve(args) => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("egress-proxy: error: cannot start the runtime: {e}");
                    return ExitCode::from(2);
                }
            };
            match runtime.block_on(egress_proxy::serve::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("egress-proxy: error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
