//! What `diodon deltat` does over a connection with a return path: send one
//! file and get a verdict for it, receive one, or echo (the thesis's
//! client/server). Each runs over Delta-t or, for comparisons, Linux TCP with
//! the same framing, so the benchmark compares transports with identical
//! application code.
//!
//! ```text
//!  sender                                                      receiver
//!  "DTF2" | name len u16 | name | size u64 ─────────────────▶  decides the output (a file, or a
//!                                                              directory + the sender's name),
//!                                                              creates NAME.part
//!            ◀──────────────── ready: 0 | or 1 + reason len u16 + reason (refused: nothing sent)
//!  data (size bytes) | BLAKE3 digest (32) ──────────────────▶  writes, hashes, fsyncs, verifies,
//!                                                              renames NAME.part → NAME
//!            ◀──────────────── verdict: 1 verified | 0 digest mismatch | 2 failed,
//!                              + reason len u16 + reason
//! ```
//!
//! A receiver that fails while data flows (disk full, a write error) sends
//! its failed verdict at once and closes; the sender's next write fails and
//! it reads the verdict, so it reports the receiver's own reason instead of
//! waiting for a timeout. The sender's time runs from the first byte
//! written to the verdict read (end to end, verified). Every outcome is a
//! typed value ([`TransferSummary`], [`EchoSummary`], [`TransferFailure`])
//! that the CLI prints; the connection's counters travel with it.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use diodon_counters::{CounterSet, Snapshot};
use diodon_deltat::{Config, CongestionAlgorithm};
use diodon_io::MonotonicClock;
use diodon_sansio::IpVersion;
use serde::{Deserialize, Serialize};

use super::driver::{DeltatListener, DeltatStream};
use crate::names;
use crate::report::Exit;

/// The first bytes of a transfer (framing version 2: with the file name and
/// the receiver's ready answer).
pub const MAGIC: &[u8; 4] = b"DTF2";
/// Longest file name a sender may announce.
pub const MAX_NAME: usize = 4096;
/// Longest reason a receiver sends back.
const MAX_REASON: usize = 1024;
const CHUNK: usize = 64 * 1024;
/// How long a Delta-t sender keeps acking after it read the verdict (no FIN:
/// a retransmitted verdict must still be acknowledged).
const VERDICT_LINGER: Duration = Duration::from_secs(2);
/// How long a side waits for the peer to acknowledge its last word.
const LAST_WORD_WAIT: Duration = Duration::from_secs(10);

const READY: u8 = 0;
const REFUSED: u8 = 1;
const VERDICT_MISMATCH: u8 = 0;
const VERDICT_VERIFIED: u8 = 1;
const VERDICT_FAILED: u8 = 2;

/// Which transport carries a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Delta-t over UDP.
    Deltat,
    /// Linux TCP (the baseline).
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Deltat => "Delta-t",
            Transport::Tcp => "TCP",
        })
    }
}

/// How to carry a transfer.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// Delta-t or TCP.
    pub transport: Transport,
    /// Delta-t port (connections multiplex on one UDP socket).
    pub port: u16,
    /// Path MTU: Delta-t segments carry MTU − IP − UDP − 20 bytes of data.
    pub mtu: usize,
    /// Delta-t congestion control.
    pub congestion: CongestionAlgorithm,
    /// Delta-t receive buffer (the largest advertised window).
    pub recv_buffer: usize,
    /// Give up on a blocked read or write after this long.
    pub timeout: Duration,
    /// TCP only: the socket's congestion control (`TCP_CONGESTION`).
    pub tcp_congestion: Option<String>,
}

impl TransportOptions {
    /// The Delta-t endpoint configuration for a peer of `ip`'s family.
    pub fn deltat_config(&self, ip: IpVersion) -> Result<Config, TransferError> {
        let max_payload = ip
            .max_payload(self.mtu)
            .and_then(|p| p.checked_sub(diodon_deltat::wire::HEADER_LEN))
            .filter(|p| *p > 0)
            .ok_or(TransferError::Mtu(self.mtu))?;
        Ok(Config {
            max_payload,
            congestion: self.congestion,
            recv_buffer: self.recv_buffer,
            ..Config::default()
        })
    }
}

/// Which end a summary is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// `deltat send`.
    Send,
    /// `deltat recv`.
    Recv,
}

