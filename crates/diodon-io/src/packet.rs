//! `AF_PACKET`: frames of a network interface. Capture through a
//! `TPACKET_V3` ring (the kernel fills blocks of frames in shared memory;
//! one `poll` per block, not one syscall per frame), optionally in a
//! `PACKET_FANOUT` group so several threads share an interface by flow
//! hash; frames the ring had no room for are counted by the kernel
//! (`PACKET_STATISTICS`) and read back as [`RingStats`]. Sending whole
//! frames with `sendmmsg` on a raw socket ([`RawSender`]).
//!
//! ```text
//!  NIC / veth ─► kernel ─► ring: block 0 │ block 1 │ … │ block n-1   (mmap, shared)
//!                            status KERNEL ─► kernel fills ─► USER ─► next_block()
//!                            Block::frames(): tpacket3_hdr → (data, wire len, ts, VLAN)
//!                            drop(Block) ─► status KERNEL (the block is the kernel's again)
//!                          no free block ─► dropped, counted (tp_drops)
//!  RawSender::send_all(frames) ─► sendmmsg (blocking; ENOBUFS waited out) ─► interface
//! ```
//!
//! A NIC or veth that strips VLAN tags into metadata reports them with the
//! frame ([`Frame::vlan`]); putting the tag back is the caller's business
//! (this crate knows no protocol). Knows no protocol: frames are bytes.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

/// `ETH_P_ALL` in network byte order, as `socket(2)` and `bind(2)` want it.
fn eth_p_all() -> u16 {
    (libc::ETH_P_ALL as u16).to_be()
}

/// How frames are spread over the sockets of one fanout group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutMode {
    /// By the kernel's flow hash (symmetric: both directions of a flow go
    /// to the same socket).
    Hash,
    /// By the CPU that received the frame.
    Cpu,
    /// Round robin (breaks flows apart; for measurements only).
    RoundRobin,
}

/// A fanout group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fanout {
    /// Group id (sockets with the same id on one interface share its frames).
    pub group: u16,
    /// How frames are spread.
    pub mode: FanoutMode,
}

/// How to open a capture ring.
#[derive(Debug, Clone)]
pub struct RingConfig {
    /// Interface name.
    pub interface: String,
    /// Bytes per block (a multiple of the page size; a frame never spans blocks).
    pub block_size: usize,
    /// Number of blocks.
    pub blocks: usize,
    /// The kernel hands a block over at the latest this long after its
    /// first frame (bounds latency at low rates).
    pub block_timeout: Duration,
    /// Join a fanout group.
    pub fanout: Option<Fanout>,
    /// Put the interface in promiscuous mode while the socket is open.
    pub promiscuous: bool,
    /// Skip frames the host itself sends on the interface.
    pub ignore_outgoing: bool,
}

impl RingConfig {
    /// Defaults: 32 blocks of 1 MiB, 10 ms block timeout, promiscuous,
    /// outgoing frames ignored, no fanout.
    pub fn new(interface: impl Into<String>) -> RingConfig {
        RingConfig {
            interface: interface.into(),
            block_size: 1 << 20,
            blocks: 32,
            block_timeout: Duration::from_millis(10),
            fanout: None,
            promiscuous: true,
            ignore_outgoing: true,
        }
    }
}

/// The kernel's counters of one capture socket, accumulated since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Frames the kernel passed to the socket (delivered plus dropped).
    pub packets: u64,
    /// Frames dropped because the ring had no free block.
    pub drops: u64,
    /// Times the queue froze (every block in user space).
    pub freezes: u64,
}

/// A frame in a ring block.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The captured bytes (without a tag the NIC moved into metadata).
    pub data: &'a [u8],
    /// Its length on the wire (≥ `data.len()` when cut by a snap length).
    pub wire_len: u32,
    /// Capture time, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// A VLAN tag removed by the NIC: (TPID, TCI).
    pub vlan: Option<(u16, u16)>,
}

/// A `TPACKET_V3` capture ring on one interface.
#[derive(Debug)]
pub struct CaptureRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    blocks: usize,
    next: usize,
    stats: RingStats,
    interface: String,
}

// SAFETY: the ring's memory is owned by this value alone (the mapping is
// private to it); moving it to another thread moves that ownership.
#[expect(unsafe_code, reason = "the mmap'd ring is owned by the value")]
unsafe impl Send for CaptureRing {}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn with_context(e: &io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The interface index of `name`.
#[expect(unsafe_code, reason = "if_nametoindex(3) has no safe std wrapper")]
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(with_context(
            &io::Error::last_os_error(),
            &format!("interface {name}"),
        ))
    } else {
        Ok(i)
    }
}

