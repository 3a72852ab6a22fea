//! The shaping queue in front of an interface: installs a token-bucket
//! qdisc (`tbf`) as an interface's root qdisc and reads its counters, over
//! rtnetlink (`NETLINK_ROUTE`), in the calling thread's network namespace.
//!
//! Why the tunnel wants it: a stock TUN drops when its ring is full, and
//! the ring is the only queue between a producer and Diodon's reader. A
//! qdisc in front of the TUN that lets packets through no faster than the
//! link carries them holds bursts instead (in bytes it owns and counts), and
//! a packet waiting there is still charged to its sending socket, so a local
//! producer blocks on its send buffer: backpressure, not a silent drop. What
//! the qdisc itself drops (its limit, for forwarded traffic) it counts, and
//! [`qdisc_stats`] reads that count.
//!
//! ```text
//!  socket ─► tbf (rate, burst, limit in bytes; drops counted) ─► TUN ring ─► reader
//!            RTM_NEWQDISC  (TCA_KIND "tbf", TCA_OPTIONS { PARMS, RATE64, BURST })
//!            RTM_GETQDISC dump ─► TCA_STATS2 { QUEUE: backlog, drops, overlimits }
//! ```

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const RTM_NEWQDISC: u16 = 36;
const RTM_GETQDISC: u16 = 38;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;
const TC_H_ROOT: u32 = 0xFFFF_FFFF;
const TCA_KIND: u16 = 1;
const TCA_OPTIONS: u16 = 2;
const TCA_STATS2: u16 = 7;
const TCA_STATS_QUEUE: u16 = 3;
const TCA_STATS_BASIC: u16 = 1;
const TCA_TBF_PARMS: u16 = 1;
const TCA_TBF_RATE64: u16 = 4;
const TCA_TBF_BURST: u16 = 6;
const NLA_F_NESTED: u16 = 0x8000;
/// `struct nlmsghdr` + `struct tcmsg`.
const HEADER_LEN: usize = 16 + 20;

/// A token bucket: what passes, how fast, and how much may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shaper {
    /// Bytes per second let through (IP packet bytes).
    pub rate_bytes_per_sec: u64,
    /// Bytes that may pass back to back (at least one packet).
    pub burst_bytes: u32,
    /// Bytes that may wait in the qdisc; beyond that it drops (counted).
    pub limit_bytes: u32,
}

/// A root qdisc's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// The qdisc's kind (`tbf`, `fq_codel`, `noqueue`, …).
    pub kind: String,
    /// Packets it passed on.
    pub packets: u64,
    /// Packets it dropped (its limit was reached).
    pub drops: u64,
    /// Times a packet had to wait for tokens.
    pub overlimits: u64,
    /// Bytes waiting now.
    pub backlog_bytes: u64,
}

/// Installs `shaper` as the root qdisc of `ifname` (replacing whatever was
/// there). Needs `CAP_NET_ADMIN` in the interface's namespace.
pub fn set_shaper(ifname: &str, shaper: Shaper) -> io::Result<()> {
    if shaper.rate_bytes_per_sec == 0 || shaper.burst_bytes == 0 || shaper.limit_bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a shaper needs a rate, a burst and a limit above zero",
        ));
    }
    let index = ifindex(ifname)?;
    let mut msg = header(
        RTM_NEWQDISC,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        index,
    );
    put_attr(&mut msg, TCA_KIND, b"tbf\0");
    let mut opts = Vec::new();
    put_attr(&mut opts, TCA_TBF_PARMS, &tbf_qopt(shaper));
    put_attr(
        &mut opts,
        TCA_TBF_RATE64,
        &shaper.rate_bytes_per_sec.to_ne_bytes(),
    );
    put_attr(&mut opts, TCA_TBF_BURST, &shaper.burst_bytes.to_ne_bytes());
    put_attr(&mut msg, TCA_OPTIONS | NLA_F_NESTED, &opts);
    let sock = NetlinkSocket::open()?;
    sock.send(&finish(msg))?;
    sock.wait_ack()
}

/// The counters of `ifname`'s root qdisc.
pub fn qdisc_stats(ifname: &str) -> io::Result<QdiscStats> {
    let index = ifindex(ifname)?;
    let sock = NetlinkSocket::open()?;
    qdisc_stats_on(&sock, index)
}

