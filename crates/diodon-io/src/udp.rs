//! Batched UDP on IPv4 and IPv6: socket setup ([`UdpConfig`], forced buffer
//! sizes with typed warnings, never-fragment, error queue), the sending side
//! ([`BatchSender`]: `sendmsg` + `UDP_SEGMENT` (GSO), `sendmmsg` fallback,
//! no-loss retry on `ENOBUFS`/`EAGAIN`) and the receiving side
//! ([`BatchReceiver`]: `recvmmsg` + `UDP_GRO` into preallocated slots, the
//! kernel's per-socket drop counter from `SO_RXQ_OVFL`).
//!
//! ```text
//!  core: buf = [d0|d1|d2|…|dN-1 (short)]   one segment_size per call (GSO contract)
//!          │
//!  BatchSender::send ── ≤64 segs, ≤64 KiB ──► sendmsg(UDP_SEGMENT=seg)   (GSO)
//!          │            or ≤64 datagrams ───► sendmmsg                    (fallback)
//!          │  ENOBUFS → sleep 50 µs, retry      EAGAIN → poll(POLLOUT), retry
//!          ▼
//!  ═══════ link ═══════
//!          ▼
//!  BatchReceiver::recv_batch ── recvmmsg(64 slots × 64 KiB, MSG_DONTWAIT) / ppoll
//!          │  slot: [super-packet] + cmsg UDP_GRO=seg  → split into datagrams
//!          │        + cmsg SO_RXQ_OVFL=cumulative drops → socket_drops()
//!          ▼
//!  RecvBatch iterator: Datagram { src, data }
//! ```
//!
//! The socket is non-blocking; waits happen in `ppoll`, so a receive thread
//! can check a stop flag between batches.
#![expect(
    unsafe_code,
    reason = "socket options, sendmsg/sendmmsg/recvmmsg and control messages have no safe std API"
)]

use std::ffi::c_int;
use std::io;
use std::mem::{self, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::time::Duration;

use crate::clock::MonotonicClock;

/// `UDP_SEGMENT` (linux/udp.h): per-call GSO segment size.
const UDP_SEGMENT: c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced super-packets.
const UDP_GRO: c_int = 104;
/// `SO_RXQ_OVFL` (asm-generic/socket.h).
const SO_RXQ_OVFL: c_int = 40;
/// `SO_SNDBUFFORCE` (asm-generic/socket.h).
const SO_SNDBUFFORCE: c_int = 32;
/// `SO_RCVBUFFORCE` (asm-generic/socket.h).
const SO_RCVBUFFORCE: c_int = 33;
/// `SO_MEMINFO` (asm-generic/socket.h).
const SO_MEMINFO: c_int = 55;
/// Number of `u32` in the `SO_MEMINFO` answer.
const SK_MEMINFO_VARS: usize = 9;

/// Most segments one GSO `sendmsg` carries (the kernel's `UDP_MAX_SEGMENTS`
/// is 64 on older kernels).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Datagrams per `sendmmsg` call on the fallback path.
pub const MAX_SEND_BATCH: usize = 64;
/// Most receive slots one `recvmmsg` call fills.
pub const MAX_RECV_SLOTS: usize = 128;
/// Largest UDP payload over IPv4 (65535 − 20 − 8).
pub const MAX_PAYLOAD_V4: usize = 65_507;
/// Largest UDP payload over IPv6 without jumbograms (65535 − 8).
pub const MAX_PAYLOAD_V6: usize = 65_527;

/// Control-message space per receive slot, in `u64` words (aligned): room
/// for `UDP_GRO` (int) and `SO_RXQ_OVFL` (u32), 24 bytes each, plus slack.
const RECV_CONTROL_WORDS: usize = 12;
/// How often (in `send` calls) the sender polls its error queue.
const ERRQUEUE_DRAIN_EVERY: u32 = 256;
/// Back-off after `ENOBUFS` (device/qdisc queue full).
const ENOBUFS_BACKOFF: Duration = Duration::from_micros(50);
/// Longest single wait for `POLLOUT` after `EAGAIN`.
const EAGAIN_WAIT: Duration = Duration::from_millis(10);

/// Socket configuration shared by [`BatchSender`] and [`BatchReceiver`].
///
/// Build with [`UdpConfig::new`] and set fields.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct UdpConfig {
    /// Local address to bind (port 0: any).
    pub bind: SocketAddr,
    /// Bind to this interface (`SO_BINDTODEVICE`).
    pub device: Option<String>,
    /// Requested receive buffer in bytes (forced with `SO_RCVBUFFORCE` when
    /// privileged, else capped by `net.core.rmem_max`).
    pub rcvbuf: Option<usize>,
    /// Requested send buffer in bytes (`SO_SNDBUFFORCE`, `net.core.wmem_max`).
    pub sndbuf: Option<usize>,
    /// Sender: use UDP GSO when the kernel supports it. `false` forces the
    /// `sendmmsg` path.
    pub gso: bool,
    /// Receiver: enable `UDP_GRO` (coalesced super-packets, split on receive).
    pub gro: bool,
    /// Receiver: `recvmmsg` slots per call (1..=[`MAX_RECV_SLOTS`]).
    pub recv_slots: usize,
    /// Receiver: bytes per slot; 65 536 holds any datagram or GRO super-packet.
    pub slot_size: usize,
    /// Sender: give up (with [`UdpError::SendStalled`]) when a datagram could
    /// not be handed to the kernel for this long.
    pub send_stall_timeout: Duration,
}

impl UdpConfig {
    /// Defaults: GSO and GRO on, 64 slots × 64 KiB, system buffer sizes,
    /// 5 s stall timeout.
    pub fn new(bind: SocketAddr) -> Self {
        UdpConfig {
            bind,
            device: None,
            rcvbuf: None,
            sndbuf: None,
            gso: true,
            gro: true,
            recv_slots: 64,
            slot_size: 65_536,
            send_stall_timeout: Duration::from_secs(5),
        }
    }
}

