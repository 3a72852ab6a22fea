//! The command line: every subcommand's flags (clap). Merging with the TOML
//! file and turning flags into library settings is `config`'s job.

mod packets;
mod transfer;

pub use packets::{AgentArgs, FlowArg, TapArgs, TunnelArgs, TunnelCommand, TunnelSendArgs};
pub use transfer::{RecvArgs, SendArgs, SyncArgs};

use clap::{Args, Parser, Subcommand, ValueEnum};
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
    Recv(RecvArgs),
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

/// Settings shared by both sides.
#[derive(Debug, Args, Default)]
pub struct LinkArgs {
    /// TOML file with the same keys as the long flags (`rate = "1gbit"`); flags win.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Path MTU; the datagram size is derived from it (never fragments). Default 1500.
    #[arg(long)]
    pub mtu: Option<usize>,
    /// Link rate (`950mbit`, `1gbit`, `unlimited`). Sender: pacing; receiver:
    /// sizes the socket buffer. Default 950mbit.
    #[arg(long)]
    pub rate: Option<String>,
    /// Repair symbols in percent of source symbols. Default 10, or what
    /// `--expected-loss` chooses.
    #[arg(long)]
    pub repair: Option<u32>,
    /// Random loss of the link, in percent (e.g. `0.5`): picks the least
    /// repair that keeps a 1 GB file below a 10⁻⁶ chance of failing and
    /// repairs any burst of 64 datagrams, sizes short blocks for it, and
    /// says what it chose. Default: designed for 1 %, repair 10.
    #[arg(long, value_name = "PERCENT")]
    pub expected_loss: Option<f64>,
    /// Source symbols per FEC block. Default 256.
    #[arg(long)]
    pub block: Option<u16>,
    /// Blocks whose symbols are interleaved. Default 4.
    #[arg(long)]
    pub interleave: Option<u8>,
    /// Pre-shared key: 32 raw bytes or 64 hex characters (keyed MAC instead
    /// of CRC32C), or the lines `current ID HEX` and `next ID HEX` for a
    /// key rollover (with --encrypt).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Encrypt every datagram (ChaCha20-Poly1305 with a key per session
    /// derived from --key-file) instead of only signing it. Both sides need
    /// it; a receiver with it refuses datagrams that are not encrypted.
    #[arg(long)]
    pub encrypt: bool,
    /// Sender, with --encrypt and a key file holding a `next` key: seal with
    /// the next key from this long after the start (`0s`: at once; `90s`,
    /// `30m`, `12h`, `7d`). The receiver opens both keys.
    #[arg(long, value_name = "DURATION")]
    pub next_key_after: Option<String>,
    /// Beacon interval in milliseconds. Default 250.
    #[arg(long, value_name = "MS")]
    pub beacon: Option<u64>,
    /// Δt in milliseconds (state is freed after 2Δt of silence). Default 2000.
    #[arg(long, value_name = "MS")]
    pub delta_t: Option<u64>,
    /// Bind the socket to this interface.
    #[arg(long)]
    pub device: Option<String>,
    /// Print the final summary as JSON on stdout (stderr with --stdout).
    #[arg(long)]
    pub json: bool,
}

/// What the process keeps once its socket and outputs are open (`send`, `recv`).
#[derive(Debug, Args, Default)]
pub struct SandboxArgs {
    /// Once the socket and the outputs are open, run as this user and its
    /// group, keeping no capability (needs root to start).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Do not restrict the process once set up (no no-new-privileges, Landlock
    /// or seccomp filter); --user still applies.
    #[arg(long)]
    pub no_sandbox: bool,
}