/// [`qdisc_stats`] on a socket opened earlier, for a process that restricts
/// itself after opening it ([`QdiscWatch`]).
fn qdisc_stats_on(sock: &NetlinkSocket, index: i32) -> io::Result<QdiscStats> {
    let msg = header(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, index);
    sock.send(&finish(msg))?;
    let mut found = None;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = sock.recv(&mut buf)?;
        let mut rest = &buf[..n];
        while rest.len() >= 16 {
            let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
            let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap_or_default());
            if len < 16 || len > rest.len() {
                return Err(bad("a netlink message runs past its datagram"));
            }
            match kind {
                NLMSG_DONE => return found.ok_or_else(|| bad("the interface has no root qdisc")),
                NLMSG_ERROR => {
                    let errno = i32::from_ne_bytes(rest[16..20].try_into().unwrap_or_default());
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                RTM_NEWQDISC if len >= HEADER_LEN => {
                    let tc = &rest[16..HEADER_LEN];
                    let msg_index = i32::from_ne_bytes(tc[4..8].try_into().unwrap_or_default());
                    let parent = u32::from_ne_bytes(tc[12..16].try_into().unwrap_or_default());
                    if msg_index == index && parent == TC_H_ROOT {
                        found = Some(parse_stats(&rest[HEADER_LEN..len]));
                    }
                }
                _ => {}
            }
            rest = &rest[align(len).min(rest.len())..];
        }
    }
}

/// A root qdisc's counters, read through a socket opened while the process
/// could still open one (before a sandbox that allows no new sockets).
#[derive(Debug)]
pub struct QdiscWatch {
    sock: NetlinkSocket,
    index: i32,
}

impl QdiscWatch {
    /// Opens the netlink socket for `ifname`'s root qdisc.
    pub fn open(ifname: &str) -> io::Result<QdiscWatch> {
        Ok(QdiscWatch {
            sock: NetlinkSocket::open()?,
            index: ifindex(ifname)?,
        })
    }

    /// The counters now.
    pub fn read(&self) -> io::Result<QdiscStats> {
        qdisc_stats_on(&self.sock, self.index)
    }
}

fn parse_stats(mut attrs: &[u8]) -> QdiscStats {
    let mut s = QdiscStats::default();
    while let Some((kind, value, rest)) = next_attr(attrs) {
        match kind {
            TCA_KIND => {
                s.kind = String::from_utf8_lossy(value.split(|&b| b == 0).next().unwrap_or(&[]))
                    .into_owned();
            }
            TCA_STATS2 => {
                let mut inner = value;
                while let Some((k, v, r)) = next_attr(inner) {
                    let word = |at: usize| {
                        v.get(at..at + 4).map_or(0, |b| {
                            u64::from(u32::from_ne_bytes(b.try_into().unwrap_or_default()))
                        })
                    };
                    match k {
                        // struct gnet_stats_basic: bytes u64, packets u32.
                        TCA_STATS_BASIC => s.packets = word(8),
                        // struct gnet_stats_queue: qlen, backlog, drops, requeues, overlimits.
                        TCA_STATS_QUEUE => {
                            s.backlog_bytes = word(4);
                            s.drops = word(8);
                            s.overlimits = word(16);
                        }
                        _ => {}
                    }
                    inner = r;
                }
            }
            _ => {}
        }
        attrs = rest;
    }
    s
}

/// One attribute off the front: (type without flags, value, the rest).
fn next_attr(buf: &[u8]) -> Option<(u16, &[u8], &[u8])> {
    if buf.len() < 4 {
        return None;
    }
    let len = usize::from(u16::from_ne_bytes([buf[0], buf[1]]));
    let kind = u16::from_ne_bytes([buf[2], buf[3]]) & !NLA_F_NESTED;
    if len < 4 || len > buf.len() {
        return None;
    }
    Some((kind, &buf[4..len], &buf[align(len).min(buf.len())..]))
}

/// `struct tc_tbf_qopt`: rate and peak rate (`struct tc_ratespec`), limit,
/// buffer, mtu. The rate's 32-bit field saturates; `TCA_TBF_RATE64` carries
/// the real one, `TCA_TBF_BURST` the bucket in bytes (so `buffer`, in
/// scheduler ticks, stays 0). Link layer 1 (Ethernet) needs no rate table.
fn tbf_qopt(s: Shaper) -> [u8; 36] {
    let mut q = [0u8; 36];
    q[1] = 1; // rate.linklayer = TC_LINKLAYER_ETHERNET
    let rate32 = u32::try_from(s.rate_bytes_per_sec).unwrap_or(u32::MAX);
    q[8..12].copy_from_slice(&rate32.to_ne_bytes());
    q[13] = 1; // peakrate.linklayer (peak rate 0: none)
    q[24..28].copy_from_slice(&s.limit_bytes.to_ne_bytes());
    q
}

fn align(len: usize) -> usize {
    (len + 3) & !3
}

