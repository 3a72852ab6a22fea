//! `--metrics ADDR`: the counters of a running Diodon over HTTP, as
//! Prometheus text and as typed JSON. Both are subscribers of the counters
//! declared in the cores, the sockets and the kernel MIBs, and of one walk
//! over them ([`export`]), so they always carry the same sets.
//!
//! ```text
//!  GET /metrics  ─► tiny_http thread ─► export(source, iface, &mut Page)  ─► Prometheus text
//!  GET /counters ─►                  └► export(source, iface, &mut Counters) ─► JSON (serde)
//!     core        SenderStats / ReceiverStats       (snapshots, ~100 ms old)
//!     socket      SenderCounters / RecvSocketCounters (SO_RXQ_OVFL drops)
//!     flows       UdpSourceCounters / UdpForwardCounters
//!     files       FileSinkCounters (full disk, quarantine evictions and levels)
//!     packets     PacketSinkCounters (tap channels: delivered, lost, late)
//!     keys        KeyUseCounters{key_id=…} (receiver: authentic datagrams per key id),
//!                 SealingKey (sender: the key id it seals with now)
//!     tap         TapCounters, TapAgentCounters{agent=…}, RuleHitCounters{line=…,action=…}
//!     agent       AgentCounters (decapsulated, passed, delivered, ring and output drops)
//!     kernel      kernel_udp_*{scope="netns"} (/proc/net/snmp), kernel_udp6_* (/proc/net/snmp6)
//!     link        kernel_link_*{interface=…,scope="netns"} (sysfs, every interface of the netns)
//!                 (scope="netns": the namespace's totals, other traffic included;
//!                 a run's own change is in its summary's `kernel`)
//!                 diodon_interface_in_use{interface=…}: the one carrying the link
//! ```
//!
//! A receiver also serves `/api/status` (JSON: link state and alarms,
//! throughput and loss per second over the last minutes, channels in
//! flight, the last verdicts; [`crate::status::StatusDocument`]) and, at
//! `/`, a dashboard page that shows it: one HTML file embedded in the
//! binary, no script or style from anywhere else.
//!
//! Only `GET` (and `HEAD`) of those paths are answered; any other path gets
//! 404 and any other method 405. Metric names and JSON keys
//! are generated from the declarations ([`diodon_counters`]), none is
//! written here. `diodon stats --diodon ADDR` reads `/counters` back as a
//! [`Counters`].

use crate::agent::AgentStats;
use crate::files::FileSinkStats;
use crate::kafka::{KafkaSinkStats, KafkaSourceStats};
use crate::packet_sink::PacketSinkStats;
use crate::recv::RecvProgress;
use crate::send::SendProgress;
use crate::status::StatusDocument;
use crate::tap::stats::{RuleHitCounters, TapStats};
use crate::tunnel::{TunnelSinkStats, TunnelSourceStats};
use crate::udp_flow::{UdpForwardStats, UdpSourceStats};
use diodon_counters::prometheus::{Page, CONTENT_TYPE};
use diodon_counters::{CounterSet, Owner, Snapshot};
use diodon_io::{LinkStats, UdpSnmp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::Arc;

/// The path of the Prometheus page.
pub const METRICS_PATH: &str = "/metrics";
/// The path of the JSON page ([`Counters`]).
pub const COUNTERS_PATH: &str = "/counters";
/// Path of the receiver's status document.
pub const STATUS_PATH: &str = "/api/status";
/// The dashboard page (embedded).
const DASHBOARD: &str = include_str!("dashboard.html");

/// What one side exports.
#[derive(Debug, Clone)]
pub enum Source {
    /// `diodon send`.
    Send {
        /// The core's progress and snapshots.
        progress: Arc<SendProgress>,
        /// The UDP-flow source, if any.
        udp: Option<Arc<UdpSourceStats>>,
        /// The tunnel source, if any.
        tunnel: Option<Arc<TunnelSourceStats>>,
        /// The Kafka source, if any.
        kafka: Option<Arc<KafkaSourceStats>>,
        /// The directory-tree sync, if any.
        sync: Option<Arc<crate::sync::SyncStats>>,
        /// With several links: each link's health, labelled `to`.
        links: Vec<Arc<crate::multilink::LinkHealth>>,
    },
    /// `diodon recv`.
    Recv {
        /// The receiver's progress and snapshots.
        progress: Arc<RecvProgress>,
        /// The UDP forwarding sink, if any.
        udp: Option<Arc<UdpForwardStats>>,
        /// The file sink, if any.
        files: Option<Arc<FileSinkStats>>,
        /// The TUN sink, if any.
        tunnel: Option<Arc<TunnelSinkStats>>,
        /// The Kafka sink, if any.
        kafka: Option<Arc<KafkaSinkStats>>,
        /// The packet sink (tap channels), if any.
        packets: Option<Arc<PacketSinkStats>>,
    },
    /// `diodon tap`.
    Tap {
        /// The tap's counters.
        stats: Arc<TapStats>,
        /// The one-way sender's, when going across the diode.
        progress: Option<Arc<SendProgress>>,
    },
    /// `diodon agent`.
    Agent {
        /// The agent's counters.
        stats: Arc<AgentStats>,
    },
}

/// Errors starting the exporter.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("cannot serve metrics on {addr}: {reason}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why (the OS error as text: `tiny_http` boxes it).
        reason: String,
    },
    /// The server thread could not be started.
    #[error("cannot start the metrics thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Binds `addr` and serves metrics on a background thread for the rest of
