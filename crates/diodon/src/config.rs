//! Command-line flags and the equivalent TOML file: parsing, merging (a flag
//! wins over the file, the file over the default) and turning the result into
//! the core's and the drivers' configurations.
//!
//! ```text
//!  clap flags ─┐
//!              ├─► Settings (merged) ─► SenderConfig / ReceiverConfig / UdpConfig
//!  --config ───┘
//! ```

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use diodon_proto::{Integrity, IpVersion, Rate, RepairRatio, SymbolSize};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default link rate when none is given: a 1 `GbE` diode less headroom.
pub const DEFAULT_RATE: &str = "950mbit";

/// diodon: send files, a pipe or TCP streams across a one-way link (data diode).
///
/// Exit codes: 0 every channel verified; 1 a channel failed or was refused;
/// 2 usage or configuration error; 3 IO error (socket, output directory).
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
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
    /// Receive into a directory (`--out`), stdout (`--stdout`) or a TCP
    /// destination (`--tcp-connect`).
    Recv(RecvArgs),
    /// Delta-t (reliable, needs a return path): send/recv a file, echo.
    Deltat(crate::deltat::DeltatArgs),
    /// Impairment relay (delay, loss, reordering) over UDP or between two TUN devices.
    Relay(crate::deltat::RelayArgs),
    /// One-way nftables guard of a diode host: apply, verify, counters, reset, remove.
    Guard(crate::guard::GuardArgs),
    /// Measuring points (UDP and IP MIB, link, guard, a running Diodon's counters), once or as deltas.
    Stats(crate::stats::StatsArgs),
    /// Run a diode trial plan (the packet-loss thesis's experiment): CSV, summary, plots.
    Trial(crate::trial::TrialArgs),
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
    /// Repair symbols in percent of source symbols. Default 10.
    #[arg(long)]
    pub repair: Option<u32>,
    /// Source symbols per FEC block. Default 64.
    #[arg(long)]
    pub block: Option<u16>,
    /// Blocks whose symbols are interleaved. Default 4.
    #[arg(long)]
    pub interleave: Option<u8>,
    /// Pre-shared key: 32 raw bytes or 64 hex characters (keyed MAC instead of CRC32C).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
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
    /// Socket receive buffer in bytes (default: rate × stall, at least 4 MiB).
    #[arg(long)]
    pub rcvbuf: Option<usize>,
    /// Longest stall of the receiving process the socket buffer must absorb (ms). Default 250.
    #[arg(long, value_name = "MS")]
    pub stall: Option<u64>,
    /// Skip fsync before rename (faster, not crash-safe).
    #[arg(long)]
    pub no_fsync: bool,
    /// Link settings.
    #[command(flatten)]
    pub link: LinkArgs,
}

/// The TOML file: every long flag, with `_` or `-` in names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    to: Option<SocketAddr>,
    bind: Option<SocketAddr>,
    listen: Option<SocketAddr>,
    tcp_listen: Option<SocketAddr>,
    tcp_connect: Option<SocketAddr>,
    /// `udp-listen` (send).
    pub udp_listen: Option<SocketAddr>,
    /// `udp-idle` (send).
    pub udp_idle: Option<u64>,
    /// `udp-forward` (recv).
    pub udp_forward: Option<SocketAddr>,
    /// `metrics` (both).
    pub metrics: Option<SocketAddr>,
    out: Option<PathBuf>,
    stdout: Option<bool>,
    once: Option<bool>,
    channels: Option<u64>,
    mtu: Option<usize>,
    rate: Option<String>,
    repair: Option<u32>,
    block: Option<u16>,
    interleave: Option<u8>,
    key_file: Option<PathBuf>,
    beacon: Option<u64>,
    delta_t: Option<u64>,
    device: Option<String>,
    json: Option<bool>,
    linger: Option<u64>,
    no_gso: Option<bool>,
    rcvbuf: Option<usize>,
    stall: Option<u64>,
    no_fsync: Option<bool>,
}

impl FileConfig {
    /// Reads `path` (or returns the empty config).
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let Some(path) = path else {
            return Ok(FileConfig::default());
        };
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let table: toml::Table =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // Accept `key_file` as well as `key-file`.
        let table: toml::Table = table
            .into_iter()
            .map(|(k, v)| (k.replace('_', "-"), v))
            .collect();
        table
            .try_into()
            .with_context(|| format!("in {}", path.display()))
    }
}

