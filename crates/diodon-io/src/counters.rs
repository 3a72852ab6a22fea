//! Kernel counters at the measuring points of a diode (thesis §4.3): the UDP
//! MIB (`/proc/net/snmp` `Udp:` lines, `/proc/net/snmp6` `Udp6*` lines), the
//! IPv4 fragment and reassembly counters (`Ip:` lines) and per-interface
//! link statistics (`/sys/class/net/IF/statistics/*`, `/proc/net/dev`), as
//! plain snapshots with saturating deltas. Each set is declared once with
//! [`diodon_counters::counters!`] (`UdpSnmp`, `IpSnmp`, `LinkStats`, owner
//! Kernel); Prometheus, JSON and `diodon stats` subscribe to those declarations.
//!
//! ```text
//!  sender app ─► SndbufErrors/OutDatagrams ─► FragCreates ─► tx_{packets,dropped} ═ link ═►
//!  rx_{packets,dropped,missed_errors} ─► ReasmFails ─► InDatagrams/RcvbufErrors/InErrors ─► receiver app
//! ```
//!
//! Network namespaces: `/proc/net` follows the *process* leader's namespace;
//! [`UdpSnmp::read`] and [`LinkStats::read_proc`] read `/proc/thread-self/net`
//! so a thread that entered a namespace sees that namespace's counters.
//! sysfs shows the namespace it was mounted in, so [`LinkStats::read`] is for
//! the current mount (`ip netns exec` remounts it).