/// the process; returns the bound address. `peer` is the address whose route
/// names the interface in use (`device` wins when given).
pub fn serve(
    addr: SocketAddr,
    source: Source,
    peer: IpAddr,
    device: Option<String>,
) -> Result<SocketAddr, MetricsError> {
    bind(addr, peer, device)?.serve(source)
}

/// A bound metrics listener that serves nothing yet: the privileged half
/// of [`serve`] (a process that restricts itself binds first).
#[derive(Debug)]
pub struct MetricsListener {
    listener: TcpListener,
    local: SocketAddr,
    iface: Option<String>,
}

/// Binds `addr` and finds the interface (see [`serve`]); no thread yet.
pub fn bind(
    addr: SocketAddr,
    peer: IpAddr,
    device: Option<String>,
) -> Result<MetricsListener, MetricsError> {
    let failed = |e: std::io::Error| MetricsError::Bind {
        addr,
        reason: e.to_string(),
    };
    let listener = TcpListener::bind(addr).map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    let iface = device.or_else(|| diodon_io::route::route_interface(peer));
    Ok(MetricsListener {
        listener,
        local,
        iface,
    })
}

impl MetricsListener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves `source` on a background thread for the rest of the process.
    pub fn serve(self, source: Source) -> Result<SocketAddr, MetricsError> {
        let MetricsListener {
            listener,
            local,
            iface,
        } = self;
        let server =
            tiny_http::Server::from_listener(listener, None).map_err(|e| MetricsError::Bind {
                addr: local,
                reason: e.to_string(),
            })?;
        tracing::info!(%local, interface = ?iface, "serving Prometheus metrics");
        std::thread::Builder::new()
            .name("diodon-metrics".into())
            .spawn(move || {
                for request in server.incoming_requests() {
                    let response = respond(&request, &source, iface.as_deref());
                    if let Err(e) = request.respond(response) {
                        tracing::debug!("metrics request: {e}");
                    }
                }
            })?;
        Ok(local)
    }
}

fn respond(
    request: &tiny_http::Request,
    source: &Source,
    iface: Option<&str>,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    use tiny_http::{Header, Method, Response};
    let path = request.url().split('?').next().unwrap_or_default();
    let text = |status: u16, body: String, content_type: &str| {
        let mut r = Response::from_string(body).with_status_code(status);
        if let Ok(h) = Header::from_bytes("Content-Type", content_type) {
            r.add_header(h);
        }
        r
    };
    match (request.method(), path) {
        (Method::Get | Method::Head, METRICS_PATH) => {
            text(200, render(source, iface), CONTENT_TYPE)
        }
        (Method::Get | Method::Head, COUNTERS_PATH) => text(
            200,
            serde_json::to_string(&counters(source, iface)).unwrap_or_default(),
            "application/json",
        ),
        (Method::Get | Method::Head, STATUS_PATH | "/") => match source {
            Source::Recv { progress, .. } if path == STATUS_PATH => text(
                200,
                serde_json::to_string(&StatusDocument::of(
                    &progress.health,
                    &progress.status,
                    diodon_io::clock::unix_time_ms(),
                ))
                .unwrap_or_default(),
                "application/json",
            ),
            Source::Recv { .. } => text(200, DASHBOARD.into(), "text/html; charset=utf-8"),
            _ => text(
                404,
                "not found: the status and the dashboard are served by diodon recv; \
                 here: /metrics (Prometheus) and /counters (JSON)\n"
                    .into(),
                "text/plain; charset=utf-8",
            ),
        },
        (Method::Get | Method::Head, _) => text(
            404,
            "not found: metrics are at /metrics (Prometheus) and /counters (JSON); \
             a receiver's status at /api/status and its dashboard at /\n"
                .into(),
            "text/plain; charset=utf-8",
        ),
        _ => text(
            405,
            "only GET /metrics or /counters\n".into(),
            "text/plain; charset=utf-8",
        ),
    }
}