/// A connection's counters: the Delta-t endpoint's and its socket's (none
/// for TCP).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionCounters {
    /// The endpoint's counters ([`diodon_deltat::Stats`]).
    pub deltat: Snapshot,
    /// The socket's sending half.
    pub socket_sent: Snapshot,
    /// The socket's receiving half.
    pub socket_received: Snapshot,
    /// Datagrams the kernel refused because of the path (left to
    /// retransmission).
    pub socket_refused: u64,
}

impl ConnectionCounters {
    fn of(stream: &DeltatStream) -> ConnectionCounters {
        let socket = stream.socket_counters();
        ConnectionCounters {
            deltat: stream.stats().snapshot(),
            socket_sent: socket.sent.snapshot(),
            socket_received: socket.received.snapshot(),
            socket_refused: socket.refused,
        }
    }

    /// The counters that moved, one group per line.
    pub fn text(&self) -> String {
        let line = |name: &str, s: &Snapshot| {
            let moved: Vec<String> =
                s.0.iter()
                    .filter(|(_, v)| **v > 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect();
            format!(
                "  {name}: {}\n",
                if moved.is_empty() {
                    "all 0".to_owned()
                } else {
                    moved.join(", ")
                }
            )
        };
        let mut s = line("delta-t", &self.deltat);
        s.push_str(&line("socket sent", &self.socket_sent));
        s.push_str(&line("socket received", &self.socket_received));
        if self.socket_refused > 0 {
            let _ = writeln!(
                s,
                "  socket refused (left to retransmission): {}",
                self.socket_refused
            );
        }
        s
    }
}

/// One side's word on a finished transfer (one JSON line on stdout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferSummary {
    /// Which side.
    pub side: Side,
    /// Transport.
    pub proto: Transport,
    /// The file name the sender announced.
    pub name: String,
    /// Bytes of the file.
    pub bytes: u64,
    /// First byte written (sender) or header read (receiver) to verdict.
    pub seconds: f64,
    /// `bytes` over `seconds`.
    pub mbit_s: f64,
    /// Whether the receiver verified the digest.
    pub verified: bool,
    /// Why not, when not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the receiver put the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The connection's counters (Delta-t only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<ConnectionCounters>,
}

impl TransferSummary {
    /// The exit status: 0 verified, 1 not.
    pub fn exit(&self) -> Exit {
        if self.verified {
            Exit::Success
        } else {
            Exit::ChannelFailed
        }
    }
}

/// The echo client's measurement (one JSON line on stdout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EchoSummary {
    /// Always `"echo"`.
    pub side: String,
    /// Transport.
    pub proto: Transport,
    /// Messages echoed.
    pub messages: u32,
    /// Bytes per message.
    pub size: usize,
    /// Median round-trip time, ms.
    pub rtt_ms_median: f64,
    /// Largest round-trip time, ms.
    pub rtt_ms_max: f64,
}

/// Why a transfer did not complete.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// The MTU leaves no room for data.
    #[error("--mtu {0} leaves no room for Delta-t data")]
    Mtu(usize),
    /// The input file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The file changed size while it was sent.
    #[error("{} shrank while it was sent ({sent} of {expected} bytes)", path.display())]
    Shrank {
        /// The file.
        path: PathBuf,
        /// Bytes sent.
        sent: u64,
        /// Size at the start.
        expected: u64,
    },
    /// The name is longer than a transfer can announce.
    #[error("the file name is longer than {MAX_NAME} bytes")]
    NameTooLong,
    /// Connecting or listening failed.
    #[error("cannot {what} {addr} over {transport}: {source}")]
    Setup {
        /// `connect to` or `listen on`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Transport.
        transport: Transport,
        /// The OS or protocol error.
        source: io::Error,
    },
    /// The connection failed while the transfer was under way.
    #[error("{peer}: {stage}: {source}")]
    Connection {
        /// The peer.
        peer: SocketAddr,
        /// What was going on, e.g. "connection lost after 12 of 40 bytes".
        stage: String,
        /// The OS or protocol error.
        source: io::Error,
    },
    /// The peer does not speak this framing.
    #[error("{peer} is not a diodon deltat sender (bad magic or header)")]
    BadHeader {
        /// The peer.
        peer: SocketAddr,
    },
    /// The receiver refused the file before any data was sent.
    #[error("the receiver refused {name:?}: {reason}")]
    Refused {
        /// The announced name.
        name: String,
        /// The receiver's reason.
        reason: String,
    },
    /// The receiver failed while the data flowed.
    #[error("the receiver failed: {reason}")]
    ReceiverFailed {
        /// The receiver's reason.
        reason: String,
    },
    /// The receiver cannot write its output.
    #[error("cannot write {}: {source}", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl TransferError {
    /// The exit status: 2 configuration, 3 local IO, 1 the transfer failed.
    pub fn exit(&self) -> Exit {
        match self {
            TransferError::Mtu(_) | TransferError::NameTooLong => Exit::Config,
            TransferError::Input { .. } | TransferError::Setup { .. } => Exit::Io,
            _ => Exit::ChannelFailed,
        }
    }
}

