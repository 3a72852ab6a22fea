//! One snapshot of every measuring point of one diode host (thesis ch. 6):
//! the kernel's and, when asked, a running Diodon's own counters; and deltas
//! between snapshots.
//!
//! ```text
//!  /proc/net/snmp Udp, Ip ─────┐  (read on a thread inside the namespace)
//!  link stats64 of IF ─────────┤
//!  guard counters (nft -j) ────┼─► Snapshot ─► delta(later, earlier) ─► JSON / text
//!  Diodon /metrics (HTTP) ─────┘  (socket drops, missing, recovered, lost, ...)
//! ```
//!
//! Link counters come from `ip -s -j link show dev IF` (netlink `stats64`),
//! which works for any namespace without remounting sysfs; without `--ns`
//! they are read from `/sys/class/net/IF/statistics`. The `Ip:` fragment
//! counters matter for tools whose datagrams exceed the MTU (netcat,
//! pydiode): a datagram that lost one fragment, or whose fragments found the
//! reassembly memory (`net.ipv4.ipfrag_high_thresh`) full, never reaches the
//! UDP layer and shows only in `ReasmFails`. The guard is absent
//! when no guard table is loaded. Diodon's counters come from the Prometheus
//! page that `diodon send|recv --metrics ADDR` serves, fetched from inside
//! the namespace (so an endpoint on the namespace's loopback is reachable).

use crate::guard::{self, GuardCounters};
use crate::nft::{in_ns, run, ToolError};
use diodon_io::netns::spawn_in;
use diodon_io::{LinkStats, UdpSnmp};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

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
    /// A Diodon metrics endpoint could not be read.
    #[error("Diodon metrics at {addr}: {what}")]
    Metrics {
        /// The endpoint.
        addr: SocketAddr,
        /// What went wrong.
        what: String,
    },
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

/// The IPv4 fragmentation and reassembly counters of `/proc/net/snmp`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[expect(non_snake_case, reason = "the kernel's own counter names")]
pub struct Ip {
    /// Fragments received that needed reassembly.
    pub ReasmReqds: u64,
    /// Datagrams reassembled.
    pub ReasmOKs: u64,
    /// Reassembly failures: fragments refused (memory full) or queues expired.
    pub ReasmFails: u64,
    /// Queues that expired (`net.ipv4.ipfrag_time`).
    pub ReasmTimeout: u64,
    /// Datagrams fragmented on output.
    pub FragOKs: u64,
    /// Fragments created on output.
    pub FragCreates: u64,
    /// Datagrams that needed fragmenting but could not be.
    pub FragFails: u64,
}

impl Ip {
    /// Parses the `Ip:` header/value line pair of `/proc/net/snmp`.
    pub fn parse_snmp(text: &str) -> Result<Ip, StatsError> {
        let mut lines = text.lines().filter(|l| l.starts_with("Ip:"));
        let (Some(names), Some(values)) = (lines.next(), lines.next()) else {
            return Err(StatsError::Parse("no `Ip:` lines in /proc/net/snmp".into()));
        };
        let mut ip = Ip::default();
        for (n, v) in names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
        {
            let v = v.parse::<u64>().unwrap_or(0);
            match n {
                "ReasmReqds" => ip.ReasmReqds = v,
                "ReasmOKs" => ip.ReasmOKs = v,
                "ReasmFails" => ip.ReasmFails = v,
                "ReasmTimeout" => ip.ReasmTimeout = v,
                "FragOKs" => ip.FragOKs = v,
                "FragCreates" => ip.FragCreates = v,
                "FragFails" => ip.FragFails = v,
                _ => {}
            }
        }
        Ok(ip)
    }

