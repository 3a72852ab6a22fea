//! `diodon`: the command-line front end of the gateway. It parses flags and
//! the TOML config, calls the libraries, prints what they return and maps it
//! to an exit code; it holds no logic a second front end would need.
//!
//! ```text
//!  args (clap) ─► config (merge with --config FILE.toml) ─► send | recv | sync | deltat
//!              │                                            guard | stats | tap | agent | tunnel
//!              │                                            completions | man (manual)
//!              └─► diodon-apps: gateway::run_send / run_recv ─► report::{Send,Recv}Summary
//! ```
//!
//! Exit codes ([`diodon_apps::report::Exit`]): 0 every channel verified; 1 a
//! channel failed or was refused; 2 usage or configuration error; 3 IO error;
//! 4 nothing arrived before `recv --timeout`.
//!
//! The measuring lab (the trial harness, its plots) is its own binary,
//! `diodon-lab`: this one links none of it.

mod agent;
mod args;
mod config;
mod deltat;
mod fatal;
mod guard;
mod manual;
mod progress;
mod recv;
mod sandbox;
mod send;
mod stats;
mod stop;
mod sync;
mod tap;
mod tunnel;

use args::{Cli, Command, LogFormat};
use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Before any thread: buffers change threads (diodon_io::memory).
    diodon_io::memory::limit_malloc_arenas(diodon_io::memory::ARENAS);
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.cmd {
        Command::Send(args) => send::run(&args),
        Command::Recv(args) => recv::run(&args),
        Command::Sync(args) => sync::run(&args),
        Command::Deltat(args) => Ok(deltat::run(&args)),
        Command::Guard(args) => guard::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::Tap(args) => tap::run(&args),
        Command::Agent(args) => agent::run(&args),
        Command::Tunnel(args) => tunnel::run(&args),
        Command::Completions { shell } => Ok(manual::completions(shell)),
        Command::Man { dir } => manual::man_pages(&dir),
    };
    match result {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(fatal) => {
            progress::clear();
            eprintln!("diodon: {}", fatal.sentence());
            ExitCode::from(fatal.0.code())
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DIODON_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| progress::LogWriter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
    }
}
