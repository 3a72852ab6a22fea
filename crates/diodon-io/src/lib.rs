//! Diodon's IO layer: the only crate that touches sockets, clocks, kernel
//! counters and network namespaces (and therefore the only `unsafe`).
//!
//! ```text
//!  sans-IO core (diodon-proto)            diodon-io
//!  ---------------------------            ---------------------------------------
//!  poll_transmit -> (buf, seg) ---------> udp::BatchSender  (sendmsg+UDP_SEGMENT,
//!                                                            sendmmsg fallback)
//!  handle_datagram <- (src, &[u8]) <----- udp::BatchReceiver (recvmmsg+UDP_GRO,
//!                                                            SO_RXQ_OVFL drops)
//!  now: Timestamp <---------------------- clock::MonotonicClock
//!  stats exporters <--------------------- counters (/proc/net/snmp, sysfs link stats)
//!  tests / benches ---------------------> netns (enter a testbed namespace)
//!  frames (tap, agent) <----------------- packet::CaptureRing (TPACKET_V3 + fanout, ring drops)
//!  frames ------------------------------> packet::RawSender (sendmmsg), tun::Tun (TAP), pcap
//! ```
//!
//! Modules:
//! - [`clock`]: monotonic clock mapped to [`diodon_sansio::Timestamp`], precise
//!   `sleep_until` for pacers, wall time.
//! - [`udp`]: socket setup (forced buffers, never-fragment, error queue) and
//!   batched send/receive on IPv4 and IPv6.
//! - [`counters`]: kernel counters (UDP MIB, IP fragment counters,
//!   per-interface statistics), snapshots and saturating deltas.
//! - [`tun`]: TUN devices (IP packets in user space): multi-queue, the
//!   virtio-net header and offloads, txqueuelen/MTU/up, the drop counter and
//!   the backpressure probe; TAP devices (Ethernet frames).
//! - [`qdisc`]: a token-bucket qdisc installed in front of an interface
//!   (the tunnel's shaper: bursts wait, local senders block) and its counters,
//!   over rtnetlink.
//! - [`packet`]: `AF_PACKET` capture through a `TPACKET_V3` ring with
//!   fanout and its kernel drop counter, raw frame sending, interface
//!   index and MAC.
//! - [`pcap`]: pcap files (nanosecond timestamps), rotated; read back.
//! - [`signal`]: SIGHUP counted, for reloads.
//! - [`netns`]: move the calling thread into a named network namespace.
//! - [`child`]: child processes that die with their parent (`PR_SET_PDEATHSIG`).
//! - [`fs`]: size and free room of the filesystem under a path (`fstatvfs`).
//! - [`gfni`]: a GF(2)-linear map applied to 16-bit elements with the
//!   CPU's GFNI instructions (found at run time), for the codec's sums.
//! - [`memory`]: glibc malloc's arenas, limited for buffers that change threads.
//! - [`cache`]: bytes a thread reads next, asked for ahead (a prefetch hint).
//! - [`sandbox`]: the process restricting itself (user, capabilities,
//!   `no_new_privs`, Landlock, seccomp); what to allow is the caller's choice.

pub mod cache;
pub mod child;
pub mod clock;
pub mod counters;
pub mod fs;
pub mod gfni;
pub mod memory;
pub mod netns;
pub mod packet;
pub mod pcap;
pub mod qdisc;
pub mod route;
pub mod sandbox;
pub mod signal;
pub mod tun;
pub mod udp;

pub use clock::{unix_time_ms, unix_time_ns, MonotonicClock};
pub use counters::{read_snmp, CounterError, IpSnmp, LinkStats, UdpSnmp};
pub use udp::{
    is_path_error, open_duplex, BatchReceiver, BatchSender, BufferKind, Datagram, ReceiverCounters,
    RecvBuffer, SendReport, SenderCounters, SetupWarning, SocketSetup, UdpConfig, UdpError,
    MAX_GSO_SEGMENTS,
};
