//! One snapshot of every kernel measuring point of one diode host (thesis
//! ch. 6), and deltas between snapshots.
//!
//! ```text
//!  /proc/net/snmp Udp ─────────┐  (read on a thread inside the namespace)
//!  link stats64 of IF ─────────┼─► Snapshot ─► delta(later, earlier) ─► JSON / text
//!  guard counters (nft -j) ────┘  (absent when no guard table is loaded)
//! ```
//!
//! Link counters come from `ip -s -j link show dev IF` (netlink `stats64`),
//! which works for any namespace without remounting sysfs; without `--ns`
//! they are read from `/sys/class/net/IF/statistics`.

use crate::guard::{self, GuardCounters};
use crate::nft::{in_ns, run, ToolError};
use diodon_io::netns::spawn_in;
use diodon_io::{LinkStats, UdpSnmp};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// Errors reading a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// A counter file.
    #[error(transparent)]
    Counter(#[from] diodon_io::CounterError),
    /// Entering the namespace.
    #[error(transparent)]
    Netns(#[from] diodon_io::netns::NetnsError),
    /// `ip`.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// Unexpected `ip -j` output.
    #[error("cannot parse `ip -s -j link` output: {0}")]
    Parse(String),
}

/// The UDP MIB fields the thesis and Diodon read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[expect(non_snake_case, reason = "the kernel's own counter names")]
pub struct Udp {
    /// Datagrams delivered to sockets.
    pub InDatagrams: u64,
    /// Datagrams to a port nobody listens on.
    pub NoPorts: u64,
    /// Receive errors (includes `RcvbufErrors`).
    pub InErrors: u64,
    /// Datagrams sent.
    pub OutDatagrams: u64,
    /// Drops: receive buffer full.
    pub RcvbufErrors: u64,
    /// Drops: send buffer / queue full.
    pub SndbufErrors: u64,
    /// Bad UDP checksums.
    pub InCsumErrors: u64,
}

impl From<UdpSnmp> for Udp {
    fn from(s: UdpSnmp) -> Self {
        Udp {
            InDatagrams: s.in_datagrams,
            NoPorts: s.no_ports,
            InErrors: s.in_errors,
            OutDatagrams: s.out_datagrams,
            RcvbufErrors: s.rcvbuf_errors,
            SndbufErrors: s.sndbuf_errors,
            InCsumErrors: s.in_csum_errors,
        }
    }
}

impl Udp {
    fn delta(&self, e: &Udp) -> Udp {
        Udp {
            InDatagrams: self.InDatagrams.saturating_sub(e.InDatagrams),
            NoPorts: self.NoPorts.saturating_sub(e.NoPorts),
            InErrors: self.InErrors.saturating_sub(e.InErrors),
            OutDatagrams: self.OutDatagrams.saturating_sub(e.OutDatagrams),
            RcvbufErrors: self.RcvbufErrors.saturating_sub(e.RcvbufErrors),
            SndbufErrors: self.SndbufErrors.saturating_sub(e.SndbufErrors),
            InCsumErrors: self.InCsumErrors.saturating_sub(e.InCsumErrors),
        }
    }
}

/// Link-layer counters of one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Link {
    /// Frames received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Frames dropped before the stack.
    pub rx_dropped: u64,
    /// Frames the NIC missed (ring full).
    pub rx_missed: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Frames dropped before the hardware.
    pub tx_dropped: u64,
}

impl From<LinkStats> for Link {
    fn from(s: LinkStats) -> Self {
        Link {
            rx_packets: s.rx_packets,
            rx_errors: s.rx_errors,
            rx_dropped: s.rx_dropped,
            rx_missed: s.rx_missed_errors,
            tx_packets: s.tx_packets,
            tx_errors: s.tx_errors,
            tx_dropped: s.tx_dropped,
        }
    }
}

impl Link {
    /// Parses `ip -s -j link show dev IF`.
    pub fn parse_ip_json(text: &str) -> Result<Link, StatsError> {
        let v: Value = serde_json::from_str(text).map_err(|e| StatsError::Parse(e.to_string()))?;
        let s = v
            .get(0)
            .and_then(|l| l.get("stats64"))
            .ok_or_else(|| StatsError::Parse("no stats64".into()))?;
        let g = |dir: &str, k: &str| s[dir][k].as_u64().unwrap_or(0);
        Ok(Link {
            rx_packets: g("rx", "packets"),
            rx_errors: g("rx", "errors"),
            rx_dropped: g("rx", "dropped"),
            rx_missed: g("rx", "missed"),
            tx_packets: g("tx", "packets"),
            tx_errors: g("tx", "errors"),
            tx_dropped: g("tx", "dropped"),
        })
    }

    fn delta(&self, e: &Link) -> Link {
        Link {
            rx_packets: self.rx_packets.saturating_sub(e.rx_packets),
            rx_errors: self.rx_errors.saturating_sub(e.rx_errors),
            rx_dropped: self.rx_dropped.saturating_sub(e.rx_dropped),
            rx_missed: self.rx_missed.saturating_sub(e.rx_missed),
            tx_packets: self.tx_packets.saturating_sub(e.tx_packets),
            tx_errors: self.tx_errors.saturating_sub(e.tx_errors),
            tx_dropped: self.tx_dropped.saturating_sub(e.tx_dropped),
        }
    }
}