/// Every counter set a running Diodon exports, by subsystem: the body of
/// `GET /counters`, built by the same walk as the Prometheus page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Diodon's own sets by subsystem (`sender`, `sender_socket`,
    /// `receiver`, `receiver_socket`, `udp_source`, `udp_forward`,
    /// `file_sink`, `tunnel_source`, `tunnel_sink`, `kafka_source`,
    /// `kafka_sink`, `packet_sink`, `tap`, `agent`).
    pub diodon: BTreeMap<String, Snapshot>,
    /// Diodon's sets that carry labels, by `subsystem{label=value,…}`
    /// (the tap's per-agent and per-rule counters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labeled: BTreeMap<String, Snapshot>,
    /// The kernel's sets of the namespace by subsystem (`udp`, `udp6`):
    /// the namespace's totals, other traffic included.
    pub kernel: BTreeMap<String, Snapshot>,
    /// Link statistics (`LinkStats`) by interface.
    pub link: BTreeMap<String, Snapshot>,
    /// The interface carrying the link, when known.
    pub interface: Option<String>,
}

/// A subscriber of the walk over the exported counter sets.
pub trait Exporter {
    /// One counter set under `subsystem`, of one interface when `interface` is given.
    fn set<C: CounterSet>(&mut self, set: &C, subsystem: &str, interface: Option<&str>);
    /// One counter set under `subsystem` with labels (one agent, one rule).
    fn labeled<C: CounterSet>(&mut self, set: &C, subsystem: &str, labels: &[(&str, &str)]);
    /// The interface that carries the link.
    fn interface_in_use(&mut self, interface: &str);
}

/// The `scope` label of the kernel's counters: totals of the whole network
/// namespace since it (or the interface) came up, not Diodon's own and not
/// one run's (the summaries hold a run's deltas).
pub const KERNEL_SCOPE: (&str, &str) = ("scope", "netns");

impl Exporter for Page {
    fn set<C: CounterSet>(&mut self, set: &C, subsystem: &str, interface: Option<&str>) {
        let kernel = C::OWNER != Owner::Diodon;
        match (interface, kernel) {
            (Some(i), true) => self.add_as(set, subsystem, &[("interface", i), KERNEL_SCOPE]),
            (Some(i), false) => self.add_as(set, subsystem, &[("interface", i)]),
            (None, true) => self.add_as(set, subsystem, &[KERNEL_SCOPE]),
            (None, false) => self.add_as(set, subsystem, &[]),
        }
    }

    fn labeled<C: CounterSet>(&mut self, set: &C, subsystem: &str, labels: &[(&str, &str)]) {
        self.add_as(set, subsystem, labels);
    }

    fn interface_in_use(&mut self, interface: &str) {
        self.gauge(
            "diodon_interface_in_use",
            "The interface carrying the link (1 for the one in use).",
            &[("interface", interface)],
            1,
        );
    }
}

impl Exporter for Counters {
    fn set<C: CounterSet>(&mut self, set: &C, subsystem: &str, interface: Option<&str>) {
        let (map, key) = match interface {
            Some(i) => (&mut self.link, i),
            None if C::OWNER == Owner::Diodon => (&mut self.diodon, subsystem),
            None => (&mut self.kernel, subsystem),
        };
        map.insert(key.to_owned(), set.snapshot());
    }

    fn labeled<C: CounterSet>(&mut self, set: &C, subsystem: &str, labels: &[(&str, &str)]) {
        let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.labeled
            .insert(format!("{subsystem}{{{}}}", l.join(",")), set.snapshot());
    }

    fn interface_in_use(&mut self, interface: &str) {
        self.interface = Some(interface.to_owned());
    }
}