fn header(kind: u16, flags: u16, index: i32) -> Vec<u8> {
    let mut m = Vec::with_capacity(128);
    m.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `finish`
    m.extend_from_slice(&kind.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
                                              // struct tcmsg: family, pad, pad, ifindex, handle, parent, info.
    m.extend_from_slice(&[0u8; 4]);
    m.extend_from_slice(&index.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&TC_H_ROOT.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m
}

fn put_attr(buf: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
    buf.extend_from_slice(&len.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(value);
    buf.resize(align(buf.len()), 0);
}

fn finish(mut msg: Vec<u8>) -> Vec<u8> {
    let len = u32::try_from(msg.len()).unwrap_or(u32::MAX);
    msg[0..4].copy_from_slice(&len.to_ne_bytes());
    msg
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink: {what}"))
}

#[expect(unsafe_code, reason = "if_nametoindex has no safe std wrapper")]
fn ifindex(name: &str) -> io::Result<i32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the call's duration.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(index).map_err(|_| bad("interface index out of range"))
}

/// A `NETLINK_ROUTE` socket.
#[derive(Debug)]
struct NetlinkSocket(OwnedFd);

impl NetlinkSocket {
    #[expect(unsafe_code, reason = "socket(AF_NETLINK) has no safe std wrapper")]
    fn open() -> io::Result<NetlinkSocket> {
        // SAFETY: plain socket(2); the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a socket we just opened and own.
        Ok(NetlinkSocket(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    #[expect(
        unsafe_code,
        reason = "write(2) on a netlink socket (seccomp allows write everywhere)"
    )]
    fn send(&self, msg: &[u8]) -> io::Result<()> {
        // Unbound netlink sockets send to the kernel (port 0) by default.
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { libc::write(self.0.as_raw_fd(), msg.as_ptr().cast(), msg.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    #[expect(
        unsafe_code,
        reason = "read(2) on a netlink socket (seccomp allows read everywhere)"
    )]
    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: the buffer is valid and writable for its length.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n >= 0 {
                return Ok(n.unsigned_abs());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits for the kernel's answer to a request sent with `NLM_F_ACK`.
    fn wait_ack(&self) -> io::Result<()> {
        let mut buf = vec![0u8; 8192];
        loop {
            let n = self.recv(&mut buf)?;
            let mut rest = &buf[..n];
            while rest.len() >= 16 {
                let len = u32::from_ne_bytes(rest[0..4].try_into().unwrap_or_default()) as usize;
                let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap_or_default());
                if len < 16 || len > rest.len() {
                    return Err(bad("a netlink message runs past its datagram"));
                }
                if kind == NLMSG_ERROR {
                    let errno = rest
                        .get(16..20)
                        .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap_or_default()));
                    return if errno == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-errno))
                    };
                }
                rest = &rest[align(len).min(rest.len())..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_padded_to_four_bytes_and_read_back() {
        let mut buf = Vec::new();
        put_attr(&mut buf, TCA_KIND, b"tbf\0");
        put_attr(&mut buf, 9, &[1, 2, 3, 4, 5]);
        assert_eq!(buf.len(), 8 + 12);
        let (k, v, rest) = next_attr(&buf).unwrap();
        assert_eq!((k, v), (TCA_KIND, &b"tbf\0"[..]));
        let (k, v, rest) = next_attr(rest).unwrap();
        assert_eq!((k, v, rest.len()), (9, &[1u8, 2, 3, 4, 5][..], 0));
        // A length past the buffer ends the walk instead of reading beyond.
        assert!(next_attr(&[200, 0, 1, 0, 0]).is_none());
    }

    #[test]
    fn the_queue_counters_come_from_stats2() {
        let mut queue = Vec::new();
        for v in [3u32, 4500, 17, 0, 99] {
            queue.extend_from_slice(&v.to_ne_bytes());
        }
        let mut basic = 123_456u64.to_ne_bytes().to_vec();
        basic.extend_from_slice(&321u32.to_ne_bytes());
        let mut stats2 = Vec::new();
        put_attr(&mut stats2, TCA_STATS_BASIC, &basic);
        put_attr(&mut stats2, TCA_STATS_QUEUE, &queue);
        let mut attrs = Vec::new();
        put_attr(&mut attrs, TCA_KIND, b"tbf\0");
        put_attr(&mut attrs, TCA_STATS2 | NLA_F_NESTED, &stats2);
        let s = parse_stats(&attrs);
        assert_eq!(
            s,
            QdiscStats {
                kind: "tbf".into(),
                packets: 321,
                drops: 17,
                overlimits: 99,
                backlog_bytes: 4500
            }
        );
    }

    #[test]
    fn a_shaper_without_rate_is_refused_before_any_syscall() {
        let e = set_shaper(
            "lo",
            Shaper {
                rate_bytes_per_sec: 0,
                burst_bytes: 1500,
                limit_bytes: 1 << 20,
            },
        )
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