/// A failed transfer: the error (one sentence) and the connection's
/// counters at the time, if it had any (printed separately).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct TransferFailure {
    /// What went wrong.
    pub error: TransferError,
    /// The connection's counters (Delta-t only).
    pub counters: Option<Box<ConnectionCounters>>,
}

impl From<TransferError> for TransferFailure {
    fn from(error: TransferError) -> Self {
        TransferFailure {
            error,
            counters: None,
        }
    }
}

/// A connected byte stream of either transport.
trait Conn: Read + Write + Send {
    /// Bounds blocking reads.
    fn set_read_limit(&mut self, d: Duration);
    /// Bounds blocking writes and flushes.
    fn set_write_limit(&mut self, d: Duration);
    /// The transport's counters (Delta-t only).
    fn counters(&self) -> Option<ConnectionCounters> {
        None
    }
}

impl Conn for TcpStream {
    fn set_read_limit(&mut self, d: Duration) {
        let _ = self.set_read_timeout(Some(d));
    }

    fn set_write_limit(&mut self, d: Duration) {
        let _ = self.set_write_timeout(Some(d));
    }
}

impl Conn for DeltatStream {
    fn set_read_limit(&mut self, d: Duration) {
        self.set_read_timeout(Some(d));
    }

    fn set_write_limit(&mut self, d: Duration) {
        self.set_write_timeout(Some(d));
    }

    fn counters(&self) -> Option<ConnectionCounters> {
        Some(ConnectionCounters::of(self))
    }
}

fn set_tcp_congestion<S: std::os::fd::AsFd>(socket: &S, opts: &TransportOptions) -> io::Result<()> {
    if let Some(name) = &opts.tcp_congestion {
        socket2::SockRef::from(socket)
            .set_tcp_congestion(name.as_bytes())
            .map_err(|e| {
                io::Error::new(e.kind(), format!("TCP congestion control {name:?}: {e}"))
            })?;
    }
    Ok(())
}

fn connect(to: SocketAddr, opts: &TransportOptions) -> Result<Box<dyn Conn>, TransferError> {
    let setup = |source| TransferError::Setup {
        what: "connect to",
        addr: to,
        transport: opts.transport,
        source,
    };
    let mut conn: Box<dyn Conn> = match opts.transport {
        Transport::Tcp => {
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(10)).map_err(setup)?;
            set_tcp_congestion(&s, opts).map_err(setup)?;
            Box::new(s)
        }
        Transport::Deltat => {
            let config = opts.deltat_config(IpVersion::of(to))?;
            Box::new(DeltatStream::connect_with(to, opts.port, config).map_err(setup)?)
        }
    };
    conn.set_read_limit(opts.timeout);
    conn.set_write_limit(opts.timeout);
    Ok(conn)
}

/// A listening socket of either transport.
enum Listener {
    Tcp(TcpListener),
    Deltat(DeltatListener),
}

impl Listener {
    fn bind(addr: SocketAddr, opts: &TransportOptions) -> Result<Listener, TransferError> {
        let setup = |source| TransferError::Setup {
            what: "listen on",
            addr,
            transport: opts.transport,
            source,
        };
        Ok(match opts.transport {
            Transport::Tcp => {
                let l = TcpListener::bind(addr).map_err(setup)?;
                set_tcp_congestion(&l, opts).map_err(setup)?;
                Listener::Tcp(l)
            }
            Transport::Deltat => {
                let config = opts.deltat_config(IpVersion::of(addr))?;
                Listener::Deltat(DeltatListener::bind_with(addr, opts.port, config).map_err(setup)?)
            }
        })
    }

