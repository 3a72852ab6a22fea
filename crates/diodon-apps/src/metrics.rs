//! `--metrics ADDR`: Prometheus text over HTTP, a subscriber of the counters
//! declared in the cores, the sockets and the kernel MIBs.
//!
//! ```text
//!  GET /metrics ─► tiny_http thread ─► render():
//!     core        SenderStats / ReceiverStats       (snapshots, ~100 ms old)
//!     socket      SenderCounters / RecvSocketCounters (SO_RXQ_OVFL drops)
//!     flows       UdpSourceCounters / UdpForwardCounters
//!     kernel      kernel_udp_* (/proc/net/snmp), kernel_udp6_* (/proc/net/snmp6)
//!     link        kernel_link_*{interface=…} (sysfs, every interface of the netns)
//!                 diodon_interface_in_use{interface=…}: the one carrying the link
//! ```
//!
//! Only `GET /metrics` (and `HEAD`) is answered with the page; any other
//! path gets 404 and any other method 405. Metric names are generated from
//! the declarations ([`diodon_counters`]), none is written here.

use crate::recv::RecvProgress;
use crate::send::SendProgress;
use crate::udp_flow::{UdpForwardStats, UdpSourceStats};
use diodon_counters::prometheus::{Page, CONTENT_TYPE};
use diodon_io::{LinkStats, UdpSnmp};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// What one side exports.
#[derive(Debug, Clone)]
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
    let server = tiny_http::Server::http(addr).map_err(|e| MetricsError::Bind {
        addr,
        reason: e.to_string(),
    })?;
    let local = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| MetricsError::Bind {
            addr,
            reason: "not an IP listener".into(),
        })?;
    let iface = device.or_else(|| diodon_io::route::route_interface(peer));
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
        (Method::Get | Method::Head, "/metrics") => text(200, render(source, iface), CONTENT_TYPE),
        (Method::Get | Method::Head, _) => text(
            404,
            "not found: metrics are at /metrics\n".into(),
            "text/plain; charset=utf-8",
        ),
        _ => text(
            405,
            "only GET /metrics\n".into(),
            "text/plain; charset=utf-8",
        ),
    }
}

/// The whole page.
pub fn render(source: &Source, iface: Option<&str>) -> String {
    let mut page = Page::new();
    match source {
        Source::Send { progress, udp } => {
            let (core, socket) = progress
                .snapshot
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            page.add(&core, &[]);
            page.add(&socket, &[]);
            if let Some(u) = udp {
                page.add(&u.snapshot(), &[]);
            }
        }
        Source::Recv { progress, udp } => {
            let core = progress
                .snapshot
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            page.add(&core, &[]);
            page.add(&progress.socket(), &[]);
            if let Some(u) = udp {
                page.add(&u.snapshot(), &[]);
            }
        }
    }
    kernel(&mut page, iface);
    page.render()
}

/// The kernel's measuring points for this network namespace.
fn kernel(page: &mut Page, iface: Option<&str>) {
    if let Ok(u) = UdpSnmp::read() {
        page.add(&u, &[]);
    }
    if let Ok(u) = UdpSnmp::read_v6() {
        page.add_as(&u, "udp6", &[]);
    }
    if let Ok(dir) = std::fs::read_dir("/sys/class/net") {
        let mut names: Vec<String> = dir
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in &names {
            if let Ok(l) = LinkStats::read(name) {
                page.add(&l, &[("interface", name)]);
            }
        }
    }
    if let Some(i) = iface {
        page.gauge(
            "diodon_interface_in_use",
            "The interface carrying the link (1 for the one in use).",
            &[("interface", i)],
            1,
        );
    }
}