/// The MAC address of `name` (from sysfs).
pub fn interface_mac(name: &str) -> io::Result<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address"))
        .map_err(|e| with_context(&e, &format!("interface {name}")))?;
    let mut mac = [0u8; 6];
    let mut n = 0;
    for part in text.trim().split(':') {
        let b = u8::from_str_radix(part, 16).ok();
        match (mac.get_mut(n), b) {
            (Some(m), Some(b)) => *m = b,
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "MAC address")),
        }
        n += 1;
    }
    if n == 6 {
        Ok(mac)
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidData, "MAC address"))
    }
}

#[expect(unsafe_code, reason = "setsockopt(2) on a valid fd with a typed value")]
fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of the given size for the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

#[expect(unsafe_code, reason = "socket(2) and bind(2) with a sockaddr_ll")]
fn packet_socket(ifindex: u32, protocol: u16) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the returned fd is owned below.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::c_int::from(protocol),
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain old data; zero is valid.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = protocol;
    sa.sll_ifindex = ifindex.cast_signed();
    // SAFETY: `sa` is a valid sockaddr_ll for the call.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sa).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
}

impl CaptureRing {
    /// Opens the socket, sets up and maps the ring, binds it to the
    /// interface and joins the fanout group. Needs `CAP_NET_RAW`.
    #[expect(unsafe_code, reason = "mmap(2) of the kernel's packet ring")]
    pub fn open(cfg: &RingConfig) -> io::Result<CaptureRing> {
        let what = format!("capture on {}", cfg.interface);
        let ctx = |e: io::Error| with_context(&e, &what);
        let ifindex = interface_index(&cfg.interface)?;
        // Protocol 0 until the ring exists: no frame is queued outside it.
        let fd = packet_socket(ifindex, 0).map_err(ctx)?;
        let raw = fd.as_raw_fd();
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(raw, libc::SOL_PACKET, libc::PACKET_VERSION, &version).map_err(ctx)?;
        let page = 4096usize;
        let block_size = cfg.block_size.max(page).next_multiple_of(page);
        let blocks = cfg.blocks.max(2);
        let frame_size = 2048usize;
        let req = libc::tpacket_req3 {
            tp_block_size: block_size as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (block_size / frame_size * blocks) as u32,
            tp_retire_blk_tov: cfg.block_timeout.as_millis().clamp(1, 60_000) as u32,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(raw, libc::SOL_PACKET, libc::PACKET_RX_RING, &req).map_err(ctx)?;
        let map_len = block_size * blocks;
        // SAFETY: maps the ring the kernel just allocated for this socket;
        // the mapping is unmapped in Drop, before the fd closes.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED | libc::MAP_POPULATE,
                raw,
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // MAP_LOCKED fails under a small RLIMIT_MEMLOCK: map unlocked.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    raw,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(ctx(io::Error::last_os_error()));
            }
            m
        } else {
            map
        };
        let ring = CaptureRing {
            fd,
            map: map.cast(),
            map_len,
            block_size,
            blocks,
            next: 0,
            stats: RingStats::default(),
            interface: cfg.interface.clone(),
        };
        if cfg.ignore_outgoing {
            let one: libc::c_int = 1;
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one).map_err(ctx)?;
        }
        if cfg.promiscuous {
            let mreq = libc::packet_mreq {
                mr_ifindex: ifindex.cast_signed(),
                mr_type: libc::PACKET_MR_PROMISC as u16,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq).map_err(ctx)?;
        }
        // Now receive every protocol into the ring.
        // SAFETY: sockaddr_ll is plain old data; zero is valid.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = eth_p_all();
        sa.sll_ifindex = ifindex.cast_signed();
        // SAFETY: `sa` is a valid sockaddr_ll for the call.
        cvt(unsafe {
            libc::bind(
                raw,
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map_err(ctx)?;
        if let Some(f) = cfg.fanout {
            let mode = match f.mode {
                FanoutMode::Hash => libc::PACKET_FANOUT_HASH,
                FanoutMode::Cpu => libc::PACKET_FANOUT_CPU,
                FanoutMode::RoundRobin => libc::PACKET_FANOUT_LB,
            };
            let arg = (u32::from(f.group) | (mode << 16)).cast_signed();
            setsockopt(raw, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(ctx)?;
        }
        Ok(ring)
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Bytes of ring memory.
    pub fn ring_bytes(&self) -> usize {
        self.map_len
    }

    fn block_ptr(&self, i: usize) -> *mut u8 {
        // In bounds: i < blocks and the mapping is blocks × block_size.
        self.map.wrapping_add(i * self.block_size)
    }

    #[expect(
        clippy::cast_ptr_alignment,
        reason = "blocks start on page boundaries (the mapping is page-aligned, block sizes are whole pages)"
    )]
    fn desc(&self, i: usize) -> *mut libc::tpacket_block_desc {
        self.block_ptr(i).cast::<libc::tpacket_block_desc>()
    }

    #[expect(unsafe_code, reason = "reads the block status the kernel writes")]
    fn block_ready(&self, i: usize) -> bool {
        let desc = self.desc(i);
        // SAFETY: the block descriptor lies at the start of block i inside
        // the live mapping; the kernel writes it concurrently, hence volatile.
        let status = unsafe { std::ptr::read_volatile(&raw const (*desc).hdr.bh1.block_status) };
        fence(Ordering::Acquire);
        status & libc::TP_STATUS_USER != 0
    }

    /// The next block the kernel filled, waiting at most `timeout`;
    /// `Ok(None)` on timeout. A socket error (the interface went away:
    /// `ENETDOWN`) is returned as an error.
    pub fn next_block(&mut self, timeout: Duration) -> io::Result<Option<Block<'_>>> {
        if !self.block_ready(self.next) {
            if !poll(self.fd.as_raw_fd(), timeout)? {
                return Ok(None);
            }
            if !self.block_ready(self.next) {
                return Ok(None);
            }
        }
        let i = self.next;
        self.next = (self.next + 1) % self.blocks;
        Ok(Some(Block {
            ring: self,
            index: i,
        }))
    }

    /// The kernel's counters since the socket opened (reading resets the
    /// kernel's own; this value accumulates them).
    #[expect(unsafe_code, reason = "getsockopt(2) into a typed value")]
    pub fn stats(&mut self) -> io::Result<RingStats> {
        let mut st = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the given size.
        cvt(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut st).cast(),
                &raw mut len,
            )
        })?;
        self.stats.packets += u64::from(st.tp_packets);
        self.stats.drops += u64::from(st.tp_drops);
        self.stats.freezes += u64::from(st.tp_freeze_q_cnt);
        Ok(self.stats)
    }
}

