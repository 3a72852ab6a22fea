//! Delta-t over a real UDP socket: one socket, one driver thread running the
//! sans-IO [`diodon_deltat::Endpoint`], and a socket-like API on top
//! ([`DeltatListener`], [`DeltatStream`] implementing [`Read`]/[`Write`]).
//!
//! ```text
//!   app threads                        driver thread                 kernel
//!   ───────────                        ─────────────                 ──────
//!   DeltatStream::write ─┐            ┌─ recv_from(timeout = poll_timeout, ≤ 10 ms)
//!   DeltatStream::read  ─┼─ Mutex<Endpoint> ─┤  handle_datagram / handle_timeout
//!   DeltatListener::accept┘  + Condvar │  poll_transmit ─▶ send_to ───▶ UDP
//!        ▲  woken on every event ──────┘  poll_event ─▶ notify_all
//! ```
//!
//! App calls flush `poll_transmit` themselves right after changing the state,
//! so new data leaves at once; the driver thread wakes at least every
//! [`MAX_IDLE`] so a timer armed by an app call is never late by more than that.
//! When the kernel refuses a datagram because a device queue is full
//! (`ENOBUFS`), the driver holds it and sends it first once the queue has
//! drained (retrying every 100 µs) instead of dropping it: a sender's own
//! burst must not turn into loss, or acks into silence.
//!
//! Delta-t has no FIN: [`Write::flush`] blocks until every written byte is
//! **acknowledged** (or fails with the connection's error), and applications
//! frame their own end of stream. Every failure reaches the caller as an
//! [`io::Error`] (kind `ConnectionRefused`, `ConnectionReset` or `TimedOut`);
//! nothing is truncated silently.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use diodon_deltat::{
    Config, ConnHandle, ConnectionError, Endpoint, Error as DtError, NakCode, Stats, WallClock,
};
use diodon_sansio::Timestamp;

use crate::clock::{unix_time_ms, MonotonicClock};

/// Longest the driver thread sleeps without looking at the timers.
pub const MAX_IDLE: Duration = Duration::from_millis(10);

/// Delta-t port used by [`DeltatListener::bind`] and [`DeltatStream::connect`]
/// when none is given (ports multiplex connections on one UDP socket).
pub const DEFAULT_PORT: u16 = 1;

const MS_PER_DAY: u64 = 86_400_000;

/// Socket buffer size asked for (the kernel may clamp it).
const SOCKET_BUFFER: usize = 4 << 20;

/// How soon the driver retries a segment the kernel's queue refused.
const HELD_RETRY: Duration = Duration::from_micros(100);

struct Inner {
    ep: Endpoint,
    /// A fatal socket error seen by the driver; every call returns it.
    io_error: Option<(io::ErrorKind, String)>,
    /// A segment the kernel refused to queue (`ENOBUFS`, `EAGAIN`: the
    /// device queue is full). Held and sent first when the queue drains:
    /// backpressure, not loss (nothing is dropped inside our pipeline).
    held: Option<(SocketAddr, Vec<u8>)>,
    /// Times a send was refused and held for a retry.
    send_retries: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    cond: Condvar,
    socket: UdpSocket,
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

    /// Sends everything the endpoint has queued, the held segment first;
    /// stops (holding the segment) when the kernel's queue is full.
    fn flush_out(&self, inner: &mut Inner) {
        let now = self.clock.now();
        while let Some((to, bytes)) = inner.held.take().or_else(|| inner.ep.poll_transmit(now)) {
            if let Err(e) = self.socket.send_to(&bytes, to) {
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) || e.raw_os_error() == Some(libc::ENOBUFS)
                {
                    inner.send_retries += 1;
                    inner.held = Some((to, bytes));
                    break;
                } else if is_transient(&e) {
                    // An ICMP error reported on this send; the datagram may
                    // not have left: the core's retransmission covers it.
                    drain_error_queue(&self.socket);
                } else {
                    inner.io_error = Some((e.kind(), format!("send_to {to}: {e}")));
                }
            }
        }
        let mut any = false;
        while inner.ep.poll_event().is_some() {
            any = true;
        }
        if any {
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
        let socket = UdpSocket::bind(bind)?;
        set_socket_buffers(&socket, SOCKET_BUFFER);
        set_recverr(&socket, bind.is_ipv6());
        socket.set_read_timeout(Some(MAX_IDLE))?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                ep,
                io_error: None,
                held: None,
                send_retries: 0,
            }),
            cond: Condvar::new(),
            socket,
            clock,
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("deltat-driver".into())
            .spawn(move || run(&s))?;
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