/// Link settings after merging flags, file and defaults.
#[derive(Debug, Clone)]
pub struct Link {
    pub mtu: usize,
    pub rate: Rate,
    pub repair: RepairRatio,
    pub block: u16,
    pub interleave: u8,
    pub integrity: Integrity,
    pub beacon: Duration,
    pub delta_t: Duration,
    pub device: Option<String>,
    pub json: bool,
}

impl Link {
    /// Merges `a` over `f`.
    pub fn merge(a: &LinkArgs, f: &FileConfig) -> Result<Self> {
        let rate_text = a
            .rate
            .clone()
            .or_else(|| f.rate.clone())
            .unwrap_or_else(|| DEFAULT_RATE.into());
        let rate: Rate = rate_text.parse()?;
        let repair = RepairRatio::percent(a.repair.or(f.repair).unwrap_or(10))?;
        let key_file = a.key_file.clone().or_else(|| f.key_file.clone());
        let integrity = match key_file {
            Some(p) => Integrity::Keyed(read_key(&p)?),
            None => Integrity::Crc32c,
        };
        let beacon = a.beacon.or(f.beacon).unwrap_or(250);
        if beacon == 0 {
            bail!("--beacon must be at least 1 ms");
        }
        Ok(Link {
            mtu: a.mtu.or(f.mtu).unwrap_or(1500),
            rate,
            repair,
            block: a.block.or(f.block).unwrap_or(64),
            interleave: a.interleave.or(f.interleave).unwrap_or(4),
            integrity,
            beacon: Duration::from_millis(beacon),
            delta_t: Duration::from_millis(a.delta_t.or(f.delta_t).unwrap_or(2000)),
            device: a.device.clone().or_else(|| f.device.clone()),
            json: a.json || f.json.unwrap_or(false),
        })
    }

    /// The symbol size for this MTU and address family.
    pub fn symbol_size(&self, addr: SocketAddr) -> Result<SymbolSize> {
        let ip = if addr.is_ipv6() {
            IpVersion::V6
        } else {
            IpVersion::V4
        };
        Ok(SymbolSize::for_mtu(self.mtu, ip, self.integrity.tag_len())?)
    }
}

/// 32 raw bytes, or 64 hex characters (surrounding whitespace ignored).
pub fn read_key(path: &Path) -> Result<[u8; 32]> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading key file {}", path.display()))?;
    if bytes.len() == 32 {
        let mut k = [0u8; 32];
        k.copy_from_slice(&bytes);
        return Ok(k);
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| anyhow!("key file must hold 32 raw bytes or 64 hex characters"))?;
    let decoded = hex::decode(text.trim())
        .map_err(|_| anyhow!("key file must hold 32 raw bytes or 64 hex characters"))?;
    decoded
        .try_into()
        .map_err(|_| anyhow!("key file must hold 32 raw bytes or 64 hex characters"))
}

/// Merges an optional flag over the file's value.
pub fn pick<T: Clone>(flag: Option<&T>, file: Option<&T>) -> Option<T> {
    flag.or(file).cloned()
}

impl SendArgs {
    /// The file config's send-side values.
    pub fn resolve(
        &self,
        f: &FileConfig,
    ) -> (
        Option<SocketAddr>,
        Option<SocketAddr>,
        Option<SocketAddr>,
        Duration,
        bool,
    ) {
        (
            pick(self.to.as_ref(), f.to.as_ref()),
            pick(self.bind.as_ref(), f.bind.as_ref()),
            pick(self.tcp_listen.as_ref(), f.tcp_listen.as_ref()),
            Duration::from_millis(self.linger.or(f.linger).unwrap_or(750)),
            self.no_gso || f.no_gso.unwrap_or(false),
        )
    }
}

/// Receive-side values after merging.
#[derive(Debug, Clone)]
pub struct RecvSettings {
    pub listen: SocketAddr,
    pub out: Option<PathBuf>,
    pub stdout: bool,
    pub tcp_connect: Option<SocketAddr>,
    pub once: bool,
    pub channels: Option<u64>,
    pub rcvbuf: Option<usize>,
    pub stall: Duration,
    pub fsync: bool,
}