diodon_counters::counters! {
    /// Authentic datagrams a receiver took under one key id (label
    /// `key_id`): a key rollover is complete once the old id stops growing.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct KeyUseCounters in Diodon "receiver_key" {
        datagrams: counter Count "datagrams" "Datagrams whose MAC or AEAD tag verified with this key id's key.",
    }
}

diodon_counters::counters! {
    /// The key a sender seals with (keyed modes).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct SealingKey in Diodon "sender_key" {
        id: gauge Count "id" "Key id the sender seals its datagrams with now.",
    }
}

/// The whole Prometheus page.
pub fn render(source: &Source, iface: Option<&str>) -> String {
    let mut page = Page::new();
    export(source, iface, &mut page);
    page.render()
}

/// The whole JSON page.
pub fn counters(source: &Source, iface: Option<&str>) -> Counters {
    let mut c = Counters::default();
    export(source, iface, &mut c);
    c
}

/// Hands every exported counter set to `out`: the side's own, then the
/// kernel's measuring points of this network namespace.
pub fn export(source: &Source, iface: Option<&str>, out: &mut impl Exporter) {
    fn own<C: CounterSet>(out: &mut impl Exporter, set: &C) {
        out.set(set, C::SUBSYSTEM, None);
    }
    /// The counters of an application part that may not be there.
    fn part<C: CounterSet>(out: &mut impl Exporter, set: Option<C>) {
        if let Some(set) = set {
            own(out, &set);
        }
    }
    match source {
        Source::Send {
            progress,
            udp,
            tunnel,
            kafka,
            sync,
            links,
        } => {
            for l in links {
                let to = l.dest.to_string();
                out.labeled(&l.snapshot(), "link", &[("to", &to)]);
            }
            let (core, socket) = progress
                .snapshot
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            own(out, &core);
            own(out, &socket);
            if let Some(id) = progress.key_id.lock().ok().and_then(|g| *g) {
                own(out, &SealingKey { id: u64::from(id) });
            }
            part(out, udp.as_ref().map(|x| x.snapshot()));
            part(out, tunnel.as_ref().map(|x| x.snapshot()));
            part(out, kafka.as_ref().map(|x| x.snapshot()));
            part(out, sync.as_ref().map(|x| x.snapshot()));
        }
        Source::Recv {
            progress,
            udp,
            files,
            tunnel,
            kafka,
            packets,
        } => {
            let core = progress
                .snapshot
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            own(out, &core);
            own(out, &progress.socket());
            for (id, datagrams) in progress
                .key_use
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default()
            {
                let id = id.to_string();
                out.labeled(
                    &KeyUseCounters { datagrams },
                    "receiver_key",
                    &[("key_id", &id)],
                );
            }
            own(
                out,
                &progress.health.counters(diodon_io::clock::unix_time_ms()),
            );
            part(out, udp.as_ref().map(|x| x.snapshot()));
            if let Some(f) = files {
                own(out, &f.snapshot());
                own(out, &f.mirror.snapshot());
            }
            part(out, tunnel.as_ref().map(|x| x.snapshot()));
            part(out, packets.as_ref().map(|x| x.snapshot()));
            part(out, kafka.as_ref().map(|x| x.snapshot()));
        }
        Source::Tap { stats, progress } => {
            own(out, &stats.snapshot());
            for (i, a) in stats.agents.iter().enumerate() {
                let i = i.to_string();
                out.labeled(&a.snapshot(), "tap_agent", &[("agent", &i)]);
            }
            for h in stats.rule_hits() {
                let line = h.line.to_string();
                let set = RuleHitCounters { frames: h.frames };
                out.labeled(&set, "tap_rule", &[("line", &line), ("action", &h.action)]);
            }
            if let Some(p) = progress {
                let (core, socket) = p.snapshot.lock().map(|g| g.clone()).unwrap_or_default();
                own(out, &core);
                own(out, &socket);
            }
        }
        Source::Agent { stats } => own(out, &stats.snapshot()),
    }
    kernel(out, iface);
}

