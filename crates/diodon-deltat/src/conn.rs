//! One Delta-t connection record: a send half and a receive half (full
//! duplex), the four timers, reliability (RTO, fast retransmit, acceptance
//! window, out-of-order buffer), flow control with rendezvous-at-sender, and
//! the rules R1–R7 of the thesis (chapter 2.1). Owned and driven by
//! [`crate::Endpoint`] (which it never names: what the two share lives in
//! [`crate::api`]); never touches a socket or a clock.
//!
//! ```text
//!   app write ─▶ snd.buf ─▶ [flight: sent, unacked] ─▶ data ─▶ peer
//!                              ▲ acks (cumulative, O, R) ◀── peer
//!   app read  ◀─ rcv.buf ◀─ in-order ◀─ ooo ◀─ data ◀── peer   ─▶ ack
//!
//!   timers: Retransmit | ReliableAck | Stimer (3Δt, R1/R7) | Rtimer (2Δt, R3/R4)
//!           | Reorder (RACK: a hole's reordering window runs out)
//! ```
//!
//! Loss recovery uses the receiver's SACK blocks when it sends them: a
//! scoreboard marks segments delivered out of order, and [`crate::rack`]
//! decides by time which holes are lost: a segment sent after the hole was
//! delivered *and* a reordering window (a quarter of the smoothed RTT, wider
//! when reordering was seen) has passed since — on an ack, or when the
//! reorder timer fires. Reordering alone, a burst of SACK blocks in one
//! ack or late and stale acks therefore mark nothing lost, while several
//! holes and lost retransmissions are still repaired per round trip.
//! Without SACK, `NewReno` (three duplicate acks, partial acks) as before.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

use diodon_sansio::{TimerSlot, TimerTable, Timestamp};

use crate::api::{ConnHandle, ConnectionError, Error, Event, Stats};
use crate::cc::{Bbr, CongestionControl, Cubic, DeliverySample, NewReno, Unlimited};
use crate::config::{CongestionAlgorithm, Settings, WallClock};
use crate::rack::{Delivered, Rack, Transmission};
use crate::rtt::RttEstimator;
use crate::seq::Seq;
use crate::wire::{
    ControlSegment, Deadline, Flags, Lifetime, NakCode, SackPayload, SegmentRepr, SegmentType,
    MAX_SACK_BLOCKS, MAX_SCALED_WINDOW, WINDOW_SCALE_SHIFT,
};

/// SN shift applied by both ends after a rendezvous (thesis 4.2.8: the maximum
/// window, so no SN sent before the rendezvous can reach the shifted window).
pub const RENDEZVOUS_OFFSET: u32 = 65_535;
/// The shift when the rendezvous's receiver advertises scaled (`W`) windows.
pub const RENDEZVOUS_OFFSET_SCALED: u32 = MAX_SCALED_WINDOW as u32;

/// The rendezvous SN shift for a receiver whose windows are (not) scaled.
const fn rendezvous_offset(scaled: bool) -> u32 {
    if scaled {
        RENDEZVOUS_OFFSET_SCALED
    } else {
        RENDEZVOUS_OFFSET
    }
}

#[derive(Clone, Copy, Debug)]
enum Timer {
    Retransmit,
    ReliableAck,
    Stimer,
    Rtimer,
    /// RACK: the earliest time a hole in the SACK scoreboard becomes lost.
    Reorder,
}

impl TimerSlot for Timer {
    const COUNT: usize = 5;
    fn index(self) -> usize {
        self as usize
    }
}

/// What a connection needs from its endpoint while handling an input.
pub(crate) struct Ctx<'a> {
    pub s: &'a Settings,
    pub wall: WallClock,
    pub stats: &'a mut Stats,
    pub events: &'a mut VecDeque<Event>,
    /// False during the sender's restart quiet interval (3Δt).
    pub may_send_new: bool,
}

#[derive(Debug)]
#[expect(
    clippy::struct_excessive_bools,
    reason = "independent scoreboard marks of one segment"
)]
struct Sent {
    sn: Seq,
    len: u32,
    first_tx: Timestamp,
    last_tx: Timestamp,
    /// R5: lifetime counts down from the first transmission.
    deadline: Deadline,
    retransmitted: bool,
    lost: bool,
    /// R2: retransmitted for R already; blocks new SNs until acked.
    exhausted: bool,
    /// Reported held by the receiver in a SACK block.
    sacked: bool,
    /// When the sender learnt that a segment sent after the last
    /// transmission was delivered (RACK: lost a reordering window later).
    passed: Option<Timestamp>,
    /// `SendState::delivered` and its time at the last transmission.
    tx_delivered: u64,
    tx_delivered_time: Timestamp,
}

impl Sent {
    /// Whether the segment counts as in flight (the "pipe" of RFC 6675).
    fn in_pipe(&self) -> bool {
        !self.lost && !self.exhausted && !self.sacked
    }

    /// Its last transmission, for RACK.
    fn transmission(&self) -> Transmission {
        Transmission {
            xmit: self.last_tx,
            end: self.sn.add(self.len),
        }
    }