/// Asks for `bytes` of send and receive buffer (forced when privileged);
/// best effort: a smaller buffer only costs throughput, never data.
#[expect(unsafe_code, reason = "setsockopt(2) has no safe std wrapper")]
fn set_socket_buffers(socket: &UdpSocket, bytes: usize) {
    use std::os::fd::AsRawFd;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        for name in [force, plain] {
            // SAFETY: the pointer and length describe `value`, live for the call.
            let rc = unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    name,
                    (&raw const value).cast(),
                    size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
    }
}

/// Turns on `IP_RECVERR`/`IPV6_RECVERR`: without it the kernel swallows
/// `ENOBUFS` from a full device queue (counting `SndbufErrors`) and the
/// datagram is gone; with it `send_to` reports the error and the driver
/// holds the datagram. ICMP errors then arrive too: [`is_transient`] errors
/// are not fatal, and [`drain_error_queue`] empties the queue they fill.
#[expect(unsafe_code, reason = "setsockopt(2) has no safe std wrapper")]
fn set_recverr(socket: &UdpSocket, v6: bool) {
    use std::os::fd::AsRawFd;
    let (level, name) = if v6 {
        (libc::IPPROTO_IPV6, libc::IPV6_RECVERR)
    } else {
        (libc::IPPROTO_IP, libc::IP_RECVERR)
    };
    let on: libc::c_int = 1;
    // SAFETY: the pointer and length describe `on`, live for the call.
    let _ = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// Empties the socket error queue (ICMP errors reported by `IP_RECVERR`):
/// its entries are charged to the receive buffer.
fn drain_error_queue(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    while crate::udp::read_error_queue_entry(socket.as_raw_fd()).is_some() {}
}

/// Errors a UDP socket reports for one datagram or from an ICMP message
/// (peer gone, route or MTU trouble): the core's timers deal with them.
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionRefused
    ) || matches!(
        e.raw_os_error(),
        Some(
            libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EHOSTDOWN
                | libc::ENETDOWN
                | libc::EMSGSIZE
                | libc::EPROTO
                | libc::ENOPROTOOPT
                | libc::EACCES
                | libc::EPERM
        )
    )
}

/// The driver loop: receive (bounded by the next timer), run timers, transmit.
fn run(s: &Shared) {
    let mut buf = vec![0u8; 65_536];
    let mut last_timeout: Option<Duration> = Some(MAX_IDLE);
    while !s.stop.load(Ordering::SeqCst) {
        let got = s.socket.recv_from(&mut buf);
        let mut g = s.lock();
        match got {
            Ok((n, from)) => {
                let now = s.clock.now();
                g.ep.handle_datagram(now, from, &buf[..n]);
                // Drain whatever else is already queued without blocking.
                let _ = s.socket.set_nonblocking(true);
                while let Ok((n, from)) = s.socket.recv_from(&mut buf) {
                    g.ep.handle_datagram(s.clock.now(), from, &buf[..n]);
                }
                let _ = s.socket.set_nonblocking(false);
                last_timeout = None;
                s.cond.notify_all();
            }
            Err(e) if is_transient(&e) => drain_error_queue(&s.socket),
            Err(e) => {
                g.io_error = Some((e.kind(), format!("recv_from: {e}")));
                s.cond.notify_all();
            }
        }
        let now = s.clock.now();
        if g.ep.poll_timeout().is_some_and(|t| t <= now) {
            g.ep.handle_timeout(now);
            s.cond.notify_all();
        }
        s.flush_out(&mut g);
        let mut wait = g.ep.poll_timeout().map_or(MAX_IDLE, |t| {
            t.saturating_duration_since(s.clock.now())
                .clamp(Duration::from_micros(100), MAX_IDLE)
        });
        if g.held.is_some() {
            // The device queue drains within microseconds: retry soon.
            wait = HELD_RETRY;
        }
        drop(g);
        if last_timeout != Some(wait) {
            let _ = s.socket.set_read_timeout(Some(wait));
            last_timeout = Some(wait);
        }
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
        self.driver.shared.socket.local_addr()
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
        self.driver.shared.socket.local_addr()
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

    /// Times the kernel's queue refused a segment, which was then held and
    /// sent again once it drained (never dropped).
    pub fn send_retries(&self) -> u64 {
        self.driver.shared.lock().send_retries
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
