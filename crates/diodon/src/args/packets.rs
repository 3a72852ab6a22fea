//! The flags of packet traffic: `diodon tap`, `diodon agent` (mirrored
//! traffic) and `diodon tunnel` (the one-way IP tunnel).

use super::link::{LinkArgs, SandboxArgs};
use clap::{Args, Subcommand, ValueEnum};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
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
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
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
    /// A shaper (token-bucket qdisc) in front of the TUN: `auto` (the
    /// tunnel's capacity at `--rate`), a rate (`80mbit`), or `off`. Bursts
    /// wait there instead of overflowing the TUN's ring, and a local sender
    /// blocks when its send buffer fills (backpressure on a stock kernel).
    /// Default off.
    #[arg(long, value_name = "RATE")]
    pub shape: Option<String>,
    /// Serve Prometheus metrics over HTTP here.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Never use UDP GSO.
    #[arg(long)]
    pub no_gso: bool,
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
}
