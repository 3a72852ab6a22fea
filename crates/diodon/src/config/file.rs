//! The TOML file (`--config FILE`): every long flag under the same name, read
//! strictly (an unknown key or a value of the wrong type is an error that
//! names the file).

use crate::args::RecvArgs;
use anyhow::{anyhow, bail, Context, Result};
use diodon_apps::held::HeldLimits;
use diodon_apps::quarantine::QuarantineBytes;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One `[[link]]` table: a link of a sender with several.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct LinkTable {
    /// The link's receiver.
    pub to: SocketAddr,
    /// The local address it sends from (default: `bind`, else any).
    pub bind: Option<SocketAddr>,
    /// The interface it is bound to (default: `device`, else the route's).
    pub device: Option<String>,
}

/// The TOML file: every long flag, with `_` or `-` in names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct FileConfig {
    /// `to` (send, tap, tunnel send).
    pub to: Option<SocketAddr>,
    /// `[[link]]` tables (send): one link each, instead of `to`.
    #[serde(default)]
    pub link: Vec<LinkTable>,
    /// `bind` (send, tap, tunnel send).
    pub bind: Option<SocketAddr>,
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) tcp_listen: Option<SocketAddr>,
    pub(crate) tcp_connect: Option<SocketAddr>,
    /// `udp-listen` (send).
    pub udp_listen: Option<SocketAddr>,
    /// `udp-idle` (send).
    pub udp_idle: Option<u64>,
    /// `udp-forward` (recv).
    pub udp_forward: Option<SocketAddr>,
    /// `kafka` (send: the source cluster; recv: the far cluster).
    pub kafka: Option<String>,
    /// `topic` (send with `kafka`).
    pub topic: Option<String>,
    /// `group` (send with `kafka`).
    pub group: Option<String>,
    /// `topic-prefix` (recv with `kafka`).
    pub topic_prefix: Option<String>,
    /// `kafka-hold` (recv with `kafka`), MiB.
    pub kafka_hold: Option<u64>,
    /// `metrics` (both).
    pub metrics: Option<SocketAddr>,
    pub(crate) out: Option<PathBuf>,
    pub(crate) stdout: Option<bool>,
    pub once: Option<bool>,
    pub(crate) timeout: Option<f64>,
    pub(crate) alarm_silence: Option<f64>,
    pub(crate) list_channels: Option<usize>,
    pub(crate) channels: Option<u64>,
    pub(crate) mtu: Option<usize>,
    pub(crate) rate: Option<String>,
    pub(crate) repair: Option<u32>,
    pub(crate) expected_loss: Option<f64>,
    pub(crate) block: Option<u16>,
    pub(crate) interleave: Option<u8>,
    /// `key-file` (both sides).
    pub key_file: Option<PathBuf>,
    /// `encrypt` (both sides).
    pub encrypt: Option<bool>,
    /// `mac` (senders): `aes-gmac` or `blake3`.
    pub mac: Option<crate::args::MacArg>,
    /// `next-key-after` (senders): a duration such as `90s`.
    pub next_key_after: Option<String>,
    pub(crate) beacon: Option<u64>,
    pub(crate) delta_t: Option<u64>,
    pub(crate) device: Option<String>,
    pub(crate) json: Option<bool>,
    pub linger: Option<u64>,
    pub no_gso: Option<bool>,
    pub(crate) rcvbuf: Option<usize>,
    pub(crate) stall: Option<u64>,
    pub(crate) no_fsync: Option<bool>,
    pub(crate) quarantine_bytes: Option<SizeValue>,
    pub(crate) quarantine_entries: Option<u64>,
    /// `recv`: held area bytes.
    pub(crate) held_bytes: Option<SizeValue>,
    /// `recv`: held area files.
    pub(crate) held_files: Option<u64>,
    /// `tap-out` (recv): TAP interfaces PREFIX<agent> for the tap's packets.
    pub tap_out: Option<String>,
    /// `pcap-out` (recv): pcap files per agent.
    pub pcap_out: Option<PathBuf>,
    /// `rotate-mb` (recv, agent): a pcap file ends after this many MiB.
    pub rotate_mb: Option<u64>,
    /// `rotate-secs` (recv, agent): ... or after this many seconds.
    pub rotate_secs: Option<u64>,
    /// `tun` (tunnel send, recv): the TUN interface.
    pub tun: Option<String>,
    /// `tun-mtu` (tunnel send, recv).
    pub tun_mtu: Option<u32>,
    /// `tun-queues` (tunnel send).
    pub tun_queues: Option<usize>,
    /// `offload` (tunnel send).
    pub offload: Option<bool>,
    /// `txqueuelen` (tunnel send).
    pub txqueuelen: Option<u32>,
    /// `queue-ms` (tunnel send).
    pub queue_ms: Option<u64>,
    /// `drop` (tunnel send): `tail` or `head`.
    pub drop: Option<String>,
    /// `flush` (tunnel send), ms.
    pub flush: Option<u64>,
    /// `no-probe` (tunnel send).
    pub no_probe: Option<bool>,
    /// `shape` (tunnel send): `auto`, a rate, or `off`.
    pub shape: Option<String>,
    /// `sync`: source directories.
    pub sources: Option<Vec<PathBuf>>,
    /// `sync`: the state database.
    pub state: Option<PathBuf>,
    /// `sync`, and `send` with `kafka`: passes.
    pub passes: Option<u32>,
    /// `sync`: repeat share, percent.
    pub repeat_share: Option<u32>,
    /// `sync`: settle time, ms.
    pub settle: Option<u64>,
    /// `sync`: rescan interval, ms.
    pub rescan: Option<u64>,
    /// `sync`: files in flight.
    pub in_flight: Option<u64>,
    /// `sync`: reader threads.
    pub readers: Option<u64>,
    /// `sync`: bundle size, bytes (0: no bundles).
    pub bundle: Option<u64>,
    /// `sync`: largest bundled file, bytes.
    pub bundle_file_max: Option<u64>,
    /// `sync`: ignore globs.
    pub ignore: Option<Vec<String>>,
    /// `sync`: no default ignore globs.
    pub no_default_ignores: Option<bool>,
    /// `sync`: follow symlinks.
    pub follow_symlinks: Option<bool>,
    /// `sync`: outbox mode.
    pub after_send: Option<String>,
    /// `recv`: really delete what went to the deleted folder after this long.
    pub(crate) delete_after: Option<String>,
    /// `recv`: the audit log.
    pub(crate) audit: Option<PathBuf>,
    /// `user` (send, recv, sync, tunnel send, tap): the user to run as once set up.
    pub user: Option<String>,
    /// `no-sandbox` (send, recv, sync, tunnel send, tap).
    pub no_sandbox: Option<bool>,
}

