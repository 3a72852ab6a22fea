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
//!  BatchReceiver::recv_into(&mut RecvBuffer) ── recvmmsg(64 slots × 64 KiB, MSG_DONTWAIT) / ppoll
//!          │  slot: [super-packet] + cmsg UDP_GRO=seg  → split into datagrams
//!          │        + cmsg SO_RXQ_OVFL=cumulative drops → socket_drops()
//!          ▼
//!  RecvBuffer (owned, handed on whole) iterator: Datagram { src, data }
//! ```
//!
//! The socket is non-blocking; waits happen in `ppoll`, so a receive thread
//! can check a stop flag between batches.
//!
//! Modules: [`config`] (what a socket is asked for, what it got, errors),
//! `sys` (socket setup and system-call helpers, private), [`send`]
//! ([`BatchSender`]), [`recv`] ([`BatchReceiver`] and the datagrams it
//! hands out), [`duplex`] (one socket for both directions, for protocols
//! with a return path).

pub mod config;
pub mod duplex;
pub mod recv;
pub mod send;
mod sys;

pub use config::{
    is_path_error, BufferKind, SetupWarning, SocketSetup, UdpConfig, UdpError, MAX_GSO_SEGMENTS,
    MAX_PAYLOAD_V4, MAX_PAYLOAD_V6, MAX_RECV_SLOTS, MAX_SEND_BATCH,
};
pub use duplex::open_duplex;
pub use recv::{BatchReceiver, Datagram, Datagrams, ReceiverCounters, RecvBuffer};
pub use send::{BatchSender, SendReport, SenderCounters};
