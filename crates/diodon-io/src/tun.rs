//! TUN and TAP devices: IP packets (TUN) or Ethernet frames (TAP) of a
//! network interface, read and written by a user process. The IP tunnel
//! reads the packets the kernel routes into a TUN on the sending host and
//! writes them into a TUN on the receiving host; a frame written to a TAP
//! arrives on its interface as if received from a wire, so any capture
//! tool, flow exporter or IDS reads it there (the tap agent's and the
//! receiver's `--tap-out`); the impairment relay (`diodon-lab`'s `relay`)
//! joins two TUN devices in two namespaces into an IP link with delay, loss
//! and reordering.
//!
//! ```text
//!   kernel ──IP──▶ qdisc ──▶ tun_net_xmit ──▶ ring (txqueuelen) ──read──▶ queue 0 fd
//!                                   │ ring full: dropped, tx_dropped += 1   queue 1 fd …
//!                                   ▼ (stock kernels; the NODROP patch
//!                                      stops the queue instead)            IFF_MULTI_QUEUE:
//!                                                                          one ring per queue
//!   with IFF_VNET_HDR + TUNSETOFFLOAD each read is [virtio_net_hdr][packet],
//!   and the packet may be a GSO super-packet (TCP/UDP up to 64 KiB)
//! ```
//!
//! What this module owns: opening (single or multi-queue, with or without
//! the virtio-net header), the feature probe (`TUNGETFEATURES`), offloads
//! (`TUNSETOFFLOAD`), the interface settings a tunnel needs (txqueuelen,
//! MTU, up), the interface's drop counter, and the backpressure probe. The
//! device exists while a queue is open (non-persistent); addresses and
//! routes are the operator's (`ip addr add … dev NAME`).
//!
//! **Backpressure.** Stock kernels drop a packet when the TUN's ring is full
//! and count it in the interface's `tx_dropped`; nothing tells the sender.
//! The NODROP patch (and its upstream series) stops the device queue
//! instead, so the qdisc holds packets; it adds no feature flag, so
//! [`probe_backpressure`] finds out by behaviour, on a scratch device.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
/// `TUNGETFEATURES` = `_IOR('T', 207, unsigned int)`.
const TUNGETFEATURES: libc::c_ulong = 0x8004_54cf;
/// `TUNSETOFFLOAD` = `_IOW('T', 208, unsigned int)`.
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;

const IFF_TUN: u32 = 0x0001;
const IFF_TAP: u32 = 0x0002;
const IFF_NO_PI: u32 = 0x1000;
const IFF_MULTI_QUEUE: u32 = 0x0100;
const IFF_VNET_HDR: u32 = 0x4000;
const IFF_NAPI: u32 = 0x0010;

/// Bytes of the virtio-net header in front of every packet with
/// `IFF_VNET_HDR` (`struct virtio_net_hdr`, the default `TUNSETVNETHDRSZ`).
pub const VNET_HDR_LEN: usize = 10;

/// Largest read: a 64 KiB (super-)packet and its virtio-net header.
pub const MAX_READ: usize = 65_535 + VNET_HDR_LEN;

/// What the kernel's TUN driver supports (`TUNGETFEATURES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunFeatures(u32);

impl TunFeatures {
    /// Several queues, one file descriptor each.
    pub fn multi_queue(self) -> bool {
        self.0 & IFF_MULTI_QUEUE != 0
    }

    /// The virtio-net header (offloads, GSO super-packets).
    pub fn vnet_hdr(self) -> bool {
        self.0 & IFF_VNET_HDR != 0
    }

    /// NAPI on the write path.
    pub fn napi(self) -> bool {
        self.0 & IFF_NAPI != 0
    }

    /// The raw flag bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

/// Offloads a TUN with the virtio-net header can take (`TUN_F_*`): the
/// kernel then hands over packets with a partial checksum and GSO
/// super-packets, and the reader finishes and segments them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offload(u32);

impl Offload {
    /// Checksum left to the reader (`TUN_F_CSUM`); the base of all others.
    pub const CSUM: Offload = Offload(0x01);
    /// TCP over IPv4 segmentation (`TUN_F_TSO4`).
    pub const TSO4: Offload = Offload(0x02);
    /// TCP over IPv6 segmentation (`TUN_F_TSO6`).
    pub const TSO6: Offload = Offload(0x04);
    /// TCP with ECN (`TUN_F_TSO_ECN`).
    pub const TSO_ECN: Offload = Offload(0x08);
    /// UDP over IPv4 segmentation (`TUN_F_USO4`, Linux ≥ 6.2).
    pub const USO4: Offload = Offload(0x20);
    /// UDP over IPv6 segmentation (`TUN_F_USO6`, Linux ≥ 6.2).
    pub const USO6: Offload = Offload(0x40);
    /// Nothing.
    pub const NONE: Offload = Offload(0);
    /// Everything the tunnel can segment.
    pub const ALL: Offload = Offload(0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40);

