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
use diodon_apps::held::HeldLimits;
use diodon_apps::key_file::KeyReload;
use diodon_apps::quarantine::{QuarantineBytes, QuarantineLimits, DEFAULT_MAX_ENTRIES};
use diodon_proto::fec_plan::{
    choose_repair, default_block, file_failure, LossModel, TARGET_FILE_BYTES,
};
use diodon_proto::{Integrity, IpVersion, KeyRing, Rate, RepairRatio, SenderConfig, SymbolSize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod file;
mod integrity;
mod links;
pub use file::{FileConfig, LinkTable};
pub use links::links;

/// Link settings after merging flags, file and defaults.
#[derive(Debug, Clone)]
pub struct Link {
    pub mtu: usize,
    pub rate: Rate,
    pub repair: RepairRatio,
    /// `--repair` was given (`--expected-loss` then only sizes short blocks).
    pub repair_given: bool,
    /// `--expected-loss` as a probability.
    pub expected_loss: Option<f64>,
    /// `--block`; `None`: [`Link::block_for`] the repair ratio.
    pub block: Option<u16>,
    pub interleave: u8,
    /// Whether `interleave` was given (the tunnel's default differs).
    pub interleave_given: bool,
    pub integrity: Integrity,
    /// The key file (read again on SIGHUP).
    pub key_file: Option<PathBuf>,
    /// Seal with the key file's next key from this long after the start.
    pub next_key_after: Option<Duration>,
    pub beacon: Duration,
    pub delta_t: Duration,
    pub device: Option<String>,
    pub json: bool,
}

impl Link {
    /// The key file to read again on SIGHUP, if the link is keyed.
    pub fn key_reload(&self) -> Option<KeyReload> {
        self.key_file.clone().map(KeyReload::new)
    }

    /// Merges `a` over `f`.
    pub fn merge(a: &LinkArgs, f: &FileConfig) -> Result<Self> {
        let rate_text = a
            .rate
            .clone()
            .or_else(|| f.rate.clone())
            .unwrap_or_else(|| DEFAULT_RATE.into());
        let rate: Rate = rate_text.parse()?;
        let repair_given = a.repair.or(f.repair).is_some();
        let repair = RepairRatio::percent(a.repair.or(f.repair).unwrap_or(10))?;
        let expected_loss = match a.expected_loss.or(f.expected_loss) {
            Some(pct) if (0.0..100.0).contains(&pct) => Some(pct / 100.0),
            Some(pct) => bail!("--expected-loss {pct} is not a percentage below 100"),
            None => None,
        };
        let integrity = integrity::integrity(a, f)?;
        let next_key_after = pick(a.next_key_after.as_ref(), f.next_key_after.as_ref())
            .map(|d| duration(&d))
            .transpose()
            .context("next-key-after")?;
        if next_key_after.is_some() && integrity.key_ring().and_then(KeyRing::next_id).is_none() {
            bail!("--next-key-after needs a key file with a `next ID HEX` line");
        }
        let beacon = a.beacon.or(f.beacon).unwrap_or(250);
        if beacon == 0 {
            bail!("--beacon must be at least 1 ms");
        }
        Ok(Link {
            mtu: a.mtu.or(f.mtu).unwrap_or(1500),
            rate,
            repair,
            repair_given,
            expected_loss,
            block: a.block.or(f.block),
            interleave: a.interleave.or(f.interleave).unwrap_or(4),
            interleave_given: a.interleave.or(f.interleave).is_some(),
            integrity,
            key_file: a.key_file.clone().or_else(|| f.key_file.clone()),
            next_key_after,
            beacon: Duration::from_millis(beacon),
            delta_t: Duration::from_millis(a.delta_t.or(f.delta_t).unwrap_or(2000)),
            device: a.device.clone().or_else(|| f.device.clone()),
            json: a.json || f.json.unwrap_or(false),
        })
    }

    /// Source symbols per full block: `--block`, or the default for
    /// `repair` (`fec_plan::default_block`: the decoder works without
    /// padding).
    pub fn block_for(&self, repair: RepairRatio) -> u16 {
        self.block
            .unwrap_or_else(|| u16::try_from(default_block(repair.get())).unwrap_or(u16::MAX))
    }

    /// The repair ratio and the loss short blocks are designed for (parts
    /// per million), for datagrams of `symbol`: `--repair`, or the least
    /// ratio `--expected-loss` needs; with a sentence saying what
    /// `--expected-loss` chose (or that the given `--repair` falls short).
    pub fn repair_plan(&self, symbol: SymbolSize) -> Result<(RepairRatio, u32, Option<String>)> {
        let Some(loss) = self.expected_loss else {
            return Ok((self.repair, SenderConfig::default().design_loss_ppm, None));
        };
        let ppm = (loss * 1e6).round() as u32;
        let model = LossModel { loss, burst: 64 };
        let depth = usize::from(self.interleave);
        let choice = choose_repair(model, symbol.get(), self.block.map(u32::from), depth);
        let k = u32::from(self.block_for(self.repair));
        let pct = loss * 100.0;
        if self.repair_given {
            let m = u32::from(self.repair.repair_for(self.block_for(self.repair)));
            let fail = file_failure(TARGET_FILE_BYTES, symbol.get(), k, m, loss);
            let note = match choice {
                Some(c) if c.percent > self.repair.get() => Some(format!(
                    "--repair {} is less than the {} % that {pct} % expected loss needs: a 1 GB file fails with probability {fail:.1e}",
                    self.repair.get(),
                    c.percent
                )),
                _ => None,
            };
            return Ok((self.repair, ppm, note));
        }
        let c = choice.ok_or_else(|| {
            anyhow::anyhow!(
                "no repair up to 100 % keeps a 1 GB file safe at {pct} % loss with {}",
                self.block.map_or("the default blocks".into(), |b| format!(
                    "{b}-symbol blocks"
                ))
            )
        })?;
        let note = format!(
            "expected loss {pct} %: repair {} % ({} symbols per {}-symbol block); a 1 GB file fails with probability {:.1e}, any burst of 64 datagrams is repaired",
            c.percent, c.repair_symbols, c.block, c.file_failure
        );
        Ok((RepairRatio::percent(c.percent)?, ppm, Some(note)))
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
    /// The file config's send-side values: the TCP listener, the linger
    /// and whether GSO is off (the links: [`links`]).
    pub fn resolve(&self, f: &FileConfig) -> (Option<SocketAddr>, Duration, bool) {
        (
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
    pub timeout: Option<Duration>,
    pub alarm_silence: Duration,
    pub list_channels: usize,
    pub rcvbuf: Option<usize>,
    pub stall: Duration,
    pub fsync: bool,
    pub quarantine: QuarantineLimits,
    pub held: HeldLimits,
    pub delete_after: Option<Duration>,
    pub audit: Option<PathBuf>,
}

/// `90s`, `30m`, `12h`, `7d` or plain seconds.
pub fn duration(text: &str) -> Result<Duration> {
    let t = text.trim();
    let (num, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = num
        .parse()
        .with_context(|| format!("{text:?}: expected a duration such as 90s, 30m, 12h or 7d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => bail!("{text:?}: unknown unit (s, m, h or d)"),
    };
    Ok(Duration::from_secs(secs))
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
        let held = f.held_limits(self)?;
        let out = pick(self.out.as_ref(), f.out.as_ref());
        let delete_after = pick(self.delete_after.as_ref(), f.delete_after.as_ref())
            .map(|d| duration(&d))
            .transpose()
            .context("delete-after")?;
        let audit = pick(self.audit.as_ref(), f.audit.as_ref())
            .or_else(|| out.as_ref().map(|o| o.join(".diodon-audit.jsonl")));
        let seconds = |what: &str, v: f64| {
            Duration::try_from_secs_f64(v)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| anyhow!("{what} must be a positive number of seconds, not {v}"))
        };
        let timeout = self
            .timeout
            .or(f.timeout)
            .map(|v| seconds("timeout", v))
            .transpose()?;
        let alarm_silence = seconds(
            "alarm-silence",
            self.alarm_silence.or(f.alarm_silence).unwrap_or(5.0),
        )?;
        Ok(RecvSettings {
            listen,
            timeout,
            alarm_silence,
            list_channels: self.list_channels.or(f.list_channels).unwrap_or(10_000),
            out,
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
            held,
            delete_after,
            audit,
        })
    }
}

#[cfg(test)]
mod tests;
