//! `--metrics ADDR`: a tiny HTTP server thread serving Prometheus text.
//!
//! ```text
//!  GET /metrics ─► TcpListener thread ─► render():
//!     core counters   (SendProgress / RecvProgress snapshots, ~100 ms old)
//!     socket drops    (SO_RXQ_OVFL of the receiving / UDP-source socket)
//!     kernel          (/proc/net/snmp Udp + /proc/net/snmp6 Udp6, this netns)
//!     link            (/sys/class/net/IF/statistics, every interface of the netns;
//!                      `diodon_interface_in_use{interface=…}` names the one in use)
//! ```
//!
//! Every request gets the whole page (the path is not looked at); the
//! connection closes after the answer.

use diodon_apps::udp_flow::{UdpForwardStats, UdpSourceStats};
use diodon_apps::{RecvProgress, SendProgress};
use diodon_io::{LinkStats, UdpSnmp};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What one side exports.
#[derive(Clone)]
pub enum Source {
    /// `diodon send`.
    Send {
        /// The core's progress and snapshots.
        progress: Arc<SendProgress>,
        /// The UDP-flow source, if any.
        udp: Option<Arc<UdpSourceStats>>,
    },
    /// `diodon recv`.
    Recv {
        /// The receiver's progress and snapshots.
        progress: Arc<RecvProgress>,
        /// The UDP forwarding sink, if any.
        udp: Option<Arc<UdpForwardStats>>,
    },
}

/// Binds `addr` and serves metrics on a background thread for the rest of
/// the process. `peer` is the address whose route names the interface in use
/// (`device` wins when given).
pub fn serve(
    addr: SocketAddr,
    source: Source,
    peer: IpAddr,
    device: Option<String>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    let iface = device.or_else(|| route_interface(peer));
    tracing::info!(%local, interface = ?iface, "serving Prometheus metrics");
    std::thread::Builder::new()
        .name("diodon-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(c) => {
                        if let Err(e) = answer(c, &source, iface.as_deref()) {
                            tracing::debug!("metrics request: {e}");
                        }
                    }
                    Err(e) => tracing::debug!("metrics accept: {e}"),
                }
            }
        })?;
    Ok(local)
}

fn answer(mut c: TcpStream, source: &Source, iface: Option<&str>) -> std::io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(2)))?;
    // Read the request head (and ignore it).
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let body = render(source, iface);
    write!(
        c,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    c.flush()
}

/// One counter with HELP and TYPE lines.
fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

/// The whole page.
pub fn render(source: &Source, iface: Option<&str>) -> String {
    let mut o = String::new();
    match source {
        Source::Send { progress, udp } => sender(&mut o, progress, udp.as_deref()),
        Source::Recv { progress, udp } => receiver(&mut o, progress, udp.as_deref()),
    }
    kernel(&mut o, iface);
    o
}

fn sender(o: &mut String, progress: &SendProgress, udp: Option<&UdpSourceStats>) {
    let (s, io) = progress
        .snapshot
        .lock()
        .map(|g| g.clone())
        .unwrap_or_default();
    for (name, help, v) in [
        (
            "datagrams_sent",
            "Datagrams produced by the core.",
            s.datagrams_sent,
        ),
        ("data_symbols", "Source symbols sent.", s.data_symbols),
        ("repair_symbols", "Repair symbols sent.", s.repair_symbols),
        ("beacons", "Beacons sent.", s.beacons),
        ("wire_bytes", "UDP payload bytes sent.", s.wire_bytes),
        (
            "bytes_accepted",
            "Channel bytes accepted.",
            s.bytes_accepted,
        ),
        ("blocks", "FEC blocks encoded.", s.blocks),
        ("channels_opened", "Channels opened.", s.channels_opened),
        ("channels_sent", "Channels sent complete.", s.channels_sent),
        ("channels_aborted", "Channels aborted.", s.channels_aborted),
        (
            "backpressure_events",
            "Times the core's buffer pushed back.",
            s.backpressure_events,
        ),
        (
            "socket_datagrams",
            "Datagrams handed to the kernel.",
            io.datagrams,
        ),
        (
            "socket_enobufs_retries",
            "Sends retried after ENOBUFS (local queue full).",
            io.enobufs_retries,
        ),
        (
            "socket_eagain_retries",
            "Sends retried after EAGAIN.",
            io.eagain_retries,
        ),
    ] {
        counter(o, &format!("diodon_sender_{name}_total"), help, v);
    }
    if let Some(u) = udp {
        for (name, help, v) in [
                    ("datagrams", "Datagrams read from the UDP-flow socket.", &u.datagrams),
                    ("bytes", "Payload bytes read from the UDP-flow socket.", &u.bytes),
                    ("flows", "UDP flows (channels) opened.", &u.flows),
                    ("socket_drops", "Datagrams the kernel dropped on the UDP-flow socket (source faster than the link; SO_RXQ_OVFL).", &u.socket_drops),
                ] {
                    counter(o, &format!("diodon_udp_source_{name}_total"), help, v.load(Ordering::Relaxed));
                }
    }
}

