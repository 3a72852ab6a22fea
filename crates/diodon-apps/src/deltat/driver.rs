//! Delta-t over a real UDP socket: one socket (both halves from
//! [`diodon_io::open_duplex`]: `sendmmsg` sends, `recvmmsg` + GRO receives), one
//! driver thread running the sans-IO [`diodon_deltat::Endpoint`], and a
//! socket-like API on top ([`DeltatListener`], [`DeltatStream`]
//! implementing [`Read`]/[`Write`]).
//!
//! ```text
//!   app threads                         driver thread                      kernel
//!   ───────────                         ─────────────                      ──────
//!   DeltatStream::write ─┐             ┌─ BatchReceiver::recv_batch(≤ next timer, ≤ 10 ms)
//!   DeltatStream::read  ─┼─ Mutex<Inner>┤  handle_datagram (in place) / handle_timeout
//!   DeltatListener::accept┘ + Condvar   │  poll_transmit(now, 64, buf) ─▶ BatchSender::send ─▶ UDP
//!                                        │                                  (sendmmsg)
//!        ▲  woken on every event ───────┘  poll_event ─▶ notify_all
//! ```
//!
//! App calls flush `poll_transmit` themselves right after changing the
//! state, so new data leaves at once; the driver thread wakes at least every
//! [`MAX_IDLE`] so a timer armed by an app call is never late by more than
//! that. A full device queue (`ENOBUFS`, visible because the socket has
//! `IP_RECVERR`) is waited out by [`diodon_io::BatchSender`], never turned
//! into a drop: a sender's own burst must not become loss, or acks silence.
//!
//! Delta-t has no FIN: [`Write::flush`] blocks until every written byte is
//! **acknowledged** (or fails with the connection's error), and applications
//! frame their own end of stream. Every failure reaches the caller as an
//! [`io::Error`] (kind `ConnectionRefused`, `ConnectionReset` or `TimedOut`);
//! nothing is truncated silently.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use diodon_deltat::{
    Config, ConnHandle, ConnectionError, Endpoint, Error as DtError, NakCode, Stats, WallClock,
};
use diodon_io::{
    is_path_error, open_duplex, unix_time_ms, BatchReceiver, BatchSender, MonotonicClock,
    ReceiverCounters, SenderCounters, UdpConfig, UdpError, MAX_GSO_SEGMENTS,
};
use diodon_sansio::Timestamp;

/// Longest the driver thread sleeps without looking at the timers.
pub const MAX_IDLE: Duration = Duration::from_millis(10);

/// Delta-t port used by [`DeltatListener::bind`] and [`DeltatStream::connect`]
/// when none is given (ports multiplex connections on one UDP socket).
pub const DEFAULT_PORT: u16 = 1;

const MS_PER_DAY: u64 = 86_400_000;

/// Socket buffer size asked for (forced when privileged, else capped by the
/// sysctl limits; a smaller buffer costs throughput, never data).
const SOCKET_BUFFER: usize = 4 << 20;

/// The socket's counters as the driver sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketCounters {
    /// The sending half (GSO calls, full-queue retries, error queue).
    pub sent: SenderCounters,
    /// The receiving half (datagrams, GRO packets, kernel drops).
    pub received: ReceiverCounters,
    /// Datagrams the kernel refused for a reason that belongs to the path
    /// (an ICMP error reported on the send, `EMSGSIZE`): not sent, left to
    /// the core's retransmission.
    pub refused: u64,
}

struct Inner {
    ep: Endpoint,
    tx: BatchSender,
    /// The transmit buffer the core writes into (reused).
    buf: Vec<u8>,
    /// A fatal socket error seen by the driver; every call returns it.
    io_error: Option<(io::ErrorKind, String)>,
    /// The receiving half's counters, as of the driver's last batch.
    received: ReceiverCounters,
    refused: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    cond: Condvar,
    local: SocketAddr,
    clock: MonotonicClock,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic in another holder leaves the endpoint usable for reporting.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends everything the endpoint has queued, one GSO batch per call.
    fn flush_out(&self, inner: &mut Inner) {
        let now = self.clock.now();
        let Inner {
            ep,
            tx,
            buf,
            io_error,
            refused,
            ..
        } = inner;
        while io_error.is_none() {
            let Some(t) = ep.poll_transmit(now, MAX_GSO_SEGMENTS, buf) else {
                break;
            };
            let Some(dest) = t.destination else { continue };
            match tx.send(dest, &buf[..t.size], t.segment_len()) {
                Ok(_) => {}
                Err(UdpError::Send { sent, source, .. })
                    if source.raw_os_error().is_some_and(is_path_error) =>
                {
                    // The peer or the path is in trouble; the core's timers
                    // retransmit what did not leave.
                    *refused += (t.datagram_count() as u64).saturating_sub(sent);
                }
                Err(e) => *io_error = Some((io::ErrorKind::Other, e.to_string())),
            }
        }
        let mut any = false;
        while ep.poll_event().is_some() {
            any = true;
        }
        if any || io_error.is_some() {
            self.cond.notify_all();
        }
    }

