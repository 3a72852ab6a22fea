//! One snapshot of every measuring point of one diode host (thesis ch. 6):
//! the kernel's and, when asked, a running Diodon's own counters; and deltas
//! between snapshots. What `diodon stats` shows and the trial harness
//! measures with.
//!
//! ```text
//!  /proc/net/snmp Udp, Ip ─────┐  (read on a thread inside the namespace)
//!  link stats64 of IF ─────────┤
//!  guard counters (nft -j) ────┼─► Snapshot ─► delta(later, earlier) ─► JSON / text
//!  Diodon GET /counters ───────┘  (typed JSON: socket drops, missing, recovered, lost, ...)
//! ```
//!
//! The kernel's sets are the declared ones ([`UdpSnmp`], [`IpSnmp`],
//! [`LinkStats`]); the JSON, the text and the deltas walk their declarations
//! ([`CounterSet::for_each`], [`CounterSet::delta`]), so no counter is
//! listed here. Link counters come from `ip -s -j link show dev IF` (netlink
//! `stats64`), which works for any namespace without remounting sysfs;
//! without `--ns` they are read from `/sys/class/net/IF/statistics`. The
//! guard is absent when no guard table is loaded. Diodon's counters come
//! from the `/counters` page that `diodon send|recv --metrics ADDR` serves
//! ([`crate::metrics::Counters`]), fetched from inside the namespace (so an
//! endpoint on the namespace's loopback is reachable).

use crate::guard::{self, GuardCounters};
use crate::metrics::{Counters, COUNTERS_PATH};
use crate::nft::{in_ns, run, ToolError};
use diodon_counters::{CounterSet, Snapshot as Values};
use diodon_io::netns::spawn_in;
use diodon_io::{IpSnmp, LinkStats, UdpSnmp};
use serde::{Serialize, Serializer};
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

/// A running Diodon's own counter sets, read from its `/counters` endpoint:
/// by subsystem (`receiver`, `receiver_socket`, `sender`, `sender_socket`,
/// `udp_source`, `udp_forward`), field → value. The kernel and link sets of
/// the same page are left out: the snapshot reads those itself.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiodonCounters {
    /// The endpoint (`host:port`).
    pub endpoint: String,
    /// Subsystem → its counters.
    pub counters: BTreeMap<String, Values>,
}

impl DiodonCounters {
    /// Fetches `http://addr/counters`, from inside namespace `ns` when given.
    pub fn fetch(ns: Option<&str>, addr: SocketAddr) -> Result<DiodonCounters, StatsError> {
        let body = match ns {
            None => http_get(addr, COUNTERS_PATH),
            Some(ns) => spawn_in(ns, move || http_get(addr, COUNTERS_PATH))?
                .join()
                .map_err(|_| StatsError::Parse("metrics thread panicked".into()))??,
        }?;
        let page: Counters = serde_json::from_str(&body).map_err(|e| StatsError::Metrics {
            addr,
            what: format!("not a counters page: {e}"),
        })?;
        Ok(DiodonCounters {
            endpoint: addr.to_string(),
            counters: page.diodon,
        })
    }

    /// One counter (0 when absent).
    pub fn get(&self, subsystem: &str, field: &str) -> u64 {
        self.counters.get(subsystem).map_or(0, |s| s.get(field))
    }

    fn delta(&self, e: &DiodonCounters) -> DiodonCounters {
        DiodonCounters {
            endpoint: self.endpoint.clone(),
            counters: self
                .counters
                .iter()
                .map(|(k, v)| {
                    let earlier = e.counters.get(k).cloned().unwrap_or_default();
                    (k.clone(), v.delta(&earlier))
                })
                .collect(),
        }
    }
}

