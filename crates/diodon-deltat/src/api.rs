//! What the [`crate::Endpoint`] and its connections hand to the
//! application: connection handles, errors, events and counters. A leaf
//! module (it imports only the wire and sequence types), so the endpoint and
//! the per-connection state machine both use it without importing each
//! other.

use crate::seq::Seq;
use crate::wire::NakCode;

/// Opaque handle of a connection record (ids start at 1, never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnHandle(pub(crate) u64);

impl ConnHandle {
    /// The numeric id.
    pub const fn id(self) -> u64 {
        self.0
    }

    /// A handle from its id (for drivers and test scripts).
    pub const fn from_id(id: u64) -> ConnHandle {
        ConnHandle(id)
    }
}

/// Why a connection failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// R7: Stimer expired while SNs were unacknowledged (the peer is gone or
    /// the path lost every retransmission for R).
    #[error("send timer expired with {bytes} bytes unacknowledged")]
    Unacknowledged {
        /// Octets written by the application and never acknowledged.
        bytes: usize,
    },
    /// The peer answered an outstanding segment with a nak.
    #[error("peer refused: {0}")]
    Refused(NakCode),
}

/// Errors of the application calls.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// No such handle (never existed, or closed).
    #[error("unknown connection handle")]
    UnknownHandle,
    /// Nothing to read / no room to write right now.
    #[error("operation would block")]
    WouldBlock,
    /// `write` after `shutdown`.
    #[error("connection is shut down for writing")]
    WriteShutdown,
    /// The connection failed; see the cause.
    #[error("connection failed: {0}")]
    Failed(ConnectionError),
    /// The (local port, remote, remote port) tuple already has a record
    /// (possibly in `TIME_WAIT`).
    #[error("address in use")]
    AddrInUse,
    /// The port is already listened on.
    #[error("port {0} already listening")]
    PortInUse(u16),
    /// Port 0 is reserved.
    #[error("port 0 is not a valid Delta-t port")]
    InvalidPort,
}

/// What happened, for the application and for observers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A listened port has a connection waiting in `accept()`.
    Incoming {
        /// The listened port.
        local_port: u16,
    },
    /// In-order data became readable (edge: buffer went from empty to non-empty).
    Readable(ConnHandle),
    /// The connection failed; writes and (once drained) reads return the error.
    Failed {
        /// Connection.
        handle: ConnHandle,
        /// Cause.
        error: ConnectionError,
    },
    /// A nak arrived (surfaced even when it is only a hint).
    Nak {
        /// Connection.
        handle: ConnHandle,
        /// Error code.
        code: NakCode,
        /// SN the nak refers to.
        sn: Seq,
    },
    /// Stimer expired with everything acknowledged (R7, no error).
    SendTimerExpired(ConnHandle),
    /// Rtimer expired: receive state reset (R4).
    ReceiveTimerExpired(ConnHandle),
    /// A closed record left `TIME_WAIT` and was freed.
    Closed(ConnHandle),
}

diodon_counters::counters! {
    /// Counters; every drop point has one (PROTOCOL-DELTAT.md names them).
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct Stats in Diodon "deltat" {
        datagrams_in: counter Count "datagrams_in" "Datagrams handed to the endpoint.",
        datagrams_out: counter Count "datagrams_out" "Datagrams the endpoint produced.",
        malformed: counter Count "malformed" "Datagrams that failed to parse as a segment.",
        expired: counter Count "expired" "Segments older than their lifetime (deadline passed).",
        deadline_too_far: counter Count "deadline_too_far" "Segments whose deadline lies further ahead than allowed.",
        recovery_drops: counter Count "recovery_drops" "Segments dropped in the restart recovery interval (start_recovery).",
        no_connection: counter Count "no_connection" "Segments for no record and no listener.",
        not_in_data_run: counter Count "not_in_data_run" "Segments without the data-run (D) flag where a receive state would have to open.",
        backlog_full: counter Count "backlog_full" "Connections refused because the listener's backlog was full.",
        time_wait_discards: counter Count "time_wait_discards" "Data or rendezvous segments for a record already closed and waiting out its timers (naked).",
        duplicate_segments: counter Count "duplicate_segments" "Segments already received.",
        out_of_order_segments: counter Count "out_of_order_segments" "Segments received out of order.",
        out_of_window: counter Count "out_of_window" "Segments outside the receive window.",
        overflow_segments: counter Count "overflow_segments" "Segments refused because the receive buffer was full.",
        overflow_bytes: counter Bytes "overflow" "Bytes refused because the receive buffer was full.",
        overruns: counter Count "overruns" "Acknowledgements whose window the sender had overrun (data beyond it is resent).",
        stale_acks: counter Count "stale_acks" "Acknowledgements for data already acknowledged.",
        bytes_sent: counter Bytes "sent" "Payload bytes sent (first transmissions).",
        bytes_acked: counter Bytes "acked" "Payload bytes acknowledged by the peer.",
        bytes_received: counter Bytes "received" "Payload bytes received in order.",
        retransmissions: counter Count "retransmissions" "Segments retransmitted.",
        fast_retransmits: counter Count "fast_retransmits" "Fast retransmissions (duplicate acknowledgements or SACK).",
        rto_expirations: counter Count "rto_expirations" "Retransmission timer expirations.",
        retransmit_limit: counter Count "retransmit_limit" "Records failed because a segment reached the retransmission limit.",
        rendezvous_sent: counter Count "rendezvous_sent" "Rendezvous requests sent.",
        rendezvous_received: counter Count "rendezvous_received" "Rendezvous requests received.",
        reliable_acks_sent: counter Count "reliable_acks_sent" "Reliable acknowledgements sent.",
        reliable_acks_received: counter Count "reliable_acks_received" "Reliable acknowledgements received.",
        naks_sent: counter Count "naks_sent" "Negative acknowledgements sent.",
        naks_received: counter Count "naks_received" "Negative acknowledgements received.",
        stimer_expirations: counter Count "stimer_expirations" "Send-side record timers (Stimer = 3 delta-t) expired.",
        rtimer_expirations: counter Count "rtimer_expirations" "Receive-side record timers (Rtimer = 2 delta-t) expired.",
        connections_opened: counter Count "connections_opened" "Connection records opened.",
        connections_failed: counter Count "connections_failed" "Connection records failed.",
        sack_blocks_sent: counter Count "sack_blocks_sent" "SACK blocks sent.",
        sacked_segments: counter Count "sacked_segments" "Segments marked received by SACK.",
        sack_loss_marks: counter Count "sack_loss_marks" "Segments marked lost by SACK.",
        window_updates: counter Count "window_updates" "Window updates sent.",
    }
}