/// A size in the TOML file: a number of bytes, or text as on the command
/// line (`"64MiB"`, `"5%"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum SizeValue {
    Bytes(u64),
    Text(String),
}

impl SizeValue {
    pub(crate) fn quarantine(&self) -> Result<QuarantineBytes> {
        Ok(match self {
            SizeValue::Bytes(n) => QuarantineBytes::Bytes(*n),
            SizeValue::Text(t) => t.parse()?,
        })
    }
}

impl FileConfig {
    /// The held area's bounds: a byte count (a share of the filesystem is the
    /// quarantine's option, not this one's) and a file count.
    pub(crate) fn held_limits(&self, args: &RecvArgs) -> Result<HeldLimits> {
        let default = HeldLimits::default();
        let bytes = match (args.held_bytes, &self.held_bytes) {
            (Some(b), _) => Some(b),
            (None, Some(v)) => Some(v.quarantine().map_err(|e| anyhow!("held-bytes: {e}"))?),
            (None, None) => None,
        };
        let max_bytes = match bytes {
            None => default.max_bytes,
            Some(QuarantineBytes::Bytes(n)) => n,
            Some(other) => {
                bail!("held-bytes {other:?}: give bytes with an optional unit (512MiB, 8GiB), not a share of the filesystem")
            }
        };
        let files = args
            .held_files
            .or(self.held_files)
            .unwrap_or(default.max_files as u64);
        if files == 0 || files > 1_000_000 {
            bail!("held-files {files}: from 1 to 1000000");
        }
        Ok(HeldLimits {
            max_bytes,
            max_files: files as usize,
        })
    }

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
