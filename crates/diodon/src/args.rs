//! The command line: every subcommand's flags (clap). Merging with the TOML
//! file and turning flags into library settings is `config`'s job.

use clap::{Args, Parser, Subcommand, ValueEnum};
use diodon_apps::quarantine::QuarantineBytes;
use serde::Deserialize;
use std::net::SocketAddr;
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

/// `diodon send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Files or directories (recursively); `-` for stdin.
    pub paths: Vec<PathBuf>,
    /// Receiver address, e.g. `10.77.0.2:7700` or `[fd77::2]:7700`.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// Local address to send from (default: any, same family as --to).
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// Accept TCP connections here; each becomes a channel (runs until interrupted).
    #[arg(long, value_name = "ADDR")]
    pub tcp_listen: Option<SocketAddr>,
    /// Listen for UDP datagrams here; each source address/port becomes a
    /// datagram channel, delivered datagram by datagram (runs until interrupted).
    #[arg(long, value_name = "ADDR")]
    pub udp_listen: Option<SocketAddr>,
    /// A UDP flow silent this long is finished (ms). Default 5000.
    #[arg(long, value_name = "MS")]
    pub udp_idle: Option<u64>,
    /// Serve Prometheus metrics over HTTP here (e.g. `127.0.0.1:9977`).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Never use UDP GSO (one sendmmsg entry per datagram). Only for links
    /// that mishandle GSO super-packets (the testbed segments them itself).
    #[arg(long)]
    pub no_gso: bool,
    /// Keep sending beacons this long after the last channel (ms). Default 750.
    #[arg(long, value_name = "MS")]
    pub linger: Option<u64>,
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// `diodon sync`.
#[derive(Debug, Args)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "each bool is an independent command-line switch"
)]
pub struct SyncArgs {
    /// Source directories (each is announced under its own name).
    pub paths: Vec<PathBuf>,
    /// Receiver address, e.g. `10.77.0.2:7700`.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// Local address to send from (default: any, same family as --to).
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// The state database (`SQLite`). Default `diodon-sync.sqlite`.
    #[arg(long, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// Print what the state database knows (files, pending, per-pass
    /// progress) and exit.
    #[arg(long)]
    pub status: bool,
    /// Times every file and every deletion is sent (the carousel). Default 2.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub passes: Option<u32>,
    /// Share of the link, in percent, that repeats may take while new or
    /// changed files wait. Default 50.
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u32).range(0..=100))]
    pub repeat_share: Option<u32>,
    /// A file is sent once untouched (mtime and ctime) this long (ms). Default 2000.
    #[arg(long, value_name = "MS")]
    pub settle: Option<u64>,
    /// A full rescan this often (ms). Default 30000.
    #[arg(long, value_name = "MS")]
    pub rescan: Option<u64>,
    /// Files being sent at once (small files pass a large one). Default 64.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub in_flight: Option<u64>,
    /// Reader threads. Default 4.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub readers: Option<u64>,
    /// Never send files matching this glob (name or relative path);
    /// repeatable; added to the defaults (`*.tmp`, `.~*`, `*.swp`, `*~`, …).
    #[arg(long, value_name = "GLOB")]
    pub ignore: Vec<String>,
    /// Drop the default ignore globs.
    #[arg(long)]
    pub no_default_ignores: bool,
    /// Follow symbolic links (default: skip them).
    #[arg(long)]
    pub follow_symlinks: bool,
    /// Do not watch the sources (inotify); find changes by --rescan only.
    #[arg(long)]
    pub no_watch: bool,
    /// Outbox: once a file went out --passes times, `delete` it or
    /// `move:DIR` it (same relative path under DIR).
    #[arg(long, value_name = "delete|move:DIR")]
    pub after_send: Option<String>,
    /// Exit once every file and deletion went out --passes times (after a full scan).
    #[arg(long)]
    pub once: bool,
    /// Scan the sources into the state database once, print what was
    /// found, and exit (sends nothing; no --to needed).
    #[arg(long)]
    pub scan_only: bool,
    /// Serve Prometheus metrics over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Keep sending beacons this long after the last channel (ms). Default 750.
    #[arg(long, value_name = "MS")]
    pub linger: Option<u64>,
    /// Never use UDP GSO.
    #[arg(long)]
    pub no_gso: bool,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// `diodon recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// Address to listen on, e.g. `10.77.0.2:7700` or `[::]:7700`.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Output directory for files.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write the (single) stream to stdout instead.
    #[arg(long)]
    pub stdout: bool,
    /// Connect to this TCP address for every received stream.
    #[arg(long, value_name = "ADDR")]
    pub tcp_connect: Option<SocketAddr>,
    /// Send every record of received UDP flows to this address, one datagram each.
    #[arg(long, value_name = "ADDR")]
    pub udp_forward: Option<SocketAddr>,
    /// The tap's packets: each agent's frames to TAP interface PREFIX<agent>.
    #[arg(long, value_name = "PREFIX")]
    pub tap_out: Option<String>,
    /// The tap's packets: each agent's frames to DIR/agent-<agent>-NNNNNN.pcap.
    #[arg(long, value_name = "DIR")]
    pub pcap_out: Option<PathBuf>,
    /// With --pcap-out: a file ends after this many MiB. Default 100.
    #[arg(long, value_name = "MIB")]
    pub rotate_mb: Option<u64>,
    /// With --pcap-out: ... or after this many seconds (0: never). Default 0.
    #[arg(long, value_name = "SECS")]
    pub rotate_secs: Option<u64>,
    /// Write the packets of a tunnel (`diodon tunnel send`) into this TUN
    /// interface (created if missing; give it addresses and routes).
    #[arg(long, value_name = "NAME")]
    pub tun: Option<String>,
    /// MTU to set on the --tun interface.
    #[arg(long, value_name = "BYTES")]
    pub tun_mtu: Option<u32>,
    /// Serve Prometheus metrics over HTTP here (e.g. `127.0.0.1:9978`).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Exit once channels were seen, all are decided and the link is silent.
    #[arg(long)]
    pub once: bool,
    /// Exit as soon as N channels (files, streams) are decided, verified or
    /// failed, without waiting for the link to fall silent. Implies --once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub channels: Option<u64>,
    /// Give up with exit code 4 when no valid datagram arrived within this
    /// many seconds of the start (a script's `--once` then never waits forever).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Raise the "link silent" alarm (a WARN line, `diodon_link_up` 0) after
    /// this many seconds without a valid datagram; the sender beacons every
    /// 250 ms while it runs. Default 5.
    #[arg(long, value_name = "SECS")]
    pub alarm_silence: Option<f64>,
    /// The summary lists the last N channels (every channel is counted, and
    /// each was logged when decided): a receiver that runs for months keeps
    /// its memory flat. Default 10000.
    #[arg(long, value_name = "N")]
    pub list_channels: Option<usize>,
    /// Socket receive buffer in bytes (default: rate × stall, at least 4 MiB).
    #[arg(long)]
    pub rcvbuf: Option<usize>,
    /// Longest stall of the receiving process the socket buffer must absorb (ms). Default 250.
    #[arg(long, value_name = "MS")]
    pub stall: Option<u64>,
    /// Skip fsync before rename (faster, not crash-safe).
    #[arg(long)]
    pub no_fsync: bool,
    /// Most bytes the quarantine keeps (partial data of failed files and
    /// their reason records): bytes with an optional unit (`64MiB`, `2GiB`)
    /// or a share of the output filesystem (`5%`); oldest entries go first.
    /// Default: 10% of the output filesystem, at most 1 GiB.
    #[arg(long, value_name = "SIZE")]
    pub quarantine_bytes: Option<QuarantineBytes>,
    /// Most entries the quarantine keeps (one per failed file); oldest go
    /// first. Default 1000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub quarantine_entries: Option<u64>,
    /// Sync deletions move files to `OUT/.diodon-deleted/<time>/`; really
    /// delete them after this long (`90s`, `30m`, `12h`, `7d`, or seconds).
    /// Default: keep them.
    #[arg(long, value_name = "DURATION")]
    pub delete_after: Option<String>,
    /// The audit log: one JSON line per file decision (verified, present,
    /// failed, deleted, renamed), rotated at 64 MiB. Default
    /// `OUT/.diodon-audit.jsonl`.
    #[arg(long, value_name = "FILE")]
    pub audit: Option<PathBuf>,
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
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