/// The kernel's measuring points for this network namespace.
fn kernel(out: &mut impl Exporter, iface: Option<&str>) {
    if let Ok(u) = UdpSnmp::read() {
        out.set(&u, UdpSnmp::SUBSYSTEM, None);
    }
    if let Ok(u) = UdpSnmp::read_v6() {
        out.set(&u, "udp6", None);
    }
    if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
        let mut names: Vec<String> = dir
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in &names {
            if let Ok(l) = LinkStats::read(name) {
                out.set(&l, LinkStats::SUBSYSTEM, Some(name));
            }
        }
    }
    if let Some(i) = iface {
        out.interface_in_use(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recv::RecvProgress;
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;

    fn get(addr: SocketAddr, request: &str) -> (String, String) {
        let mut c = TcpStream::connect(addr).expect("test");
        write!(c, "{request} HTTP/1.0\r\nHost: x\r\n\r\n").expect("test");
        let mut text = String::new();
        c.read_to_string(&mut text).expect("test");
        let (head, body) = text.split_once("\r\n\r\n").expect("test");
        (
            head.lines().next().unwrap_or_default().to_owned(),
            body.to_owned(),
        )
    }

    #[test]
    fn serves_the_same_sets_as_prometheus_text_and_json() {
        let progress = Arc::new(RecvProgress::default());
        progress
            .datagrams
            .store(12, std::sync::atomic::Ordering::Relaxed);
        progress.snapshot.lock().expect("test").missing = 3;
        let files = Arc::new(FileSinkStats::default());
        files
            .quarantine_evictions
            .store(4, std::sync::atomic::Ordering::Relaxed);
        let kafka = Arc::new(KafkaSinkStats::default());
        kafka
            .duplicates
            .store(7, std::sync::atomic::Ordering::Relaxed);
        let source = Source::Recv {
            progress,
            udp: None,
            tunnel: None,
            kafka: Some(kafka),
            files: Some(files),
            packets: None,
        };
        let addr = serve(
            "127.0.0.1:0".parse().expect("test"),
            source.clone(),
            "127.0.0.1".parse().expect("test"),
            Some("lo".into()),
        )
        .expect("test");
        let (status, page) = get(addr, "GET /metrics");
        assert!(status.contains(" 200"), "{status}");
        assert!(page.contains("diodon_receiver_missing_total 3\n"), "{page}");
        assert!(
            page.contains("diodon_file_sink_quarantine_evictions_total 4\n"),
            "{page}"
        );
        assert!(
            page.contains("diodon_kafka_sink_records_skipped_total 7\n"),
            "{page}"
        );
        let (status, json) = get(addr, "GET /counters");
        assert!(status.contains(" 200"), "{status}");
        let c: Counters = serde_json::from_str(&json).expect("typed JSON");
        assert_eq!(c.diodon["receiver"].get("missing"), 3);
        assert_eq!(c.diodon["receiver_socket"].get("datagrams"), 12);
        assert_eq!(c.diodon["file_sink"].get("quarantine_evictions"), 4);
        assert_eq!(c.diodon["kafka_sink"].get("duplicates"), 7);
        assert!(c.kernel.contains_key("udp"), "{json}");
        assert!(c.link.contains_key("lo"), "{json}");
        assert_eq!(c.interface.as_deref(), Some("lo"));
        // Every sample of the page is a value of the JSON, and the other way round.
        let samples = diodon_counters::prometheus::parse(&page).len();
        let values: usize = [&c.diodon, &c.labeled, &c.kernel, &c.link]
            .iter()
            .flat_map(|m| m.values())
            .map(|s| s.0.len())
            .sum::<usize>()
            + usize::from(c.interface.is_some());
        assert_eq!(samples, values);
        assert!(get(addr, "GET /other").0.contains(" 404"));
        assert!(get(addr, "POST /counters").0.contains(" 405"));
    }

    #[test]
    fn a_sender_with_several_links_labels_each_links_health() {
        use crate::multilink::LinkHealth;
        let links = vec![
            LinkHealth::new("10.81.1.2:7700".parse().expect("test")),
            LinkHealth::new("10.81.2.2:7700".parse().expect("test")),
        ];
        let source = Source::Send {
            progress: Arc::new(SendProgress::default()),
            udp: None,
            tunnel: None,
            kafka: None,
            sync: None,
            links,
        };
        let page = render(&source, None);
        for to in ["10.81.1.2:7700", "10.81.2.2:7700"] {
            assert!(
                page.contains(&format!("diodon_link_up{{to=\"{to}\"}} 1\n")),
                "{page}"
            );
            assert!(
                page.contains(&format!("diodon_link_down_events_total{{to=\"{to}\"}} 0\n")),
                "{page}"
            );
        }
    }
}