impl Drop for CaptureRing {
    #[expect(unsafe_code, reason = "unmaps the ring mapped in open")]
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what mmap returned; no Block
        // borrows the ring any more (they borrow it mutably).
        unsafe {
            libc::munmap(self.map.cast(), self.map_len);
        }
    }
}

/// One filled block; the kernel gets it back when this is dropped.
#[derive(Debug)]
pub struct Block<'r> {
    ring: &'r mut CaptureRing,
    index: usize,
}

impl Block<'_> {
    /// The block's frames, in capture order.
    #[expect(unsafe_code, reason = "reads the block header the kernel wrote")]
    pub fn frames(&self) -> Frames<'_> {
        let base = self.ring.block_ptr(self.index);
        let desc = self.ring.desc(self.index);
        // SAFETY: the block is ours (status USER) until drop; its header
        // lies at its start inside the mapping.
        let (n, first) = unsafe {
            let h = &(*desc).hdr.bh1;
            (h.num_pkts, h.offset_to_first_pkt as usize)
        };
        Frames {
            // SAFETY: the whole block lies inside the live mapping and is
            // not written by the kernel while its status is USER.
            block: unsafe { std::slice::from_raw_parts(base, self.ring.block_size) },
            left: n,
            at: first,
        }
    }
}

impl Drop for Block<'_> {
    #[expect(unsafe_code, reason = "hands the block back to the kernel")]
    fn drop(&mut self) {
        let desc = self.ring.desc(self.index);
        fence(Ordering::Release);
        // SAFETY: as in `block_ready`; every read of the block happened
        // before (the fence orders them), and no `Frames` outlives `self`.
        unsafe {
            std::ptr::write_volatile(
                &raw mut (*desc).hdr.bh1.block_status,
                libc::TP_STATUS_KERNEL,
            );
        }
    }
}

/// The frames of a [`Block`].
#[derive(Debug)]
pub struct Frames<'b> {
    block: &'b [u8],
    left: u32,
    at: usize,
}

fn rd32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
}

fn rd16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_ne_bytes([s[0], s[1]]))
}

impl<'b> Iterator for Frames<'b> {
    type Item = Frame<'b>;