    fn accept(
        &self,
        opts: &TransportOptions,
    ) -> Result<(Box<dyn Conn>, SocketAddr), TransferError> {
        let (mut conn, peer): (Box<dyn Conn>, SocketAddr) = match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().map_err(|source| self.accept_error(source))?;
                (Box::new(s), peer)
            }
            Listener::Deltat(l) => {
                let (s, peer) = l.accept().map_err(|source| self.accept_error(source))?;
                (Box::new(s), peer)
            }
        };
        conn.set_read_limit(opts.timeout);
        conn.set_write_limit(opts.timeout);
        Ok((conn, peer))
    }

    fn accept_error(&self, source: io::Error) -> TransferError {
        let (addr, transport) = match self {
            Listener::Tcp(l) => (l.local_addr(), Transport::Tcp),
            Listener::Deltat(l) => (l.local_addr(), Transport::Deltat),
        };
        TransferError::Setup {
            what: "accept on",
            addr: addr.unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0))),
            transport,
            source,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Deltat(l) => l.local_addr(),
        }
    }
}

/// Sends `path` to a `deltat recv` at `to` and waits for its verdict.
pub fn send_file(
    path: &Path,
    to: SocketAddr,
    opts: &TransportOptions,
) -> Result<TransferSummary, TransferFailure> {
    let input = |source| TransferError::Input {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(input)?;
    let len = file.metadata().map_err(input)?.len();
    let name = path
        .file_name()
        .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned());
    if name.len() > MAX_NAME {
        return Err(TransferError::NameTooLong.into());
    }
    let mut reader = BufReader::with_capacity(CHUNK, file);
    let clock = MonotonicClock::new();
    let mut conn = connect(to, opts)?;
    let result = send_over(&mut *conn, to, path, &name, len, &mut reader, &clock);
    let counters = conn.counters();
    match result {
        Ok((verdict, reason, seconds)) => {
            if opts.transport == Transport::Deltat {
                // No FIN: stay a moment so a retransmitted verdict is acked.
                std::thread::sleep(VERDICT_LINGER);
            }
            Ok(TransferSummary {
                side: Side::Send,
                proto: opts.transport,
                name,
                bytes: len,
                seconds,
                mbit_s: mbit_s(len, seconds),
                verified: verdict == VERDICT_VERIFIED,
                reason,
                location: None,
                counters: conn.counters().or(counters),
            })
        }
        Err(error) => Err(TransferFailure {
            error,
            counters: counters.map(Box::new),
        }),
    }
}

/// The sender's half of the exchange: the verdict code, the receiver's
/// reason and the seconds from first byte to verdict.
fn send_over(
    conn: &mut dyn Conn,
    peer: SocketAddr,
    path: &Path,
    name: &str,
    len: u64,
    input: &mut impl Read,
    clock: &MonotonicClock,
) -> Result<(u8, Option<String>, f64), TransferError> {
    let lost = |stage: String| {
        move |source| TransferError::Connection {
            peer,
            stage,
            source,
        }
    };
    let start = clock.now();
    let mut header = Vec::with_capacity(14 + name.len());
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&(name.len() as u16).to_be_bytes());
    header.extend_from_slice(name.as_bytes());
    header.extend_from_slice(&len.to_be_bytes());
    conn.write_all(&header)
        .map_err(lost("sending the header".into()))?;
    let mut ready = [0u8; 1];
    conn.read_exact(&mut ready)
        .map_err(lost("waiting for the receiver to open its output".into()))?;
    if ready[0] != READY {
        let reason = read_reason(conn).unwrap_or_else(|_| "no reason given".into());
        return Err(TransferError::Refused {
            name: name.to_owned(),
            reason,
        });
    }
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut sent = 0u64;
    while sent < len {
        let want = usize::try_from(len - sent).unwrap_or(usize::MAX).min(CHUNK);
        let n = input
            .read(&mut buf[..want])
            .map_err(|source| TransferError::Input {
                path: path.to_owned(),
                source,
            })?;
        if n == 0 {
            return Err(TransferError::Shrank {
                path: path.to_owned(),
                sent,
                expected: len,
            });
        }
        hasher.update(&buf[..n]);
        if let Err(e) = conn.write_all(&buf[..n]) {
            // The receiver may have failed and said why before closing.
            conn.set_read_limit(Duration::from_secs(1));
            return Err(match read_verdict(conn) {
                Ok((VERDICT_FAILED, reason)) => TransferError::ReceiverFailed {
                    reason: reason.unwrap_or_default(),
                },
                _ => lost(format!("connection lost after {sent} of {len} bytes"))(e),
            });
        }
        sent += n as u64;
    }
    conn.write_all(hasher.finalize().as_bytes())
        .map_err(lost("sending the digest".into()))?;
    // No flush: the verdict follows the digest, so reading it proves every
    // byte arrived, even when the acks of the last segments were lost and
    // the receiver has already gone (flushing would wait for those acks).
    let (verdict, reason) = read_verdict(conn).map_err(lost("reading the verdict".into()))?;
    if verdict == VERDICT_FAILED {
        return Err(TransferError::ReceiverFailed {
            reason: reason.unwrap_or_default(),
        });
    }
    Ok((verdict, reason, clock.elapsed_since(start).as_secs_f64()))
}