/// How flows are keyed for agent assignment.
#[derive(Debug, Clone, Copy, ValueEnum, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FlowArg {
    /// Protocol and both (address, port) endpoints; fragments by address pair.
    #[value(name = "5tuple")]
    #[serde(rename = "5tuple")]
    FiveTuple,
    /// The address pair only (a host pair's whole traffic on one agent).
    Ippair,
}

/// `diodon tap`: capture, filter, distribute to agents.
#[derive(Debug, Args)]
pub struct TapArgs {
    /// Capture interface (a SPAN/mirror port; promiscuous while running).
    #[arg(long = "if", value_name = "IF")]
    pub interface: Option<String>,
    /// Capture threads sharing the interface by flow hash (packet fanout). Default 1.
    #[arg(long)]
    pub workers: Option<usize>,
    /// ACL rule file (reloaded on SIGHUP; a file with an error keeps the old rules).
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Flow key for agent assignment. Default 5tuple.
    #[arg(long, value_enum)]
    pub flow: Option<FlowArg>,
    /// An agent: `NAME` or `NAME=MAC` (MAC needed with --encap-if). Repeat per agent.
    #[arg(long = "agent", value_name = "NAME[=MAC]")]
    pub agents: Vec<String>,
    /// Interface facing the agents: frames go there encapsulated (agent MAC, tap MAC, EtherType).
    #[arg(long, value_name = "IF")]
    pub encap_if: Option<String>,
    /// Encapsulation EtherType (hex). Default 0xF1F0.
    #[arg(long, value_name = "HEX")]
    pub ethertype: Option<String>,
    /// Receiver across the diode: each agent's frames become datagram channels.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// Local address to send from.
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// A segment (channel) of an agent ends after this many MiB. Default 16.
    #[arg(long, value_name = "MIB")]
    pub segment_mb: Option<u64>,
    /// ... or after this many milliseconds. Default 1000.
    #[arg(long, value_name = "MS")]
    pub segment_ms: Option<u64>,
    /// Capture ring per worker in MiB (1 MiB blocks). Default 32.
    #[arg(long, value_name = "MIB")]
    pub ring_mb: Option<usize>,
    /// Stop after this many seconds (default: run until SIGINT/SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Only count captured frames, nothing else (measures the capture path's ceiling).
    #[arg(long)]
    pub capture_only: bool,
    /// Serve Prometheus metrics over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Link settings (for --to), --config and --json.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// `diodon agent`: strip the tap's encapsulation and hand frames on.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Interface facing the tap.
    #[arg(long = "if", value_name = "IF")]
    pub interface: Option<String>,
    /// Encapsulation EtherType (hex). Default 0xF1F0.
    #[arg(long, value_name = "HEX")]
    pub ethertype: Option<String>,
    /// Drop (and count) frames without the marker instead of passing them unchanged.
    #[arg(long)]
    pub marked_only: bool,
    /// Deliver to this TAP interface (created and brought up).
    #[arg(long, value_name = "NAME")]
    pub tap_out: Option<String>,
    /// Deliver to pcap files in this folder (frames-NNNNNN.pcap, rotated).
    #[arg(long, value_name = "DIR")]
    pub pcap_out: Option<PathBuf>,
    /// Deliver to the Unix datagram socket bound at this path (one frame per datagram).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// A pcap file ends after this many MiB. Default 100.
    #[arg(long, value_name = "MIB")]
    pub rotate_mb: Option<u64>,
    /// ... or after this many seconds (0: never). Default 0.
    #[arg(long, value_name = "SECS")]
    pub rotate_secs: Option<u64>,
    /// Capture ring in MiB. Default 32.
    #[arg(long, value_name = "MIB")]
    pub ring_mb: Option<usize>,
    /// Stop after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// TOML file with the same keys as the long flags; flags win.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `diodon tunnel`.
#[derive(Debug, Args)]
pub struct TunnelArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: TunnelCommand,
}