    fn delta(&self, e: &Ip) -> Ip {
        Ip {
            ReasmReqds: self.ReasmReqds.saturating_sub(e.ReasmReqds),
            ReasmOKs: self.ReasmOKs.saturating_sub(e.ReasmOKs),
            ReasmFails: self.ReasmFails.saturating_sub(e.ReasmFails),
            ReasmTimeout: self.ReasmTimeout.saturating_sub(e.ReasmTimeout),
            FragOKs: self.FragOKs.saturating_sub(e.FragOKs),
            FragCreates: self.FragCreates.saturating_sub(e.FragCreates),
            FragFails: self.FragFails.saturating_sub(e.FragFails),
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

/// A running Diodon's own counters, read from its Prometheus endpoint.
///
/// Names are the metric names without `diodon_` and `_total`, e.g.
/// `receiver_socket_drops` (`SO_RXQ_OVFL`), `receiver_missing`,
/// `receiver_recovered_symbols`, `receiver_blocks_lost`,
/// `sender_datagrams_sent`. The kernel and link series of the same page are
/// left out: the snapshot reads those itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiodonCounters {
    /// The endpoint (`host:port`).
    pub endpoint: String,
    /// Counter name → value.
    pub counters: BTreeMap<String, u64>,
}

impl DiodonCounters {
    /// Parses Prometheus text exposition (only unlabelled integer samples of
    /// `diodon_*` series that are not kernel or link copies).
    pub fn parse(endpoint: &str, text: &str) -> DiodonCounters {
        let mut counters = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with('#') || line.contains('{') {
                continue;
            }
            let Some((name, value)) = line.split_once(' ') else {
                continue;
            };
            let Some(short) = name.strip_prefix("diodon_") else {
                continue;
            };
            if short.starts_with("kernel_") || short.starts_with("link_") {
                continue;
            }
            if let Ok(v) = value.trim().parse::<u64>() {
                let short = short.strip_suffix("_total").unwrap_or(short);
                counters.insert(short.to_owned(), v);
            }
        }
        DiodonCounters {
            endpoint: endpoint.to_owned(),
            counters,
        }
    }

    /// Fetches `http://addr/metrics`, from inside namespace `ns` when given.
    pub fn fetch(ns: Option<&str>, addr: SocketAddr) -> Result<DiodonCounters, StatsError> {
        let body = match ns {
            None => http_get_metrics(addr),
            Some(ns) => spawn_in(ns, move || http_get_metrics(addr))?
                .join()
                .map_err(|_| StatsError::Parse("metrics thread panicked".into()))??,
        }?;
        Ok(DiodonCounters::parse(&addr.to_string(), &body))
    }

    /// One counter (0 when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.counters.get(name).copied().unwrap_or(0)
    }

    fn delta(&self, e: &DiodonCounters) -> DiodonCounters {
        DiodonCounters {
            endpoint: self.endpoint.clone(),
            counters: self
                .counters
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(e.get(k))))
                .collect(),
        }
    }
}

/// `GET /metrics` over HTTP/1.0; the body of a 200 answer.
fn http_get_metrics(addr: SocketAddr) -> Result<String, StatsError> {
    let err = |what: String| StatsError::Metrics { addr, what };
    let timeout = Duration::from_secs(3);
    let mut c = TcpStream::connect_timeout(&addr, timeout).map_err(|e| err(e.to_string()))?;
    c.set_read_timeout(Some(timeout))
        .and_then(|()| c.set_write_timeout(Some(timeout)))
        .and_then(|()| write!(c, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n"))
        .map_err(|e| err(e.to_string()))?;
    let mut raw = Vec::new();
    c.take(64 << 20)
        .read_to_end(&mut raw)
        .map_err(|e| err(e.to_string()))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| err("no HTTP header".into()))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(err(format!("answered {status:?}")));
    }
    Ok(body.to_owned())
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
    /// `/proc/net/snmp` Ip fragmentation and reassembly.
    pub ip: Ip,
    /// Link counters of `iface`.
    pub link: Option<Link>,
    /// The guard table's counters, when one is loaded.
    pub guard: Option<GuardCounters>,
    /// A running Diodon's counters, when an endpoint was named.
    pub diodon: Option<DiodonCounters>,
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
    /// A running Diodon's metrics endpoint (`--metrics ADDR`), reached from `ns`.
    pub diodon: Option<SocketAddr>,
}

/// Reads the UDP MIB of `ns` (on a thread inside it).
pub fn read_udp(ns: Option<&str>) -> Result<Udp, StatsError> {
    Ok(read_snmp(ns)?.0)
}