use diodon_counters::CounterSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Errors reading or parsing kernel counters.
#[derive(Debug, thiserror::Error)]
pub enum CounterError {
    /// A counter file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The text did not have the expected layout.
    #[error("malformed counters in {what}: {reason}")]
    Malformed {
        /// What was being parsed.
        what: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// The interface is not listed.
    #[error("interface {0} not found")]
    NoSuchInterface(String),
}

fn read_text(path: &Path) -> Result<String, CounterError> {
    fs::read_to_string(path).map_err(|source| CounterError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The first of `paths` that exists (falls back to the last one).
fn first_existing(paths: &[&'static str]) -> &'static Path {
    let path = paths
        .iter()
        .copied()
        .find(|p| Path::new(p).exists())
        .unwrap_or(paths[paths.len() - 1]);
    Path::new(path)
}

/// Peak resident memory of this process (`VmHWM` of /proc/self/status), KiB.
pub fn peak_rss_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// CPU time (user + system) of this process so far, in seconds, from
/// `/proc/self/stat` (0.0 where it cannot be read).
pub fn process_cpu_seconds() -> f64 {
    let Ok(stat) = fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses).
    let Some(rest) = stat.rsplit(')').next() else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 here.
    (ticks(11) + ticks(12)) / 100.0
}

diodon_counters::counters! {
    /// The kernel's UDP MIB (one address family). Fields a kernel does not
    /// report read as 0. Exported as `kernel_udp_*` (`kernel_udp6_*` for IPv6).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct UdpSnmp in Kernel "udp" {
        in_datagrams: counter Count "in_datagrams" "InDatagrams: datagrams delivered to sockets.",
        no_ports: counter Count "no_ports" "NoPorts: datagrams to a port with no socket.",
        in_errors: counter Count "in_errors" "InErrors: datagrams dropped on receive for any reason (includes RcvbufErrors).",
        out_datagrams: counter Count "out_datagrams" "OutDatagrams: datagrams sent.",
        rcvbuf_errors: counter Count "rcvbuf_errors" "RcvbufErrors: datagrams dropped because a receive buffer was full.",
        sndbuf_errors: counter Count "sndbuf_errors" "SndbufErrors: datagrams dropped because a send buffer or device queue was full.",
        in_csum_errors: counter Count "in_csum_errors" "InCsumErrors: datagrams with a bad checksum.",
        ignored_multi: counter Count "ignored_multi" "IgnoredMulti: broadcast or multicast datagrams nobody listened to.",
        mem_errors: counter Count "mem_errors" "MemErrors: datagrams dropped for socket memory accounting.",
    }
}

impl UdpSnmp {
    /// The IPv4 UDP MIB of the calling thread's network namespace.
    pub fn read() -> Result<Self, CounterError> {
        let path = first_existing(&["/proc/thread-self/net/snmp", "/proc/net/snmp"]);
        Self::parse_snmp(&read_text(path)?)
    }

    /// The IPv6 UDP MIB of the calling thread's network namespace.
    pub fn read_v6() -> Result<Self, CounterError> {
        let path = first_existing(&["/proc/thread-self/net/snmp6", "/proc/net/snmp6"]);
        Self::parse_snmp6(&read_text(path)?)
    }

    /// Parses the `Udp:` header/value line pair of `/proc/net/snmp`.
    pub fn parse_snmp(text: &str) -> Result<Self, CounterError> {
        let mut out = UdpSnmp::default();
        for (name, value) in snmp_pairs(text, "Udp:")? {
            out.set(name, value);
        }
        Ok(out)
    }

    /// Parses the `Udp6*` lines of `/proc/net/snmp6`.
    pub fn parse_snmp6(text: &str) -> Result<Self, CounterError> {
        let mut out = UdpSnmp::default();
        let mut seen = false;
        for line in text.lines() {
            let mut parts = line.split_whitespace();
            let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            if let Some(name) = key.strip_prefix("Udp6") {
                out.set(name, parse_u64("snmp6", value)?);
                seen = true;
            }
        }
        if seen {
            Ok(out)
        } else {
            Err(CounterError::Malformed {
                what: "snmp6",
                reason: "no `Udp6*` lines".into(),
            })
        }
    }

    fn set(&mut self, name: &str, value: u64) {
        let field = match name {
            "InDatagrams" => &mut self.in_datagrams,
            "NoPorts" => &mut self.no_ports,
            "InErrors" => &mut self.in_errors,
            "OutDatagrams" => &mut self.out_datagrams,
            "RcvbufErrors" => &mut self.rcvbuf_errors,
            "SndbufErrors" => &mut self.sndbuf_errors,
            "InCsumErrors" => &mut self.in_csum_errors,
            "IgnoredMulti" => &mut self.ignored_multi,
            "MemErrors" => &mut self.mem_errors,
            _ => return,
        };
        *field = value;
    }

    /// `self − earlier`, field by field, saturating at 0 (counters that were
    /// reset or wrapped read as 0, never as a huge number).
    #[must_use]
    pub fn delta(&self, earlier: &Self) -> Self {
        <Self as CounterSet>::delta(self, earlier)
    }
}

diodon_counters::counters! {
    /// The kernel's IPv4 fragmentation and reassembly counters (`Ip:` lines
    /// of `/proc/net/snmp`). They matter for tools whose datagrams exceed the
    /// MTU: a datagram that lost one fragment, or whose fragments found the
    /// reassembly memory (`net.ipv4.ipfrag_high_thresh`) full, never reaches
    /// UDP and shows only in `ReasmFails`. Exported as `kernel_ip_*`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct IpSnmp in Kernel "ip" {
        reasm_reqds: counter Count "reasm_reqds" "ReasmReqds: fragments received that needed reassembly.",
        reasm_oks: counter Count "reasm_oks" "ReasmOKs: datagrams reassembled.",
        reasm_fails: counter Count "reasm_fails" "ReasmFails: reassembly failures (fragments refused for memory, or queues expired).",
        reasm_timeout: counter Count "reasm_timeout" "ReasmTimeout: reassembly queues that expired (net.ipv4.ipfrag_time).",
        frag_oks: counter Count "frag_oks" "FragOKs: datagrams fragmented on output.",
        frag_fails: counter Count "frag_fails" "FragFails: datagrams that needed fragmenting but could not be.",
        frag_creates: counter Count "frag_creates" "FragCreates: fragments created on output.",
    }
}

impl IpSnmp {
    /// The IPv4 fragment counters of the calling thread's network namespace.
    pub fn read() -> Result<Self, CounterError> {
        Ok(read_snmp()?.1)
    }

    /// Parses the `Ip:` header/value line pair of `/proc/net/snmp`.
    pub fn parse_snmp(text: &str) -> Result<Self, CounterError> {
        let mut out = IpSnmp::default();
        for (name, value) in snmp_pairs(text, "Ip:")? {
            let field = match name {
                "ReasmReqds" => &mut out.reasm_reqds,
                "ReasmOKs" => &mut out.reasm_oks,
                "ReasmFails" => &mut out.reasm_fails,
                "ReasmTimeout" => &mut out.reasm_timeout,
                "FragOKs" => &mut out.frag_oks,
                "FragFails" => &mut out.frag_fails,
                "FragCreates" => &mut out.frag_creates,
                _ => continue,
            };
            *field = value;
        }
        Ok(out)
    }

    /// `self − earlier`, field by field, saturating at 0.
    #[must_use]
    pub fn delta(&self, earlier: &Self) -> Self {
        <Self as CounterSet>::delta(self, earlier)
    }
}

/// The UDP MIB and the IP fragment counters of the calling thread's network
/// namespace from one read of `/proc/net/snmp`, so both describe one moment.
pub fn read_snmp() -> Result<(UdpSnmp, IpSnmp), CounterError> {
    let path = first_existing(&["/proc/thread-self/net/snmp", "/proc/net/snmp"]);
    let text = read_text(path)?;
    Ok((UdpSnmp::parse_snmp(&text)?, IpSnmp::parse_snmp(&text)?))
}

/// The `(name, value)` pairs of one `PREFIX` header/value line pair of
/// `/proc/net/snmp` (`Udp:`, `Ip:`).
fn snmp_pairs<'t>(text: &'t str, prefix: &str) -> Result<Vec<(&'t str, u64)>, CounterError> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let (Some(header), Some(values)) = (lines.next(), lines.next()) else {
        return Err(CounterError::Malformed {
            what: "snmp",
            reason: format!("no `{prefix}` header and value lines"),
        });
    };
    let names: Vec<&str> = header.split_whitespace().skip(1).collect();
    let values: Vec<&str> = values.split_whitespace().skip(1).collect();
    if names.len() != values.len() {
        return Err(CounterError::Malformed {
            what: "snmp",
            reason: format!(
                "`{prefix}` has {} names but {} values",
                names.len(),
                values.len()
            ),
        });
    }
    names
        .into_iter()
        .zip(values)
        .map(|(n, v)| Ok((n, parse_u64("snmp", v)?)))
        .collect()
}