fn receiver(o: &mut String, progress: &RecvProgress, udp: Option<&UdpForwardStats>) {
    let s = progress
        .snapshot
        .lock()
        .map(|g| g.clone())
        .unwrap_or_default();
    for (name, help, v) in [
        ("datagrams", "Datagrams handed to the core.", s.datagrams),
        ("accepted", "Datagrams accepted.", s.accepted),
        ("bad_check", "Datagrams with a wrong CRC/MAC.", s.bad_check),
        ("invalid", "Datagrams rejected by validation.", s.invalid()),
        (
            "stale_session",
            "Datagrams of a retired session.",
            s.stale_session,
        ),
        ("duplicates", "Duplicate datagrams.", s.duplicates),
        ("late", "Datagrams for finished blocks.", s.late),
        ("expired", "Datagrams past their lifetime.", s.expired),
        ("data_symbols", "Source symbols received.", s.data_symbols),
        (
            "repair_symbols",
            "Repair symbols received.",
            s.repair_symbols,
        ),
        ("beacons", "Beacons received.", s.beacons),
        (
            "missing",
            "Datagrams never received (sequence gaps).",
            s.missing,
        ),
        (
            "recovered_symbols",
            "Symbols recovered by FEC.",
            s.recovered_symbols,
        ),
        (
            "blocks_recovered",
            "Blocks that needed FEC.",
            s.blocks_recovered,
        ),
        ("blocks_delivered", "Blocks delivered.", s.blocks_delivered),
        ("blocks_lost", "Blocks lost.", s.blocks_lost),
        ("channels_opened", "Channels opened.", s.channels_opened),
        (
            "channels_complete",
            "Channels verified.",
            s.channels_complete,
        ),
        ("channels_failed", "Channels failed.", s.channels_failed),
        (
            "bytes_delivered",
            "Channel bytes delivered.",
            s.bytes_delivered,
        ),
        ("sessions", "Sender sessions seen.", s.sessions),
        (
            "socket_datagrams",
            "Datagrams read from the socket.",
            progress.datagrams.load(Ordering::Relaxed),
        ),
        (
            "socket_drops",
            "Datagrams the kernel dropped on the receiving socket (SO_RXQ_OVFL).",
            progress.socket_drops.load(Ordering::Relaxed),
        ),
    ] {
        counter(o, &format!("diodon_receiver_{name}_total"), help, v);
    }
    if let Some(u) = udp {
        counter(
            o,
            "diodon_udp_forward_datagrams_total",
            "Datagrams forwarded to the destination.",
            u.datagrams.load(Ordering::Relaxed),
        );
        counter(
            o,
            "diodon_udp_forward_bytes_total",
            "Payload bytes forwarded.",
            u.bytes.load(Ordering::Relaxed),
        );
    }
}