/// Tunnel subcommands.
#[derive(Debug, Subcommand)]
pub enum TunnelCommand {
    /// Read IP packets routed into a TUN and send them across the diode
    /// (runs until interrupted; the channel then finishes cleanly).
    Send(TunnelSendArgs),
}

/// `diodon tunnel send`.
#[derive(Debug, Args)]
pub struct TunnelSendArgs {
    /// The TUN interface to read (created if missing; route traffic into it).
    #[arg(long, value_name = "NAME")]
    pub tun: Option<String>,
    /// Receiver address, e.g. `10.77.0.2:7700`.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// Local address to send from.
    #[arg(long)]
    pub bind: Option<SocketAddr>,
    /// TUN queues (one reader thread each; more than 1 sets `IFF_MULTI_QUEUE`). Default 1.
    #[arg(long, value_name = "N")]
    pub tun_queues: Option<usize>,
    /// Take checksum, TSO and USO offloads (`IFF_VNET_HDR`): one read returns
    /// a TCP/UDP super-packet, segmented here.
    #[arg(long)]
    pub offload: bool,
    /// Ring length of each TUN queue (txqueuelen); default: leave the kernel's 500.
    #[arg(long, value_name = "PACKETS")]
    pub txqueuelen: Option<u32>,
    /// MTU to set on the TUN.
    #[arg(long, value_name = "BYTES")]
    pub tun_mtu: Option<u32>,
    /// Diodon's packet queue, in milliseconds at the link rate. Default 30.
    #[arg(long, value_name = "MS")]
    pub queue_ms: Option<u64>,
    /// What a full queue drops: `tail` (the arriving packet) or `head` (the oldest). Default tail.
    #[arg(long, value_name = "POLICY")]
    pub drop: Option<String>,
    /// A partial FEC block waits at most this long for more packets (ms). Default 5.
    #[arg(long, value_name = "MS")]
    pub flush: Option<u64>,
    /// Skip the start-up probe for TUN backpressure (it creates a scratch TUN).
    #[arg(long)]
    pub no_probe: bool,
    /// Serve Prometheus metrics over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Never use UDP GSO.
    #[arg(long)]
    pub no_gso: bool,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
}