fn read_reason(conn: &mut dyn Conn) -> io::Result<String> {
    let mut len = [0u8; 2];
    conn.read_exact(&mut len)?;
    let mut text = vec![0u8; usize::from(u16::from_be_bytes(len)).min(MAX_REASON)];
    conn.read_exact(&mut text)?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn read_verdict(conn: &mut dyn Conn) -> io::Result<(u8, Option<String>)> {
    let mut code = [0u8; 1];
    conn.read_exact(&mut code)?;
    let reason = read_reason(conn)?;
    Ok((code[0], (!reason.is_empty()).then_some(reason)))
}

/// A code and a reason, as the receiver sends them.
fn word(code: u8, reason: &str) -> Vec<u8> {
    let mut reason = reason.as_bytes();
    if reason.len() > MAX_REASON {
        reason = &reason[..MAX_REASON];
    }
    let mut out = Vec::with_capacity(3 + reason.len());
    out.push(code);
    out.extend_from_slice(&(reason.len() as u16).to_be_bytes());
    out.extend_from_slice(reason);
    out
}

/// Where a received file goes: `out` itself, or the sender's (sanitized)
/// name inside `out` when `out` is a directory.
fn output_path(out: &Path, name: &str) -> Result<PathBuf, String> {
    if out.is_dir() {
        let safe = names::sanitize(name).map_err(|e| format!("unsafe file name {name:?}: {e}"))?;
        Ok(out.join(safe.as_path()))
    } else {
        Ok(out.to_owned())
    }
}

/// Decides where the file goes and creates its staging file: the final
/// path, the staging path and the open file, or why not (one sentence).
fn open_output(out: &Path, name: &str) -> Result<(PathBuf, PathBuf, File), String> {
    let path = output_path(out, name)?;
    let part = part_name(&path);
    if let Some(dir) = part.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let file = File::create(&part).map_err(|e| format!("cannot create {}: {e}", part.display()))?;
    Ok((path, part, file))
}

/// Receives one file on `listen`: `out` is the file, or a directory to
/// write the sender's name into. The output is created before the sender is
/// told to go, so a receiver that cannot write refuses before any data
/// flows.
pub fn recv_file(
    listen: SocketAddr,
    out: &Path,
    opts: &TransportOptions,
) -> Result<TransferSummary, TransferFailure> {
    let listener = Listener::bind(listen, opts)?;
    tracing::info!(addr = ?listener.local_addr().ok(), transport = %opts.transport, "waiting for a sender");
    let (mut conn, peer) = listener.accept(opts)?;
    let result = recv_over(&mut *conn, peer, out, opts);
    let counters = conn.counters();
    match result {
        Ok(mut summary) => {
            summary.counters = counters;
            Ok(summary)
        }
        Err(error) => Err(TransferFailure {
            error,
            counters: counters.map(Box::new),
        }),
    }
}

/// Reads a sender's header: the announced name and size.
fn read_header(conn: &mut dyn Conn, peer: SocketAddr) -> Result<(String, u64), TransferError> {
    let lost = |source| TransferError::Connection {
        peer,
        stage: "reading the header".into(),
        source,
    };
    let mut magic = [0u8; 6];
    conn.read_exact(&mut magic).map_err(lost)?;
    if &magic[..4] != MAGIC {
        return Err(TransferError::BadHeader { peer });
    }
    let name_len = usize::from(u16::from_be_bytes([magic[4], magic[5]]));
    if name_len > MAX_NAME {
        return Err(TransferError::BadHeader { peer });
    }
    let mut name = vec![0u8; name_len];
    conn.read_exact(&mut name).map_err(lost)?;
    let mut size = [0u8; 8];
    conn.read_exact(&mut size).map_err(lost)?;
    Ok((
        String::from_utf8_lossy(&name).into_owned(),
        u64::from_be_bytes(size),
    ))
}

fn recv_over(
    conn: &mut dyn Conn,
    peer: SocketAddr,
    out: &Path,
    opts: &TransportOptions,
) -> Result<TransferSummary, TransferError> {
    let lost = |stage: String| {
        move |source| TransferError::Connection {
            peer,
            stage,
            source,
        }
    };
    let clock = MonotonicClock::new();
    let start = clock.now();
    let (name, len) = read_header(conn, peer)?;

    // Decide and create the output before accepting a single data byte.
    let (path, part, file) = match open_output(out, &name) {
        Ok(x) => x,
        Err(reason) => {
            tracing::error!("refusing {name:?} from {peer}: {reason}");
            last_word(conn, &word(REFUSED, &reason), peer);
            return Err(TransferError::Refused { name, reason });
        }
    };
    conn.write_all(&[READY])
        .map_err(lost("answering the header".into()))?;

    let mut writer = BufWriter::with_capacity(CHUNK, file);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    let fail = |conn: &mut dyn Conn, source: io::Error| {
        let _ = std::fs::remove_file(&part);
        let reason = format!("cannot write {}: {source}", part.display());
        last_word(conn, &word(VERDICT_FAILED, &reason), peer);
        TransferError::Output {
            path: part.clone(),
            source,
        }
    };
    while got < len {
        let want = usize::try_from(len - got).unwrap_or(usize::MAX).min(CHUNK);
        let n = match conn.read(&mut buf[..want]) {
            Ok(0) => {
                let _ = std::fs::remove_file(&part);
                return Err(lost(format!("stream ended after {got} of {len} bytes"))(
                    io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            Ok(n) => n,
            Err(e) => {
                let _ = std::fs::remove_file(&part);
                return Err(lost(format!("connection lost after {got} of {len} bytes"))(
                    e,
                ));
            }
        };
        hasher.update(&buf[..n]);
        if let Err(e) = writer.write_all(&buf[..n]) {
            return Err(fail(conn, e));
        }
        got += n as u64;
    }
    let mut digest = [0u8; 32];
    if let Err(e) = conn.read_exact(&mut digest) {
        let _ = std::fs::remove_file(&part);
        return Err(lost("reading the digest".into())(e));
    }
    let ok = *hasher.finalize().as_bytes() == digest;
    let synced = writer
        .into_inner()
        .map_err(io::IntoInnerError::into_error)
        .and_then(|f| f.sync_all());
    if let Err(e) = synced {
        return Err(fail(conn, e));
    }
    let (verdict, reason) = if ok {
        if let Err(e) = std::fs::rename(&part, &path) {
            return Err(fail(conn, e));
        }
        (VERDICT_VERIFIED, None)
    } else {
        let _ = std::fs::remove_file(&part);
        (
            VERDICT_MISMATCH,
            Some(format!("digest mismatch; {} removed", part.display())),
        )
    };
    let seconds = clock.elapsed_since(start).as_secs_f64();
    last_word(conn, &word(verdict, reason.as_deref().unwrap_or("")), peer);
    Ok(TransferSummary {
        side: Side::Recv,
        proto: opts.transport,
        name,
        bytes: len,
        seconds,
        mbit_s: mbit_s(len, seconds),
        verified: ok,
        reason,
        location: ok.then(|| path.display().to_string()),
        counters: None,
    })
}

/// Sends the receiver's last word and waits (bounded) until it is
/// acknowledged: Delta-t has no FIN, so `flush` is what proves delivery. A
/// sender that left before acking only loses the news.
fn last_word(conn: &mut dyn Conn, bytes: &[u8], peer: SocketAddr) {
    conn.set_write_limit(LAST_WORD_WAIT);
    if let Err(e) = conn.write_all(bytes).and_then(|()| conn.flush()) {
        tracing::warn!("the answer to {peer} was not acknowledged: {e}");
    }
}

fn part_name(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

fn mbit_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds / 1e6
    } else {
        0.0
    }
}

/// Echo server: answers every connection's bytes with the same bytes,
/// until the process ends.
pub fn echo_server(listen: SocketAddr, opts: &TransportOptions) -> Result<(), TransferError> {
    let listener = Listener::bind(listen, opts)?;
    tracing::info!(%listen, transport = %opts.transport, "echo server listening");
    loop {
        let (mut conn, peer) = listener.accept(opts)?;
        std::thread::spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if let Err(e) = conn.write_all(&buf[..n]).and_then(|()| conn.flush()) {
                            tracing::warn!("echo {peer}: {e}");
                            break;
                        }
                    }
                    Err(e) => {
                        if e.kind() != io::ErrorKind::TimedOut {
                            tracing::warn!("echo {peer}: {e}");
                        }
                        break;
                    }
                }
            }
        });
    }
}