/// Which socket buffer a [`SetupWarning::BufferCapped`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BufferKind {
    /// `SO_RCVBUF`, limited by `net.core.rmem_max`.
    Receive,
    /// `SO_SNDBUF`, limited by `net.core.wmem_max`.
    Send,
}

impl BufferKind {
    /// The sysctl that caps this buffer for unprivileged sockets.
    pub fn sysctl_key(self) -> &'static str {
        match self {
            BufferKind::Receive => "net.core.rmem_max",
            BufferKind::Send => "net.core.wmem_max",
        }
    }
}

impl std::fmt::Display for BufferKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BufferKind::Receive => "receive",
            BufferKind::Send => "send",
        })
    }
}

/// Something that did not go as configured but does not stop the socket
/// from working. Report these to the operator.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupWarning {
    /// The kernel gave a smaller buffer than requested.
    #[error(
        "{kind} buffer is {effective} bytes, {requested} requested: run `{command}` \
         (or give the process CAP_NET_ADMIN)"
    )]
    BufferCapped {
        /// Which buffer.
        kind: BufferKind,
        /// What was asked for.
        requested: usize,
        /// What the kernel granted (half the `getsockopt` value, comparable to
        /// `requested`).
        effective: usize,
        /// The exact command that lifts the cap, e.g.
        /// `sysctl -w net.core.rmem_max=16777216`.
        command: String,
    },
    /// An optional socket option was refused.
    #[error("{option} unavailable: {reason}")]
    OptionUnavailable {
        /// The option, e.g. `UDP_GRO`.
        option: &'static str,
        /// The OS error text.
        reason: String,
    },
    /// The first GSO send failed; the sender uses `sendmmsg` from now on.
    #[error("UDP GSO unavailable ({reason}); falling back to sendmmsg")]
    GsoUnavailable {
        /// The OS error text.
        reason: String,
    },
}

/// What a socket ended up with after setup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketSetup {
    /// The bound local address.
    pub local: SocketAddr,
    /// Effective receive buffer (half of what `getsockopt(SO_RCVBUF)` says,
    /// the kernel doubles the request for bookkeeping overhead).
    pub rcvbuf: usize,
    /// Effective send buffer (half of `getsockopt(SO_SNDBUF)`).
    pub sndbuf: usize,
    /// `UDP_GRO` is on.
    pub gro: bool,
    /// `SO_RXQ_OVFL` is on (drop counter in every received batch).
    pub rxq_ovfl: bool,
    /// `IP_RECVERR`/`IPV6_RECVERR` is on (errors are reported, not swallowed).
    pub recverr: bool,
    /// Everything that did not go as configured.
    pub warnings: Vec<SetupWarning>,
}

