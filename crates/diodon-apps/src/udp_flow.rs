//! UDP flows: the sender listens on UDP, each source address/port becomes a
//! channel of kind `Datagrams`; the receiver sends every record out again as
//! one datagram to a fixed destination (one socket per flow, so the
//! destination can still tell the flows apart).
//!
//! ```text
//!  src A ─┐                                         ┌─► socket A' ─► dest
//!  src B ─┼─► BatchReceiver ─► per-source channel ──┤   (one datagram per record)
//!  src C ─┘   (recvmmsg,       "udp:SRC", records   └─► socket B' ─► dest
//!             SO_RXQ_OVFL)     [len u16 BE][payload]
//! ```
//!
//! A record is a 2-byte big-endian length and the payload; records may span
//! blocks, the receiver reassembles them. Nothing inside is dropped: when the
//! link (the configured rate) is slower than the source, the source thread
//! blocks on the sender's queue and the kernel drops at the listening
//! socket. That is the only admissible loss, and it is counted
//! (`SO_RXQ_OVFL`) and reported as `socket_drops`. A flow silent for
//! `idle` is finished (its trailer carries the digest), and a later datagram
//! from the same source opens a new channel.

use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::send::SourceHandle;
use crate::sink_error::{Refusal, SinkFailure};
use diodon_io::{BatchReceiver, MonotonicClock, UdpConfig, UdpError};
use diodon_proto::{ChannelKind, ChannelMeta, Timestamp};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of a record's length prefix (the protocol's record framing).
pub use diodon_proto::records::RECORD_HEADER;

/// Buffered record bytes per flow before they go to the sender's queue.
const FLUSH_BYTES: usize = 64 * 1024;

diodon_counters::counters! {
    /// What the UDP-flow source counted (a snapshot of [`UdpSourceStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct UdpSourceCounters in Diodon "udp_source" {
        datagrams: counter Count "datagrams" "Datagrams read from the UDP-flow socket.",
        bytes: counter Bytes "payload" "Payload bytes read from the UDP-flow socket.",
        flows: counter Count "flows" "UDP flows (channels) opened.",
        /// The only admissible loss of a UDP source: it outran the configured rate.
        socket_drops: counter Count "socket_dropped_packets" "Packets the kernel dropped on the UDP-flow socket because the source was faster than the link (SO_RXQ_OVFL; a GRO super-packet counts once).",
    }
}

diodon_counters::counters! {
    /// What the UDP forwarding sink counted (a snapshot of [`UdpForwardStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct UdpForwardCounters in Diodon "udp_forward" {
        datagrams: counter Count "datagrams" "Datagrams forwarded to the destination.",
        bytes: counter Bytes "payload" "Payload bytes forwarded.",
    }
}

/// Live counters of the UDP source, shared with the summary and metrics
/// threads; [`UdpSourceStats::snapshot`] reads them as declared counters.
#[derive(Debug, Default)]
pub struct UdpSourceStats {
    /// Datagrams read from the listening socket.
    pub datagrams: AtomicU64,
    /// Payload bytes read.
    pub bytes: AtomicU64,
    /// Flows (channels) opened.
    pub flows: AtomicU64,
    /// Datagrams the kernel dropped on the listening socket because the
    /// source outran the link (`SO_RXQ_OVFL` / `SO_MEMINFO`).
    pub socket_drops: AtomicU64,
}

/// How to run the UDP source.
#[derive(Debug, Clone)]
pub struct UdpSourceOptions {
    /// The listening socket (GRO is turned off: one datagram per slot).
    pub udp: UdpConfig,
    /// A flow silent this long is finished.
    pub idle: Duration,
}

struct Flow {
    token: u64,
    buf: Vec<u8>,
    last: Timestamp,
}

/// Reads datagrams until `stop` is set; each source address is a channel.
pub fn serve_udp(
    opts: &UdpSourceOptions,
    handle: &SourceHandle,
    stop: &AtomicBool,
    stats: &UdpSourceStats,
) -> Result<(), UdpError> {
    serve_udp_on(open_udp_source(opts)?, opts, handle, stop, stats)
}

