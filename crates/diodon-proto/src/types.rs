//! Checked newtypes for the values the protocol negotiates and carries:
//! session and channel ids, symbol size, rate, repair ratio. Constructing one
//! validates it ("parse, don't validate"), so the rest of the core can rely on
//! the invariant.

use std::fmt;
use thiserror::Error;

/// A sender session's random 64-bit id; a new one on every sender start.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(pub u64);

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// A channel (one file, stream or flow) within a session; 0 is reserved for
/// beacons, so channels count from 1.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct ChannelId(pub u32);

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a configuration value was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// Symbol size out of range or odd.
    #[error("symbol size {0} must be even and within 16..=65000")]
    SymbolSize(usize),
    /// MTU too small to carry any symbol.
    #[error("MTU {0} leaves no room for a symbol")]
    Mtu(usize),
    /// Repair ratio above 100 %.
    #[error("repair ratio {0} % is above 100 %")]
    Repair(u32),
    /// Unparseable rate text.
    #[error("cannot parse rate {0:?} (examples: 950mbit, 1gbit, 100000kbit, 0 for unlimited)")]
    Rate(String),
    /// Block size out of range.
    #[error("block of {0} source symbols is outside 1..=32768")]
    BlockSymbols(usize),
    /// Interleave depth out of range.
    #[error("interleave depth {0} is outside 1..=255")]
    Interleave(usize),
    /// Other inconsistent setting.
    #[error("{0}")]
    Inconsistent(&'static str),
}

/// Shard length of full blocks, in bytes: even (the erasure code works on
/// 16-bit words) and at most 65000. `SymbolSize::for_mtu` is defined in
/// [`crate::wire`], which knows the header lengths (this module is a leaf).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SymbolSize(u16);

impl SymbolSize {
    /// Checks `bytes`.
    pub fn new(bytes: usize) -> Result<Self, ConfigError> {
        if !(16..=65_000).contains(&bytes) || !bytes.is_multiple_of(2) {
            return Err(ConfigError::SymbolSize(bytes));
        }
        Ok(SymbolSize(bytes as u16))
    }

    /// Bytes.
    pub fn get(self) -> usize {
        usize::from(self.0)
    }
}

/// A link rate in bit/s; 0 means unpaced.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Rate(u64);

impl Rate {
    /// Unpaced.
    pub const UNLIMITED: Rate = Rate(0);

    /// `bps` bits per second.
    pub fn bits_per_sec(bps: u64) -> Self {
        Rate(bps)
    }

    /// Bits per second (0 = unpaced).
    pub fn bps(self) -> u64 {
        self.0
    }

    /// Whether pacing is off.
    pub fn is_unlimited(self) -> bool {
        self.0 == 0
    }
}

impl std::str::FromStr for Rate {
    type Err = ConfigError;

    /// Parses `950mbit`, `1gbit`, `1.5gbit`, `200kbit`, `1000000` (bit/s),
    /// `0` or `unlimited`.
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        let t = text.trim().to_ascii_lowercase();
        if t == "0" || t == "unlimited" || t == "max" {
            return Ok(Rate::UNLIMITED);
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num
            .parse()
            .map_err(|_| ConfigError::Rate(text.to_owned()))?;
        let scale = match unit.trim() {
            "" | "bit" | "bps" => 1.0,
            "k" | "kbit" | "kbps" => 1e3,
            "m" | "mbit" | "mbps" => 1e6,
            "g" | "gbit" | "gbps" => 1e9,
            _ => return Err(ConfigError::Rate(text.to_owned())),
        };
        let bps = value * scale;
        if !(1.0..=1e13).contains(&bps) {
            return Err(ConfigError::Rate(text.to_owned()));
        }
        Ok(Rate(bps.round() as u64))
    }
}

/// Repair symbols per source symbol, in percent (0..=100).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RepairRatio(u8);

impl RepairRatio {
    /// Checks `percent`.
    pub fn percent(percent: u32) -> Result<Self, ConfigError> {
        if percent > 100 {
            return Err(ConfigError::Repair(percent));
        }
        Ok(RepairRatio(percent as u8))
    }

    /// The percentage.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }

    /// Repair symbols for a full block of `k` source symbols: ⌈k·r/100⌉.
    pub fn repair_for(self, k: u16) -> u16 {
        let m = (u32::from(k) * u32::from(self.0)).div_ceil(100);
        m as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_sansio::IpVersion;

    #[test]
    fn symbol_size_for_mtu_never_fragments() {
        // 1500 − 28 − 32 − 18 − 4 = 1418
        assert_eq!(
            SymbolSize::for_mtu(1500, IpVersion::V4, 4).unwrap().get(),
            1418
        );
        assert_eq!(
            SymbolSize::for_mtu(1500, IpVersion::V6, 4).unwrap().get(),
            1398
        );
        assert_eq!(
            SymbolSize::for_mtu(9000, IpVersion::V4, 16).unwrap().get(),
            8906
        );
        assert!(SymbolSize::for_mtu(60, IpVersion::V4, 4).is_err());
        assert!(SymbolSize::new(1001).is_err());
    }

    #[test]
    fn rates_parse() {
        assert_eq!("950mbit".parse::<Rate>().unwrap().bps(), 950_000_000);
        assert_eq!("1.5gbit".parse::<Rate>().unwrap().bps(), 1_500_000_000);
        assert_eq!("0".parse::<Rate>().unwrap(), Rate::UNLIMITED);
        assert!("fast".parse::<Rate>().is_err());
        assert!("12furlongs".parse::<Rate>().is_err());
    }

    #[test]
    fn repair_rounds_up() {
        let r = RepairRatio::percent(10).unwrap();
        assert_eq!(r.repair_for(64), 7);
        assert_eq!(r.repair_for(1), 1);
        assert_eq!(RepairRatio::percent(0).unwrap().repair_for(64), 0);
        assert!(RepairRatio::percent(101).is_err());
    }
}