/// Errors from socket setup and batched IO.
#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    /// A system call during setup failed.
    #[error("{op} failed: {source}")]
    Sys {
        /// The call or option, e.g. `socket`, `IP_MTU_DISCOVER`.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `bind` failed.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `SO_BINDTODEVICE` failed.
    #[error("cannot bind to device {device}: {source}")]
    Device {
        /// The interface name.
        device: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The configuration is unusable.
    #[error("invalid UDP configuration: {0}")]
    Config(String),
    /// `segment_size` is 0 or larger than a UDP payload can be.
    #[error("segment size {segment_size} out of range 1..={max}")]
    SegmentSize {
        /// The requested segment size.
        segment_size: usize,
        /// The largest UDP payload for this address family.
        max: usize,
    },
    /// An IPv6 destination for an IPv4 socket.
    #[error("destination {dest} is not reachable from an IPv4 socket")]
    AddressFamily {
        /// The destination.
        dest: SocketAddr,
    },
    /// The kernel refused a datagram (e.g. `EMSGSIZE`: larger than the path
    /// MTU, `EPERM`: a firewall dropped it on output). Datagrams before it in
    /// the buffer were sent; `sent` says how many.
    #[error("send to {dest} failed after {sent} datagrams: {source}")]
    Send {
        /// The destination.
        dest: SocketAddr,
        /// Datagrams of this call that were handed to the kernel.
        sent: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The kernel did not accept a datagram for
    /// [`UdpConfig::send_stall_timeout`].
    #[error("send to {dest} stalled for {waited:?} after {sent} datagrams")]
    SendStalled {
        /// The destination.
        dest: SocketAddr,
        /// Datagrams of this call that were handed to the kernel.
        sent: u64,
        /// How long the sender waited.
        waited: Duration,
    },
    /// `recvmmsg` failed.
    #[error("recvmmsg failed: {0}")]
    Recv(#[source] io::Error),
    /// `ppoll` failed.
    #[error("ppoll failed: {0}")]
    Poll(#[source] io::Error),
}

// ---------------------------------------------------------------------------
// Socket setup
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Sender,
    Receiver,
}

fn open_socket(cfg: &UdpConfig, role: Role) -> Result<(OwnedFd, SocketSetup), UdpError> {
    let v6 = cfg.bind.is_ipv6();
    let domain = if v6 { libc::AF_INET6 } else { libc::AF_INET };
    // SAFETY: plain system call with constant arguments; returns a new fd or -1.
    let raw = unsafe {
        libc::socket(
            domain,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            libc::IPPROTO_UDP,
        )
    };
    if raw < 0 {
        return Err(sys("socket"));
    }
    // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let raw = fd.as_raw_fd();
    let mut warnings = Vec::new();

    if let Some(device) = &cfg.device {
        set_bytes(
            raw,
            libc::SOL_SOCKET,
            libc::SO_BINDTODEVICE,
            device.as_bytes(),
        )
        .map_err(|source| UdpError::Device {
            device: device.clone(),
            source,
        })?;
    }

    set_never_fragment(raw, v6)?;

    let rcvbuf = size_buffer(raw, BufferKind::Receive, cfg.rcvbuf, &mut warnings)?;
    let sndbuf = size_buffer(raw, BufferKind::Send, cfg.sndbuf, &mut warnings)?;

    let mut optional = |level, name, option: &'static str| match set_int(raw, level, name, 1) {
        Ok(()) => true,
        Err(e) => {
            warnings.push(SetupWarning::OptionUnavailable {
                option,
                reason: e.to_string(),
            });
            false
        }
    };
    let (mut gro, mut rxq_ovfl, mut recverr) = (false, false, false);
    match role {
        Role::Receiver => {
            rxq_ovfl = optional(libc::SOL_SOCKET, SO_RXQ_OVFL, "SO_RXQ_OVFL");
            if cfg.gro {
                gro = optional(libc::SOL_UDP, UDP_GRO, "UDP_GRO");
            }
        }
        Role::Sender => {
            recverr = if v6 {
                optional(libc::IPPROTO_IPV6, libc::IPV6_RECVERR, "IPV6_RECVERR")
            } else {
                optional(libc::IPPROTO_IP, libc::IP_RECVERR, "IP_RECVERR")
            };
        }
    }

    let addr = RawAddr::new(cfg.bind);
    // SAFETY: `addr` points at a valid sockaddr of `addr.len()` bytes.
    let rc = unsafe { libc::bind(raw, addr.as_ptr(), addr.len()) };
    if rc != 0 {
        return Err(UdpError::Bind {
            addr: cfg.bind,
            source: io::Error::last_os_error(),
        });
    }
    let local = local_addr(raw)?;
    Ok((
        fd,
        SocketSetup {
            local,
            rcvbuf,
            sndbuf,
            gro,
            rxq_ovfl,
            recverr,
            warnings,
        },
    ))
}

/// Never fragment (DESIGN principle 5): DF set, oversize sends fail with
/// `EMSGSIZE` instead of leaving as IP fragments.
fn set_never_fragment(raw: RawFd, v6: bool) -> Result<(), UdpError> {
    if v6 {
        set_int(
            raw,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
        .map_err(|source| UdpError::Sys {
            op: "IPV6_MTU_DISCOVER",
            source,
        })?;
        set_int(raw, libc::IPPROTO_IPV6, libc::IPV6_DONTFRAG, 1).map_err(|source| {
            UdpError::Sys {
                op: "IPV6_DONTFRAG",
                source,
            }
        })?;
        // v4-mapped traffic on a dual-stack socket; best effort.
        let _ = set_int(
            raw,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        );
    } else {
        set_int(
            raw,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
        .map_err(|source| UdpError::Sys {
            op: "IP_MTU_DISCOVER",
            source,
        })?;
    }
    Ok(())
}

/// Sets one socket buffer: `*BUFFORCE` first (ignores the sysctl cap when
/// privileged), plain `SO_*BUF` otherwise; returns the effective size.
fn size_buffer(
    fd: RawFd,
    kind: BufferKind,
    requested: Option<usize>,
    warnings: &mut Vec<SetupWarning>,
) -> Result<usize, UdpError> {
    let (plain, force, op) = match kind {
        BufferKind::Receive => (libc::SO_RCVBUF, SO_RCVBUFFORCE, "SO_RCVBUF"),
        BufferKind::Send => (libc::SO_SNDBUF, SO_SNDBUFFORCE, "SO_SNDBUF"),
    };
    if let Some(requested) = requested {
        // The kernel doubles the value into an int: keep it below INT_MAX / 2.
        let value = c_int::try_from(requested.min(i32::MAX as usize / 2)).unwrap_or(c_int::MAX);
        if set_int(fd, libc::SOL_SOCKET, force, value).is_err() {
            set_int(fd, libc::SOL_SOCKET, plain, value)
                .map_err(|source| UdpError::Sys { op, source })?;
        }
    }
    let kernel =
        get_int(fd, libc::SOL_SOCKET, plain).map_err(|source| UdpError::Sys { op, source })?;
    let effective = usize::try_from(kernel).unwrap_or(0) / 2;
    if let Some(requested) = requested {
        if effective < requested.min(i32::MAX as usize / 2) {
            warnings.push(SetupWarning::BufferCapped {
                kind,
                requested,
                effective,
                command: format!("sysctl -w {}={requested}", kind.sysctl_key()),
            });
        }
    }
    Ok(effective)
}

fn sys(op: &'static str) -> UdpError {
    UdpError::Sys {
        op,
        source: io::Error::last_os_error(),
    }
}

fn set_int(fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
    // SAFETY: the pointer and length describe `value`, live for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_bytes(fd: RawFd, level: c_int, name: c_int, value: &[u8]) -> io::Result<()> {
    let len = libc::socklen_t::try_from(value.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the pointer and length describe `value`, live for the call.
    let rc = unsafe { libc::setsockopt(fd, level, name, value.as_ptr().cast(), len) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int(fd: RawFd, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut value: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `value`.
    let rc = unsafe { libc::getsockopt(fd, level, name, (&raw mut value).cast(), &raw mut len) };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn local_addr(fd: RawFd) -> Result<SocketAddr, UdpError> {
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `storage`.
    let rc = unsafe { libc::getsockname(fd, (&raw mut storage).cast(), &raw mut len) };
    if rc != 0 {
        return Err(sys("getsockname"));
    }
    from_storage(&storage, len).ok_or_else(|| UdpError::Sys {
        op: "getsockname",
        source: io::Error::from(io::ErrorKind::InvalidData),
    })
}

/// Waits until `fd` is ready for `events` or `timeout` passes (`None`:
/// forever). Returns whether it is ready.
fn wait_for(fd: RawFd, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(t.subsec_nanos()),
    });
    let ts_ptr = ts.as_ref().map_or(ptr::null(), ptr::from_ref);
    loop {
        // SAFETY: one valid pollfd; `ts_ptr` is null or points at `ts`.
        let rc = unsafe { libc::ppoll(&raw mut pfd, 1, ts_ptr, ptr::null()) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

// ---------------------------------------------------------------------------
// Addresses
// ---------------------------------------------------------------------------

/// A `SocketAddr` in the kernel's layout.
enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawAddr {
    fn new(addr: SocketAddr) -> Self {
        match addr {
            SocketAddr::V4(a) => RawAddr::V4(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            }),
            SocketAddr::V6(a) => RawAddr::V6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            }),
        }
    }

    fn as_ptr(&self) -> *const libc::sockaddr {
        match self {
            RawAddr::V4(a) => ptr::from_ref(a).cast(),
            RawAddr::V6(a) => ptr::from_ref(a).cast(),
        }
    }

    fn len(&self) -> libc::socklen_t {
        (match self {
            RawAddr::V4(_) => size_of::<libc::sockaddr_in>(),
            RawAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
        }) as libc::socklen_t
    }
}

fn from_storage(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match c_int::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is large and aligned enough for it.
            let a: libc::sockaddr_in = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { ptr::read(ptr::from_ref(storage).cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Sender
// ---------------------------------------------------------------------------

/// What one [`BatchSender::send`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Datagrams handed to the kernel.
    pub datagrams: u64,
    /// Payload bytes handed to the kernel.
    pub bytes: u64,
    /// Times a datagram was retried after `ENOBUFS`/`EAGAIN`/an async error.
    pub retries: u64,
}

diodon_counters::counters! {
    /// Cumulative counters of a batched sending socket. Exported as
    /// `diodon_sender_socket_*`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SenderCounters in Diodon "sender_socket" {
        datagrams: counter Count "datagrams" "Datagrams handed to the kernel.",
        bytes: counter Bytes "payload" "Payload bytes handed to the kernel.",
        gso_calls: counter Count "gso_calls" "Successful sendmsg calls carrying a GSO super-packet.",
        sendmmsg_calls: counter Count "sendmmsg_calls" "Successful sendmmsg calls.",
        /// The kernel would otherwise have dropped the datagram and counted
        /// `SndbufErrors`.
        enobufs_retries: counter Count "enobufs_retries" "Sends retried after ENOBUFS (device or qdisc queue full).",
        eagain_retries: counter Count "eagain_retries" "Sends retried after EAGAIN (socket send buffer full).",
        async_error_retries: counter Count "async_error_retries" "Sends retried after an error that belonged to an earlier datagram (ICMP with IP_RECVERR).",
        error_queue: counter Count "error_queue" "Entries read from the socket error queue (MSG_ERRQUEUE).",
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GsoState {
    Untested,
    Works,
    Off,
}

/// Sends buffers of back-to-back datagrams with as few system calls as the
/// kernel allows, and never drops one on a full queue.
#[derive(Debug)]
pub struct BatchSender {
    fd: OwnedFd,
    setup: SocketSetup,
    gso: GsoState,
    counters: SenderCounters,
    stall_timeout: Duration,
    calls_since_drain: u32,
    last_queued_errno: Option<i32>,
}

impl BatchSender {
    /// Opens and binds a sending socket.
    pub fn open(cfg: &UdpConfig) -> Result<Self, UdpError> {
        let (fd, setup) = open_socket(cfg, Role::Sender)?;
        Ok(BatchSender {
            fd,
            setup,
            gso: if cfg.gso {
                GsoState::Untested
            } else {
                GsoState::Off
            },
            counters: SenderCounters::default(),
            stall_timeout: cfg.send_stall_timeout,
            calls_since_drain: 0,
            last_queued_errno: None,
        })
    }

    /// What setup achieved (buffer sizes, warnings; a GSO fallback adds one).
    pub fn setup(&self) -> &SocketSetup {
        &self.setup
    }

    /// The bound local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.setup.local
    }

    /// Whether sends currently use GSO (`true` until a probe fails).
    pub fn gso_enabled(&self) -> bool {
        self.gso != GsoState::Off
    }

    /// Cumulative counters.
    pub fn counters(&self) -> SenderCounters {
        self.counters
    }

    /// The errno of the last error-queue entry, if any was read.
    pub fn last_queued_error(&self) -> Option<io::Error> {
        self.last_queued_errno.map(io::Error::from_raw_os_error)
    }

    /// The largest datagram payload this socket's family allows.
    pub fn max_payload(&self) -> usize {
        if self.setup.local.is_ipv6() {
            MAX_PAYLOAD_V6
        } else {
            MAX_PAYLOAD_V4
        }
    }

    /// Sends `buf` as datagrams of `segment_size` bytes (the last may be
    /// shorter) to `dest`.
    ///
    /// Uses GSO (≤ [`MAX_GSO_SEGMENTS`] segments and ≤ 64 KiB per call) when
    /// available, else `sendmmsg`. A full queue is waited out, never turned
    /// into a drop; an error returns with [`UdpError::Send`] telling how many
    /// datagrams of `buf` went out before it.
    pub fn send(
        &mut self,
        dest: SocketAddr,
        buf: &[u8],
        segment_size: usize,
    ) -> Result<SendReport, UdpError> {
        let mut report = SendReport::default();
        let max = self.max_payload();
        if segment_size == 0 || segment_size > max {
            return Err(UdpError::SegmentSize { segment_size, max });
        }
        let dest = match (dest, self.setup.local.is_ipv6()) {
            (SocketAddr::V6(_), false) => return Err(UdpError::AddressFamily { dest }),
            (SocketAddr::V4(a), true) => {
                SocketAddr::V6(SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0))
            }
            (d, _) => d,
        };
        if buf.is_empty() {
            return Ok(report);
        }
        self.calls_since_drain += 1;
        if self.calls_since_drain >= ERRQUEUE_DRAIN_EVERY {
            self.drain_error_queue();
        }
        let addr = RawAddr::new(dest);
        let mut rest = buf;
        if self.gso != GsoState::Off {
            let per_call = (max / segment_size).clamp(1, MAX_GSO_SEGMENTS) * segment_size;
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(rest.len().min(per_call));
                match self.send_gso(&addr, dest, chunk, segment_size, &mut report) {
                    Ok(()) => rest = tail,
                    Err(None) => break, // GSO unsupported: the fallback sends `rest`
                    Err(Some(e)) => return Err(e),
                }
            }
        }
        if !rest.is_empty() {
            self.send_mmsg(&addr, dest, rest, segment_size, &mut report)?;
        }
        Ok(report)
    }

    /// One GSO super-packet. `Err(None)`: the probe failed, GSO is now off.
    fn send_gso(
        &mut self,
        addr: &RawAddr,
        dest: SocketAddr,
        chunk: &[u8],
        segment_size: usize,
        report: &mut SendReport,
    ) -> Result<(), Option<UdpError>> {
        let fd = self.fd.as_raw_fd();
        let seg = u16::try_from(segment_size).unwrap_or(u16::MAX);
        let result = self.retrying(dest, report, || gso_sendmsg(fd, addr, chunk, seg));
        match result {
            Ok(_) => {
                self.gso = GsoState::Works;
                let n = chunk.len().div_ceil(segment_size) as u64;
                self.account(report, n, chunk.len() as u64);
                self.counters.gso_calls += 1;
                Ok(())
            }
            Err(UdpError::Send { source, .. })
                if self.gso == GsoState::Untested
                    && matches!(
                        source.raw_os_error(),
                        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
                    ) =>
            {
                self.gso = GsoState::Off;
                self.setup.warnings.push(SetupWarning::GsoUnavailable {
                    reason: source.to_string(),
                });
                Err(None)
            }
            Err(e) => Err(Some(Self::with_sent(e, report))),
        }
    }

    fn send_mmsg(
        &mut self,
        addr: &RawAddr,
        dest: SocketAddr,
        buf: &[u8],
        segment_size: usize,
        report: &mut SendReport,
    ) -> Result<(), UdpError> {
        let fd = self.fd.as_raw_fd();
        for group in buf.chunks(segment_size * MAX_SEND_BATCH) {
            // SAFETY: iovec and mmsghdr are plain C structs; all-zero (null
            // pointers, zero lengths) is a valid value.
            let mut iov: [libc::iovec; MAX_SEND_BATCH] = unsafe { mem::zeroed() };
            // SAFETY: as above.
            let mut hdrs: [libc::mmsghdr; MAX_SEND_BATCH] = unsafe { mem::zeroed() };
            let mut lens = [0usize; MAX_SEND_BATCH];
            let mut n = 0;
            for (i, d) in group.chunks(segment_size).enumerate() {
                iov[i] = libc::iovec {
                    iov_base: d.as_ptr().cast_mut().cast(),
                    iov_len: d.len(),
                };
                lens[i] = d.len();
                let h = &mut hdrs[i].msg_hdr;
                h.msg_name = addr.as_ptr().cast_mut().cast();
                h.msg_namelen = addr.len();
                h.msg_iov = &raw mut iov[i];
                h.msg_iovlen = 1;
                n = i + 1;
            }
            let mut done = 0;
            while done < n {
                let pending = &mut hdrs[done..n];
                let sent = self
                    .retrying(dest, report, || sendmmsg(fd, pending))
                    .map_err(|e| Self::with_sent(e, report))?;
                let bytes: usize = lens[done..done + sent].iter().sum();
                self.account(report, sent as u64, bytes as u64);
                self.counters.sendmmsg_calls += 1;
                done += sent;
            }
        }
        Ok(())
    }

    fn account(&mut self, report: &mut SendReport, datagrams: u64, bytes: u64) {
        report.datagrams += datagrams;
        report.bytes += bytes;
        self.counters.datagrams += datagrams;
        self.counters.bytes += bytes;
    }

    fn with_sent(e: UdpError, report: &SendReport) -> UdpError {
        match e {
            UdpError::Send { dest, source, .. } => UdpError::Send {
                dest,
                sent: report.datagrams,
                source,
            },
            UdpError::SendStalled { dest, waited, .. } => UdpError::SendStalled {
                dest,
                sent: report.datagrams,
                waited,
            },
            other => other,
        }
    }

    /// Runs `op` until the kernel accepts (a return > 0), waiting out full
    /// queues and skipping errors that belong to earlier datagrams.
    fn retrying(
        &mut self,
        dest: SocketAddr,
        report: &mut SendReport,
        mut op: impl FnMut() -> io::Result<usize>,
    ) -> Result<usize, UdpError> {
        let mut stall: Option<(MonotonicClock, Duration)> = None;
        loop {
            let err = match op() {
                Ok(n) => return Ok(n),
                Err(e) => e,
            };
            match err.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    self.counters.eagain_retries += 1;
                    report.retries += 1;
                    wait_for(self.fd.as_raw_fd(), libc::POLLOUT, Some(EAGAIN_WAIT))
                        .map_err(UdpError::Poll)?;
                }
                Some(libc::ENOBUFS) => {
                    self.counters.enobufs_retries += 1;
                    report.retries += 1;
                    std::thread::sleep(ENOBUFS_BACKOFF);
                }
                Some(
                    libc::ECONNREFUSED
                    | libc::EHOSTUNREACH
                    | libc::ENETUNREACH
                    | libc::EHOSTDOWN
                    | libc::EPROTO,
                ) if self.drain_error_queue() > 0 => {
                    // The error was an earlier datagram's ICMP report; this
                    // one was not sent yet.
                    self.counters.async_error_retries += 1;
                    report.retries += 1;
                }
                _ => {
                    self.drain_error_queue();
                    return Err(UdpError::Send {
                        dest,
                        sent: 0,
                        source: err,
                    });
                }
            }
            let (clock, timeout) =
                *stall.get_or_insert_with(|| (MonotonicClock::new(), self.stall_timeout));
            let waited = clock.elapsed_since(diodon_sansio::Timestamp::ZERO);
            if waited > timeout {
                return Err(UdpError::SendStalled {
                    dest,
                    sent: 0,
                    waited,
                });
            }
        }
    }

    /// Reads and counts every entry of the socket error queue; returns how
    /// many there were.
    pub fn drain_error_queue(&mut self) -> u64 {
        self.calls_since_drain = 0;
        let fd = self.fd.as_raw_fd();
        let mut drained = 0;
        while let Some(entry) = read_error_queue_entry(fd) {
            drained += 1;
            if entry.errno.is_some() {
                self.last_queued_errno = entry.errno;
            }
        }
        self.counters.error_queue += drained;
        drained
    }
}

/// One entry read from a socket error queue.
pub(crate) struct ErrorQueueEntry {
    /// The extended error's errno, if the entry carried one.
    pub errno: Option<i32>,
}

/// Reads one entry of `fd`'s socket error queue (`MSG_ERRQUEUE`, filled by
/// `IP_RECVERR`/`IPV6_RECVERR`); `None` when the queue is empty.
pub(crate) fn read_error_queue_entry(fd: RawFd) -> Option<ErrorQueueEntry> {
    let mut data = [0u8; 64];
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes live local buffers of the stated sizes.
    let rc = unsafe { libc::recvmsg(fd, &raw mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if rc < 0 {
        return None;
    }
    let mut errno = None;
    // SAFETY: the kernel filled `control` with `msg_controllen` bytes
    // of well-formed control messages; we read within each one.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            let level = (*cmsg).cmsg_level;
            let ty = (*cmsg).cmsg_type;
            let fits = (*cmsg).cmsg_len as usize
                >= libc::CMSG_LEN(size_of::<libc::sock_extended_err>() as u32) as usize;
            if fits
                && ((level == libc::IPPROTO_IP && ty == libc::IP_RECVERR)
                    || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_RECVERR))
            {
                let ee: libc::sock_extended_err = ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                errno = i32::try_from(ee.ee_errno).ok();
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Some(ErrorQueueEntry { errno })
}

fn gso_sendmsg(fd: RawFd, addr: &RawAddr, chunk: &[u8], segment_size: u16) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: chunk.as_ptr().cast_mut().cast(),
        iov_len: chunk.len(),
    };
    let mut control = [0u64; 4]; // 32 bytes ≥ CMSG_SPACE(2) = 24, 8-aligned
                                 // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = addr.as_ptr().cast_mut().cast();
    msg.msg_namelen = addr.len();
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE/CMSG_LEN are pure arithmetic; CMSG_FIRSTHDR returns
    // the start of `control`, which holds a full header plus a u16 (24 bytes
    // of 32); CMSG_DATA points inside it.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment_size);
    }
    // SAFETY: `msg` and everything it points to are live for the call.
    let rc = unsafe { libc::sendmsg(fd, &raw const msg, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

fn sendmmsg(fd: RawFd, hdrs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    let n = u32::try_from(hdrs.len()).unwrap_or(u32::MAX);
    // SAFETY: `hdrs` are initialised headers whose pointers (address, iovec,
    // payload) are live for the call; the kernel writes only `msg_len`.
    let rc = unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n, 0) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

// ---------------------------------------------------------------------------
// Receiver
// ---------------------------------------------------------------------------

diodon_counters::counters! {
    /// Cumulative counters of a batched receiving socket.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct ReceiverCounters in Diodon "receiver_socket" {
        datagrams: counter Count "datagrams" "Datagrams read from the socket (after GRO splitting).",
        bytes: counter Bytes "payload" "Payload bytes read from the socket.",
        batches: counter Count "batches" "recvmmsg calls that returned at least one message.",
        gro_packets: counter Count "gro_packets" "Messages that were GRO super-packets (more than one datagram).",
        truncated: counter Count "truncated" "Messages larger than a slot (MSG_TRUNC): not delivered, counted here.",
        control_truncated: counter Count "control_truncated" "Messages whose control data did not fit (MSG_CTRUNC).",
        socket_drops: counter Count "drops" "Datagrams the kernel dropped on this socket because its buffer was full (SO_RXQ_OVFL).",
    }
}

#[derive(Clone, Copy, Debug)]
struct SlotMeta {
    slot: usize,
    src: SocketAddr,
    len: usize,
    /// GRO segment size; 0 when the slot holds a single datagram.
    segment: usize,
}

/// Drains a socket with `recvmmsg` into preallocated slots.
///
/// Run it on a thread that does nothing else (DESIGN principle 4) and hand
/// the datagrams on; a [`RecvBatch`] borrows the slots until the next call.
pub struct BatchReceiver {
    fd: OwnedFd,
    setup: SocketSetup,
    slots: usize,
    slot_size: usize,
    buf: Vec<u8>,
    names: Vec<libc::sockaddr_storage>,
    control: Vec<u64>,
    meta: Vec<SlotMeta>,
    counters: ReceiverCounters,
    last_ovfl: Option<u32>,
}

impl std::fmt::Debug for BatchReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchReceiver")
            .field("fd", &self.fd)
            .field("setup", &self.setup)
            .field("slots", &self.slots)
            .field("slot_size", &self.slot_size)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl BatchReceiver {
    /// Opens and binds a receiving socket and allocates its slots.
    pub fn open(cfg: &UdpConfig) -> Result<Self, UdpError> {
        if cfg.recv_slots == 0 || cfg.recv_slots > MAX_RECV_SLOTS {
            return Err(UdpError::Config(format!(
                "recv_slots {} out of range 1..={MAX_RECV_SLOTS}",
                cfg.recv_slots
            )));
        }
        if cfg.slot_size == 0 || cfg.slot_size > 1 << 20 {
            return Err(UdpError::Config(format!(
                "slot_size {} out of range 1..=1048576",
                cfg.slot_size
            )));
        }
        let (fd, setup) = open_socket(cfg, Role::Receiver)?;
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
        let empty: libc::sockaddr_storage = unsafe { mem::zeroed() };
        Ok(BatchReceiver {
            fd,
            setup,
            slots: cfg.recv_slots,
            slot_size: cfg.slot_size,
            buf: vec![0; cfg.recv_slots * cfg.slot_size],
            names: vec![empty; cfg.recv_slots],
            control: vec![0; cfg.recv_slots * RECV_CONTROL_WORDS],
            meta: Vec::with_capacity(cfg.recv_slots),
            counters: ReceiverCounters::default(),
            last_ovfl: None,
        })
    }

    /// What setup achieved.
    pub fn setup(&self) -> &SocketSetup {
        &self.setup
    }

    /// The bound local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.setup.local
    }

    /// Cumulative counters.
    pub fn counters(&self) -> ReceiverCounters {
        self.counters
    }

    /// The kernel's cumulative count of datagrams dropped on this socket, as
    /// last reported by `SO_RXQ_OVFL` (it rides on received datagrams, so
    /// drops show up with the next datagram that gets through).
    pub fn socket_drops(&self) -> u64 {
        self.counters.socket_drops
    }

    /// The kernel's drop count for this socket right now (`SO_MEMINFO`),
    /// independent of traffic.
    pub fn socket_drops_now(&self) -> Result<u64, UdpError> {
        let mut info = [0u32; SK_MEMINFO_VARS];
        let mut len = mem::size_of_val(&info) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes into `info`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_MEMINFO,
                info.as_mut_ptr().cast(),
                &raw mut len,
            )
        };
        if rc != 0 {
            return Err(sys("SO_MEMINFO"));
        }
        Ok(u64::from(info[libc::SK_MEMINFO_DROPS as usize]))
    }

    /// Receives what is queued, waiting up to `timeout` (`None`: until
    /// something arrives; `Some(ZERO)`: don't wait) if nothing is.
    ///
    /// An empty batch means the timeout passed.
    pub fn recv_batch(&mut self, timeout: Option<Duration>) -> Result<RecvBatch<'_>, UdpError> {
        let mut n = self.recv_now()?;
        while n == 0 && timeout != Some(Duration::ZERO) {
            let ready =
                wait_for(self.fd.as_raw_fd(), libc::POLLIN, timeout).map_err(UdpError::Poll)?;
            n = self.recv_now()?;
            if !ready || timeout.is_some() {
                break;
            }
        }
        let datagrams = self
            .meta
            .iter()
            .map(|m| {
                if m.segment == 0 {
                    1
                } else {
                    m.len.div_ceil(m.segment).max(1)
                }
            })
            .sum();
        let bytes = self.meta.iter().map(|m| m.len).sum();
        Ok(RecvBatch {
            buf: &self.buf,
            slot_size: self.slot_size,
            meta: &self.meta,
            datagrams,
            bytes,
        })
    }

    /// One non-blocking `recvmmsg`; fills `self.meta`; returns messages read.
    fn recv_now(&mut self) -> Result<usize, UdpError> {
        self.meta.clear();
        // SAFETY: iovec and mmsghdr are plain C structs; all-zero is valid.
        let mut iov: [libc::iovec; MAX_RECV_SLOTS] = unsafe { mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; MAX_RECV_SLOTS] = unsafe { mem::zeroed() };
        let base = self.buf.as_mut_ptr();
        let names = self.names.as_mut_ptr();
        let control = self.control.as_mut_ptr();
        for i in 0..self.slots {
            // SAFETY: `i < slots`, and `buf`, `names` and `control` hold
            // `slots` slots of the sizes used here.
            unsafe {
                iov[i] = libc::iovec {
                    iov_base: base.add(i * self.slot_size).cast(),
                    iov_len: self.slot_size,
                };
                let h = &mut hdrs[i].msg_hdr;
                h.msg_name = names.add(i).cast();
                h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_iov = &raw mut iov[i];
                h.msg_iovlen = 1;
                h.msg_control = control.add(i * RECV_CONTROL_WORDS).cast();
                h.msg_controllen = (RECV_CONTROL_WORDS * size_of::<u64>()) as _;
            }
        }
        let n = loop {
            // SAFETY: `hdrs[..slots]` describe live, writable buffers owned by
            // `self` (not reallocated during the call).
            let rc = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    self.slots as u32,
                    libc::MSG_DONTWAIT,
                    ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EAGAIN) => return Ok(0),
                _ => return Err(UdpError::Recv(err)),
            }
        };
        if n > 0 {
            self.counters.batches += 1;
        }
        for (slot, h) in hdrs.iter().enumerate().take(n) {
            let len = h.msg_len as usize;
            let flags = h.msg_hdr.msg_flags;
            let (segment, drops) = parse_recv_cmsgs(&h.msg_hdr);
            if let Some(d) = drops {
                self.note_drops(d);
            }
            if flags & libc::MSG_CTRUNC != 0 {
                self.counters.control_truncated += 1;
            }
            if flags & libc::MSG_TRUNC != 0 {
                self.counters.truncated += 1;
                continue;
            }
            let src = from_storage(&self.names[slot], h.msg_hdr.msg_namelen)
                .unwrap_or(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)));
            let segment = match segment {
                Some(s) if s > 0 && s < len => s,
                _ => 0,
            };
            let datagrams = if segment == 0 {
                1
            } else {
                self.counters.gro_packets += 1;
                len.div_ceil(segment) as u64
            };
            self.counters.datagrams += datagrams;
            self.counters.bytes += len as u64;
            self.meta.push(SlotMeta {
                slot,
                src,
                len,
                segment,
            });
        }
        Ok(n)
    }

    /// `SO_RXQ_OVFL` carries the socket's cumulative drop count (u32, wraps)
    /// at the time the datagram was queued.
    fn note_drops(&mut self, value: u32) {
        match self.last_ovfl {
            None => {
                self.counters.socket_drops = u64::from(value);
                self.last_ovfl = Some(value);
            }
            Some(last) => {
                let delta = value.wrapping_sub(last);
                if delta > 0 && delta < 1 << 31 {
                    self.counters.socket_drops += u64::from(delta);
                    self.last_ovfl = Some(value);
                }
            }
        }
    }
}

