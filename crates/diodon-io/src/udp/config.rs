//! What a UDP socket is asked for ([`UdpConfig`]), what it got
//! ([`SocketSetup`], [`SetupWarning`]) and how its calls fail ([`UdpError`]),
//! plus the size limits every caller shares.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

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

/// Socket configuration shared by [`BatchSender`](super::BatchSender) and [`BatchReceiver`](super::BatchReceiver).
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
    /// A datagram of a batch, other than the last, is not `segment_size`
    /// bytes long (or the last is longer): GSO would cut it wrongly.
    #[error("datagram {index} of the batch is {len} bytes, not the segment size {segment_size}")]
    UnevenBatch {
        /// The datagram's place in the batch.
        index: usize,
        /// Its length.
        len: usize,
        /// The batch's segment size.
        segment_size: usize,
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

/// Whether `errno` is about the path rather than the socket: an ICMP error
/// reported for something sent earlier (peer gone, host or network
/// unreachable), or a datagram larger than the path MTU. A receive that
/// reports one has nothing wrong with it; a send that reports one did not
/// leave, and a protocol with retransmission can let it go.
pub fn is_path_error(errno: i32) -> bool {
    matches!(
        errno,
        libc::ECONNREFUSED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::EHOSTDOWN
            | libc::ENETDOWN
            | libc::EMSGSIZE
            | libc::EPROTO
            | libc::ENOPROTOOPT
            | libc::EACCES
            | libc::EPERM
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