    fn next(&mut self) -> Option<Frame<'b>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // tpacket3_hdr: next_offset 0, sec 4, nsec 8, snaplen 12, len 16,
        // status 20, mac 24 (u16), net 26, hv1: rxhash 28, vlan_tci 32,
        // vlan_tpid 36. Read field by field, bounds-checked: a corrupt
        // header ends the block instead of reading outside it.
        let h = self.at;
        let b = self.block;
        let next = rd32(b, h)? as usize;
        let sec = rd32(b, h + 4)?;
        let nsec = rd32(b, h + 8)?;
        let snaplen = rd32(b, h + 12)? as usize;
        let len = rd32(b, h + 16)?;
        let status = rd32(b, h + 20)?;
        let mac = usize::from(rd16(b, h + 24)?);
        let tci = rd32(b, h + 32)? as u16;
        let tpid = rd16(b, h + 36)?;
        let data = b.get(h + mac..h + mac + snaplen)?;
        self.at = if next == 0 { b.len() } else { h + next };
        let vlan = (status & libc::TP_STATUS_VLAN_VALID != 0).then(|| {
            let tpid = if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
                tpid
            } else {
                0x8100
            };
            (tpid, tci)
        });
        Some(Frame {
            data,
            wire_len: len,
            timestamp_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
            vlan,
        })
    }
}

/// `poll(2)` for readability; an error condition on the socket (POLLERR:
/// the interface went away) is read with `SO_ERROR` and returned.
#[expect(
    unsafe_code,
    reason = "poll(2) and getsockopt(2) have no safe std wrapper"
)]
fn poll(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, nfds = 1, lives for the call.
    let rc = unsafe { libc::poll(&raw mut p, 1, ms) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(false)
        } else {
            Err(e)
        };
    }
    if p.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
        let mut err: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `err` and `len` are valid for writes of their sizes.
        unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&raw mut err).cast(),
                &raw mut len,
            );
        }
        let e = if err == 0 {
            io::Error::from_raw_os_error(libc::ENETDOWN)
        } else {
            io::Error::from_raw_os_error(err)
        };
        return Err(e);
    }
    Ok(rc > 0)
}

/// Sends whole frames on one interface (an `AF_PACKET` raw socket that
/// receives nothing).
#[derive(Debug)]
pub struct RawSender {
    fd: OwnedFd,
    interface: String,
    /// Times a full queue (`ENOBUFS`/`EAGAIN`) was waited out.
    pub waits: u64,
}

/// Frames per `sendmmsg` call.
pub const SEND_BATCH: usize = 64;

impl RawSender {
    /// A sender on `interface`. Needs `CAP_NET_RAW`.
    pub fn open(interface: &str) -> io::Result<RawSender> {
        let ifindex = interface_index(interface)?;
        let fd = packet_socket(ifindex, 0)
            .map_err(|e| with_context(&e, &format!("raw socket on {interface}")))?;
        Ok(RawSender {
            fd,
            interface: interface.to_owned(),
            waits: 0,
        })
    }

    /// The interface.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Sends every frame, in order, `SEND_BATCH` per syscall; a full
    /// device queue is waited out (never dropped here). Returns the indexes
    /// of frames the interface refused as larger than its MTU (`EMSGSIZE`;
    /// skipped, the caller counts them). An interface that went away is an
    /// error.
    #[expect(unsafe_code, reason = "sendmmsg(2) over iovecs that borrow the frames")]
    pub fn send_all(&mut self, frames: &[&[u8]]) -> io::Result<Vec<usize>> {
        let mut refused = Vec::new();
        let mut done = 0usize;
        let mut tries = 0u32;
        while done < frames.len() {
            let batch = &frames[done..frames.len().min(done + SEND_BATCH)];
            let mut iov: Vec<libc::iovec> = batch
                .iter()
                .map(|f| libc::iovec {
                    iov_base: f.as_ptr().cast_mut().cast(),
                    iov_len: f.len(),
                })
                .collect();
            let mut msgs: Vec<libc::mmsghdr> = iov
                .iter_mut()
                .map(|v| {
                    // SAFETY: mmsghdr is plain old data; zero is valid.
                    let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                    m.msg_hdr.msg_iov = std::ptr::from_mut(v);
                    m.msg_hdr.msg_iovlen = 1;
                    m
                })
                .collect();
            // SAFETY: every mmsghdr points at one iovec that borrows a live
            // frame; the kernel only reads them during the call.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs.as_mut_ptr(),
                    msgs.len() as libc::c_uint,
                    0,
                )
            };
            if rc > 0 {
                done += rc as usize;
                tries = 0;
                continue;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EMSGSIZE) {
                refused.push(done);
                done += 1;
                continue;
            }
            let full = matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN));
            if (full || e.kind() == io::ErrorKind::Interrupted) && tries < 100_000 {
                tries += 1;
                self.waits += 1;
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            return Err(with_context(&e, &format!("sending on {}", self.interface)));
        }
        Ok(refused)
    }
}