/// Reads `UDP_GRO` (segment size) and `SO_RXQ_OVFL` (drops) from one
/// received message's control data.
fn parse_recv_cmsgs(hdr: &libc::msghdr) -> (Option<usize>, Option<u32>) {
    let (mut segment, mut drops) = (None, None);
    // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control
    // messages into our buffer; CMSG_NXTHDR stays within it, and each read is
    // guarded by the message's own length.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            let level = (*cmsg).cmsg_level;
            let ty = (*cmsg).cmsg_type;
            let len = (*cmsg).cmsg_len as usize;
            let data = libc::CMSG_DATA(cmsg);
            if len >= libc::CMSG_LEN(4) as usize {
                if level == libc::SOL_UDP && ty == UDP_GRO {
                    let s: c_int = ptr::read_unaligned(data.cast());
                    segment = usize::try_from(s).ok();
                } else if level == libc::SOL_SOCKET && ty == SO_RXQ_OVFL {
                    drops = Some(ptr::read_unaligned(data.cast::<u32>()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    (segment, drops)
}

/// The datagrams of one [`BatchReceiver::recv_batch`] call, borrowed from the
/// receiver's slots.
#[derive(Clone, Copy, Debug)]
pub struct RecvBatch<'a> {
    buf: &'a [u8],
    slot_size: usize,
    meta: &'a [SlotMeta],
    datagrams: usize,
    bytes: usize,
}

impl<'a> RecvBatch<'a> {
    /// Number of datagrams (GRO super-packets count as their parts).
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Whether nothing was received.
    pub fn is_empty(&self) -> bool {
        self.datagrams == 0
    }

    /// Payload bytes in the batch.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The datagrams, in arrival order.
    pub fn iter(&self) -> Datagrams<'a> {
        Datagrams {
            buf: self.buf,
            slot_size: self.slot_size,
            meta: self.meta.iter(),
            current: None,
        }
    }
}

impl<'a> IntoIterator for RecvBatch<'a> {
    type Item = Datagram<'a>;
    type IntoIter = Datagrams<'a>;
    fn into_iter(self) -> Datagrams<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &RecvBatch<'a> {
    type Item = Datagram<'a>;
    type IntoIter = Datagrams<'a>;
    fn into_iter(self) -> Datagrams<'a> {
        self.iter()
    }
}

/// One received datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Who sent it.
    pub src: SocketAddr,
    /// The payload.
    pub data: &'a [u8],
}

