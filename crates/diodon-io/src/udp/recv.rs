//! The receiving side: [`BatchReceiver`] drains a socket with `recvmmsg`
//! (+ `UDP_GRO`) into the slots of a [`RecvBuffer`], which splits
//! super-packets into [`Datagram`]s, and keeps the kernel's drop count
//! (`SO_RXQ_OVFL`).
//!
//! ```text
//!   recv_into(&mut RecvBuffer) ── the kernel writes each message into a slot ──▶
//!   RecvBuffer (owned, Send): slots × slot_size bytes + where each message lies
//!        │  hand it to another thread as it is (no copy) and take it back for reuse
//!        ▼
//!   for d in &buffer { d.src, d.data }   (GRO super-packets split at their segment size)
//! ```
#![expect(
    unsafe_code,
    reason = "recvmmsg and its control messages have no safe std API"
)]

use std::ffi::c_int;
use std::io;
use std::mem::{self, size_of, MaybeUninit};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;
use std::time::Duration;

use super::config::{is_path_error, SocketSetup, UdpConfig, UdpError, MAX_RECV_SLOTS};
use super::sys::{
    from_storage, open_socket, read_error_queue_entry, sys, wait_for, Role, SK_MEMINFO_VARS,
    SO_MEMINFO, SO_RXQ_OVFL, UDP_GRO,
};

/// Control-message space per receive slot, in `u64` words (aligned): room
/// for `UDP_GRO` (int) and `SO_RXQ_OVFL` (u32), 24 bytes each, plus slack.
const RECV_CONTROL_WORDS: usize = 12;

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
        socket_drops: counter Count "dropped_packets" "Packets the kernel dropped on this socket because its buffer was full (SO_RXQ_OVFL); a GRO/GSO super-packet counts once, however many datagrams it held.",
        error_queue: counter Count "error_queue" "Entries read from the socket error queue after a receive reported an error (ICMP errors on a two-way socket).",
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