/// Echo client: sends `count` messages of `size` bytes, checks each echo,
/// and measures the round-trip times.
pub fn echo_client(
    to: SocketAddr,
    count: u32,
    size: usize,
    opts: &TransportOptions,
) -> Result<EchoSummary, TransferFailure> {
    let clock = MonotonicClock::new();
    let mut conn = connect(to, opts)?;
    let mut rtts = Vec::with_capacity(count as usize);
    let mut run = || -> Result<(), TransferError> {
        let lost = |stage: String| {
            move |source| TransferError::Connection {
                peer: to,
                stage,
                source,
            }
        };
        for i in 0..count {
            let msg: Vec<u8> = (0..size)
                .map(|j| (j as u32).wrapping_mul(31).wrapping_add(i) as u8)
                .collect();
            let t0 = clock.now();
            conn.write_all(&msg)
                .map_err(lost(format!("sending message {i}")))?;
            let mut back = vec![0u8; msg.len()];
            conn.read_exact(&mut back)
                .map_err(lost(format!("reading echo {i}")))?;
            if back != msg {
                return Err(lost(format!("echo {i}"))(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the reply differs from the message",
                )));
            }
            rtts.push(clock.elapsed_since(t0).as_secs_f64() * 1e3);
        }
        conn.flush().map_err(lost("flushing".into()))
    };
    if let Err(error) = run() {
        return Err(TransferFailure {
            error,
            counters: conn.counters().map(Box::new),
        });
    }
    rtts.sort_by(f64::total_cmp);
    Ok(EchoSummary {
        side: "echo".into(),
        proto: opts.transport,
        messages: count,
        size,
        rtt_ms_median: rtts.get(rtts.len() / 2).copied().unwrap_or(0.0),
        rtt_ms_max: rtts.last().copied().unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_carry_code_and_reason() {
        let w = word(VERDICT_FAILED, "disk full");
        assert_eq!(w[0], VERDICT_FAILED);
        assert_eq!(u16::from_be_bytes([w[1], w[2]]), 9);
        assert_eq!(&w[3..], b"disk full");
        let long = "x".repeat(MAX_REASON + 10);
        assert_eq!(word(REFUSED, &long).len(), 3 + MAX_REASON);
    }

    #[test]
    fn a_directory_output_takes_the_senders_sanitized_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            output_path(dir.path(), "report.pdf"),
            Ok(dir.path().join("report.pdf"))
        );
        assert!(output_path(dir.path(), "../escape").is_err());
        let file = dir.path().join("given");
        assert_eq!(output_path(&file, "ignored"), Ok(file.clone()));
    }

    #[test]
    fn the_mtu_must_leave_room_for_data() {
        let opts = TransportOptions {
            transport: Transport::Deltat,
            port: 1,
            mtu: 48,
            congestion: CongestionAlgorithm::Cubic,
            recv_buffer: 1 << 20,
            timeout: Duration::from_secs(1),
            tcp_congestion: None,
        };
        assert!(matches!(
            opts.deltat_config(IpVersion::V4),
            Err(TransferError::Mtu(48))
        ));
        let config = TransportOptions { mtu: 1500, ..opts }
            .deltat_config(IpVersion::V6)
            .expect("room");
        assert_eq!(config.max_payload, 1500 - 48 - 20);
    }
}