diodon_counters::counters! {
    /// Per-interface link statistics. Exported as `kernel_link_*{interface=…}`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct LinkStats in Kernel "link" {
        rx_packets: counter Count "rx_packets" "Packets received.",
        rx_bytes: counter Bytes "rx_bytes" "Bytes received.",
        rx_errors: counter Count "rx_errors" "Receive errors.",
        /// From `/proc/net/dev` this also includes `rx_missed_errors`.
        rx_dropped: counter Count "rx_dropped" "Packets dropped on receive.",
        /// 0 from `/proc/net/dev`.
        rx_missed_errors: counter Count "rx_missed_errors" "Packets the NIC missed (ring full).",
        tx_packets: counter Count "tx_packets" "Packets sent.",
        tx_bytes: counter Bytes "tx_bytes" "Bytes sent.",
        tx_errors: counter Count "tx_errors" "Transmit errors.",
        tx_dropped: counter Count "tx_dropped" "Packets dropped on transmit.",
    }
}

impl LinkStats {
    /// Reads `/sys/class/net/IFACE/statistics/*`.
    pub fn read(iface: &str) -> Result<Self, CounterError> {
        Self::read_sysfs(Path::new("/sys/class/net"), iface)
    }

    /// Reads `ROOT/IFACE/statistics/*` (`ROOT` is normally `/sys/class/net`;
    /// tests point it at a fixture directory).
    pub fn read_sysfs(root: &Path, iface: &str) -> Result<Self, CounterError> {
        let dir = root.join(iface).join("statistics");
        if !dir.is_dir() {
            return Err(CounterError::NoSuchInterface(iface.to_owned()));
        }
        let get = |name: &str| -> Result<u64, CounterError> {
            let text = read_text(&dir.join(name))?;
            parse_u64("sysfs statistics", text.trim())
        };
        Ok(LinkStats {
            rx_packets: get("rx_packets")?,
            rx_bytes: get("rx_bytes")?,
            rx_errors: get("rx_errors")?,
            rx_dropped: get("rx_dropped")?,
            rx_missed_errors: get("rx_missed_errors")?,
            tx_packets: get("tx_packets")?,
            tx_bytes: get("tx_bytes")?,
            tx_errors: get("tx_errors")?,
            tx_dropped: get("tx_dropped")?,
        })
    }