    fn wait<'a>(&self, g: MutexGuard<'a, Inner>, timeout: Duration) -> MutexGuard<'a, Inner> {
        self.cond
            .wait_timeout(g, timeout)
            .map_or_else(|e| e.into_inner().0, |(g, _)| g)
    }
}

/// The socket plus its driver thread; shared by a listener and its streams.
struct Driver {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Driver {
    fn start(bind: SocketAddr, config: Config) -> io::Result<Arc<Driver>> {
        let clock = MonotonicClock::new();
        let wall = WallClock::at_origin((unix_time_ms() % MS_PER_DAY) as u32);
        let ep = Endpoint::new(config, wall)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut cfg = UdpConfig::new(bind);
        cfg.rcvbuf = Some(SOCKET_BUFFER);
        cfg.sndbuf = Some(SOCKET_BUFFER);
        // sendmmsg, not GSO: a qdisc that splits a GSO super-packet (tbf)
        // may drop some of its segments and still report success, and a
        // drop Delta-t did not cause is a retransmission it did not need.
        // With sendmmsg every datagram is queued on its own and a full
        // queue is reported (ENOBUFS) and waited out.
        cfg.gso = false;
        let (tx, rx) = open_duplex(&cfg).map_err(udp_error)?;
        for w in &tx.setup().warnings {
            tracing::debug!("delta-t socket: {w}");
        }
        let shared = Arc::new(Shared {
            local: tx.local_addr(),
            inner: Mutex::new(Inner {
                ep,
                tx,
                buf: Vec::new(),
                io_error: None,
                received: ReceiverCounters::default(),
                refused: 0,
            }),
            cond: Condvar::new(),
            clock,
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("deltat-driver".into())
            .spawn(move || run(&s, rx))?;
        Ok(Arc::new(Driver {
            shared,
            thread: Mutex::new(Some(thread)),
        }))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = t.join();
        }
    }
}

fn udp_error(e: UdpError) -> io::Error {
    let kind = match &e {
        UdpError::Bind { source, .. } => source.kind(),
        UdpError::Config(_) => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// The driver loop: receive (bounded by the next timer), run timers, transmit.
fn run(s: &Shared, mut rx: BatchReceiver) {
    let mut wait = MAX_IDLE;
    while !s.stop.load(Ordering::SeqCst) {
        let got = rx.recv_batch(Some(wait));
        let mut g = s.lock();
        match got {
            Ok(batch) if !batch.is_empty() => {
                let now = s.clock.now();
                for d in batch {
                    g.ep.handle_datagram(now, d.src, d.data);
                }
                s.cond.notify_all();
            }
            Ok(_) => {}
            Err(e) => {
                g.io_error = Some((io::ErrorKind::Other, e.to_string()));
                s.cond.notify_all();
                return;
            }
        }
        g.received = rx.counters();
        let now = s.clock.now();
        if g.ep.poll_timeout().is_some_and(|t| t <= now) {
            g.ep.handle_timeout(now);
            s.cond.notify_all();
        }
        s.flush_out(&mut g);
        wait = g.ep.poll_timeout().map_or(MAX_IDLE, |t| {
            t.saturating_duration_since(s.clock.now())
                .clamp(Duration::from_micros(100), MAX_IDLE)
        });
    }
}

fn conn_error(e: &ConnectionError) -> io::Error {
    let kind = match e {
        ConnectionError::Unacknowledged { .. } => io::ErrorKind::TimedOut,
        ConnectionError::Refused(NakCode::PortUnreachable | NakCode::BacklogFull) => {
            io::ErrorKind::ConnectionRefused
        }
        ConnectionError::Refused(_) => io::ErrorKind::ConnectionReset,
    };
    io::Error::new(kind, format!("delta-t: {e}"))
}

fn dt_error(e: DtError) -> io::Error {
    match e {
        DtError::Failed(c) => conn_error(&c),
        DtError::WouldBlock => io::ErrorKind::WouldBlock.into(),
        DtError::WriteShutdown => io::Error::new(io::ErrorKind::BrokenPipe, e),
        DtError::AddrInUse | DtError::PortInUse(_) => io::Error::new(io::ErrorKind::AddrInUse, e),
        DtError::InvalidPort => io::Error::new(io::ErrorKind::InvalidInput, e),
        DtError::UnknownHandle => io::Error::new(io::ErrorKind::NotConnected, e),
    }
}

fn check_io(inner: &Inner) -> io::Result<()> {
    match &inner.io_error {
        Some((kind, msg)) => Err(io::Error::new(*kind, msg.clone())),
        None => Ok(()),
    }
}

/// Listens for Delta-t connections on one UDP socket.
pub struct DeltatListener {
    driver: Arc<Driver>,
    port: u16,
}

impl DeltatListener {
    /// Binds `addr` with the default configuration and listens on [`DEFAULT_PORT`].
    pub fn bind(addr: SocketAddr) -> io::Result<DeltatListener> {
        Self::bind_with(addr, DEFAULT_PORT, Config::default())
    }

    /// Binds `addr` and listens on Delta-t `port` with `config`.
    pub fn bind_with(addr: SocketAddr, port: u16, config: Config) -> io::Result<DeltatListener> {
        let driver = Driver::start(addr, config)?;
        driver.shared.lock().ep.listen(port).map_err(dt_error)?;
        Ok(DeltatListener { driver, port })
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.driver.shared.local)
    }

    /// The listened Delta-t port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Blocks until a connection's first segment arrives.
    pub fn accept(&self) -> io::Result<(DeltatStream, SocketAddr)> {
        self.accept_timeout(None)?
            .ok_or_else(|| io::ErrorKind::TimedOut.into())
    }

    /// [`DeltatListener::accept`] giving up after `timeout` (`Ok(None)`).
    pub fn accept_timeout(
        &self,
        timeout: Option<Duration>,
    ) -> io::Result<Option<(DeltatStream, SocketAddr)>> {
        let s = &self.driver.shared;
        let deadline = timeout.map(|t| s.clock.now() + t);
        let mut g = s.lock();
        loop {
            check_io(&g)?;
            if let Some(h) = g.ep.accept() {
                let peer = g.ep.remote(h).map_err(dt_error)?;
                return Ok(Some((DeltatStream::new(Arc::clone(&self.driver), h), peer)));
            }
            let wait = match deadline {
                Some(d) => {
                    let now = s.clock.now();
                    if now >= d {
                        return Ok(None);
                    }
                    d.saturating_duration_since(now)
                        .min(Duration::from_millis(100))
                }
                None => Duration::from_millis(100),
            };
            g = s.wait(g, wait);
        }
    }

    /// Endpoint counters.
    pub fn stats(&self) -> Stats {
        self.driver.shared.lock().ep.stats().clone()
    }
}

/// A Delta-t connection: a reliable, ordered, full-duplex byte stream.
///
/// Dropping it closes the record (Delta-t `close()`); call
/// [`Write::flush`] first to wait until the peer has acknowledged everything.
pub struct DeltatStream {
    driver: Arc<Driver>,
    h: ConnHandle,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl DeltatStream {
    fn new(driver: Arc<Driver>, h: ConnHandle) -> DeltatStream {
        DeltatStream {
            driver,
            h,
            read_timeout: None,
            write_timeout: None,
        }
    }

    /// Connects to the Delta-t [`DEFAULT_PORT`] at `addr` from an ephemeral
    /// UDP port, default configuration. Sends nothing: the first write opens
    /// the connection, and a refusal surfaces on a later write or flush.
    pub fn connect(addr: SocketAddr) -> io::Result<DeltatStream> {
        Self::connect_with(addr, DEFAULT_PORT, Config::default())
    }

    /// Connects to Delta-t `port` at `addr` with `config`.
    pub fn connect_with(addr: SocketAddr, port: u16, config: Config) -> io::Result<DeltatStream> {
        let bind: SocketAddr = if addr.is_ipv6() {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        };
        let driver = Driver::start(bind, config)?;
        let h = driver
            .shared
            .lock()
            .ep
            .connect(addr, port, DEFAULT_PORT)
            .map_err(dt_error)?;
        Ok(DeltatStream::new(driver, h))
    }

    /// Bounds how long `read` blocks (`TimedOut` after that); `None`: forever.
    pub fn set_read_timeout(&mut self, t: Option<Duration>) {
        self.read_timeout = t;
    }

    /// Bounds how long `write` and `flush` block; `None`: until the protocol
    /// itself gives up (Stimer, 3Δt).
    pub fn set_write_timeout(&mut self, t: Option<Duration>) {
        self.write_timeout = t;
    }

    /// The peer's UDP address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.driver
            .shared
            .lock()
            .ep
            .remote(self.h)
            .map_err(dt_error)
    }

    /// The local UDP address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.driver.shared.local)
    }

    /// Ends writing (no FIN exists: the peer learns nothing).
    pub fn shutdown(&self) -> io::Result<()> {
        self.driver
            .shared
            .lock()
            .ep
            .shutdown(self.h)
            .map_err(dt_error)
    }

    /// Bytes written and not acknowledged yet.
    pub fn unacked(&self) -> io::Result<usize> {
        self.driver
            .shared
            .lock()
            .ep
            .unacked(self.h)
            .map_err(dt_error)
    }

    /// Endpoint counters (shared by every connection of this socket).
    pub fn stats(&self) -> Stats {
        self.driver.shared.lock().ep.stats().clone()
    }

    /// Times the kernel's queue was full and a send was retried once it
    /// drained (never dropped).
    pub fn send_retries(&self) -> u64 {
        let c = self.driver.shared.lock().tx.counters();
        c.enobufs_retries + c.eagain_retries
    }

    /// The socket's counters (shared by every connection of this socket).
    pub fn socket_counters(&self) -> SocketCounters {
        let g = self.driver.shared.lock();
        SocketCounters {
            sent: g.tx.counters(),
            received: g.received,
            refused: g.refused,
        }
    }

    /// Blocks on the driver's condition until `f` yields a value, the
    /// connection fails, or `timeout` passes.
    fn block<T>(
        &self,
        timeout: Option<Duration>,
        mut op: impl FnMut(&mut Inner, ConnHandle) -> Result<Option<T>, DtError>,
    ) -> io::Result<T> {
        let shared = &self.driver.shared;
        let deadline: Option<Timestamp> = timeout.map(|t| shared.clock.now() + t);
        let mut guard = shared.lock();
        loop {
            check_io(&guard)?;
            let result = op(&mut guard, self.h);
            shared.flush_out(&mut guard);
            match result {
                Ok(Some(v)) => return Ok(v),
                Ok(None) | Err(DtError::WouldBlock) => {}
                Err(e) => return Err(dt_error(e)),
            }
            if let Ok(Some(e)) = guard.ep.error(self.h) {
                return Err(conn_error(&e));
            }
            let mut wait = Duration::from_millis(100);
            if let Some(d) = deadline {
                let now = shared.clock.now();
                if now >= d {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "delta-t: operation timed out",
                    ));
                }
                wait = wait.min(d.saturating_duration_since(now));
            }
            guard = shared.wait(guard, wait);
        }
    }
}

impl Read for DeltatStream {
    /// Blocks until at least one byte is readable. Never returns `Ok(0)` for
    /// a non-empty buffer: Delta-t has no end of stream.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.block(self.read_timeout, |i, h| i.ep.read(h, buf).map(Some))
    }
}

impl Write for DeltatStream {
    /// Blocks until at least one byte fits the send buffer.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.block(self.write_timeout, |i, h| i.ep.write(h, buf).map(Some))
    }

    /// Blocks until every written byte is acknowledged by the peer.
    fn flush(&mut self) -> io::Result<()> {
        self.block(self.write_timeout, |i, h| {
            // A failure may have emptied the send buffer: check it first.
            if let Some(e) = i.ep.error(h)? {
                return Err(DtError::Failed(e));
            }
            i.ep.unacked(h).map(|n| (n == 0).then_some(()))
        })
    }
}

impl Drop for DeltatStream {
    fn drop(&mut self) {
        let s = &self.driver.shared;
        let mut g = s.lock();
        let _ = g.ep.close(self.h);
        s.flush_out(&mut g);
    }
}

impl std::fmt::Debug for DeltatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltatStream")
            .field("handle", &self.h.id())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for DeltatListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltatListener")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}