/// Opens the listening socket of `opts` (GRO off: one datagram per slot).
pub fn open_udp_source(opts: &UdpSourceOptions) -> Result<BatchReceiver, UdpError> {
    let mut cfg = opts.udp.clone();
    cfg.gro = false;
    BatchReceiver::open(&cfg)
}

/// [`serve_udp`] on a socket [`open_udp_source`] opened.
pub fn serve_udp_on(
    mut sock: BatchReceiver,
    opts: &UdpSourceOptions,
    handle: &SourceHandle,
    stop: &AtomicBool,
    stats: &UdpSourceStats,
) -> Result<(), UdpError> {
    tracing::info!(local = %sock.local_addr(), rcvbuf = sock.setup().rcvbuf, "listening for UDP flows");
    for w in &sock.setup().warnings {
        tracing::warn!("{w}");
    }
    let slots = opts.udp.recv_slots;
    let clock = MonotonicClock::new();
    let mut flows: HashMap<SocketAddr, Flow> = HashMap::new();
    let closed = |_| UdpError::Config("the sender pipeline has stopped".into());
    while !stop.load(Ordering::Relaxed) {
        let batch = sock.recv_batch(Some(Duration::from_millis(20)))?;
        let now = clock.now();
        let drained = batch.messages() < slots;
        let (mut n, mut bytes) = (0u64, 0u64);
        for d in batch {
            n += 1;
            bytes += d.data.len() as u64;
            let flow = match flows.entry(d.src) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let meta = ChannelMeta {
                        kind: ChannelKind::Datagrams,
                        ..ChannelMeta::stream(format!("udp:{}", d.src))
                    };
                    let token = handle.open(meta).map_err(closed)?;
                    stats.flows.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(src = %d.src, "UDP flow opened");
                    e.insert(Flow {
                        token,
                        buf: Vec::with_capacity(FLUSH_BYTES + 65_536),
                        last: now,
                    })
                }
            };
            flow.last = now;
            let len = u16::try_from(d.data.len()).unwrap_or(u16::MAX);
            flow.buf.extend_from_slice(&len.to_be_bytes());
            flow.buf.extend_from_slice(&d.data[..usize::from(len)]);
        }
        stats.datagrams.fetch_add(n, Ordering::Relaxed);
        stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        stats
            .socket_drops
            .store(sock.socket_drops(), Ordering::Relaxed);
        // Hand records on when the socket is drained (latency) or a flow
        // has buffered enough; a full queue blocks here (backpressure: the
        // kernel socket buffer absorbs the rest, and counts what it drops).
        for flow in flows.values_mut() {
            if !flow.buf.is_empty() && (drained || flow.buf.len() >= FLUSH_BYTES) {
                let data = std::mem::replace(&mut flow.buf, Vec::with_capacity(FLUSH_BYTES));
                handle.data(flow.token, data).map_err(closed)?;
            }
        }
        let idle: Vec<SocketAddr> = flows
            .iter()
            .filter(|(_, f)| f.buf.is_empty() && now.saturating_duration_since(f.last) >= opts.idle)
            .map(|(a, _)| *a)
            .collect();
        for src in idle {
            if let Some(f) = flows.remove(&src) {
                tracing::info!(%src, "UDP flow idle: finished");
                handle.finish(f.token).map_err(closed)?;
            }
        }
    }
    for (_, f) in flows.drain() {
        if !f.buf.is_empty() {
            let _ = handle.data(f.token, f.buf);
        }
        let _ = handle.finish(f.token);
    }
    let drops = sock
        .socket_drops_now()
        .unwrap_or(0)
        .max(sock.socket_drops());
    stats.socket_drops.store(drops, Ordering::Relaxed);
    Ok(())
}

/// Live counters of the forwarding sink; [`UdpForwardStats::snapshot`]
/// reads them as declared counters.
#[derive(Debug, Default)]
pub struct UdpForwardStats {
    /// Datagrams sent to the destination.
    pub datagrams: AtomicU64,
    /// Payload bytes sent.
    pub bytes: AtomicU64,
}