    /// Reads `IFACE`'s line of `/proc/thread-self/net/dev` (the calling
    /// thread's namespace).
    pub fn read_proc(iface: &str) -> Result<Self, CounterError> {
        let path = first_existing(&["/proc/thread-self/net/dev", "/proc/net/dev"]);
        Self::parse_proc_net_dev(&read_text(path)?, iface)
    }

    /// Parses `IFACE`'s line of `/proc/net/dev` text.
    pub fn parse_proc_net_dev(text: &str, iface: &str) -> Result<Self, CounterError> {
        for line in text.lines() {
            let Some((name, rest)) = line.split_once(':') else {
                continue;
            };
            if name.trim() != iface {
                continue;
            }
            let v = rest
                .split_whitespace()
                .map(|f| parse_u64("net/dev", f))
                .collect::<Result<Vec<_>, _>>()?;
            if v.len() < 16 {
                return Err(CounterError::Malformed {
                    what: "net/dev",
                    reason: format!("{iface}: {} fields, expected 16", v.len()),
                });
            }
            return Ok(LinkStats {
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                rx_missed_errors: 0,
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            });
        }
        Err(CounterError::NoSuchInterface(iface.to_owned()))
    }

    /// `self − earlier`, field by field, saturating at 0.
    #[must_use]
    pub fn delta(&self, earlier: &Self) -> Self {
        <Self as CounterSet>::delta(self, earlier)
    }
}

