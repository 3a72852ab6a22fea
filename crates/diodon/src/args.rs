//! The command line: every subcommand's flags (clap). Merging with the TOML
//! file and turning flags into library settings is `config`'s job.

mod link;
mod packets;
mod transfer;

pub use link::{LinkArgs, MacArg, SandboxArgs};
pub use packets::{AgentArgs, FlowArg, TapArgs, TunnelArgs, TunnelCommand, TunnelSendArgs};
pub use transfer::{RecvArgs, SendArgs, SyncArgs};

use clap::{Parser, Subcommand, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;

/// Default link rate when none is given: a 1 `GbE` diode less headroom.
pub const DEFAULT_RATE: &str = "950mbit";

/// diodon: send files, a pipe or TCP streams across a one-way link (data diode).
///
/// Exit codes: 0 every channel verified; 1 a channel failed or was refused;
/// 2 usage or configuration error; 3 IO error (socket, output directory);
/// 4 nothing arrived before `recv --timeout`.
#[derive(Debug, Parser)]
#[command(version = env!("DIODON_VERSION"), about, long_about = None)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, global = true, default_value = "human")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub cmd: Command,
}

/// Log formats.
#[derive(Debug, Clone, Copy, ValueEnum, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send files/directories, stdin (`-`) or TCP connections (`--tcp-listen`).
    Send(SendArgs),
    /// Receive into a directory (`--out`), stdout (`--stdout`), a TCP or UDP
    /// destination, a TUN (`--tun`), or TAP interfaces or pcap files (the tap's packets).
    Recv(Box<RecvArgs>),
    /// Keep directory trees mirrored across the diode (long-running; state
    /// in `SQLite`; carousel passes, deletions, outbox). `--status` reports.
    Sync(SyncArgs),
    /// Delta-t (reliable, needs a return path): send/recv a file, echo.
    Deltat(crate::deltat::DeltatArgs),
    /// One-way nftables guard of a diode host: apply, verify, counters, reset, remove.
    Guard(crate::guard::GuardArgs),
    /// Measuring points (UDP and IP MIB, link, guard, a running Diodon's counters), once or as deltas.
    Stats(crate::stats::StatsArgs),
    /// Mirrored traffic: capture, ACL pre-filter, flows spread over agents,
    /// encapsulated to them and/or across the diode (SIGHUP reloads the rules).
    Tap(TapArgs),
    /// The tap's agent: strip the encapsulation, hand frames to a TAP, pcap files or a socket.
    Agent(AgentArgs),
    /// The one-way IP tunnel: `tunnel send --tun NAME --to ADDR` (the far
    /// side runs `diodon recv --tun NAME`).
    Tunnel(TunnelArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages (diodon.1 and one per subcommand) into DIR.
    #[command(hide = true)]
    Man {
        /// Output folder (created if missing).
        dir: PathBuf,
    },
}
