//! Socket setup and the system-call helpers the sending and receiving
//! sides share: opening and binding a socket with its options, socket
//! addresses in kernel form, waiting with `ppoll`, and reading the error
//! queue.
#![expect(
    unsafe_code,
    reason = "socket options, addresses and the error queue have no safe std API"
)]

use std::ffi::c_int;
use std::io;
use std::mem::{self, size_of};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::time::Duration;

use super::config::{BufferKind, SetupWarning, SocketSetup, UdpConfig, UdpError};

/// `UDP_SEGMENT` (linux/udp.h): per-call GSO segment size.
pub(super) const UDP_SEGMENT: c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced super-packets.
pub(super) const UDP_GRO: c_int = 104;
/// `SO_RXQ_OVFL` (asm-generic/socket.h).
pub(super) const SO_RXQ_OVFL: c_int = 40;
/// `SO_SNDBUFFORCE` (asm-generic/socket.h).
pub(super) const SO_SNDBUFFORCE: c_int = 32;
/// `SO_RCVBUFFORCE` (asm-generic/socket.h).
pub(super) const SO_RCVBUFFORCE: c_int = 33;
/// `SO_MEMINFO` (asm-generic/socket.h).
pub(super) const SO_MEMINFO: c_int = 55;
/// Number of `u32` in the `SO_MEMINFO` answer.
pub(super) const SK_MEMINFO_VARS: usize = 9;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Sender,
    Receiver,
    /// Both directions on one socket (a protocol with a return path).
    Duplex,
}

pub(super) fn open_socket(cfg: &UdpConfig, role: Role) -> Result<(OwnedFd, SocketSetup), UdpError> {
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
    if matches!(role, Role::Receiver | Role::Duplex) {
        rxq_ovfl = optional(libc::SOL_SOCKET, SO_RXQ_OVFL, "SO_RXQ_OVFL");
        if cfg.gro {
            gro = optional(libc::SOL_UDP, UDP_GRO, "UDP_GRO");
        }
    }
    if matches!(role, Role::Sender | Role::Duplex) {
        recverr = if v6 {
            optional(libc::IPPROTO_IPV6, libc::IPV6_RECVERR, "IPV6_RECVERR")
        } else {
            optional(libc::IPPROTO_IP, libc::IP_RECVERR, "IP_RECVERR")
        };
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
pub(super) fn set_never_fragment(raw: RawFd, v6: bool) -> Result<(), UdpError> {
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
pub(super) fn size_buffer(
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

pub(super) fn sys(op: &'static str) -> UdpError {
    UdpError::Sys {
        op,
        source: io::Error::last_os_error(),
    }
}

pub(super) fn set_int(fd: RawFd, level: c_int, name: c_int, value: c_int) -> io::Result<()> {
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

pub(super) fn set_bytes(fd: RawFd, level: c_int, name: c_int, value: &[u8]) -> io::Result<()> {
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

pub(super) fn get_int(fd: RawFd, level: c_int, name: c_int) -> io::Result<c_int> {
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

pub(super) fn local_addr(fd: RawFd) -> Result<SocketAddr, UdpError> {
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
pub(super) fn wait_for(fd: RawFd, events: i16, timeout: Option<Duration>) -> io::Result<bool> {
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

/// A `SocketAddr` in the kernel's layout.
pub(super) enum RawAddr {
    V4(libc::sockaddr_in),
    V6(libc::sockaddr_in6),
}

impl RawAddr {
    pub(super) fn new(addr: SocketAddr) -> Self {
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

    pub(super) fn as_ptr(&self) -> *const libc::sockaddr {
        match self {
            RawAddr::V4(a) => ptr::from_ref(a).cast(),
            RawAddr::V6(a) => ptr::from_ref(a).cast(),
        }
    }

    pub(super) fn len(&self) -> libc::socklen_t {
        (match self {
            RawAddr::V4(_) => size_of::<libc::sockaddr_in>(),
            RawAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
        }) as libc::socklen_t
    }
}

pub(super) fn from_storage(
    storage: &libc::sockaddr_storage,
    len: libc::socklen_t,
) -> Option<SocketAddr> {
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
}