    /// It as newly delivered by an ack, for RACK.
    fn delivered(&self) -> Delivered {
        Delivered {
            tx: self.transmission(),
            retransmitted: self.retransmitted,
            marked_lost: self.lost && !self.retransmitted,
            passed: self.passed,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SendRdv {
    None,
    Sent {
        sn: Seq,
        first_tx: Timestamp,
        deadline: Deadline,
        exhausted: bool,
    },
    Acked {
        shifted: Seq,
    },
}

#[derive(Debug)]
struct SendState {
    una: Seq,
    nxt: Seq,
    /// Highest SN sent in this send state (beyond `nxt` after an overrun
    /// rewind: the receiver may have buffered those octets and ack them).
    max: Seq,
    /// `buf[0]` has SN `una`; `[una, nxt)` sent, the rest unsent.
    buf: VecDeque<u8>,
    flight: VecDeque<Sent>,
    /// Peer's advertised window, octets.
    wnd: u32,
    /// The peer's last ack carried `W`: its rendezvous shift is the scaled one.
    peer_scaled: bool,
    dup_acks: u32,
    recover: Option<Seq>,
    /// A segment sent after recovery began was found lost: that is a new
    /// congestion signal, answered by a new recovery when this one ends.
    loss_after_recover: bool,
    rdv: SendRdv,
    /// Octets of `flight` in the pipe (not lost, exhausted or `SACKed`).
    pipe: usize,
    /// Segments of `flight` marked lost and not yet retransmitted.
    lost_count: usize,
    /// Segments of `flight` past their R (R2).
    exhausted_count: usize,
    /// The peer sends SACK blocks (`NewReno` partial-ack guessing is off).
    sack_seen: bool,
    /// Delivery order in time: which holes are lost (RACK).
    rack: Rack,
    /// Octets delivered (acked or `SACKed`) so far, and when the last were.
    delivered: u64,
    delivered_time: Timestamp,
    /// Delivered by the ack being processed, and its most recently sent segment.
    ack_delivered: usize,
    ack_latest: Option<DeliveryMark>,
}

/// The send-time state of the most recently sent segment an ack delivered.
#[derive(Debug, Clone, Copy)]
struct DeliveryMark {
    last_tx: Timestamp,
    tx_delivered: u64,
    tx_delivered_time: Timestamp,
    retransmitted: bool,
}

impl DeliveryMark {
    /// Keeps in `latest` whichever of it and `f` was sent last.
    fn keep_latest(latest: &mut Option<DeliveryMark>, f: &Sent) {
        if latest.is_none_or(|m| f.last_tx >= m.last_tx) {
            *latest = Some(DeliveryMark {
                last_tx: f.last_tx,
                tx_delivered: f.tx_delivered,
                tx_delivered_time: f.tx_delivered_time,
                retransmitted: f.retransmitted,
            });
        }
    }
}

impl SendState {
    /// Stamps a segment about to be (re)transmitted with the delivery state.
    fn stamp(&mut self, now: Timestamp) -> (u64, Timestamp) {
        if self.pipe == 0 {
            // Nothing in flight: idle time must not dilute the next rate sample.
            self.delivered_time = now;
        }
        (self.delivered, self.delivered_time)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecvRdv {
    None,
    /// Rendezvous accepted and window shifted; reliable-ack due when the window opens.
    Accepted {
        rdv_sn: Seq,
    },
    /// Reliable-ack sent; retransmitted until acceptable data arrives.
    RelAck {
        rdv_sn: Seq,
        sn: Seq,
        first_tx: Timestamp,
        deadline: Deadline,
    },
}

#[derive(Debug)]
struct RecvState {
    /// False while Rtimer is zero: only a D-flagged segment is acceptable.
    valid: bool,
    nxt: Seq,
    /// `nxt` as an unwrapped octet offset: the key space of `ooo`.
    nxt_abs: u64,
    buf: VecDeque<u8>,
    /// Out-of-order data by unwrapped offset.
    ooo: BTreeMap<u64, Vec<u8>>,
    ooo_len: usize,
    /// Offset of the latest out-of-order arrival (its SACK block goes first).
    last_ooo: Option<u64>,
    /// Right edge of the largest window advertised since the state opened:
    /// data up to it is accepted even when a scaled window rounds down.
    adv_right: Seq,
    /// The application's reads reopened a small window: tell the sender.
    window_update_due: bool,
    /// Δt of the peer's sending direction (its lifetime field).
    deltat: Lifetime,
    rdv: RecvRdv,
}

impl RecvState {
    fn clear_ooo(&mut self) {
        self.ooo.clear();
        self.ooo_len = 0;
        self.last_ooo = None;
    }

    /// Starts accepting at `sn` (new data run or rendezvous shift).
    fn open_at(&mut self, sn: Seq) {
        self.nxt = sn;
        self.adv_right = sn;
        self.clear_ooo();
    }

    fn advance(&mut self, n: usize) {
        self.nxt = self.nxt.add(n as u32);
        self.nxt_abs += n as u64;
    }

    /// Stores `bytes` at offset `off` from `nxt`; returns octets made readable.
    fn insert(&mut self, off: u32, bytes: &[u8], window: usize) -> usize {
        if off > 0 {
            let start = self.nxt_abs + u64::from(off);
            let end = start + bytes.len() as u64;
            let covered = self
                .ooo
                .range(..=start)
                .next_back()
                .is_some_and(|(k, d)| k + d.len() as u64 >= end);
            if !covered && self.ooo_len + bytes.len() <= window {
                if let Some(old) = self.ooo.insert(start, bytes.to_vec()) {
                    self.ooo_len -= old.len();
                }
                self.ooo_len += bytes.len();
                self.last_ooo = Some(start);
            }
            return 0;
        }
        let before = self.buf.len();
        self.buf.extend(bytes);
        self.advance(bytes.len());
        while let Some(entry) = self.ooo.first_entry() {
            let start = *entry.key();
            if start > self.nxt_abs {
                break;
            }
            let d = entry.remove();
            self.ooo_len -= d.len();
            let skip = usize::try_from(self.nxt_abs - start).unwrap_or(usize::MAX);
            if skip < d.len() {
                self.buf.extend(&d[skip..]);
                self.advance(d.len() - skip);
            }
        }
        self.buf.len() - before
    }

    /// The out-of-order data as SACK blocks: the block of the latest arrival
    /// first (RFC 2018), then the others from the lowest up.
    fn sack_blocks(&self) -> Vec<(Seq, Seq)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (&start, d) in &self.ooo {
            let end = start + d.len() as u64;
            match ranges.last_mut() {
                Some(r) if start <= r.1 => r.1 = r.1.max(end),
                _ => ranges.push((start, end)),
            }
        }
        if let Some(last) = self.last_ooo {
            if let Some(i) = ranges.iter().position(|r| r.0 <= last && last < r.1) {
                let r = ranges.remove(i);
                ranges.insert(0, r);
            }
        }
        ranges.truncate(MAX_SACK_BLOCKS);
        let seq = |abs: u64| self.nxt.add((abs - self.nxt_abs) as u32);
        ranges.iter().map(|&(s, e)| (seq(s), seq(e))).collect()
    }
}

/// A connection record.
#[derive(Debug)]
pub(crate) struct Connection {
    pub handle: ConnHandle,
    pub local_port: u16,
    pub remote: SocketAddr,
    pub remote_port: u16,
    /// The application closed the handle (`TIME_WAIT` while timers run).
    pub time_wait: bool,
    pub write_shutdown: bool,
    pub failed: Option<ConnectionError>,
    timers: TimerTable<Timer>,
    snd: SendState,
    rcv: RecvState,
    /// Segments without data waiting to be sent (acks, rendezvous).
    out: VecDeque<ControlSegment>,
    cc: Box<dyn CongestionControl>,
    rtt: RttEstimator,
}

impl Connection {
    pub fn new(
        handle: ConnHandle,
        local_port: u16,
        remote: SocketAddr,
        remote_port: u16,
        s: &Settings,
    ) -> Connection {
        let cfg = &s.cfg;
        let cc: Box<dyn CongestionControl> = match cfg.congestion {
            CongestionAlgorithm::NewReno => {
                Box::new(NewReno::new(cfg.max_payload, cfg.initial_window_segments))
            }
            CongestionAlgorithm::Cubic => {
                Box::new(Cubic::new(cfg.max_payload, cfg.initial_window_segments))
            }
            CongestionAlgorithm::Bbr => {
                Box::new(Bbr::new(cfg.max_payload, cfg.initial_window_segments))
            }
            CongestionAlgorithm::Unlimited => Box::new(Unlimited),
        };
        let isn = Seq(cfg.initial_sn);
        Connection {
            handle,
            local_port,
            remote,
            remote_port,
            time_wait: false,
            write_shutdown: false,
            failed: None,
            timers: TimerTable::default(),
            snd: SendState {
                una: isn,
                nxt: isn,
                max: isn,
                buf: VecDeque::new(),
                flight: VecDeque::new(),
                wnd: u32::from(u16::MAX),
                peer_scaled: false,
                dup_acks: 0,
                recover: None,
                loss_after_recover: false,
                rdv: SendRdv::None,
                pipe: 0,
                lost_count: 0,
                exhausted_count: 0,
                sack_seen: false,
                rack: Rack::new(),
                delivered: 0,
                delivered_time: Timestamp::ZERO,
                ack_delivered: 0,
                ack_latest: None,
            },
            rcv: RecvState {
                valid: false,
                nxt: Seq(0),
                nxt_abs: 0,
                buf: VecDeque::new(),
                ooo: BTreeMap::new(),
                ooo_len: 0,
                last_ooo: None,
                adv_right: Seq(0),
                window_update_due: false,
                deltat: s.delta_t,
                rdv: RecvRdv::None,
            },
            out: VecDeque::new(),
            cc,
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
        }
    }

    // ---- application side ------------------------------------------------

    pub fn write(&mut self, data: &[u8], s: &Settings) -> Result<usize, Error> {
        if let Some(e) = &self.failed {
            return Err(Error::Failed(e.clone()));
        }
        if self.write_shutdown {
            return Err(Error::WriteShutdown);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let room = s.cfg.send_buffer.saturating_sub(self.snd.buf.len());
        if room == 0 {
            return Err(Error::WouldBlock);
        }
        let n = room.min(data.len());
        self.snd.buf.extend(&data[..n]);
        Ok(n)
    }

    pub fn read(&mut self, out: &mut [u8], s: &Settings) -> Result<usize, Error> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.rcv.buf.is_empty() {
            return match &self.failed {
                Some(e) => Err(Error::Failed(e.clone())),
                None => Err(Error::WouldBlock),
            };
        }
        let n = out.len().min(self.rcv.buf.len());
        for (dst, src) in out.iter_mut().zip(self.rcv.buf.drain(..n)) {
            *dst = src;
        }
        // A window that had shrunk below half the buffer (but not to zero:
        // that is the rendezvous's job) and is now at least half open again
        // is announced at once instead of with the next data's ack.
        let half = s.cfg.recv_buffer / 2;
        let advertised = usize::try_from(self.rcv.adv_right.diff(self.rcv.nxt)).unwrap_or(0);
        let free = s.cfg.recv_buffer.saturating_sub(self.rcv.buf.len());
        if self.rcv.valid
            && advertised > 0
            && advertised < half
            && free >= half
            && self.rcv.rdv == RecvRdv::None
        {
            self.rcv.window_update_due = true;
        }
        Ok(n)
    }

    pub fn readable(&self) -> usize {
        self.rcv.buf.len()
    }

    /// Octets written but not yet acknowledged.
    pub fn unacked(&self) -> usize {
        self.snd.buf.len()
    }

    pub fn send_capacity(&self, s: &Settings) -> usize {
        s.cfg.send_buffer.saturating_sub(self.snd.buf.len())
    }

    pub fn timers_running(&self) -> bool {
        self.timers.get(Timer::Stimer).is_some() || self.timers.get(Timer::Rtimer).is_some()
    }

    /// `TIME_WAIT` record whose timers have run out and that owes nothing.
    pub fn is_reapable(&self) -> bool {
        self.time_wait
            && !self.timers_running()
            && self.out.is_empty()
            && (self.snd.buf.is_empty() || self.failed.is_some())
    }

    pub fn next_timeout(&self) -> Option<Timestamp> {
        self.timers.next()
    }

    // ---- segment construction -----------------------------------------------

    /// The header of a segment of ours; the window field (and `W`) is our
    /// receive window (advertising it remembers its right edge).
    #[expect(clippy::too_many_arguments, reason = "one argument per header field")]
    fn header<'p>(
        &mut self,
        s: &Settings,
        kind: SegmentType,
        flags: Flags,
        sn: Seq,
        deadline: Deadline,
        lifetime: Lifetime,
        payload: &'p [u8],
    ) -> SegmentRepr<'p> {
        let (window, scaled) = self.advertise(s);
        SegmentRepr {
            src_port: self.local_port,
            dst_port: self.remote_port,
            kind,
            flags: flags.with(scaled),
            sn,
            deadline,
            lifetime,
            window,
            payload,
        }
    }

    /// A segment of ours without data (ack with SACK blocks, rendezvous),
    /// held inline.
    #[expect(clippy::too_many_arguments, reason = "one argument per header field")]
    fn control(
        &mut self,
        s: &Settings,
        kind: SegmentType,
        flags: Flags,
        sn: Seq,
        deadline: Deadline,
        lifetime: Lifetime,
        payload: &[u8],
    ) -> ControlSegment {
        self.header(s, kind, flags, sn, deadline, lifetime, payload)
            .to_control()
            .expect("a control payload is at most the SACK blocks")
    }

    /// Appends a data segment carrying `len` send-buffer octets from `off`
    /// (relative to `una`) to `buf`, copied straight from the send buffer;
    /// returns the segment's length.
    #[expect(clippy::too_many_arguments, reason = "one argument per header field")]
    fn append_data(
        &mut self,
        s: &Settings,
        flags: Flags,
        sn: Seq,
        deadline: Deadline,
        off: usize,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> usize {
        let repr = self.header(s, SegmentType::Data, flags, sn, deadline, s.delta_t, &[]);
        let (a, b) = self.snd.buf.as_slices();
        let parts = if off + len <= a.len() {
            [&a[off..off + len], &[][..]]
        } else if off >= a.len() {
            [&b[off - a.len()..off - a.len() + len], &[][..]]
        } else {
            [&a[off..], &b[..off + len - a.len()]]
        };
        repr.append_gathered(parts, buf)
            .expect("payload bounded by the validated max_payload")
    }

    /// Free receive buffer in octets.
    fn rcv_free(&self, s: &Settings) -> usize {
        s.cfg.recv_buffer.saturating_sub(self.rcv.buf.len())
    }

    /// The window to advertise now: the field and the `W` flag when scaled.
    /// Remembers the right edge, which data is accepted up to.
    fn advertise(&mut self, s: &Settings) -> (u16, Flags) {
        let free = self.rcv_free(s);
        let (field, flag, octets) = if s.scaled_window() {
            let field = u16::try_from(free >> WINDOW_SCALE_SHIFT).unwrap_or(u16::MAX);
            (field, Flags::W, u32::from(field) << WINDOW_SCALE_SHIFT)
        } else {
            let field = u16::try_from(free).unwrap_or(u16::MAX);
            (field, Flags::NONE, u32::from(field))
        };
        let right = self.rcv.nxt.add(octets);
        if self.rcv.adv_right.before(right) {
            self.rcv.adv_right = right;
        }
        (field, flag)
    }

    /// Octets beyond `rcv.nxt` that are accepted: the free buffer, or the
    /// right edge already advertised if that is further (never moves left).
    fn accept_limit(&self, s: &Settings) -> i64 {
        let free = i64::try_from(self.rcv_free(s)).unwrap_or(i64::MAX);
        self.rcv.adv_right.diff(self.rcv.nxt).max(free)
    }

    /// R6: an ack's lifetime is Δt (the peer's) from the moment its SN was
    /// tested. Carries SACK blocks when out-of-order data is held.
    fn queue_ack(&mut self, now: Timestamp, ctx: &mut Ctx<'_>, sn: Seq, flags: Flags) {
        let lifetime = self.rcv.deltat;
        let sack = if ctx.s.cfg.sack && self.rcv.valid && !self.rcv.ooo.is_empty() {
            let blocks = self.rcv.sack_blocks();
            ctx.stats.sack_blocks_sent += blocks.len() as u64;
            SackPayload::new(&blocks)
        } else {
            SackPayload::EMPTY
        };
        let seg = self.control(
            ctx.s,
            SegmentType::Ack,
            flags,
            sn,
            ctx.wall.deadline(now, lifetime),
            lifetime,
            sack.as_slice(),
        );
        self.out.push_back(seg);
    }

    pub fn nak(
        repr: &SegmentRepr<'_>,
        code: NakCode,
        now: Timestamp,
        s: &Settings,
        wall: WallClock,
    ) -> ControlSegment {
        SegmentRepr {
            src_port: repr.dst_port,
            dst_port: repr.src_port,
            kind: SegmentType::Nak,
            flags: Flags::NONE,
            sn: repr.sn,
            deadline: wall.deadline(now, s.delta_t),
            lifetime: s.delta_t,
            window: code.to_u16(),
            payload: &[],
        }
        .to_control()
        .expect("nak has no payload")
    }

    fn fail(&mut self, error: ConnectionError, ctx: &mut Ctx<'_>) {
        if self.failed.is_some() {
            return;
        }
        ctx.stats.connections_failed += 1;
        self.snd.buf.clear();
        self.clear_flight();
        self.snd.nxt = self.snd.una;
        self.snd.max = self.snd.una;
        self.snd.rdv = SendRdv::None;
        self.timers.stop(Timer::Retransmit);
        ctx.events.push_back(Event::Failed {
            handle: self.handle,
            error: error.clone(),
        });
        self.failed = Some(error);
    }

    // ---- inbound ------------------------------------------------------------

    pub fn handle_segment(&mut self, now: Timestamp, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        match seg.kind {
            SegmentType::Data | SegmentType::Rendezvous if self.time_wait => {
                ctx.stats.time_wait_discards += 1;
                ctx.stats.naks_sent += 1;
                self.out
                    .push_back(Connection::nak(seg, NakCode::Closed, now, ctx.s, ctx.wall));
            }
            SegmentType::Data => self.on_data(now, seg, ctx),
            SegmentType::Rendezvous => self.on_rendezvous(now, seg, ctx),
            SegmentType::Ack => self.on_ack(now, seg, ctx),
            SegmentType::Nak => self.on_nak(seg, ctx),
        }
    }

    /// Opens the receive state on a D-flagged segment when Rtimer is zero.
    fn accept_state(&mut self, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) -> bool {
        if self.rcv.valid {
            return true;
        }
        if !seg.flags.contains(Flags::D) {
            ctx.stats.not_in_data_run += 1;
            return false;
        }
        self.rcv.valid = true;
        self.rcv.open_at(seg.sn);
        self.rcv.deltat = seg.lifetime;
        self.rcv.rdv = RecvRdv::None;
        true
    }

    /// R3: Rtimer = 2Δt from now.
    fn refresh_rtimer(&mut self, now: Timestamp, lifetime: Lifetime) {
        self.rcv.deltat = lifetime;
        self.timers
            .set(Timer::Rtimer, now + 2 * lifetime.duration());
    }

    fn on_data(&mut self, now: Timestamp, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        if !self.accept_state(seg, ctx) {
            return;
        }
        let off = seg.sn.diff(self.rcv.nxt);
        let len = i64::try_from(seg.payload.len()).unwrap_or(i64::MAX);
        let end = off + len;
        if end <= 0 {
            ctx.stats.duplicate_segments += 1;
            self.queue_ack(now, ctx, self.rcv.nxt, Flags::NONE);
            return;
        }
        let wnd = self.accept_limit(ctx.s);
        let start = off.max(0);
        let accept_end = end.min(wnd);
        let overflow = end > wnd;
        let mut accepted = false;
        let mut readable = 0;
        if accept_end > start {
            let bytes = &seg.payload[(start - off) as usize..(accept_end - off) as usize];
            readable = self.rcv.insert(start as u32, bytes, wnd as usize);
            accepted = true;
            if start > 0 {
                ctx.stats.out_of_order_segments += 1;
            }
        }
        if overflow {
            ctx.stats.overflow_segments += 1;
            ctx.stats.overflow_bytes += (end - accept_end.max(start)) as u64;
        }
        if accepted || overflow {
            self.refresh_rtimer(now, seg.lifetime);
        }
        if accepted {
            if let RecvRdv::RelAck { .. } = self.rcv.rdv {
                self.rcv.rdv = RecvRdv::None;
                self.timers.stop(Timer::ReliableAck);
            }
        }
        if readable > 0 {
            ctx.stats.bytes_received += readable as u64;
            if self.rcv.buf.len() == readable {
                ctx.events.push_back(Event::Readable(self.handle));
            }
        }
        let flags = if overflow { Flags::O } else { Flags::NONE };
        self.queue_ack(now, ctx, self.rcv.nxt, flags);
    }

    fn on_rendezvous(&mut self, now: Timestamp, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        if !self.accept_state(seg, ctx) {
            return;
        }
        match self.rcv.rdv {
            RecvRdv::Accepted { rdv_sn } | RecvRdv::RelAck { rdv_sn, .. } if rdv_sn == seg.sn => {
                ctx.stats.duplicate_segments += 1;
                self.queue_ack(now, ctx, rdv_sn.add(1), Flags::NONE);
                return;
            }
            _ => {}
        }
        if seg.sn != self.rcv.nxt {
            ctx.stats.out_of_window += 1;
            self.queue_ack(now, ctx, self.rcv.nxt, Flags::NONE);
            return;
        }
        ctx.stats.rendezvous_received += 1;
        self.refresh_rtimer(now, seg.lifetime);
        self.rcv.clear_ooo();
        self.queue_ack(now, ctx, seg.sn.add(1), Flags::NONE);
        self.rcv
            .open_at(seg.sn.add(rendezvous_offset(ctx.s.scaled_window())));
        self.rcv.rdv = RecvRdv::Accepted { rdv_sn: seg.sn };
    }

    /// Forgets every segment in flight (overrun, rendezvous, R7, failure).
    fn clear_flight(&mut self) {
        self.snd.flight.clear();
        self.snd.pipe = 0;
        self.snd.lost_count = 0;
        self.snd.exhausted_count = 0;
        self.snd.loss_after_recover = false;
        self.snd.rack.reset();
        self.timers.stop(Timer::Reorder);
    }

    /// Pipe octets, lost and exhausted segments, counted from the flight.
    fn recount(&self) -> (usize, usize, usize) {
        let (mut pipe, mut lost, mut exhausted) = (0, 0, 0);
        for f in &self.snd.flight {
            if f.in_pipe() {
                pipe += f.len as usize;
            }
            lost += usize::from(f.lost);
            exhausted += usize::from(f.exhausted);
        }
        (pipe, lost, exhausted)
    }

    /// Recounts the pipe, lost and exhausted segments after bulk changes.
    fn rescan(&mut self) {
        (self.snd.pipe, self.snd.lost_count, self.snd.exhausted_count) = self.recount();
    }

    /// Whether the incremental scoreboard counters equal a recount, and the
    /// flight is in SN order (checked by fuzzing and the simulator tests).
    pub fn scoreboard_consistent(&self) -> bool {
        let (pipe, lost, exhausted) = self.recount();
        let ordered = self
            .snd
            .flight
            .iter()
            .zip(self.snd.flight.iter().skip(1))
            .all(|(a, b)| !b.sn.before(a.sn.add(a.len)));
        ordered
            && pipe == self.snd.pipe
            && lost == self.snd.lost_count
            && exhausted == self.snd.exhausted_count
            && self.rcv.ooo_len == self.rcv.ooo.values().map(Vec::len).sum::<usize>()
    }

    /// Marks `f` lost (it leaves the pipe until retransmitted).
    fn mark_lost(snd: &mut SendState, i: usize) {
        let f = &mut snd.flight[i];
        if f.lost || f.exhausted || f.sacked {
            return;
        }
        f.lost = true;
        snd.pipe -= f.len as usize;
        snd.lost_count += 1;
    }

    fn finish_rendezvous(&mut self, sn: Seq, window: u32) {
        self.snd.rdv = SendRdv::None;
        self.snd.una = sn;
        self.snd.nxt = sn;
        self.snd.max = sn;
        self.clear_flight();
        self.snd.wnd = window;
        self.timers.stop(Timer::Retransmit);
        self.rtt.reset_backoff();
    }

    /// Applies an ack's SACK blocks to the scoreboard.
    fn apply_sack(&mut self, now: Timestamp, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        let (min_rtt, nxt) = (self.rtt.min_rtt(), self.snd.nxt);
        for (start, end) in seg.sack_blocks() {
            self.snd.sack_seen = true;
            if end.diff(self.snd.una) <= 0 || start.diff(self.snd.max) >= 0 {
                continue;
            }
            let from = self.snd.flight.partition_point(|f| f.sn.before(start));
            for f in self.snd.flight.range_mut(from..) {
                if f.sn.add(f.len).diff(end) > 0 {
                    break;
                }
                if f.sacked {
                    continue;
                }
                self.snd.rack.on_delivered(now, f.delivered(), min_rtt, nxt);
                if f.in_pipe() {
                    self.snd.pipe -= f.len as usize;
                }
                if f.lost {
                    // Marked lost but delivered before it was resent.
                    f.lost = false;
                    self.snd.lost_count -= 1;
                }
                f.sacked = true;
                ctx.stats.sacked_segments += 1;
                self.snd.ack_delivered += f.len as usize;
                DeliveryMark::keep_latest(&mut self.snd.ack_latest, f);
            }
        }
    }

    /// Gives the congestion controller the delivery-rate sample of this ack.
    fn report_delivery(&mut self, now: Timestamp) {
        let newly = std::mem::take(&mut self.snd.ack_delivered);
        let latest = self.snd.ack_latest.take();
        if newly == 0 {
            return;
        }
        self.snd.delivered += newly as u64;
        self.snd.delivered_time = now;
        let Some(mark) = latest else {
            return;
        };
        self.cc.on_delivered(
            now,
            &DeliverySample {
                newly_delivered: newly,
                delivered: self.snd.delivered - mark.tx_delivered,
                interval: now.saturating_duration_since(mark.tx_delivered_time),
                rtt: (!mark.retransmitted).then(|| now.saturating_duration_since(mark.last_tx)),
                prior_delivered: mark.tx_delivered,
                total_delivered: self.snd.delivered,
            },
        );
    }

    /// SACK-based loss detection by time (RACK, RFC 8985): a segment in
    /// flight is lost once a segment sent after it was delivered and the
    /// reordering window has passed since the sender learnt that (this also
    /// finds lost retransmissions); the reorder timer is armed for the
    /// earliest hole still inside its window. The first loss enters recovery.
    fn detect_losses(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) {
        let window = self.snd.rack.reorder_window(self.rtt.srtt());
        let mut marked = 0u64;
        let mut next: Option<Timestamp> = None;
        for i in 0..self.snd.flight.len() {
            let f = &mut self.snd.flight[i];
            let first = Transmission {
                xmit: f.first_tx,
                end: f.sn.add(f.len),
            };
            if !self.snd.rack.passed(first) {
                // First sent no earlier than the latest delivered segment,
                // like every segment after it (the flight is in SN order,
                // first transmissions in time order): none of them is passed.
                break;
            }
            if !f.in_pipe() || !self.snd.rack.passed(f.transmission()) {
                continue;
            }
            let at = *f.passed.get_or_insert(now) + window;
            if at <= now {
                if self.snd.recover.is_some_and(|r| !f.sn.before(r)) {
                    self.snd.loss_after_recover = true;
                }
                Self::mark_lost(&mut self.snd, i);
                marked += 1;
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        match next {
            Some(at) => self.timers.set(Timer::Reorder, at),
            None => self.timers.stop(Timer::Reorder),
        }
        if marked > 0 {
            ctx.stats.sack_loss_marks += marked;
            if self.snd.recover.is_none() {
                self.enter_recovery(now, ctx);
            }
        }
    }

    /// Fast recovery after losses found from SACK blocks: one window
    /// reduction until everything sent so far is acked.
    fn enter_recovery(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) {
        ctx.stats.fast_retransmits += 1;
        self.snd.recover = Some(self.snd.nxt);
        self.snd.loss_after_recover = false;
        self.snd.rack.on_recovery();
        // The base is never above the window: a long recovery leaves much
        // `SACKed` data outstanding, and a loss must not raise the window.
        let base = self.flight_size().min(self.cc.window());
        self.cc.on_congestion_event(now, base);
    }

    fn on_ack(&mut self, now: Timestamp, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        if self.failed.is_some() {
            return;
        }
        self.snd.peer_scaled = seg.flags.contains(Flags::W);
        let offset = rendezvous_offset(self.snd.peer_scaled);
        if seg.flags.contains(Flags::R) {
            let expected = match self.snd.rdv {
                SendRdv::Sent { sn, .. } => Some(sn.add(offset)),
                SendRdv::Acked { shifted } => Some(shifted),
                SendRdv::None => None,
            };
            if expected == Some(seg.sn) {
                ctx.stats.reliable_acks_received += 1;
                self.finish_rendezvous(seg.sn, seg.window_octets());
            } else if self.snd.rdv == SendRdv::None && seg.sn == self.snd.una {
                self.snd.wnd = seg.window_octets();
            } else {
                ctx.stats.stale_acks += 1;
            }
            return;
        }
        match self.snd.rdv {
            SendRdv::Sent { sn, .. } => {
                if seg.sn == sn.add(1) {
                    let shifted = sn.add(offset);
                    self.snd.rdv = SendRdv::Acked { shifted };
                    self.snd.una = shifted;
                    self.snd.nxt = shifted;
                    self.snd.max = shifted;
                    self.snd.wnd = 0;
                    self.timers.stop(Timer::Retransmit);
                    self.rtt.reset_backoff();
                } else {
                    ctx.stats.stale_acks += 1;
                }
                return;
            }
            SendRdv::Acked { shifted } => {
                if seg.sn == shifted && seg.window > 0 {
                    self.finish_rendezvous(shifted, seg.window_octets());
                } else {
                    ctx.stats.stale_acks += 1;
                }
                return;
            }
            SendRdv::None => {}
        }
        let acked = seg.sn.diff(self.snd.una);
        let span = self.snd.nxt.diff(self.snd.una);
        if acked < 0 || acked > self.snd.max.diff(self.snd.una) {
            ctx.stats.stale_acks += 1;
            return;
        }
        let overflow = seg.flags.contains(Flags::O);
        let window = seg.window_octets();
        if acked > 0 {
            self.on_new_ack(now, seg.sn, acked as usize, ctx);
        } else if span > 0
            && !overflow
            && window == self.snd.wnd
            && !self.snd.sack_seen
            && seg.payload.is_empty()
        {
            // `NewReno` for a peer that sends no SACK blocks; with them a
            // duplicate ack is only reordering until RACK says otherwise.
            self.snd.dup_acks += 1;
            if self.snd.dup_acks == ctx.s.cfg.dup_ack_threshold && self.snd.recover.is_none() {
                ctx.stats.fast_retransmits += 1;
                let in_flight = self.flight_size();
                if !self.snd.flight.is_empty() {
                    Self::mark_lost(&mut self.snd, 0);
                }
                self.snd.recover = Some(self.snd.nxt);
                self.cc.on_congestion_event(now, in_flight);
            }
        }
        if !overflow {
            if !seg.payload.is_empty() {
                self.apply_sack(now, seg, ctx);
            }
            if self.snd.sack_seen {
                self.detect_losses(now, ctx);
            }
        }
        self.report_delivery(now);
        self.snd.wnd = window;
        if overflow {
            // Window overrun: everything beyond the ack is treated as never sent.
            ctx.stats.overruns += 1;
            self.clear_flight();
            self.snd.nxt = self.snd.una;
            self.snd.recover = None;
            self.snd.dup_acks = 0;
            self.timers.stop(Timer::Retransmit);
        }
    }

    fn on_new_ack(&mut self, now: Timestamp, ack: Seq, acked: usize, ctx: &mut Ctx<'_>) {
        self.snd.buf.drain(..acked.min(self.snd.buf.len()));
        self.snd.una = ack;
        if self.snd.nxt.before(ack) {
            self.snd.nxt = ack;
        }
        ctx.stats.bytes_acked += acked as u64;
        let mut sample = None;
        let (min_rtt, nxt) = (self.rtt.min_rtt(), self.snd.nxt);
        while let Some(f) = self.snd.flight.front_mut() {
            if f.sn.add(f.len).diff(ack) <= 0 {
                if !f.retransmitted {
                    sample = Some(now - f.last_tx);
                }
                if !f.sacked {
                    self.snd.rack.on_delivered(now, f.delivered(), min_rtt, nxt);
                }
                if f.in_pipe() {
                    self.snd.pipe -= f.len as usize;
                }
                self.snd.lost_count -= usize::from(f.lost);
                self.snd.exhausted_count -= usize::from(f.exhausted);
                if !f.sacked {
                    self.snd.ack_delivered += f.len as usize;
                    DeliveryMark::keep_latest(&mut self.snd.ack_latest, f);
                }
                self.snd.flight.pop_front();
            } else {
                if f.sn.before(ack) {
                    let cut = ack.diff(f.sn) as u32;
                    f.sn = ack;
                    f.len -= cut;
                    if f.in_pipe() {
                        self.snd.pipe -= cut as usize;
                    }
                    if !f.sacked {
                        self.snd.ack_delivered += cut as usize;
                    }
                }
                break;
            }
        }
        if let Some(r) = sample {
            self.rtt.on_sample(r);
        }
        self.rtt.reset_backoff();
        self.snd.dup_acks = 0;
        match self.snd.recover {
            Some(r) if !ack.before(r) => {
                self.snd.recover = None;
                self.cc.on_recovery_end(now);
                if std::mem::take(&mut self.snd.loss_after_recover) {
                    self.enter_recovery(now, ctx);
                }
            }
            Some(_) if !self.snd.sack_seen => {
                // `NewReno` partial ack: the next hole is lost too (with SACK,
                // the scoreboard knows which holes are).
                if !self.snd.flight.is_empty() {
                    Self::mark_lost(&mut self.snd, 0);
                }
            }
            Some(_) => {}
            None => self.cc.on_ack(now, acked, self.rtt.srtt()),
        }
        if self.snd.flight.is_empty() {
            self.timers.stop(Timer::Retransmit);
            self.timers.stop(Timer::Reorder);
        } else {
            self.arm_rto(now, ctx.s);
        }
    }

    fn on_nak(&mut self, seg: &SegmentRepr<'_>, ctx: &mut Ctx<'_>) {
        ctx.stats.naks_received += 1;
        let code = NakCode::from_u16(seg.window);
        ctx.events.push_back(Event::Nak {
            handle: self.handle,
            code,
            sn: seg.sn,
        });
        let in_flight = (!seg.sn.before(self.snd.una) && seg.sn.before(self.snd.nxt))
            || matches!(self.snd.rdv, SendRdv::Sent { sn, .. } if sn == seg.sn);
        if in_flight
            && matches!(
                code,
                NakCode::PortUnreachable | NakCode::Closed | NakCode::BacklogFull
            )
        {
            self.fail(ConnectionError::Refused(code), ctx);
        }
    }

    // ---- timers -------------------------------------------------------------

    /// Octets in the pipe: sent, not acked, `SACKed`, lost or exhausted.
    fn bytes_in_flight(&self) -> usize {
        self.snd.pipe
    }

    /// RFC 5681's `FlightSize`: sent and not yet cumulatively acked (`SACKed`
    /// octets included), the base of a window reduction.
    fn flight_size(&self) -> usize {
        usize::try_from(self.snd.nxt.diff(self.snd.una)).unwrap_or(0)
    }

    fn blocked(&self) -> bool {
        self.snd.exhausted_count > 0
            || matches!(
                self.snd.rdv,
                SendRdv::Sent {
                    exhausted: true,
                    ..
                }
            )
    }

    /// Next retransmission: now + RTO, but never past the R limit of the
    /// oldest segment still eligible (so its last attempt happens at R).
    fn arm_rto(&mut self, now: Timestamp, s: &Settings) {
        let rto = self.rtt.rto();
        let limit = match self.snd.rdv {
            SendRdv::Sent { first_tx, .. } => Some(first_tx + s.cfg.max_retransmit_time),
            _ => self
                .snd
                .flight
                .iter()
                .find(|f| !f.exhausted)
                .map(|f| f.first_tx + s.cfg.max_retransmit_time),
        };
        let at = match limit {
            Some(l) if l > now => (now + rto).min(l),
            _ => now + rto,
        };
        self.timers.set(Timer::Retransmit, at);
    }

    pub fn handle_timeout(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) {
        if self.timers.take_expired(Timer::Retransmit, now) {
            self.on_rto(now, ctx);
        }
        if self.timers.take_expired(Timer::Reorder, now) && self.failed.is_none() {
            self.detect_losses(now, ctx);
        }
        if self.timers.take_expired(Timer::ReliableAck, now) {
            self.on_reliable_ack_timer(now, ctx);
        }
        if self.timers.take_expired(Timer::Stimer, now) {
            self.on_stimer(ctx);
        }
        if self.timers.take_expired(Timer::Rtimer, now) {
            // R4: receive state back to defaults.
            ctx.stats.rtimer_expirations += 1;
            self.rcv.valid = false;
            self.rcv.clear_ooo();
            self.rcv.rdv = RecvRdv::None;
            self.timers.stop(Timer::ReliableAck);
            ctx.events
                .push_back(Event::ReceiveTimerExpired(self.handle));
        }
    }

    fn on_rto(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) {
        let r = ctx.s.cfg.max_retransmit_time;
        if let SendRdv::Sent {
            sn,
            first_tx,
            deadline,
            exhausted: false,
        } = self.snd.rdv
        {
            if now <= first_tx + r {
                ctx.stats.retransmissions += 1;
                let seg = self.control(
                    ctx.s,
                    SegmentType::Rendezvous,
                    Flags::D,
                    sn,
                    deadline,
                    ctx.s.delta_t,
                    &[],
                );
                self.out.push_back(seg);
                self.rtt.back_off();
                self.arm_rto(now, ctx.s);
            } else {
                ctx.stats.retransmit_limit += 1;
                self.snd.rdv = SendRdv::Sent {
                    sn,
                    first_tx,
                    deadline,
                    exhausted: true,
                };
            }
            return;
        }
        if self.snd.flight.is_empty() {
            return;
        }
        ctx.stats.rto_expirations += 1;
        self.cc.on_retransmission_timeout(now, self.flight_size());
        self.rtt.back_off();
        for f in &mut self.snd.flight {
            f.lost = !f.exhausted && !f.sacked;
            // Karn: once an RTO has fired, an ack for any segment sent before
            // it is ambiguous (it may answer a later retransmission of the
            // head): a late cumulative ack would otherwise yield an RTT sample
            // of several seconds and pin the RTO at its maximum.
            f.retransmitted = true;
        }
        self.rescan();
        self.snd.recover = Some(self.snd.nxt);
        self.snd.loss_after_recover = false;
        self.snd.dup_acks = 0;
        if self.snd.flight.iter().any(|f| !f.exhausted) {
            self.arm_rto(now, ctx.s);
        }
    }

    fn on_reliable_ack_timer(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) {
        if let RecvRdv::RelAck {
            sn,
            first_tx,
            deadline,
            ..
        } = self.rcv.rdv
        {
            if now <= first_tx + ctx.s.cfg.max_retransmit_time {
                ctx.stats.retransmissions += 1;
                let seg = self.control(
                    ctx.s,
                    SegmentType::Ack,
                    Flags::R,
                    sn,
                    deadline,
                    ctx.s.delta_t,
                    &[],
                );
                self.out.push_back(seg);
                self.timers.set(Timer::ReliableAck, now + self.rtt.rto());
            } else {
                ctx.stats.retransmit_limit += 1;
            }
        }
    }

    /// R7: send state back to defaults; unacked SNs are an error.
    fn on_stimer(&mut self, ctx: &mut Ctx<'_>) {
        ctx.stats.stimer_expirations += 1;
        let unacked = !self.snd.flight.is_empty() || matches!(self.snd.rdv, SendRdv::Sent { .. });
        let unacked_bytes = self.snd.buf.len();
        self.clear_flight();
        self.snd.nxt = self.snd.una;
        self.snd.max = self.snd.una;
        self.snd.rdv = SendRdv::None;
        self.snd.recover = None;
        self.snd.dup_acks = 0;
        self.timers.stop(Timer::Retransmit);
        self.rtt.reset_backoff();
        if unacked && self.failed.is_none() {
            self.fail(
                ConnectionError::Unacknowledged {
                    bytes: unacked_bytes,
                },
                ctx,
            );
        } else {
            ctx.events.push_back(Event::SendTimerExpired(self.handle));
        }
    }

    // ---- outbound -----------------------------------------------------------

    /// R1: Stimer = 3Δt from a new SN (or reliable-ack) sent.
    fn refresh_stimer(&mut self, now: Timestamp, s: &Settings) {
        self.timers.set(Timer::Stimer, now + s.stimer());
    }

    /// Appends this connection's next segment to `buf` and returns its
    /// length, or `None` when it has nothing to send at `now`.
    pub fn poll_transmit(
        &mut self,
        now: Timestamp,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let append = |buf: &mut Vec<u8>, seg: ControlSegment| {
            buf.extend_from_slice(seg.as_bytes());
            seg.as_bytes().len()
        };
        if let Some(seg) = self.out.pop_front() {
            return Some(append(buf, seg));
        }
        if std::mem::take(&mut self.rcv.window_update_due)
            && self.rcv.valid
            && self.rcv.rdv == RecvRdv::None
        {
            ctx.stats.window_updates += 1;
            self.queue_ack(now, ctx, self.rcv.nxt, Flags::NONE);
            return self.out.pop_front().map(|seg| append(buf, seg));
        }
        if let Some(seg) = self.poll_reliable_ack(now, ctx) {
            return Some(append(buf, seg));
        }
        if self.failed.is_some() {
            return None;
        }
        if let Some(len) = self.poll_retransmission(now, ctx, buf) {
            return Some(len);
        }
        self.poll_new(now, ctx, buf)
    }

    fn poll_reliable_ack(&mut self, now: Timestamp, ctx: &mut Ctx<'_>) -> Option<ControlSegment> {
        let RecvRdv::Accepted { rdv_sn } = self.rcv.rdv else {
            return None;
        };
        if !ctx.may_send_new {
            return None;
        }
        let mut threshold = ctx.s.cfg.max_payload.min(ctx.s.cfg.recv_buffer);
        if ctx.s.scaled_window() {
            // The window must be non-zero once rounded down to 256-octet units.
            threshold = threshold.max(1 << WINDOW_SCALE_SHIFT);
        }
        if self.rcv_free(ctx.s) < threshold {
            return None;
        }
        // R5: a reliable-ack has lifetime Δt from its first transmission.
        let deadline = ctx.wall.deadline(now, ctx.s.delta_t);
        let sn = self.rcv.nxt;
        let seg = self.control(
            ctx.s,
            SegmentType::Ack,
            Flags::R,
            sn,
            deadline,
            ctx.s.delta_t,
            &[],
        );
        self.rcv.rdv = RecvRdv::RelAck {
            rdv_sn,
            sn,
            first_tx: now,
            deadline,
        };
        self.timers.set(Timer::ReliableAck, now + self.rtt.rto());
        self.refresh_stimer(now, ctx.s);
        ctx.stats.reliable_acks_sent += 1;
        Some(seg)
    }

    fn poll_retransmission(
        &mut self,
        now: Timestamp,
        ctx: &mut Ctx<'_>,
        buf: &mut Vec<u8>,
    ) -> Option<usize> {
        let r = ctx.s.cfg.max_retransmit_time;
        if self.snd.lost_count == 0 {
            return None;
        }
        let cwnd = self.cc.window();
        let in_flight = self.bytes_in_flight();
        let i = self.snd.flight.iter().position(|f| f.lost)?;
        let f = &mut self.snd.flight[i];
        if now > f.first_tx + r {
            f.lost = false;
            f.exhausted = true;
            self.snd.lost_count -= 1;
            self.snd.exhausted_count += 1;
            ctx.stats.retransmit_limit += 1;
            return self.poll_retransmission(now, ctx, buf);
        }
        // The head (fast retransmit, partial ack, RTO) always goes; later
        // holes wait for the congestion window.
        if f.sn != self.snd.una && in_flight > 0 && in_flight.saturating_add(f.len as usize) > cwnd
        {
            return None;
        }
        f.lost = false;
        f.retransmitted = true;
        f.last_tx = now;
        f.passed = None;
        let (sn, len, deadline) = (f.sn, f.len as usize, f.deadline);
        let (tx_delivered, tx_delivered_time) = self.snd.stamp(now);
        let f = &mut self.snd.flight[i];
        f.tx_delivered = tx_delivered;
        f.tx_delivered_time = tx_delivered_time;
        self.snd.lost_count -= 1;
        self.snd.pipe += len;
        let off = sn.diff(self.snd.una) as usize;
        let flags = if sn == self.snd.una {
            Flags::D
        } else {
            Flags::NONE
        };
        ctx.stats.retransmissions += 1;
        if sn == self.snd.una || self.timers.get(Timer::Retransmit).is_none() {
            // The timer guards the head: once resent, it runs from now (as
            // Linux does), or it could fire while the retransmission is
            // still on its way.
            self.arm_rto(now, ctx.s);
        }
        Some(self.append_data(ctx.s, flags, sn, deadline, off, len, buf))
    }

    fn poll_new(&mut self, now: Timestamp, ctx: &mut Ctx<'_>, buf: &mut Vec<u8>) -> Option<usize> {
        if !ctx.may_send_new || self.blocked() || self.snd.rdv != SendRdv::None {
            return None;
        }
        let sent = self.snd.nxt.diff(self.snd.una) as usize;
        let unsent = self.snd.buf.len().saturating_sub(sent);
        if unsent == 0 {
            return None;
        }
        let deadline = ctx.wall.deadline(now, ctx.s.delta_t);
        if self.snd.wnd == 0 {
            if !self.snd.flight.is_empty() {
                return None;
            }
            // Rendezvous-at-sender: everything acked, data waiting, zero window.
            let sn = self.snd.nxt;
            self.snd.rdv = SendRdv::Sent {
                sn,
                first_tx: now,
                deadline,
                exhausted: false,
            };
            self.refresh_stimer(now, ctx.s);
            self.arm_rto(now, ctx.s);
            ctx.stats.rendezvous_sent += 1;
            let seg = self.control(
                ctx.s,
                SegmentType::Rendezvous,
                Flags::D,
                sn,
                deadline,
                ctx.s.delta_t,
                &[],
            );
            buf.extend_from_slice(seg.as_bytes());
            return Some(seg.as_bytes().len());
        }
        let mss = ctx.s.cfg.max_payload;
        let wnd_room = (self.snd.wnd as usize).saturating_sub(sent);
        let cwnd_room = self.cc.window().saturating_sub(self.bytes_in_flight());
        let len = mss.min(unsent).min(wnd_room).min(cwnd_room);
        if len == 0 || (len < mss.min(unsent) && !self.snd.flight.is_empty()) {
            return None;
        }
        let sn = self.snd.nxt;
        let (tx_delivered, tx_delivered_time) = self.snd.stamp(now);
        let flags = if sn == self.snd.una {
            Flags::D
        } else {
            Flags::NONE
        };
        self.snd.flight.push_back(Sent {
            sn,
            len: len as u32,
            first_tx: now,
            last_tx: now,
            deadline,
            retransmitted: false,
            lost: false,
            exhausted: false,
            sacked: false,
            passed: None,
            tx_delivered,
            tx_delivered_time,
        });
        self.snd.pipe += len;
        self.snd.nxt = sn.add(len as u32);
        if self.snd.max.before(self.snd.nxt) {
            self.snd.max = self.snd.nxt;
        }
        self.refresh_stimer(now, ctx.s);
        if self.timers.get(Timer::Retransmit).is_none() {
            self.arm_rto(now, ctx.s);
        }
        ctx.stats.bytes_sent += len as u64;
        Some(self.append_data(ctx.s, flags, sn, deadline, sent, len, buf))
    }
}