    /// Both sets.
    #[must_use]
    pub fn with(self, other: Offload) -> Offload {
        Offload(self.0 | other.0)
    }

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Offload) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw `TUN_F_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::fmt::Display for Offload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = [
            (Offload::CSUM, "csum"),
            (Offload::TSO4, "tso4"),
            (Offload::TSO6, "tso6"),
            (Offload::TSO_ECN, "tso-ecn"),
            (Offload::USO4, "uso4"),
            (Offload::USO6, "uso6"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(o, _)| self.contains(*o))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&set.join(","))
        }
    }
}

/// How to open a TUN.
#[derive(Debug, Clone)]
pub struct TunConfig {
    /// Interface name (created if missing).
    pub name: String,
    /// Queues (file descriptors); more than one sets `IFF_MULTI_QUEUE`.
    pub queues: usize,
    /// Prefix every packet with the virtio-net header (`IFF_VNET_HDR`).
    pub vnet_hdr: bool,
    /// Offloads to ask for (needs `vnet_hdr`); what the kernel refuses is
    /// left out (see [`Tun::offload`]).
    pub offload: Offload,
}

impl TunConfig {
    /// One queue, no header, no offloads: each read is one IP packet.
    pub fn plain(name: &str) -> Self {
        TunConfig {
            name: name.to_owned(),
            queues: 1,
            vnet_hdr: false,
            offload: Offload::NONE,
        }
    }
}

/// One open queue of a TUN or TAP device (no packet-information header:
/// each read is one IP packet, or one Ethernet frame for a TAP).
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
    vnet_hdr: bool,
    offload: Offload,
}

impl Tun {
    /// Creates (or attaches to) TUN device `name` in the calling thread's
    /// network namespace, one queue, each read one IP packet. Needs
    /// `CAP_NET_ADMIN`.
    pub fn open(name: &str) -> io::Result<Tun> {
        let mut queues = Tun::open_queues(&TunConfig::plain(name))?;
        queues
            .pop()
            .ok_or_else(|| io::Error::other("no TUN queue opened"))
    }

    /// Creates (or attaches to) TAP device `name` in the calling thread's
    /// network namespace: each read or write is one Ethernet frame. Needs
    /// `CAP_NET_ADMIN`.
    pub fn open_tap(name: &str) -> io::Result<Tun> {
        Ok(Tun {
            file: attach(name, IFF_TAP | IFF_NO_PI)?,
            name: name.to_owned(),
            vnet_hdr: false,
            offload: Offload::NONE,
        })
    }

    /// Opens `config.queues` queues of one device; the offloads are set on
    /// the device (through the first queue) and reported by each queue.
    pub fn open_queues(config: &TunConfig) -> io::Result<Vec<Tun>> {
        let n = config.queues.max(1);
        let mut flags = IFF_TUN | IFF_NO_PI;
        if n > 1 {
            flags |= IFF_MULTI_QUEUE;
        }
        if config.vnet_hdr {
            flags |= IFF_VNET_HDR;
        }
        let mut queues = Vec::with_capacity(n);
        for _ in 0..n {
            let file = attach(&config.name, flags)?;
            queues.push(Tun {
                file,
                name: config.name.clone(),
                vnet_hdr: config.vnet_hdr,
                offload: Offload::NONE,
            });
        }
        let offload = if config.vnet_hdr && config.offload != Offload::NONE {
            set_offload(queues[0].file.as_raw_fd(), config.offload)?
        } else {
            Offload::NONE
        };
        for q in &mut queues {
            q.offload = offload;
        }
        Ok(queues)
    }

    /// What this kernel's TUN driver supports.
    #[expect(unsafe_code, reason = "ioctl(TUNGETFEATURES) has no safe std wrapper")]
    pub fn features() -> io::Result<TunFeatures> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut bits: libc::c_uint = 0;
        // SAFETY: TUNGETFEATURES writes one unsigned int; `bits` lives for the call.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNGETFEATURES as _, &raw mut bits) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(TunFeatures(bits))
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether each packet carries the virtio-net header.
    pub fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// The offloads the kernel accepted.
    pub fn offload(&self) -> Offload {
        self.offload
    }

    /// Reads one packet (with its virtio-net header when enabled), waiting
    /// at most `timeout`; `Ok(None)` on timeout.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        if !poll_readable(self.file.as_raw_fd(), timeout)? {
            return Ok(None);
        }
        self.try_recv(buf)
    }

    /// Reads one packet if one is waiting, `Ok(None)` if not; never waits
    /// once [`Tun::set_nonblocking`] is on (a blocking queue would wait here).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match io::Read::read(&mut &self.file, buf) {
            Ok(n) => Ok(Some(n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Sets or clears `O_NONBLOCK` on this queue's descriptor: reads then
    /// return at once when no packet waits ([`Tun::try_recv`]).
    #[expect(unsafe_code, reason = "fcntl(F_SETFL) has no safe std wrapper")]
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        let fd = self.file.as_raw_fd();
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no pointers.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if flags < 0 {
            return Err(io::Error::last_os_error());
        }
        let flags = if on {
            flags | libc::O_NONBLOCK
        } else {
            flags & !libc::O_NONBLOCK
        };
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFL, flags) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Writes one packet (with its virtio-net header when enabled).
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        io::Write::write(&mut &self.file, packet).map(|_| ())
    }

    /// A second handle on the same queue (for a thread per direction).
    pub fn try_clone(&self) -> io::Result<Tun> {
        Ok(Tun {
            file: self.file.try_clone()?,
            name: self.name.clone(),
            vnet_hdr: self.vnet_hdr,
            offload: self.offload,
        })
    }
}

/// Opens `/dev/net/tun` and attaches it to `name` with `flags`.
#[expect(unsafe_code, reason = "ioctl(TUNSETIFF) has no safe std wrapper")]
fn attach(name: &str, flags: u32) -> io::Result<File> {
    let mut req = ifreq(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: `req` is a valid ifreq that lives for the call; the fd is open.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &raw mut req) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Asks for `want`; if the kernel refuses (no USO before 6.2), asks again
/// without UDP segmentation, then with checksum only. Returns what it took.
#[expect(unsafe_code, reason = "ioctl(TUNSETOFFLOAD) has no safe std wrapper")]
fn set_offload(fd: RawFd, want: Offload) -> io::Result<Offload> {
    let tries = [
        want,
        Offload(want.0 & !(Offload::USO4.0 | Offload::USO6.0)),
        Offload(want.0 & Offload::CSUM.0),
    ];
    let mut last = io::Error::other("no offload accepted");
    for t in tries {
        // SAFETY: TUNSETOFFLOAD takes the flag word by value; the fd is open.
        let rc = unsafe { libc::ioctl(fd, TUNSETOFFLOAD as _, libc::c_ulong::from(t.0)) };
        if rc == 0 {
            return Ok(t);
        }
        last = io::Error::last_os_error();
    }
    Err(last)
}

/// An `ifreq` with `name` filled in.
#[expect(unsafe_code, reason = "zeroing a plain C struct")]
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['/', ' ', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name '{name}': 1..{} bytes, no '/', space or NUL",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s.cast_signed();
    }
    Ok(req)
}

/// A datagram socket for interface ioctls (any family works for them).
#[expect(unsafe_code, reason = "socket(2) has no safe std wrapper for this use")]
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs an interface ioctl with `req`.
#[expect(unsafe_code, reason = "interface ioctls have no safe std wrapper")]
fn if_ioctl(request: libc::c_ulong, req: &mut libc::ifreq) -> io::Result<()> {
    let sock = ioctl_socket()?;
    // SAFETY: `req` is a valid ifreq that lives for the call; the socket is open.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, std::ptr::from_mut(req)) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets an interface's transmit queue length (for a TUN: the ring of
/// packets waiting for the reader, per queue).
pub fn set_txqueuelen(name: &str, packets: u32) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_metric = libc::c_int::try_from(packets).unwrap_or(libc::c_int::MAX);
    if_ioctl(libc::SIOCSIFTXQLEN, &mut req)
}

/// An interface's transmit queue length.
#[expect(unsafe_code, reason = "reading the union field the ioctl filled")]
pub fn txqueuelen(name: &str) -> io::Result<u32> {
    let mut req = ifreq(name)?;
    if_ioctl(libc::SIOCGIFTXQLEN, &mut req)?;
    // SAFETY: SIOCGIFTXQLEN filled the int member.
    let n = unsafe { req.ifr_ifru.ifru_metric };
    Ok(u32::try_from(n).unwrap_or(0))
}

/// Sets an interface's MTU.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_mtu = libc::c_int::try_from(mtu).unwrap_or(libc::c_int::MAX);
    if_ioctl(libc::SIOCSIFMTU, &mut req)
}

/// An interface's flags (`IFF_UP`, `IFF_RUNNING`, …) in the calling
/// thread's namespace.
pub fn interface_flags(name: &str) -> io::Result<libc::c_int> {
    interface_flags_on(ioctl_socket()?.as_raw_fd(), name)
}

/// An interface's flags in the namespace of the open socket `fd` (a
/// sandboxed process may not open a new one).
#[expect(unsafe_code, reason = "SIOCGIFFLAGS has no safe std wrapper")]
pub(crate) fn interface_flags_on(fd: RawFd, name: &str) -> io::Result<libc::c_int> {
    let mut req = ifreq(name)?;
    // SAFETY: `req` is a valid ifreq that lives for the call; the fd is open.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &raw mut req) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok(libc::c_int::from(flags.cast_unsigned()))
}

/// Brings an interface up.
#[expect(unsafe_code, reason = "reading the union field the ioctl filled")]
pub fn set_up(name: &str) -> io::Result<()> {
    let mut req = ifreq(name)?;
    if_ioctl(libc::SIOCGIFFLAGS, &mut req)?;
    // SAFETY: SIOCGIFFLAGS filled the flags member.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    req.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    if_ioctl(libc::SIOCSIFFLAGS, &mut req)
}

/// Packets the kernel dropped on transmit into the interface (for a TUN:
/// its ring was full), in the calling thread's namespace.
pub fn tx_dropped(name: &str) -> io::Result<u64> {
    crate::counters::LinkStats::read_proc(name)
        .map(|s| s.tx_dropped)
        .map_err(io::Error::other)
}

/// What a full TUN ring does on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backpressure {
    /// The driver drops the packet and counts it in `tx_dropped` (stock
    /// kernels).
    Drops,
    /// The driver stops its queue and the qdisc holds packets (the NODROP
    /// patch or its upstream series).
    Stops,
}

/// Finds out what a full TUN ring does: a scratch TUN (`name`) with a
/// one-packet ring gets a burst of packets through a packet socket while
/// nobody reads; drops in its `tx_dropped` mean [`Backpressure::Drops`].
/// The device is gone when this returns. Needs `CAP_NET_ADMIN` and
/// `CAP_NET_RAW`.
pub fn probe_backpressure(name: &str) -> io::Result<Backpressure> {
    let tun = Tun::open(name)?;
    set_txqueuelen(name, 1)?;
    set_up(name)?;
    let index = if_index(name)?;
    let sock = packet_socket()?;
    // A minimal IPv4/UDP header to a documentation address; nothing reads it.
    let mut pkt = [0u8; 28];
    pkt[0] = 0x45;
    pkt[3] = 28;
    pkt[8] = 1;
    pkt[9] = 17;
    pkt[12..16].copy_from_slice(&[192, 0, 2, 1]);
    pkt[16..20].copy_from_slice(&[192, 0, 2, 2]);
    let mut sent = 0u32;
    for _ in 0..16 {
        if send_packet(&sock, index, &pkt).is_ok() {
            sent += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(20));
    let dropped = tx_dropped(name)?;
    drop(tun);
    if sent < 2 {
        return Err(io::Error::other(
            "the backpressure probe could not send through its scratch TUN",
        ));
    }
    Ok(if dropped > 0 {
        Backpressure::Drops
    } else {
        Backpressure::Stops
    })
}

#[expect(unsafe_code, reason = "if_nametoindex(3) has no safe std wrapper")]
fn if_index(name: &str) -> io::Result<libc::c_int> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: `c` is a valid NUL-terminated string for the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(io::Error::last_os_error());
    }
    libc::c_int::try_from(i).map_err(io::Error::other)
}

#[expect(
    unsafe_code,
    reason = "socket(2) has no safe std wrapper for AF_PACKET"
)]
fn packet_socket() -> io::Result<OwnedFd> {
    let proto = libc::c_int::from((libc::ETH_P_IP as u16).to_be());
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            proto,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[expect(unsafe_code, reason = "sendto(2) with a sockaddr_ll")]
fn send_packet(sock: &OwnedFd, index: libc::c_int, pkt: &[u8]) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = (libc::ETH_P_IP as u16).to_be();
    addr.sll_ifindex = index;
    // SAFETY: buffer and address are valid for the call; lengths match.
    let rc = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            pkt.as_ptr().cast(),
            pkt.len(),
            0,
            std::ptr::from_ref(&addr).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `poll(2)` for readability with a timeout.
#[expect(unsafe_code, reason = "poll(2) has no safe std wrapper")]
fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, nfds = 1, lives for the call.
    let rc = unsafe { libc::poll(&raw mut p, 1, ms) };
    match rc {
        0 => Ok(false),
        r if r > 0 => Ok(true),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offload_sets_print_their_names() {
        assert_eq!(Offload::NONE.to_string(), "none");
        assert_eq!(Offload::ALL.to_string(), "csum,tso4,tso6,tso-ecn,uso4,uso6");
        assert!(Offload::ALL.contains(Offload::CSUM.with(Offload::USO6)));
        assert!(!Offload::CSUM.contains(Offload::TSO4));
    }

    #[test]
    fn bad_interface_names_are_refused_before_any_ioctl() {
        for bad in ["", "a/b", "has space", "sixteen-chars-xx"] {
            assert!(ifreq(bad).is_err(), "{bad:?}");
        }
        assert!(ifreq("dt0").is_ok());
    }
}