impl RecvArgs {
    /// Merges with the file.
    pub fn resolve(&self, f: &FileConfig) -> Result<RecvSettings> {
        let listen = pick(self.listen.as_ref(), f.listen.as_ref())
            .ok_or_else(|| anyhow!("--listen ADDR is required"))?;
        Ok(RecvSettings {
            listen,
            out: pick(self.out.as_ref(), f.out.as_ref()),
            stdout: self.stdout || f.stdout.unwrap_or(false),
            tcp_connect: pick(self.tcp_connect.as_ref(), f.tcp_connect.as_ref()),
            once: self.once || f.once.unwrap_or(false) || self.channels.or(f.channels).is_some(),
            channels: self.channels.or(f.channels).filter(|&n| n > 0),
            rcvbuf: self.rcvbuf.or(f.rcvbuf),
            stall: Duration::from_millis(self.stall.or(f.stall).unwrap_or(250)),
            fsync: !(self.no_fsync || f.no_fsync.unwrap_or(false)),
        })
    }
}

/// Receive buffer for `rate` and a tolerated stall, 4 MiB ..= 1 GiB
/// (unlimited rate counts as 10 Gbit/s).
pub fn rcvbuf_for(rate: Rate, stall: Duration) -> usize {
    let bps = if rate.is_unlimited() {
        10_000_000_000
    } else {
        rate.bps()
    };
    let bytes = (bps as f64 / 8.0 * stall.as_secs_f64()) as usize;
    bytes.clamp(4 << 20, 1 << 30)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rcvbuf_scales_with_rate() {
        assert_eq!(
            rcvbuf_for("1gbit".parse().unwrap(), Duration::from_millis(250)),
            31_250_000
        );
        assert_eq!(
            rcvbuf_for("1mbit".parse().unwrap(), Duration::from_millis(250)),
            4 << 20
        );
    }

    #[test]
    fn toml_matches_flags() {
        let f: FileConfig = toml::from_str(
            "rate = \"1gbit\"\nrepair = 20\nkey-file = \"/k\"\nonce = true\nchannels = 2\n",
        )
        .unwrap();
        assert_eq!(f.channels, Some(2));
        assert_eq!(f.rate.as_deref(), Some("1gbit"));
        assert_eq!(f.repair, Some(20));
        assert!(toml::from_str::<FileConfig>("bogus = 1").is_err());
        let link = Link::merge(
            &LinkArgs {
                repair: Some(5),
                ..LinkArgs::default()
            },
            &FileConfig::default(),
        )
        .unwrap();
        assert_eq!(link.repair.get(), 5);
        assert_eq!(link.rate.bps(), 950_000_000);
    }

    #[test]
    fn channels_implies_once_and_must_be_positive() {
        let recv = |args: &[&str]| -> Result<RecvSettings> {
            let cli = Cli::try_parse_from(
                [
                    "diodon",
                    "recv",
                    "--listen",
                    "127.0.0.1:7700",
                    "--out",
                    "/o",
                ]
                .iter()
                .chain(args),
            )?;
            let Command::Recv(r) = cli.cmd else {
                panic!("not recv")
            };
            r.resolve(&FileConfig::default())
        };
        let s = recv(&["--channels", "2"]).unwrap();
        assert!(s.once);
        assert_eq!(s.channels, Some(2));
        let s = recv(&[]).unwrap();
        assert!(!s.once);
        assert_eq!(s.channels, None);
        assert!(recv(&["--channels", "0"]).is_err());
    }

    #[test]
    fn key_file_formats() {
        let dir = std::env::temp_dir().join(format!("diodon-key-{}", std::process::id()));
        std::fs::write(&dir, [7u8; 32]).unwrap();
        assert_eq!(read_key(&dir).unwrap(), [7u8; 32]);
        std::fs::write(&dir, format!("{}\n", "ab".repeat(32))).unwrap();
        assert_eq!(read_key(&dir).unwrap(), [0xab; 32]);
        std::fs::write(&dir, "short").unwrap();
        assert!(read_key(&dir).is_err());
        let _ = std::fs::remove_file(&dir);
    }
}