/// `GET PATH` over HTTP/1.0; the body of a 200 answer.
fn http_get(addr: SocketAddr, path: &str) -> Result<String, StatsError> {
    let err = |what: String| StatsError::Metrics { addr, what };
    let timeout = Duration::from_secs(3);
    let mut c = TcpStream::connect_timeout(&addr, timeout).map_err(|e| err(e.to_string()))?;
    c.set_read_timeout(Some(timeout))
        .and_then(|()| c.set_write_timeout(Some(timeout)))
        .and_then(|()| write!(c, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n"))
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

/// Serialises a counter set as its declared `field → value` map.
fn values<C: CounterSet, S: Serializer>(set: &C, s: S) -> Result<S::Ok, S::Error> {
    set.snapshot().serialize(s)
}

/// [`values`] of an optional set.
#[expect(
    clippy::ref_option,
    reason = "serde's serialize_with passes a reference to the field"
)]
fn opt_values<C: CounterSet, S: Serializer>(set: &Option<C>, s: S) -> Result<S::Ok, S::Error> {
    set.as_ref().map(CounterSet::snapshot).serialize(s)
}

/// ` field value field value …` of a counter set, in declaration order.
fn line<C: CounterSet>(set: &C) -> String {
    let mut s = String::new();
    set.for_each(&mut |d, v| {
        let _ = write!(s, " {} {v}", d.field);
    });
    s
}

/// Every measuring point of one host at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Namespace (`None`: the caller's).
    pub ns: Option<String>,
    /// Interface, if one was named.
    pub iface: Option<String>,
    /// `/proc/net/snmp` Udp.
    #[serde(serialize_with = "values")]
    pub udp: UdpSnmp,
    /// `/proc/net/snmp` Ip fragmentation and reassembly.
    #[serde(serialize_with = "values")]
    pub ip: IpSnmp,
    /// Link counters of `iface`.
    #[serde(serialize_with = "opt_values")]
    pub link: Option<LinkStats>,
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

/// Reads the UDP MIB and the IP fragment counters of `ns` (on a thread
/// inside it), from one read.
pub fn read_snmp(ns: Option<&str>) -> Result<(UdpSnmp, IpSnmp), StatsError> {
    match ns {
        None => Ok(diodon_io::read_snmp()?),
        Some(ns) => {
            let read = spawn_in(ns, diodon_io::read_snmp)?
                .join()
                .map_err(|_| StatsError::Parse("counter thread panicked".into()))??;
            Ok(read?)
        }
    }
}

/// Reads the link counters of `iface` in `ns`.
pub fn read_link(ns: Option<&str>, iface: &str) -> Result<LinkStats, StatsError> {
    match ns {
        None => Ok(LinkStats::read(iface)?),
        Some(ns) => {
            let mut c = in_ns(None, "ip");
            c.args(["-n", ns, "-s", "-j", "link", "show", "dev", iface]);
            link_from_ip_json(&run(c, None)?)
        }
    }
}

/// Parses `ip -s -j link show dev IF` (its `stats64`).
pub fn link_from_ip_json(text: &str) -> Result<LinkStats, StatsError> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| StatsError::Parse(e.to_string()))?;
    let s = v
        .get(0)
        .and_then(|l| l.get("stats64"))
        .ok_or_else(|| StatsError::Parse("no stats64".into()))?;
    let g = |dir: &str, k: &str| s[dir][k].as_u64().unwrap_or(0);
    Ok(LinkStats {
        rx_packets: g("rx", "packets"),
        rx_bytes: g("rx", "bytes"),
        rx_errors: g("rx", "errors"),
        rx_dropped: g("rx", "dropped"),
        rx_missed_errors: g("rx", "missed"),
        tx_packets: g("tx", "packets"),
        tx_bytes: g("tx", "bytes"),
        tx_errors: g("tx", "errors"),
        tx_dropped: g("tx", "dropped"),
    })
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

    /// Human-readable lines: one per counter set, its declared fields in order.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "udp  {}", line(&self.udp));
        let _ = writeln!(s, "ip   {}", line(&self.ip));
        if let (Some(l), Some(i)) = (&self.link, &self.iface) {
            let _ = writeln!(s, "link  {i}{}", line(l));
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
            // One line per subsystem (receiver, receiver_socket, sender, ...).
            for (subsystem, values) in &d.counters {
                let _ = write!(s, "diodon {} {subsystem}", d.endpoint);
                for (field, v) in &values.0 {
                    let _ = write!(s, " {field} {v}");
                }
                s.push('\n');
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
        let l = link_from_ip_json(json).expect("test");
        assert_eq!(
            l,
            LinkStats {
                rx_packets: 5,
                rx_bytes: 446,
                rx_errors: 1,
                rx_dropped: 2,
                rx_missed_errors: 3,
                tx_packets: 9,
                tx_bytes: 0,
                tx_errors: 4,
                tx_dropped: 6
            }
        );
        assert!(link_from_ip_json("[]").is_err());
        let a = Snapshot {
            iface: Some("rx0".into()),
            link: Some(l),
            udp: UdpSnmp {
                in_datagrams: 10,
                ..UdpSnmp::default()
            },
            ..Snapshot::default()
        };
        let mut b = a.clone();
        b.udp.in_datagrams = 25;
        b.ip.reasm_fails = 2;
        b.link = Some(LinkStats {
            rx_packets: 15,
            ..l
        });
        let d = b.delta(&a);
        assert_eq!(d.udp.in_datagrams, 15);
        assert_eq!(d.ip.reasm_fails, 2);
        assert_eq!(d.link.expect("test").rx_packets, 10);
        let text = d.text();
        assert!(text.contains("udp   in_datagrams 15 no_ports 0"), "{text}");
        assert!(
            text.contains("ip    reasm_reqds 0 reasm_oks 0 reasm_fails 2"),
            "{text}"
        );
        assert!(text.contains("link  rx0 rx_packets 10"), "{text}");
    }

    #[test]
    fn json_carries_every_declared_counter() {
        let s = Snapshot {
            link: Some(LinkStats::default()),
            ..Snapshot::default()
        };
        let v = serde_json::to_value(&s).expect("test");
        for (key, descs) in [
            ("udp", UdpSnmp::DESCS),
            ("ip", IpSnmp::DESCS),
            ("link", LinkStats::DESCS),
        ] {
            let obj = v[key].as_object().expect("an object per set");
            assert_eq!(obj.len(), descs.len(), "{key}: {obj:?}");
            for d in descs {
                assert_eq!(v[key][d.field], 0, "{key}.{}", d.field);
            }
        }
        assert!(v["guard"].is_null() && v["diodon"].is_null());
    }

    #[test]
    fn diodon_counters_come_from_the_typed_page_and_delta() {
        let page = r#"{"diodon":{"receiver":{"missing":7,"accepted":12},"receiver_socket":{"dropped_packets":3}},
                       "kernel":{"udp":{"in_datagrams":99}},"link":{"rx0":{"rx_packets":5}},"interface":"rx0"}"#;
        let page: Counters = serde_json::from_str(page).expect("test");
        let a = DiodonCounters {
            endpoint: "127.0.0.1:9978".into(),
            counters: page.diodon,
        };
        assert_eq!(a.get("receiver", "missing"), 7);
        assert_eq!(a.get("receiver_socket", "dropped_packets"), 3);
        assert_eq!(a.get("sender", "datagrams_sent"), 0);
        let mut b = a.clone();
        b.counters
            .get_mut("receiver")
            .expect("test")
            .0
            .insert("missing".into(), 10);
        let d = Snapshot {
            diodon: Some(b),
            ..Snapshot::default()
        }
        .delta(&Snapshot {
            diodon: Some(a),
            ..Snapshot::default()
        });
        let dd = d.diodon.as_ref().expect("test");
        assert_eq!(dd.get("receiver", "missing"), 3);
        assert_eq!(dd.get("receiver_socket", "dropped_packets"), 0);
        let text = d.text();
        assert!(
            text.contains("diodon 127.0.0.1:9978 receiver accepted 0 missing 3\n"),
            "{text}"
        );
        assert!(text.contains("diodon 127.0.0.1:9978 receiver_socket dropped_packets 0\n"));
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