/// Drains a socket with `recvmmsg` into the slots of a [`RecvBuffer`].
///
/// Run it on a thread that does nothing else (DESIGN principle 4) and hand
/// the buffers on: [`BatchReceiver::recv_into`] fills a buffer the caller
/// owns (pass it to another thread, take it back for reuse: the datagrams
/// are never copied); [`BatchReceiver::recv_batch`] fills the receiver's
/// own buffer and lends it until the next call.
pub struct BatchReceiver {
    fd: OwnedFd,
    setup: SocketSetup,
    slots: usize,
    slot_size: usize,
    own: RecvBuffer,
    names: Vec<libc::sockaddr_storage>,
    control: Vec<u64>,
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
        check_slots(cfg)?;
        let (fd, setup) = open_socket(cfg, Role::Receiver)?;
        Ok(Self::from_socket(fd, setup, cfg))
    }

    /// The receiving half of a socket opened by `sys::open_socket`
    /// (slots checked by [`check_slots`]).
    pub(super) fn from_socket(fd: OwnedFd, setup: SocketSetup, cfg: &UdpConfig) -> Self {
        // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
        let empty: libc::sockaddr_storage = unsafe { mem::zeroed() };
        BatchReceiver {
            fd,
            setup,
            slots: cfg.recv_slots,
            slot_size: cfg.slot_size,
            own: RecvBuffer::default(),
            names: vec![empty; cfg.recv_slots],
            control: vec![0; cfg.recv_slots * RECV_CONTROL_WORDS],
            counters: ReceiverCounters::default(),
            last_ovfl: None,
        }
    }

    /// A buffer of this receiver's size (slots × slot size) for
    /// [`BatchReceiver::recv_into`]. Its memory is taken from the system
    /// zeroed and untouched: pages become resident as datagrams fill them.
    pub fn new_buffer(&self) -> RecvBuffer {
        let mut b = RecvBuffer::default();
        b.fit(self.slots, self.slot_size);
        b
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

    /// Receives what is queued into `into` (its previous datagrams are
    /// gone), waiting up to `timeout` (`None`: until something arrives;
    /// `Some(ZERO)`: don't wait) if nothing is. An empty buffer means the
    /// timeout passed. A buffer of another size is resized first.
    pub fn recv_into(
        &mut self,
        into: &mut RecvBuffer,
        timeout: Option<Duration>,
    ) -> Result<(), UdpError> {
        into.fit(self.slots, self.slot_size);
        let mut n = self.recv_now(into)?;
        while n == 0 && timeout != Some(Duration::ZERO) {
            let ready =
                wait_for(self.fd.as_raw_fd(), libc::POLLIN, timeout).map_err(UdpError::Poll)?;
            n = self.recv_now(into)?;
            if !ready || timeout.is_some() {
                break;
            }
        }
        Ok(())
    }

    /// [`BatchReceiver::recv_into`] the receiver's own buffer, lent until
    /// the next call.
    pub fn recv_batch(&mut self, timeout: Option<Duration>) -> Result<&RecvBuffer, UdpError> {
        let mut own = mem::take(&mut self.own);
        let result = self.recv_into(&mut own, timeout);
        self.own = own;
        result.map(|()| &self.own)
    }

    /// One non-blocking `recvmmsg` into `into` (already of this receiver's
    /// size); returns the messages read.
    fn recv_now(&mut self, into: &mut RecvBuffer) -> Result<usize, UdpError> {
        into.clear();
        // Only the first `slots` headers are written (and zeroed): zeroing all
        // MAX_RECV_SLOTS of them on every call was most of a quiet
        // receiver's user-space work.
        let mut iov = [MaybeUninit::<libc::iovec>::uninit(); MAX_RECV_SLOTS];
        let mut hdrs = [MaybeUninit::<libc::mmsghdr>::uninit(); MAX_RECV_SLOTS];
        let base = into.buf.as_mut_ptr();
        let names = self.names.as_mut_ptr();
        let control = self.control.as_mut_ptr();
        for i in 0..self.slots {
            // SAFETY: `i < slots`, and `into.buf`, `names` and `control`
            // hold `slots` slots of the sizes used here (`fit` sized `into`);
            // mmsghdr is a plain C struct for which all-zero is valid.
            unsafe {
                let io = iov[i].write(libc::iovec {
                    iov_base: base.add(i * self.slot_size).cast(),
                    iov_len: self.slot_size,
                });
                let mut m: libc::mmsghdr = mem::zeroed();
                let h = &mut m.msg_hdr;
                h.msg_name = names.add(i).cast();
                h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_iov = ptr::from_mut(io);
                h.msg_iovlen = 1;
                h.msg_control = control.add(i * RECV_CONTROL_WORDS).cast();
                h.msg_controllen = (RECV_CONTROL_WORDS * size_of::<u64>()) as _;
                hdrs[i].write(m);
            }
        }
        let n = loop {
            // SAFETY: `hdrs[..slots]` describe live, writable buffers owned by
            // `self` and `into` (not reallocated during the call).
            let rc = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr().cast::<libc::mmsghdr>(),
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
                Some(e) if is_path_error(e) => {
                    // An ICMP error for something this socket sent (a
                    // two-way socket has IP_RECVERR): not about any datagram
                    // waiting here. Empty the queue it sits in and go on.
                    while read_error_queue_entry(self.fd.as_raw_fd()).is_some() {
                        self.counters.error_queue += 1;
                    }
                }
                _ => return Err(UdpError::Recv(err)),
            }
        };
        if n > 0 {
            self.counters.batches += 1;
        }
        for (slot, h) in hdrs.iter().enumerate().take(n) {
            // SAFETY: the first `slots` headers were written above, and the
            // kernel fills at most `slots` (n <= slots).
            let h = unsafe { h.assume_init_ref() };
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
            into.push(SlotMeta {
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

/// Checks the slot geometry of a receiving socket's configuration.
pub(super) fn check_slots(cfg: &UdpConfig) -> Result<(), UdpError> {
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
    Ok(())
}

/// The memory one `recvmmsg` call writes into, and where each received
/// message lies in it. Owned and `Send`: a receive thread fills it and hands
/// it over whole, so a datagram is written once, by the kernel, and read in
/// place.
#[derive(Debug, Default)]
pub struct RecvBuffer {
    buf: Vec<u8>,
    slot_size: usize,
    meta: Vec<SlotMeta>,
    datagrams: usize,
    bytes: usize,
}

impl RecvBuffer {
    /// Sizes the buffer for `slots` × `slot_size` (keeps it if it fits).
    fn fit(&mut self, slots: usize, slot_size: usize) {
        if self.slot_size != slot_size || self.buf.len() != slots * slot_size {
            self.buf = vec![0; slots * slot_size];
            self.slot_size = slot_size;
            self.meta = Vec::with_capacity(slots);
        }
        self.clear();
    }

    /// Gives the buffer's memory back to the kernel (`MADV_DONTNEED`): the
    /// buffer keeps its size, its pages read as zeros and become resident
    /// again only as datagrams fill them. For a pool that keeps idle
    /// buffers without keeping their memory.
    pub fn release_pages(&mut self) {
        self.clear();
        let page = page_size();
        let start = self.buf.as_mut_ptr() as usize;
        let first = start.next_multiple_of(page);
        let end = (start + self.buf.len()) / page * page;
        if end > first {
            // SAFETY: [first, end) is page-aligned and lies inside `buf`,
            // which we hold exclusively; its private anonymous pages read
            // back as zeros, a valid value for u8. Failure leaves the
            // memory as it was.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED);
            }
        }
    }

    fn clear(&mut self) {
        self.meta.clear();
        self.datagrams = 0;
        self.bytes = 0;
    }

    fn push(&mut self, m: SlotMeta) {
        self.datagrams += if m.segment == 0 {
            1
        } else {
            m.len.div_ceil(m.segment).max(1)
        };
        self.bytes += m.len;
        self.meta.push(m);
    }

    /// Number of datagrams (GRO super-packets count as their parts).
    pub fn len(&self) -> usize {
        self.datagrams
    }

    /// Whether nothing was received.
    pub fn is_empty(&self) -> bool {
        self.datagrams == 0
    }

    /// Payload bytes received.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Messages the kernel delivered (a GRO super-packet is one).
    pub fn messages(&self) -> usize {
        self.meta.len()
    }

    /// Messages it holds at most (its slots). A batch of fewer messages
    /// emptied the socket.
    pub fn slots(&self) -> usize {
        self.buf.len().checked_div(self.slot_size).unwrap_or(0)
    }

    /// The datagrams, in arrival order.
    pub fn iter(&self) -> Datagrams<'_> {
        Datagrams {
            buf: &self.buf,
            slot_size: self.slot_size,
            meta: self.meta.iter(),
            current: None,
        }
    }
}

impl<'a> IntoIterator for &'a RecvBuffer {
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

/// Iterator over a [`RecvBuffer`], splitting GRO super-packets.
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

/// The system's page size.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}