impl UdpSourceStats {
    /// The counters now.
    pub fn snapshot(&self) -> UdpSourceCounters {
        UdpSourceCounters {
            datagrams: self.datagrams.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            flows: self.flows.load(Ordering::Relaxed),
            socket_drops: self.socket_drops.load(Ordering::Relaxed),
        }
    }
}

impl UdpForwardStats {
    /// The counters now.
    pub fn snapshot(&self) -> UdpForwardCounters {
        UdpForwardCounters {
            datagrams: self.datagrams.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug)]
struct OutFlow {
    name: String,
    sock: Option<UdpSocket>,
    pending: Vec<u8>,
    bytes: u64,
}

/// Sends every record of every `Datagrams` channel to `dest` as one datagram.
#[derive(Debug)]
pub struct UdpForwardSink {
    dest: SocketAddr,
    flows: HashMap<ChannelKey, OutFlow>,
    stats: Arc<UdpForwardStats>,
}

impl UdpForwardSink {
    /// A sink forwarding to `dest`.
    pub fn new(dest: SocketAddr, stats: Arc<UdpForwardStats>) -> Self {
        UdpForwardSink {
            dest,
            flows: HashMap::new(),
            stats,
        }
    }

    fn bind(&self) -> io::Result<UdpSocket> {
        if self.dest.is_ipv6() {
            UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0))
        } else {
            UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        }
    }

    /// Sends the complete records of `flow`, keeping a partial one.
    fn forward(&self, flow: &mut OutFlow) -> io::Result<()> {
        let Some(sock) = &flow.sock else {
            return Ok(());
        };
        let mut off = 0usize;
        let (mut n, mut bytes) = (0u64, 0u64);
        while flow.pending.len() - off >= RECORD_HEADER {
            let len = usize::from(u16::from_be_bytes([
                flow.pending[off],
                flow.pending[off + 1],
            ]));
            let end = off + RECORD_HEADER + len;
            if end > flow.pending.len() {
                break;
            }
            send_retrying(sock, &flow.pending[off + RECORD_HEADER..end], self.dest)?;
            n += 1;
            bytes += len as u64;
            off = end;
        }
        flow.pending.drain(..off);
        self.stats.datagrams.fetch_add(n, Ordering::Relaxed);
        self.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }
}

/// `send_to`, waiting out full local queues (never drops a record).
fn send_retrying(sock: &UdpSocket, data: &[u8], dest: SocketAddr) -> io::Result<()> {
    let mut tries = 0u32;
    loop {
        match sock.send_to(data, dest) {
            Ok(_) => return Ok(()),
            Err(e)
                if tries < 5000
                    && (e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted
                        || e.kind() == io::ErrorKind::ConnectionRefused
                        || e.raw_os_error() == Some(libc::ENOBUFS)) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(e),
        }
    }
}

