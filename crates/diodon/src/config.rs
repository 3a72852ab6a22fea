//! Command-line flags and the equivalent TOML file: parsing, merging (a flag
//! wins over the file, the file over the default) and turning the result into
//! the core's and the drivers' configurations.
//!
//! ```text
//!  clap flags ─┐
//!              ├─► Settings (merged) ─► SenderConfig / ReceiverConfig / UdpConfig
//!  --config ───┘
//! ```

use crate::args::{LinkArgs, RecvArgs, SendArgs, DEFAULT_RATE};
use anyhow::{anyhow, bail, Context, Result};
use diodon_apps::link::read_key;
use diodon_apps::quarantine::{QuarantineBytes, QuarantineLimits, DEFAULT_MAX_ENTRIES};
use diodon_proto::{Integrity, IpVersion, Rate, RepairRatio, SymbolSize};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The TOML file: every long flag, with `_` or `-` in names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    /// `to` (send, tap).
    pub to: Option<SocketAddr>,
    /// `bind` (send, tap).
    pub bind: Option<SocketAddr>,
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
    quarantine_bytes: Option<SizeValue>,
    quarantine_entries: Option<u64>,
    /// `tap-out` (recv): TAP interfaces PREFIX<agent> for the tap's packets.
    pub tap_out: Option<String>,
    /// `pcap-out` (recv): pcap files per agent.
    pub pcap_out: Option<PathBuf>,
    /// `rotate-mb` (recv, agent): a pcap file ends after this many MiB.
    pub rotate_mb: Option<u64>,
    /// `rotate-secs` (recv, agent): ... or after this many seconds.
    pub rotate_secs: Option<u64>,
}

/// A size in the TOML file: a number of bytes, or text as on the command
/// line (`"64MiB"`, `"5%"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    fn quarantine(&self) -> Result<QuarantineBytes> {
        Ok(match self {
            SizeValue::Bytes(n) => QuarantineBytes::Bytes(*n),
            SizeValue::Text(t) => t.parse()?,
        })
    }
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
        Self::from_table(table, Some(path))
    }

    /// The keys of an already parsed table (the tap reads its own keys
    /// first and leaves the link settings here).
    pub fn from_table(table: toml::Table, path: Option<&Path>) -> Result<Self> {
        // Accept `key_file` as well as `key-file`.
        let table: toml::Table = table
            .into_iter()
            .map(|(k, v)| (k.replace('_', "-"), v))
            .collect();
        let origin = path.map_or_else(|| "the config file".into(), |p| p.display().to_string());
        table.try_into().with_context(|| format!("in {origin}"))
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
        Ok(SymbolSize::for_mtu(
            self.mtu,
            IpVersion::of(addr),
            self.integrity.tag_len(),
        )?)
    }
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
    pub quarantine: QuarantineLimits,
}

impl RecvArgs {
    /// Merges with the file.
    pub fn resolve(&self, f: &FileConfig) -> Result<RecvSettings> {
        let listen = pick(self.listen.as_ref(), f.listen.as_ref())
            .ok_or_else(|| anyhow!("--listen ADDR is required"))?;
        let max_bytes = match (self.quarantine_bytes, &f.quarantine_bytes) {
            (Some(b), _) => b,
            (None, Some(v)) => v.quarantine().context("quarantine-bytes")?,
            (None, None) => QuarantineBytes::Auto,
        };
        let max_entries = self
            .quarantine_entries
            .or(f.quarantine_entries)
            .unwrap_or(DEFAULT_MAX_ENTRIES);
        if max_entries == 0 {
            bail!("quarantine-entries must be at least 1 (each failed file leaves a record)");
        }
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
            quarantine: QuarantineLimits {
                max_bytes,
                max_entries,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command, LinkArgs};
    use clap::Parser;

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
    fn quarantine_bounds_come_from_flags_or_the_file() {
        let recv = |args: &[&str], file: &str| -> Result<RecvSettings> {
            let cli = Cli::try_parse_from(
                ["diodon", "recv", "--listen", "127.0.0.1:7700"]
                    .iter()
                    .chain(args),
            )?;
            let Command::Recv(r) = cli.cmd else {
                panic!("not recv")
            };
            r.resolve(&toml::from_str(file)?)
        };
        let d = recv(&[], "").unwrap().quarantine;
        assert_eq!(d, QuarantineLimits::default());
        assert_eq!(d.max_bytes, QuarantineBytes::Auto);
        assert_eq!(d.max_entries, 1000);
        let q = recv(
            &["--quarantine-bytes", "64MiB", "--quarantine-entries", "7"],
            "",
        )
        .unwrap()
        .quarantine;
        assert_eq!(q.max_bytes, QuarantineBytes::Bytes(64 << 20));
        assert_eq!(q.max_entries, 7);
        let q = recv(&[], "quarantine-bytes = \"5%\"\nquarantine-entries = 9\n")
            .unwrap()
            .quarantine;
        assert_eq!(q.max_bytes, QuarantineBytes::Percent(5));
        assert_eq!(q.max_entries, 9);
        let q = recv(&["--quarantine-bytes", "1000"], "quarantine-bytes = 4096\n")
            .unwrap()
            .quarantine;
        assert_eq!(q.max_bytes, QuarantineBytes::Bytes(1000), "the flag wins");
        assert!(recv(&["--quarantine-bytes", "lots"], "").is_err());
        assert!(recv(&["--quarantine-entries", "0"], "").is_err());
        assert!(recv(&[], "quarantine-entries = 0\n").is_err());
        assert!(recv(&[], "quarantine-bytes = \"200%\"\n").is_err());
    }
}