/// The kernel's measuring points for this network namespace.
fn kernel(o: &mut String, iface: Option<&str>) {
    for (proto, file, snmp) in [
        ("udp", "snmp", UdpSnmp::read()),
        ("udp6", "snmp6", UdpSnmp::read_v6()),
    ] {
        let Ok(u) = snmp else { continue };
        for (name, help, v) in [
            (
                "in_datagrams",
                "InDatagrams: delivered to sockets.",
                u.in_datagrams,
            ),
            ("in_errors", "InErrors: receive errors.", u.in_errors),
            (
                "rcvbuf_errors",
                "RcvbufErrors: dropped, receive buffer full.",
                u.rcvbuf_errors,
            ),
            (
                "sndbuf_errors",
                "SndbufErrors: dropped, send buffer full.",
                u.sndbuf_errors,
            ),
            (
                "in_csum_errors",
                "InCsumErrors: bad checksums.",
                u.in_csum_errors,
            ),
            ("out_datagrams", "OutDatagrams: sent.", u.out_datagrams),
            ("no_ports", "NoPorts: no socket listening.", u.no_ports),
        ] {
            counter(
                o,
                &format!("diodon_kernel_{proto}_{name}_total"),
                &format!("/proc/net/{file} {help}"),
                v,
            );
        }
    }
    let Ok(dir) = std::fs::read_dir("/sys/class/net") else {
        return;
    };
    let mut names: Vec<String> = dir
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut first = true;
    for name in &names {
        let Ok(l) = LinkStats::read(name) else {
            continue;
        };
        for (field, v) in [
            ("rx_packets", l.rx_packets),
            ("rx_bytes", l.rx_bytes),
            ("rx_dropped", l.rx_dropped),
            ("rx_errors", l.rx_errors),
            ("tx_packets", l.tx_packets),
            ("tx_bytes", l.tx_bytes),
            ("tx_dropped", l.tx_dropped),
            ("tx_errors", l.tx_errors),
        ] {
            let metric = format!("diodon_link_{field}_total");
            if first {
                let _ = writeln!(
                    o,
                    "# HELP {metric} /sys/class/net/IF/statistics/{field}\n# TYPE {metric} counter"
                );
            }
            let _ = writeln!(o, "{metric}{{interface=\"{name}\"}} {v}");
        }
        first = false;
    }
    if let Some(i) = iface {
        let _ = writeln!(
            o,
            "# HELP diodon_interface_in_use The interface carrying the link.\n# TYPE diodon_interface_in_use gauge\ndiodon_interface_in_use{{interface=\"{i}\"}} 1"
        );
    }
}

/// The interface the kernel would use to reach `peer` (longest prefix in
/// `/proc/net/route` or `/proc/net/ipv6_route`); for a local or unspecified
/// address the first interface that is not `lo` with a matching route.
pub fn route_interface(peer: IpAddr) -> Option<String> {
    if peer.is_loopback() {
        return Some("lo".into());
    }
    match peer {
        IpAddr::V4(a) => {
            let text = std::fs::read_to_string("/proc/net/route").ok()?;
            let ip = u32::from(a);
            let mut best: Option<(u32, String)> = None;
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 8 {
                    continue;
                }
                // The kernel prints the network-order word as a native u32.
                let word = |h: &str| {
                    u32::from_str_radix(h, 16)
                        .ok()
                        .map(|v| u32::from_be_bytes(v.to_ne_bytes()))
                };
                let (Some(dest), Some(mask)) = (word(f[1]), word(f[7])) else {
                    continue;
                };
                if (ip & mask == dest || a.is_unspecified())
                    && best
                        .as_ref()
                        .is_none_or(|(m, _)| mask.count_ones() > m.count_ones())
                    && f[0] != "lo"
                {
                    best = Some((mask, f[0].to_owned()));
                }
            }
            best.map(|(_, n)| n)
        }
        IpAddr::V6(a) => {
            let text = std::fs::read_to_string("/proc/net/ipv6_route").ok()?;
            let ip = u128::from(a);
            let mut best: Option<(u32, String)> = None;
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 10 || f[9] == "lo" {
                    continue;
                }
                let dest = u128::from_str_radix(f[0], 16).ok()?;
                let plen = u32::from_str_radix(f[1], 16).ok()?;
                let mask = if plen == 0 {
                    0
                } else {
                    u128::MAX << (128 - plen.min(128))
                };
                if (ip & mask == dest || a.is_unspecified())
                    && best.as_ref().is_none_or(|(p, _)| plen > *p)
                {
                    best = Some((plen, f[9].to_owned()));
                }
            }
            best.map(|(_, n)| n)
        }
    }
}
