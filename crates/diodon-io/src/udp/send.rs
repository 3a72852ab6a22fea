//! The sending side: [`BatchSender`] hands buffers of back-to-back
//! datagrams to the kernel with `sendmsg` + `UDP_SEGMENT` (GSO) or
//! `sendmmsg`, and waits out full queues instead of dropping.
#![expect(
    unsafe_code,
    reason = "sendmsg/sendmmsg and their control messages have no safe std API"
)]

use std::io;
use std::mem::{self, size_of};
use std::net::{SocketAddr, SocketAddrV6};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr;
use std::time::Duration;

use super::config::{
    SetupWarning, SocketSetup, UdpConfig, UdpError, MAX_GSO_SEGMENTS, MAX_PAYLOAD_V4,
    MAX_PAYLOAD_V6, MAX_SEND_BATCH,
};
use super::sys::{open_socket, read_error_queue_entry, wait_for, RawAddr, Role, UDP_SEGMENT};
use crate::clock::MonotonicClock;

/// How often (in `send` calls) the sender polls its error queue.
const ERRQUEUE_DRAIN_EVERY: u32 = 256;
/// Back-off after `ENOBUFS` (device/qdisc queue full).
const ENOBUFS_BACKOFF: Duration = Duration::from_micros(50);
/// Longest single wait for `POLLOUT` after `EAGAIN`.
const EAGAIN_WAIT: Duration = Duration::from_millis(10);

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
        Ok(Self::from_socket(fd, setup, cfg))
    }

    /// The sending half of a socket opened by `sys::open_socket`.
    pub(super) fn from_socket(fd: OwnedFd, setup: SocketSetup, cfg: &UdpConfig) -> Self {
        BatchSender {
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
        }
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

    /// Whether the path to `peer` can carry datagrams now (the interface
    /// `device` names, else the route's, up and with a carrier), asked
    /// through this socket: its namespace, and no new socket (a sandboxed
    /// sender may open none).
    pub fn path_state(
        &self,
        peer: std::net::IpAddr,
        device: Option<&str>,
    ) -> crate::route::PathState {
        let fd = self.fd.as_raw_fd();
        crate::route::path_state_with(peer, device, |name| {
            crate::tun::interface_flags_on(fd, name)
        })
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
    /// shorter) to `dest`: [`BatchSender::send_pieces`] with one piece per
    /// datagram.
    pub fn send(
        &mut self,
        dest: SocketAddr,
        buf: &[u8],
        segment_size: usize,
    ) -> Result<SendReport, UdpError> {
        if segment_size == 0 {
            return Err(UdpError::SegmentSize {
                segment_size,
                max: self.max_payload(),
            });
        }
        let pieces: Vec<&[u8]> = buf.chunks(segment_size).collect();
        self.send_pieces(dest, &pieces, 1, segment_size)
    }

    /// Sends datagrams made of pieces to `dest`: datagram `i` is
    /// `pieces[i * per_datagram..(i + 1) * per_datagram]` one after the
    /// other (empty pieces are skipped), the kernel gathers them, so a
    /// payload is sent from where it lies. Every datagram is
    /// `segment_size` bytes but the last, which may be shorter.
    ///
    /// Uses GSO (≤ [`MAX_GSO_SEGMENTS`] segments and ≤ 64 KiB per call) when
    /// available, else `sendmmsg`. A full queue is waited out, never turned
    /// into a drop; an error returns with [`UdpError::Send`] telling how many
    /// datagrams went out before it.
    ///
    /// # Panics
    /// If `per_datagram` is 0 or does not divide `pieces.len()`.
    pub fn send_pieces(
        &mut self,
        dest: SocketAddr,
        pieces: &[&[u8]],
        per_datagram: usize,
        segment_size: usize,
    ) -> Result<SendReport, UdpError> {
        assert!(
            per_datagram > 0 && pieces.len().is_multiple_of(per_datagram),
            "{} pieces are not datagrams of {per_datagram}",
            pieces.len()
        );
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
        let batch = Gather::new(pieces, per_datagram, segment_size)?;
        if batch.lens.is_empty() {
            return Ok(report);
        }
        self.calls_since_drain += 1;
        if self.calls_since_drain >= ERRQUEUE_DRAIN_EVERY {
            self.drain_error_queue();
        }
        let addr = RawAddr::new(dest);
        let mut next = 0;
        if self.gso != GsoState::Off {
            let per_call = (max / segment_size).clamp(1, MAX_GSO_SEGMENTS);
            while next < batch.lens.len() {
                let end = batch.lens.len().min(next + per_call);
                match self.send_gso(&addr, dest, &batch, next..end, segment_size, &mut report) {
                    Ok(()) => next = end,
                    Err(None) => break, // GSO unsupported: the fallback sends the rest
                    Err(Some(e)) => return Err(e),
                }
            }
        }
        if next < batch.lens.len() {
            self.send_mmsg(&addr, dest, &batch, next, &mut report)?;
        }
        Ok(report)
    }

    /// One GSO super-packet of datagrams `range`. `Err(None)`: the probe
    /// failed, GSO is now off.
    fn send_gso(
        &mut self,
        addr: &RawAddr,
        dest: SocketAddr,
        batch: &Gather,
        range: std::ops::Range<usize>,
        segment_size: usize,
        report: &mut SendReport,
    ) -> Result<(), Option<UdpError>> {
        let fd = self.fd.as_raw_fd();
        let seg = u16::try_from(segment_size).unwrap_or(u16::MAX);
        let iov = &batch.iov[batch.starts[range.start]..batch.starts[range.end]];
        let bytes: usize = batch.lens[range.clone()].iter().sum();
        let result = self.retrying(dest, report, || gso_sendmsg(fd, addr, iov, seg));
        match result {
            Ok(_) => {
                self.gso = GsoState::Works;
                self.account(report, range.len() as u64, bytes as u64);
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

    /// Datagrams `first..` of `batch`, up to [`MAX_SEND_BATCH`] per call.
    fn send_mmsg(
        &mut self,
        addr: &RawAddr,
        dest: SocketAddr,
        batch: &Gather,
        first: usize,
        report: &mut SendReport,
    ) -> Result<(), UdpError> {
        let fd = self.fd.as_raw_fd();
        let mut group_start = first;
        while group_start < batch.lens.len() {
            let group_end = batch.lens.len().min(group_start + MAX_SEND_BATCH);
            // SAFETY: mmsghdr is a plain C struct; all-zero (null pointers,
            // zero lengths) is a valid value.
            let mut hdrs: [libc::mmsghdr; MAX_SEND_BATCH] = unsafe { mem::zeroed() };
            let n = group_end - group_start;
            for (h, d) in hdrs.iter_mut().zip(group_start..group_end) {
                let iov = &batch.iov[batch.starts[d]..batch.starts[d + 1]];
                let h = &mut h.msg_hdr;
                h.msg_name = addr.as_ptr().cast_mut().cast();
                h.msg_namelen = addr.len();
                h.msg_iov = iov.as_ptr().cast_mut();
                h.msg_iovlen = iov.len();
            }
            let mut done = 0;
            while done < n {
                let pending = &mut hdrs[done..n];
                let sent = self
                    .retrying(dest, report, || sendmmsg(fd, pending))
                    .map_err(|e| Self::with_sent(e, report))?;
                let first_sent = group_start + done;
                let bytes: usize = batch.lens[first_sent..first_sent + sent].iter().sum();
                self.account(report, sent as u64, bytes as u64);
                self.counters.sendmmsg_calls += 1;
                done += sent;
            }
            group_start = group_end;
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

/// A batch's datagrams as the kernel reads them: the non-empty pieces as
/// iovecs, where each datagram's start in them, and each datagram's length.
struct Gather {
    iov: Vec<libc::iovec>,
    /// `starts[i]..starts[i + 1]` are datagram `i`'s iovecs.
    starts: Vec<usize>,
    lens: Vec<usize>,
}

impl Gather {
    fn new(pieces: &[&[u8]], per_datagram: usize, segment_size: usize) -> Result<Self, UdpError> {
        let count = pieces.len() / per_datagram;
        let mut batch = Gather {
            iov: Vec::with_capacity(pieces.len()),
            starts: Vec::with_capacity(count + 1),
            lens: Vec::with_capacity(count),
        };
        for (index, datagram) in pieces.chunks(per_datagram).enumerate() {
            batch.starts.push(batch.iov.len());
            let mut len = 0;
            for piece in datagram.iter().filter(|p| !p.is_empty()) {
                batch.iov.push(libc::iovec {
                    iov_base: piece.as_ptr().cast_mut().cast(),
                    iov_len: piece.len(),
                });
                len += piece.len();
            }
            let last = index + 1 == count;
            if len > segment_size || (!last && len != segment_size) || len == 0 {
                return Err(UdpError::UnevenBatch {
                    index,
                    len,
                    segment_size,
                });
            }
            batch.lens.push(len);
        }
        batch.starts.push(batch.iov.len());
        Ok(batch)
    }
}

fn gso_sendmsg(
    fd: RawFd,
    addr: &RawAddr,
    iov: &[libc::iovec],
    segment_size: u16,
) -> io::Result<usize> {
    let mut control = [0u64; 4]; // 32 bytes ≥ CMSG_SPACE(2) = 24, 8-aligned
                                 // SAFETY: all-zero msghdr is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_name = addr.as_ptr().cast_mut().cast();
    msg.msg_namelen = addr.len();
    // The kernel only reads the iovecs (and the bytes they point to).
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len();
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

#[cfg(test)]
mod tests {
    use super::*;

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