/// Reads the UDP MIB and the IP fragment counters of `ns`, from one read.
pub fn read_snmp(ns: Option<&str>) -> Result<(Udp, Ip), StatsError> {
    fn here() -> Result<(Udp, Ip), StatsError> {
        let path = ["/proc/thread-self/net/snmp", "/proc/net/snmp"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("/proc/net/snmp");
        let text =
            std::fs::read_to_string(path).map_err(|e| StatsError::Parse(format!("{path}: {e}")))?;
        Ok((UdpSnmp::parse_snmp(&text)?.into(), Ip::parse_snmp(&text)?))
    }
    match ns {
        None => here(),
        Some(ns) => spawn_in(ns, here)?
            .join()
            .map_err(|_| StatsError::Parse("counter thread panicked".into()))??,
    }
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
        let (udp, ip) = read_snmp(ns)?;
        Ok(Snapshot {
            ns: t.ns.clone(),
            iface: t.iface.clone(),
            udp,
            ip,
            link: t.iface.as_deref().map(|i| read_link(ns, i)).transpose()?,
            guard: guard::counters(ns, &t.guard_table).ok(),
            diodon: t.diodon.map(|a| DiodonCounters::fetch(ns, a)).transpose()?,
        })
    }

    /// `self − earlier` for every counter.
    #[must_use]
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot {
            ns: self.ns.clone(),
            iface: self.iface.clone(),
            udp: self.udp.delta(&earlier.udp),
            ip: self.ip.delta(&earlier.ip),
            link: match (self.link, earlier.link) {
                (Some(a), Some(b)) => Some(a.delta(&b)),
                _ => None,
            },
            guard: match (&self.guard, &earlier.guard) {
                (Some(a), Some(b)) => Some(a.delta(b)),
                _ => None,
            },
            diodon: match (&self.diodon, &earlier.diodon) {
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
        let ip = &self.ip;
        let _ = writeln!(
            s,
            "ip    ReasmReqds {} ReasmOKs {} ReasmFails {} ReasmTimeout {} FragOKs {} FragCreates {} FragFails {}",
            ip.ReasmReqds, ip.ReasmOKs, ip.ReasmFails, ip.ReasmTimeout, ip.FragOKs, ip.FragCreates, ip.FragFails
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
        if let Some(d) = &self.diodon {
            // One line per role (receiver, sender, udp_source, ...).
            let mut roles: BTreeMap<&str, String> = BTreeMap::new();
            for (k, v) in &d.counters {
                let (role, name) = ["receiver_", "sender_", "udp_source_", "udp_forward_"]
                    .iter()
                    .find_map(|p| k.strip_prefix(p).map(|n| (p.trim_end_matches('_'), n)))
                    .unwrap_or(("other", k));
                let _ = write!(roles.entry(role).or_default(), " {name} {v}");
            }
            for (role, line) in roles {
                let _ = writeln!(s, "diodon {} {role}{line}", d.endpoint);
            }
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
    fn parses_ip_fragment_counters() {
        let text = "Ip: Forwarding DefaultTTL InReceives ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates\n\
                    Ip: 2 64 100 1 90 10 7 3 0 12\n\
                    Udp: InDatagrams NoPorts\nUdp: 5 0\n";
        let ip = Ip::parse_snmp(text).expect("test");
        assert_eq!(
            ip,
            Ip {
                ReasmReqds: 90,
                ReasmOKs: 10,
                ReasmFails: 7,
                ReasmTimeout: 1,
                FragOKs: 3,
                FragCreates: 12,
                FragFails: 0
            }
        );
        assert!(Ip::parse_snmp("Udp: a\nUdp: 1\n").is_err());
    }

    #[test]
    fn parses_diodon_metrics_and_deltas() {
        let page = "# HELP diodon_receiver_missing_total Datagrams never received.\n\
                    # TYPE diodon_receiver_missing_total counter\n\
                    diodon_receiver_missing_total 7\n\
                    diodon_receiver_socket_drops_total 3\n\
                    diodon_kernel_udp_in_datagrams_total 99\n\
                    diodon_link_rx_packets_total{interface=\"rx0\"} 5\n\
                    diodon_interface_in_use{interface=\"rx0\"} 1\n\
                    diodon_sender_datagrams_sent_total 12\n\
                    other_metric 4\n";
        let a = DiodonCounters::parse("127.0.0.1:9978", page);
        assert_eq!(a.get("receiver_missing"), 7);
        assert_eq!(a.get("receiver_socket_drops"), 3);
        assert_eq!(a.get("sender_datagrams_sent"), 12);
        assert_eq!(a.counters.len(), 3, "{:?}", a.counters);
        let mut b = a.clone();
        b.counters.insert("receiver_missing".into(), 10);
        let d = Snapshot {
            diodon: Some(b),
            ..Snapshot::default()
        }
        .delta(&Snapshot {
            diodon: Some(a),
            ..Snapshot::default()
        });
        let dd = d.diodon.as_ref().expect("test");
        assert_eq!(dd.get("receiver_missing"), 3);
        assert_eq!(dd.get("receiver_socket_drops"), 0);
        let text = d.text();
        assert!(
            text.contains("diodon 127.0.0.1:9978 receiver missing 3 socket_drops 0"),
            "{text}"
        );
        assert!(text.contains("diodon 127.0.0.1:9978 sender datagrams_sent 0"));
    }

    #[test]
    fn unreachable_metrics_endpoint_is_an_error() {
        // A port nobody listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("test")
            .port();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("test");
        let e = DiodonCounters::fetch(None, addr).expect_err("nothing listens");
        assert!(e.to_string().contains("Diodon metrics at 127.0.0.1"), "{e}");
    }

    #[test]
    fn reads_this_namespace() {
        let s = Snapshot::read(&Target {
            ns: None,
            iface: Some("lo".into()),
            guard_table: "diodon_no_such_table".into(),
            diodon: None,
        })
        .expect("test");
        assert!(s.link.is_some());
        assert!(s.guard.is_none());
    }
}