impl Sink for UdpForwardSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        if meta.aligned {
            Err(Refusal::PacketsNeedTun)
        } else if meta.kind == ChannelKind::Datagrams {
            Ok(())
        } else {
            Err(Refusal::NotDatagrams(meta.kind))
        }
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        let dest = self.dest.to_string();
        match event {
            SinkEvent::Opened { key, meta } => {
                let sock = self.bind();
                let (sock, err) = match sock {
                    Ok(s) => (Some(s), None),
                    Err(e) => (None, Some(e)),
                };
                self.flows.insert(
                    key,
                    OutFlow {
                        name: meta.name,
                        sock,
                        pending: Vec::new(),
                        bytes: 0,
                    },
                );
                match err {
                    None => Ok(None),
                    Some(e) => Err(SinkError {
                        key,
                        why: SinkFailure::Socket {
                            dest,
                            source: Arc::new(e),
                        },
                    }),
                }
            }
            SinkEvent::Refused { .. }
            | SinkEvent::Gap { .. }
            | SinkEvent::Partial { .. }
            | SinkEvent::Assembled { .. } => Ok(None),
            SinkEvent::Data { key, data, .. } => {
                let Some(mut flow) = self.flows.remove(&key) else {
                    return Ok(None);
                };
                flow.bytes += data.len() as u64;
                flow.pending.extend_from_slice(&data);
                let r = self.forward(&mut flow);
                if r.is_err() {
                    flow.sock = None;
                }
                self.flows.insert(key, flow);
                r.map(|()| None).map_err(|e| SinkError {
                    key,
                    why: SinkFailure::SendTo {
                        dest,
                        source: Arc::new(e),
                    },
                })
            }
            SinkEvent::Complete { key, bytes, digest } => {
                let flow = self.flows.remove(&key);
                let (name, partial) = flow.map(|f| (f.name, f.pending.len())).unwrap_or_default();
                let verdict = if partial == 0 {
                    Verdict::Verified {
                        blake3: hex::encode(digest),
                    }
                } else {
                    Verdict::Failed {
                        reason: format!("stream ends inside a record ({partial} bytes left)"),
                    }
                };
                Ok(Some(ChannelOutcome::new(key, name, bytes, &dest, verdict)))
            }
            SinkEvent::Failed { key, reason } => {
                let (name, bytes) = self
                    .flows
                    .remove(&key)
                    .map(|f| (f.name, f.bytes))
                    .unwrap_or_default();
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &dest,
                    Verdict::Failed {
                        reason: reason.to_string(),
                    },
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_proto::{ChannelId, SessionId};

    #[test]
    fn records_split_across_data_events_keep_their_boundaries() {
        let dest_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        dest_sock
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let stats = Arc::new(UdpForwardStats::default());
        let mut sink = UdpForwardSink::new(dest_sock.local_addr().unwrap(), Arc::clone(&stats));
        let key = ChannelKey {
            session: SessionId(1),
            channel: ChannelId(1),
        };
        let meta = ChannelMeta {
            kind: ChannelKind::Datagrams,
            ..ChannelMeta::stream("udp:x")
        };
        assert!(UdpForwardSink::admit(&meta).is_ok());
        assert!(UdpForwardSink::admit(&ChannelMeta::stream("s")).is_err());
        sink.handle(SinkEvent::Opened { key, meta }).unwrap();
        let payloads: Vec<Vec<u8>> = vec![vec![], vec![1; 5], vec![2; 300], vec![3; 1]];
        let mut wire = Vec::new();
        for p in &payloads {
            wire.extend_from_slice(&(p.len() as u16).to_be_bytes());
            wire.extend_from_slice(p);
        }
        let mut offset = 0u64;
        for piece in wire.chunks(7) {
            sink.handle(SinkEvent::Data {
                key,
                offset,
                data: piece.to_vec(),
            })
            .unwrap();
            offset += piece.len() as u64;
        }
        let out = sink
            .handle(SinkEvent::Complete {
                key,
                bytes: offset,
                digest: [0; 32],
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Verified { .. }));
        let mut buf = [0u8; 2048];
        for p in &payloads {
            let n = dest_sock.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &p[..]);
        }
        assert_eq!(stats.datagrams.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn byte_sinks_refuse_datagram_channels() {
        let meta = ChannelMeta {
            kind: ChannelKind::Datagrams,
            ..ChannelMeta::stream("udp:1.2.3.4:5")
        };
        assert!(crate::stream::TcpSink::admit(&meta).is_err());
        assert!(crate::stream::StdoutSink::admit(&meta).is_err());
        assert!(crate::files::FileSink::admit(&meta).is_err());
        assert!(crate::stream::TcpSink::admit(&ChannelMeta::stream("tcp:x")).is_ok());
    }

    #[test]
    fn a_channel_ending_inside_a_record_fails() {
        let stats = Arc::new(UdpForwardStats::default());
        let mut sink = UdpForwardSink::new("127.0.0.1:9".parse().unwrap(), stats);
        let key = ChannelKey {
            session: SessionId(1),
            channel: ChannelId(2),
        };
        let meta = ChannelMeta {
            kind: ChannelKind::Datagrams,
            ..ChannelMeta::stream("udp:y")
        };
        sink.handle(SinkEvent::Opened { key, meta }).unwrap();
        sink.handle(SinkEvent::Data {
            key,
            offset: 0,
            data: vec![0, 10, 1, 2],
        })
        .unwrap();
        let out = sink
            .handle(SinkEvent::Complete {
                key,
                bytes: 4,
                digest: [0; 32],
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Failed { .. }));
    }
}
