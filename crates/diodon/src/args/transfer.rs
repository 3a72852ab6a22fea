//! The flags of the transfers: `diodon send`, `diodon sync` and `diodon recv`.

use super::link::{LinkArgs, SandboxArgs};
use clap::Args;
use diodon_apps::quarantine::QuarantineBytes;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `diodon send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Files or directories (recursively); `-` for stdin.
    pub paths: Vec<PathBuf>,
    /// Receiver address, e.g. `10.77.0.2:7700` or `[fd77::2]:7700`. Give it
    /// again for more links (or `[[link]]` tables in the file): channels
    /// spread over the links by a stable hash of their name (a Kafka
    /// partition keeps to one link), each link its own session, pacing at
    /// --rate and counters; a link that goes down is reported, its channels
    /// in flight fail and new ones take the others.
    #[arg(long)]
    pub to: Vec<SocketAddr>,
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
    /// Consume --topic from this Kafka cluster (`host:port,…`) as a
    /// consumer group; each topic-partition travels in channels of its own
    /// (runs until interrupted).
    #[arg(long, value_name = "BROKERS")]
    pub kafka: Option<String>,
    /// With --kafka: the topic to carry (all its partitions).
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,
    /// With --kafka: the consumer group, whose committed offsets are where
    /// a restart resumes. Default `diodon`.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// With --kafka: times each segment of records goes to the link (the
    /// carousel; the receiver skips records it already produced). Offsets
    /// are committed once every copy was sent. Default 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub passes: Option<u32>,
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
    /// Receiver address, e.g. `10.77.0.2:7700`. Give it again for more
    /// links (or `[[link]]` tables in the file): files spread over the
    /// links by a stable hash of their name, as with `diodon send`.
    #[arg(long)]
    pub to: Vec<SocketAddr>,
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
    /// Files being sent at once (small files pass a large one). Default 32.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub in_flight: Option<u64>,
    /// Reader threads. Default 4.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=64))]
    pub readers: Option<u64>,
    /// Pack small files into bundle channels of up to this many bytes
    /// (each file keeps its own name, mtime, mode and digest); 0 sends
    /// every file in its own channel. Default 1048576.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(0..=8_388_608))]
    pub bundle: Option<u64>,
    /// Files up to this size are bundled. Default 65536.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(0..=1_048_576))]
    pub bundle_file_max: Option<u64>,
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
    /// Privilege drop and sandbox.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
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
    /// Produce the records of Kafka channels into this Kafka cluster
    /// (`host:port,…`): same topic name, same partition, never twice.
    #[arg(long, value_name = "BROKERS")]
    pub kafka: Option<String>,
    /// With --kafka: put this in front of every topic's name.
    #[arg(long, value_name = "PREFIX")]
    pub topic_prefix: Option<String>,
    /// With --kafka: records held in memory until the far brokers
    /// acknowledge them, at most (MiB). At the bound the receiver stops
    /// reading the link; what it then loses is counted as gaps. Default 256.
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=2047))]
    pub kafka_hold: Option<u64>,
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
    /// Most bytes the held area keeps: the blocks of sync files a pass did
    /// not complete, merged with the next pass (PROTOCOL.md § 7.7), bytes
    /// with an optional unit (`512MiB`, `8GiB`); least recently written go
    /// first. Default 4GiB.
    #[arg(long, value_name = "SIZE")]
    pub held_bytes: Option<QuarantineBytes>,
    /// Most files the held area keeps. Default 256.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub held_files: Option<u64>,
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
