//! Reordering is not loss: transfers over paths that reorder datagrams and
//! delay or bunch acks, but drop nothing, retransmit nothing; a dropped
//! segment is still repaired within about a round trip, without the RTO.
//!
//! Two fixtures. The seeded simulator link (diodon-sim) with nodes that hold
//! datagrams back, bunch acks and drop one segment:
//!
//! ```text
//!   A ──▶ delay ─ [held back / dropped] ──────────────────────▶ B
//!   A ◀── delay ─ [some held back] ─ [released in bunches] ◀─── B
//! ```
//!
//! and a model of the loopback of `diodon-apps/tests/deltat_queue.rs`, whose
//! runs retransmitted although nothing was lost: one `tbf` queue (20 Mbit/s,
//! 30 kB) for the data and the acks; a driver that polls everything it may
//! send at one `now`, then blocks while the queue is full (`ENOBUFS`) and
//! reads no ack meanwhile; datagrams dequeued on another CPU's backlog now and
//! then arriving just after the next one.
//!
//! ```text
//!   A: poll(now) ─▶ [batch] ─blocks while full─▶ ┌──────────────┐ ─▶ backlog ─▶ B
//!   B: poll(now) ─▶ [acks ] ─blocks while full─▶ │ tbf (shared) │ ─▶ backlog ─▶ A
//!                                                └──────────────┘   (every n-th a little late)
//! ```

#[allow(
    dead_code,
    reason = "shared fixture: this binary uses part of it (expect would fail in the others)"
)]
mod common;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use common::{pattern, seeds, write_pattern, ADDR_B};
use diodon_deltat::{
    Config, ConnHandle, Endpoint, Error, SegmentRepr, SegmentType, Stats, WallClock,
};
use diodon_sansio::Timestamp;
use diodon_sim::{
    Delay, DuplexLink, Link, LinkNode, NodeStats, Pair, Reorder, Seed, SeedReport, Side, ADDR_A,
};

// ---- simulator link nodes ---------------------------------------------------

/// Holds back every `every`-th datagram by `gap`, so the ones behind it
/// overtake it. Nothing is lost.
struct HoldEvery {
    every: u64,
    gap: Duration,
    stats: NodeStats,
}