fn parse_u64(what: &'static str, s: &str) -> Result<u64, CounterError> {
    s.parse().map_err(|_| CounterError::Malformed {
        what,
        reason: format!("not a counter: {s:?}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SNMP: &str = "\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 12345
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 2 30 999 28 4 1 0 5
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 7 7 7 7 7 7 7 7 7
";

    const SNMP_OLD_KERNEL: &str = "\
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors
Udp: 5 0 1 6 1 0
";

    const SNMP6: &str = "\
Ip6InReceives                   \t42
Udp6InDatagrams                 \t10
Udp6NoPorts                     \t0
Udp6InErrors                    \t3
Udp6OutDatagrams                \t11
Udp6RcvbufErrors                \t3
Udp6SndbufErrors                \t0
Udp6InCsumErrors                \t0
UdpLite6InDatagrams             \t9
";

    const NET_DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
   rx0: 1500000    1000    1    2    0     0          0         0       84       1    0    9    0     0       0          0
";

    #[test]
    fn parses_udp_line_pair() {
        let s = UdpSnmp::parse_snmp(SNMP).expect("test");
        assert_eq!(
            s,
            UdpSnmp {
                in_datagrams: 1000,
                no_ports: 2,
                in_errors: 30,
                out_datagrams: 999,
                rcvbuf_errors: 28,
                sndbuf_errors: 4,
                in_csum_errors: 1,
                ignored_multi: 0,
                mem_errors: 5,
            }
        );
    }

    #[test]
    fn parses_ip_fragment_counters() {
        let text = "Ip: Forwarding DefaultTTL InReceives ReasmTimeout ReasmReqds ReasmOKs ReasmFails FragOKs FragFails FragCreates\n\
                    Ip: 2 64 100 1 90 10 7 3 0 12\n\
                    Udp: InDatagrams NoPorts\nUdp: 5 0\n";
        let ip = IpSnmp::parse_snmp(text).expect("test");
        assert_eq!(
            ip,
            IpSnmp {
                reasm_reqds: 90,
                reasm_oks: 10,
                reasm_fails: 7,
                reasm_timeout: 1,
                frag_oks: 3,
                frag_fails: 0,
                frag_creates: 12,
            }
        );
        assert!(IpSnmp::parse_snmp("Udp: a\nUdp: 1\n").is_err());
        let later = IpSnmp {
            reasm_fails: 9,
            ..ip
        };
        assert_eq!(later.delta(&ip).reasm_fails, 2);
        assert_eq!(ip.delta(&later).reasm_fails, 0, "saturates");
    }

    #[test]
    fn old_kernel_missing_fields_read_zero() {
        let s = UdpSnmp::parse_snmp(SNMP_OLD_KERNEL).expect("test");
        assert_eq!(s.rcvbuf_errors, 1);
        assert_eq!(s.in_csum_errors, 0);
    }

    #[test]
    fn rejects_malformed_snmp() {
        assert!(UdpSnmp::parse_snmp("Ip: a b\nIp: 1 2\n").is_err());
        assert!(UdpSnmp::parse_snmp("Udp: A B\nUdp: 1\n").is_err());
        assert!(UdpSnmp::parse_snmp("Udp: A B\nUdp: 1 x\n").is_err());
        assert!(UdpSnmp::parse_snmp6("Ip6InReceives 4\n").is_err());
    }

    #[test]
    fn parses_snmp6() {
        let s = UdpSnmp::parse_snmp6(SNMP6).expect("test");
        assert_eq!(s.in_datagrams, 10);
        assert_eq!(s.out_datagrams, 11);
        assert_eq!(s.rcvbuf_errors, 3);
        assert_eq!(s.in_errors, 3);
    }

    #[test]
    fn delta_saturates() {
        let a = UdpSnmp::parse_snmp(SNMP).expect("test");
        let mut b = a;
        b.in_datagrams += 5;
        b.rcvbuf_errors = 0; // counter reset
        let d = b.delta(&a);
        assert_eq!(d.in_datagrams, 5);
        assert_eq!(d.rcvbuf_errors, 0);
        assert_eq!(d.out_datagrams, 0);
    }

    #[test]
    fn parses_proc_net_dev() {
        let s = LinkStats::parse_proc_net_dev(NET_DEV, "rx0").expect("test");
        assert_eq!(s.rx_bytes, 1_500_000);
        assert_eq!(s.rx_packets, 1000);
        assert_eq!(s.rx_errors, 1);
        assert_eq!(s.rx_dropped, 2);
        assert_eq!(s.tx_packets, 1);
        assert_eq!(s.tx_dropped, 9);
        assert!(matches!(
            LinkStats::parse_proc_net_dev(NET_DEV, "eth9"),
            Err(CounterError::NoSuchInterface(_))
        ));
    }

    #[test]
    fn reads_sysfs_fixture_and_delta() {
        let root = std::env::temp_dir().join(format!("diodon-sysfs-{}", std::process::id()));
        let dir = root.join("veth0").join("statistics");
        fs::create_dir_all(&dir).expect("test");
        for (i, name) in [
            "rx_packets",
            "rx_bytes",
            "rx_errors",
            "rx_dropped",
            "rx_missed_errors",
            "tx_packets",
            "tx_bytes",
            "tx_errors",
            "tx_dropped",
        ]
        .iter()
        .enumerate()
        {
            fs::write(dir.join(name), format!("{}\n", (i + 1) * 10)).expect("test");
        }
        let s = LinkStats::read_sysfs(&root, "veth0").expect("test");
        fs::remove_dir_all(&root).expect("test");
        assert_eq!(s.rx_packets, 10);
        assert_eq!(s.rx_missed_errors, 50);
        assert_eq!(s.tx_dropped, 90);
        assert_eq!(s.delta(&LinkStats::default()), s);
        assert_eq!(LinkStats::default().delta(&s), LinkStats::default());
    }

    #[test]
    fn reads_live_files() {
        let (udp, _ip) = read_snmp().expect("test");
        let v4 = UdpSnmp::read().expect("test");
        assert!(v4.in_datagrams >= udp.in_datagrams);
        IpSnmp::read().expect("test");
        let again = UdpSnmp::read().expect("test");
        assert!(again.in_datagrams >= v4.in_datagrams);
        // snmp6 exists whenever IPv6 is compiled in.
        if Path::new("/proc/net/snmp6").exists() {
            UdpSnmp::read_v6().expect("test");
        }
        let lo = LinkStats::read("lo").expect("test");
        let lo_proc = LinkStats::read_proc("lo").expect("test");
        assert!(lo_proc.rx_packets >= lo.rx_packets);
        assert!(matches!(
            LinkStats::read("diodon-none0"),
            Err(CounterError::NoSuchInterface(_))
        ));
    }
}