/// Every measuring point of one host at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Namespace (`None`: the caller's).
    pub ns: Option<String>,
    /// Interface, if one was named.
    pub iface: Option<String>,
    /// `/proc/net/snmp` Udp.
    pub udp: Udp,
    /// Link counters of `iface`.
    pub link: Option<Link>,
    /// The guard table's counters, when one is loaded.
    pub guard: Option<GuardCounters>,
}

/// What to read.
#[derive(Clone, Debug, Default)]
pub struct Target {
    /// Namespace.
    pub ns: Option<String>,
    /// Interface.
    pub iface: Option<String>,
    /// Guard table name.
    pub guard_table: String,
}

/// Reads the UDP MIB of `ns` (on a thread inside it).
pub fn read_udp(ns: Option<&str>) -> Result<Udp, StatsError> {
    let snmp = match ns {
        None => UdpSnmp::read()?,
        Some(ns) => spawn_in(ns, UdpSnmp::read)?
            .join()
            .map_err(|_| StatsError::Parse("counter thread panicked".into()))???,
    };
    Ok(snmp.into())
}

/// Reads the link counters of `iface` in `ns`.
pub fn read_link(ns: Option<&str>, iface: &str) -> Result<Link, StatsError> {
    match ns {
        None => Ok(LinkStats::read(iface)?.into()),
        Some(ns) => {
            let mut c = in_ns(None, "ip");
            c.args(["-n", ns, "-s", "-j", "link", "show", "dev", iface]);
            Link::parse_ip_json(&run(c, None)?)
        }
    }
}

impl Snapshot {
    /// Reads all points of `t`; the guard is `None` when its table is absent.
    pub fn read(t: &Target) -> Result<Snapshot, StatsError> {
        let ns = t.ns.as_deref();
        Ok(Snapshot {
            ns: t.ns.clone(),
            iface: t.iface.clone(),
            udp: read_udp(ns)?,
            link: t.iface.as_deref().map(|i| read_link(ns, i)).transpose()?,
            guard: guard::counters(ns, &t.guard_table).ok(),
        })
    }

    /// `self − earlier` for every counter.
    #[must_use]
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            ns: self.ns.clone(),
            iface: self.iface.clone(),
            udp: self.udp.delta(&earlier.udp),
            link: match (self.link, earlier.link) {
                (Some(a), Some(b)) => Some(a.delta(&b)),
                _ => None,
            },
            guard: match (&self.guard, &earlier.guard) {
                (Some(a), Some(b)) => Some(a.delta(b)),
                _ => None,
            },
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let u = &self.udp;
        let _ = writeln!(
            s,
            "udp   InDatagrams {} NoPorts {} InErrors {} OutDatagrams {} RcvbufErrors {} SndbufErrors {} InCsumErrors {}",
            u.InDatagrams, u.NoPorts, u.InErrors, u.OutDatagrams, u.RcvbufErrors, u.SndbufErrors, u.InCsumErrors
        );
        if let (Some(l), Some(i)) = (&self.link, &self.iface) {
            let _ = writeln!(
                s,
                "link  {i} rx_packets {} rx_errors {} rx_dropped {} rx_missed {} tx_packets {} tx_errors {} tx_dropped {}",
                l.rx_packets, l.rx_errors, l.rx_dropped, l.rx_missed, l.tx_packets, l.tx_errors, l.tx_dropped
            );
        }
        if let Some(g) = &self.guard {
            let _ = writeln!(
                s,
                "guard accepted {} ({} bytes) fragments {} dropped_in {} dropped_out {}",
                g.accepted.packets,
                g.accepted.bytes,
                g.fragments.packets,
                g.dropped_in.packets,
                g.dropped_out.packets
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ip_stats64_and_deltas() {
        let json = r#"[{"ifname":"rx0","stats64":{"rx":{"bytes":446,"packets":5,"errors":1,"dropped":2,"missed":3},"tx":{"bytes":0,"packets":9,"errors":4,"dropped":6}}}]"#;
        let l = Link::parse_ip_json(json).expect("test");
        assert_eq!(
            l,
            Link {
                rx_packets: 5,
                rx_errors: 1,
                rx_dropped: 2,
                rx_missed: 3,
                tx_packets: 9,
                tx_errors: 4,
                tx_dropped: 6
            }
        );
        assert!(Link::parse_ip_json("[]").is_err());
        let a = Snapshot {
            link: Some(l),
            udp: Udp {
                InDatagrams: 10,
                ..Udp::default()
            },
            ..Snapshot::default()
        };
        let mut b = a.clone();
        b.udp.InDatagrams = 25;
        b.link = Some(Link {
            rx_packets: 15,
            ..l
        });
        let d = b.delta(&a);
        assert_eq!(d.udp.InDatagrams, 15);
        assert_eq!(d.link.expect("test").rx_packets, 10);
        assert!(d.text().contains("InDatagrams 15"));
    }

    #[test]
    fn reads_this_namespace() {
        let s = Snapshot::read(&Target {
            ns: None,
            iface: Some("lo".into()),
            guard_table: "diodon_no_such_table".into(),
        })
        .expect("test");
        assert!(s.link.is_some());
        assert!(s.guard.is_none());
    }
}