/// Iterator over a [`RecvBatch`], splitting GRO super-packets.
#[derive(Clone, Debug)]
pub struct Datagrams<'a> {
    buf: &'a [u8],
    slot_size: usize,
    meta: std::slice::Iter<'a, SlotMeta>,
    /// The rest of the current super-packet and its segment size.
    current: Option<(SocketAddr, &'a [u8], usize)>,
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = Datagram<'a>;

    fn next(&mut self) -> Option<Datagram<'a>> {
        loop {
            if let Some((src, rest, segment)) = &mut self.current {
                if !rest.is_empty() {
                    let (data, tail) = rest.split_at((*segment).min(rest.len()));
                    *rest = tail;
                    return Some(Datagram { src: *src, data });
                }
                self.current = None;
            }
            let m = self.meta.next()?;
            let start = m.slot * self.slot_size;
            let data = self.buf.get(start..start + m.len)?;
            if m.segment == 0 {
                return Some(Datagram { src: m.src, data });
            }
            self.current = Some((m.src, data, m.segment));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trip() {
        for addr in [
            "127.0.0.1:4242".parse::<SocketAddr>().expect("test"),
            "[fd77::2]:9".parse().expect("test"),
        ] {
            let raw = RawAddr::new(addr);
            // SAFETY: test-only copy of a sockaddr into storage of sufficient size.
            let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
            // SAFETY: `raw` is `raw.len()` bytes, storage is larger.
            unsafe {
                ptr::copy_nonoverlapping(
                    raw.as_ptr().cast::<u8>(),
                    (&raw mut storage).cast::<u8>(),
                    raw.len() as usize,
                );
            }
            assert_eq!(from_storage(&storage, raw.len()), Some(addr));
        }
    }

    #[test]
    fn buffer_warning_names_the_sysctl() {
        let w = SetupWarning::BufferCapped {
            kind: BufferKind::Receive,
            requested: 16 << 20,
            effective: 4 << 20,
            command: format!(
                "sysctl -w {}={}",
                BufferKind::Receive.sysctl_key(),
                16 << 20
            ),
        };
        assert!(
            w.to_string()
                .contains("sysctl -w net.core.rmem_max=16777216"),
            "{w}"
        );
    }

    #[test]
    fn rejects_bad_segment_sizes() {
        let mut tx =
            BatchSender::open(&UdpConfig::new("127.0.0.1:0".parse().expect("test"))).expect("test");
        let dest = "127.0.0.1:9".parse().expect("test");
        assert!(matches!(
            tx.send(dest, &[0; 10], 0),
            Err(UdpError::SegmentSize { .. })
        ));
        assert!(matches!(
            tx.send(dest, &[0; 10], MAX_PAYLOAD_V4 + 1),
            Err(UdpError::SegmentSize { .. })
        ));
        assert!(matches!(
            tx.send("[::1]:9".parse().expect("test"), &[0; 10], 10),
            Err(UdpError::AddressFamily { .. })
        ));
    }
}