impl LinkNode for HoldEvery {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        if self.stats.offered.is_multiple_of(self.every) {
            self.stats.reordered += 1;
            out.push((now + self.gap, datagram));
        } else {
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}

/// Releases datagrams, in order, only at multiples of `period`: acks held
/// behind a queue and delivered in bunches.
struct Bunch {
    period: Duration,
    stats: NodeStats,
}

impl LinkNode for Bunch {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        let p = self.period.as_nanos();
        let t = now.saturating_duration_since(Timestamp::ZERO).as_nanos();
        let release = u64::try_from(t.div_ceil(p) * p).expect("virtual time fits in u64 ns");
        out.push((Timestamp::ZERO + Duration::from_nanos(release), datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}

/// Hands datagrams to `node` after the first `skip`: a receive state opens
/// only on the data-run segment, and whatever overtakes it is refused
/// (`not_in_data_run`), which is loss.
struct After<N> {
    skip: u64,
    node: N,
    seen: u64,
}

impl<N: LinkNode> LinkNode for After<N> {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.seen += 1;
        if self.seen <= self.skip {
            out.push((now, datagram));
        } else {
            self.node.offer(now, datagram, out);
        }
    }

    fn stats(&self) -> NodeStats {
        self.node.stats()
    }
}

/// Drops the `nth` datagram (counting from 1) and nothing else.
struct DropNth {
    nth: u64,
    stats: NodeStats,
}

impl LinkNode for DropNth {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        if self.stats.offered == self.nth {
            self.stats.dropped += 1;
            return;
        }
        self.stats.passed += 1;
        out.push((now, datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }
}

/// 20 ms each way: a 40 ms round trip, a 10 ms reordering window.
fn path() -> Link {
    Link::new().with(Delay::new(Duration::from_millis(20)))
}

/// A data segment A sent: when, its SN and length.
type Sent = (Timestamp, u32, usize);

/// Sends `total` octets A→B over `a_to_b` / `b_to_a` with the default
/// configuration; returns A's counters and every data segment A sent.
fn transfer(a_to_b: Link, b_to_a: Link, total: usize) -> (Stats, Vec<Sent>) {
    let cfg = Config::default();
    let a = Endpoint::new(cfg.clone(), WallClock::at_origin(1000)).expect("cfg");
    let mut b = Endpoint::new(cfg, WallClock::at_origin(1000)).expect("cfg");
    b.listen(2).expect("listen");
    let sent = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&sent);
    let mut sim = Pair::new(a, b, DuplexLink::new(a_to_b, b_to_a)).with_trace(Box::new(
        move |side: Side, now: Timestamp, d: &[u8]| {
            let Ok(seg) = SegmentRepr::parse_bytes(d) else {
                return;
            };
            if side == Side::A && seg.kind == SegmentType::Data {
                log.borrow_mut().push((now, seg.sn.0, seg.payload.len()));
            }
        },
    ));
    let h = sim.a.connect(ADDR_B, 2, 1).expect("connect");
    let (mut written, mut read) = (0, 0);
    let mut rx = None;
    let mut buf = vec![0u8; 1 << 20];
    while read < total {
        assert!(
            sim.now().as_millis() < 600_000,
            "stalled at {read} of {total}: a {:?}",
            sim.a.stats()
        );
        assert_eq!(sim.a.error(h), Ok(None), "a {:?}", sim.a.stats());
        write_pattern(&mut sim.a, h, &mut written, total);
        if rx.is_none() {
            rx = sim.b.accept();
        }
        if let Some(r) = rx {
            read += read_checked(&mut sim.b, r, &mut buf, read);
        }
        sim.step(Duration::from_millis(50));
    }
    let stats = sim.a.stats().clone();
    drop(sim);
    let sent = Rc::try_unwrap(sent).expect("trace dropped").into_inner();
    (stats, sent)
}

/// Reads what `r` holds, checking every octet against stream 1 from `at`.
fn read_checked(ep: &mut Endpoint, r: ConnHandle, buf: &mut [u8], at: usize) -> usize {
    let mut n = 0;
    loop {
        match ep.read(r, buf) {
            Ok(k) => {
                for (i, byte) in buf[..k].iter().enumerate() {
                    assert_eq!(*byte, pattern(1, at + n + i), "octet {}", at + n + i);
                }
                n += k;
            }
            Err(Error::WouldBlock) => return n,
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// Asserts that a transfer over a path that dropped nothing retransmitted
/// nothing and reduced no window.
fn assert_no_retransmission(what: &str, s: &Stats) {
    assert_eq!(
        (
            s.retransmissions,
            s.fast_retransmits,
            s.sack_loss_marks,
            s.rto_expirations
        ),
        (0, 0, 0, 0),
        "{what}: nothing was lost, yet the sender retransmitted: {s:?}"
    );
}

#[test]
fn segments_overtaken_within_the_reordering_window_are_not_lost() {
    // Every n-th segment arrives 2–6 ms after those sent behind it (a whole
    // burst overtakes it, far more than 3 segments), always less than a
    // quarter of the 40 ms round trip.
    for (every, gap_ms) in [(7, 2), (10, 4), (25, 6)] {
        let held = path().with(HoldEvery {
            every,
            gap: Duration::from_millis(gap_ms),
            stats: NodeStats::default(),
        });
        let (stats, _) = transfer(held, path(), 2_000_000);
        assert!(stats.sacked_segments > 0, "nothing was reordered");
        assert_no_retransmission(&format!("every {every} held {gap_ms} ms"), &stats);
    }
}

#[test]
fn late_reordered_and_bunched_acks_mark_nothing_lost() {
    for seed in seeds(0..8) {
        let _report = SeedReport::new("late_reordered_and_bunched_acks", &Seed(seed));
        // Data 2 ms late now and then, acks 2 ms late and released every
        // 4 ms: what A learns arrives at most 8 ms late, within a quarter of
        // the round trip.
        let data = path().with(After {
            skip: 1,
            node: Reorder::with_gap(0.05, Duration::from_millis(2), Seed(seed).derive(0)),
            seen: 0,
        });
        let acks = path()
            .with(Reorder::with_gap(
                0.1,
                Duration::from_millis(2),
                Seed(seed).derive(1),
            ))
            .with(Bunch {
                period: Duration::from_millis(4),
                stats: NodeStats::default(),
            });
        let (stats, _) = transfer(data, acks, 2_000_000);
        assert!(stats.stale_acks > 0, "seed {seed}: no ack came late");
        assert_no_retransmission(&format!("seed {seed}"), &stats);
    }
}

#[test]
fn a_dropped_segment_is_retransmitted_within_a_round_trip_and_a_quarter() {
    for nth in [3, 40, 200, 900] {
        let dropping = path().with(DropNth {
            nth,
            stats: NodeStats::default(),
        });
        let (stats, sent) = transfer(dropping, path(), 2_000_000);
        assert_eq!(
            (
                stats.retransmissions,
                stats.fast_retransmits,
                stats.rto_expirations
            ),
            (1, 1, 0),
            "segment {nth} dropped: one fast retransmission, no timeout: {stats:?}"
        );
        let first = sent[usize::try_from(nth).expect("small") - 1];
        let again = sent
            .iter()
            .skip(usize::try_from(nth).expect("small"))
            .find(|s| s.1 == first.1)
            .expect("retransmitted");
        let took = again.0.saturating_duration_since(first.0);
        // Its successors are SACKed one round trip (40 ms) after it was sent,
        // it is lost a reordering window (srtt/4 = 10 ms) later.
        assert!(
            took <= Duration::from_millis(55),
            "segment {nth} resent {took:?} after it was sent"
        );
    }
}

// ---- the loopback queue of deltat_queue.rs -----------------------------------

/// The loopback device with its `tbf` qdisc, in virtual time.
struct Loopback {
    rate_bits: u64,
    limit: usize,
    /// Queued datagrams: when they leave the qdisc, to whom, the bytes.
    queue: VecDeque<(Timestamp, Side, Vec<u8>)>,
    queued: usize,
    last_departure: Timestamp,
    /// Left the qdisc, waiting in the receiving socket: when readable.
    arrived: Vec<(Timestamp, u64, Side, Vec<u8>)>,
    departed: u64,
    /// Every `late_every`-th datagram reaches its socket `late` after it
    /// left (another CPU's backlog); `drop_data`: the data segment with this
    /// SN is lost once.
    late_every: u64,
    late: Duration,
    drop_data: Option<u32>,
}

impl Loopback {
    /// Moves what has left the qdisc by `now` towards the sockets.
    fn advance(&mut self, now: Timestamp) {
        while let Some((at, _, _)) = self.queue.front() {
            if *at > now {
                break;
            }
            let (at, to, d) = self.queue.pop_front().expect("front");
            self.queued -= d.len();
            self.departed += 1;
            let late = if self.departed.is_multiple_of(self.late_every) {
                self.late
            } else {
                Duration::ZERO
            };
            self.arrived.push((at + late, self.departed, to, d));
        }
    }

    /// Queues a datagram, or says the queue is full (`ENOBUFS`).
    fn send(&mut self, now: Timestamp, to: Side, d: &[u8]) -> bool {
        self.advance(now);
        if self.queued + d.len() > self.limit {
            return false;
        }
        if let (Some(sn), Ok(seg)) = (self.drop_data, SegmentRepr::parse_bytes(d)) {
            if seg.kind == SegmentType::Data && seg.sn.0 == sn {
                self.drop_data = None;
                return true;
            }
        }
        let bits = d.len() as u64 * 8;
        let wire = Duration::from_nanos(bits * 1_000_000_000 / self.rate_bits);
        let at = self.last_departure.max(now) + wire;
        self.last_departure = at;
        self.queued += d.len();
        self.queue.push_back((at, to, d.to_vec()));
        true
    }

    /// The datagrams readable by `side` at `now`, in arrival order.
    fn receive(&mut self, now: Timestamp, side: Side) -> Vec<Vec<u8>> {
        self.advance(now);
        self.arrived.sort_by_key(|&(at, k, _, _)| (at, k));
        let mut out = Vec::new();
        self.arrived.retain(|(at, _, to, d)| {
            if *at <= now && *to == side {
                out.push(d.clone());
                false
            } else {
                true
            }
        });
        out
    }
}

/// One end: the endpoint and what its driver polled but could not queue yet.
struct Host {
    ep: Endpoint,
    side: Side,
    blocked: VecDeque<Vec<u8>>,
    buf: Vec<u8>,
}

impl Host {
    fn new(side: Side) -> Host {
        Host {
            ep: Endpoint::new(Config::default(), WallClock::at_origin(1000)).expect("cfg"),
            side,
            blocked: VecDeque::new(),
            buf: Vec::new(),
        }
    }

    /// The driver loop at `now`: while a send is blocked it only retries;
    /// otherwise it reads every datagram, runs the timers, lets `app` act and
    /// polls everything it may send, all at one `now` (as `flush_out` does).
    fn step(&mut self, now: Timestamp, lo: &mut Loopback, app: impl FnOnce(&mut Endpoint)) {
        let peer = match self.side {
            Side::A => Side::B,
            Side::B => Side::A,
        };
        if self.blocked.is_empty() {
            let from: SocketAddr = match self.side {
                Side::A => ADDR_B,
                Side::B => ADDR_A,
            };
            for d in lo.receive(now, self.side) {
                self.ep.handle_datagram(now, from, &d);
            }
            if self.ep.poll_timeout().is_some_and(|t| t <= now) {
                self.ep.handle_timeout(now);
            }
            app(&mut self.ep);
            while let Some(t) = self.ep.poll_transmit(now, 64, &mut self.buf) {
                self.blocked
                    .extend(t.datagrams(&self.buf).map(<[u8]>::to_vec));
            }
        }
        while let Some(d) = self.blocked.front() {
            if !lo.send(now, peer, d) {
                break;
            }
            self.blocked.pop_front();
        }
    }
}

/// 3 MB A→B through the loopback queue; A's counters.
fn loopback_transfer(late_every: u64, late: Duration, drop_data: Option<u32>) -> Stats {
    const TOTAL: usize = 3_000_000;
    // ENOBUFS back-off of diodon-io's sender.
    const TICK: Duration = Duration::from_micros(50);
    let mut lo = Loopback {
        rate_bits: 20_000_000,
        limit: 30_000,
        queue: VecDeque::new(),
        queued: 0,
        last_departure: Timestamp::ZERO,
        arrived: Vec::new(),
        departed: 0,
        late_every,
        late,
        drop_data,
    };
    let (mut a, mut b) = (Host::new(Side::A), Host::new(Side::B));
    b.ep.listen(2).expect("listen");
    let h = a.ep.connect(ADDR_B, 2, 1).expect("connect");
    let (mut written, mut read) = (0, 0);
    let mut rx = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut now = Timestamp::ZERO;
    while read < TOTAL {
        assert!(
            now.as_millis() < 60_000,
            "stalled at {read}: {:?}",
            a.ep.stats()
        );
        assert_eq!(a.ep.error(h), Ok(None), "a {:?}", a.ep.stats());
        a.step(now, &mut lo, |ep| write_pattern(ep, h, &mut written, TOTAL));
        b.step(now, &mut lo, |ep| {
            rx = rx.or_else(|| ep.accept());
            if let Some(r) = rx {
                read += read_checked(ep, r, &mut buf, read);
            }
        });
        now += TICK;
    }
    a.ep.stats().clone()
}

#[test]
fn the_loopback_queue_reorders_but_loses_nothing() {
    for (late_every, late_us) in [(37, 700), (101, 1_500), (53, 3_000)] {
        let s = loopback_transfer(late_every, Duration::from_micros(late_us), None);
        assert!(s.sacked_segments > 0, "nothing arrived out of order: {s:?}");
        assert_no_retransmission(&format!("every {late_every} late by {late_us} µs"), &s);
    }
}

#[test]
fn the_loopback_queue_repairs_a_lost_segment_without_the_rto() {
    for sn in [60_000, 1_200_000, 2_400_000] {
        let sn = sn / 1200 * 1200;
        let s = loopback_transfer(37, Duration::from_micros(700), Some(sn));
        assert_eq!(
            (s.retransmissions, s.fast_retransmits, s.rto_expirations),
            (1, 1, 0),
            "segment {sn} lost: one fast retransmission: {s:?}"
        );
    }
}
