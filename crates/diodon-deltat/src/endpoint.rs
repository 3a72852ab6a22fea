//! The [`Endpoint`]: one UDP socket's worth of Delta-t connections. It parses
//! datagrams, checks deadlines, demultiplexes by (local port, remote address,
//! remote port), creates records on the first acceptable segment for a
//! listened port, answers strays with naks, reaps `TIME_WAIT` records, and
//! exposes the application calls.
//!
//! ```text
//!  handle_datagram(now, from, bytes) ─▶ parse ─▶ deadline ─▶ demux ─▶ Connection
//!  handle_timeout(now) ───────────────────────────────────────────▶ Connection timers
//!  poll_transmit(now, max, buf) ◀── endpoint naks ◀── connections (round robin),
//!                                  batched per peer and size (GSO) into the driver's buffer
//!  poll_timeout() = min(connection timers)       poll_event() ◀── events
//! ```
//!
//! Call order for a driver: feed every input (`handle_datagram`,
//! `handle_timeout`, app calls), then drain `poll_transmit` until `None`,
//! drain `poll_event`, and sleep until `poll_timeout` or the next datagram.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

use diodon_sansio::{Timestamp, Transmit, MAX_TRANSMIT_BYTES};

pub use crate::api::{ConnHandle, ConnectionError, Error, Event, Stats};
use crate::config::{Config, ConfigError, Settings, WallClock};
use crate::conn::{Connection, Ctx};
use crate::wire::{ControlSegment, Flags, NakCode, SegmentRepr, SegmentType};

type Key = (u16, SocketAddr, u16);

/// Where a held segment came from and goes.
#[derive(Debug, Clone, Copy)]
struct Held {
    source: Option<u64>,
    to: SocketAddr,
}

/// A Delta-t endpoint (sans-IO). See the module docs for the call order.
#[derive(Debug)]
pub struct Endpoint {
    s: Settings,
    wall: WallClock,
    conns: BTreeMap<u64, Connection>,
    by_key: BTreeMap<Key, u64>,
    listeners: BTreeSet<u16>,
    accept_queue: VecDeque<ConnHandle>,
    events: VecDeque<Event>,
    /// Naks waiting to be sent.
    out: VecDeque<(SocketAddr, ControlSegment)>,
    /// A segment emitted into a transmit it did not fit (longer than the
    /// batch's segments): sent first by the next call, from `held_bytes`.
    held: Option<Held>,
    held_bytes: Vec<u8>,
    stats: Stats,
    next_handle: u64,
    cursor: u64,
    send_quiet_until: Option<Timestamp>,
    recv_quiet_until: Option<Timestamp>,
}

impl Endpoint {
    /// A new endpoint. `wall` maps `Timestamp::ZERO` to the time of day (UTC)
    /// used for segment deadlines.
    pub fn new(config: Config, wall: WallClock) -> Result<Endpoint, ConfigError> {
        Ok(Endpoint {
            s: Settings::new(config)?,
            wall,
            conns: BTreeMap::new(),
            by_key: BTreeMap::new(),
            listeners: BTreeSet::new(),
            accept_queue: VecDeque::new(),
            events: VecDeque::new(),
            out: VecDeque::new(),
            held: None,
            held_bytes: Vec::new(),
            stats: Stats::default(),
            next_handle: 1,
            cursor: 0,
            send_quiet_until: None,
            recv_quiet_until: None,
        })
    }

    /// Replaces the wall-clock mapping (after the driver re-reads the clock).
    pub fn set_wall_clock(&mut self, wall: WallClock) {
        self.wall = wall;
    }

    /// Δt of this endpoint's sending direction, in seconds.
    pub fn delta_t(&self) -> u8 {
        self.s.delta_t.secs()
    }

    /// Enforces the restart recovery intervals (thesis 2.1): call once after a
    /// crash or restart, before anything else. No new SN is sent before
    /// `now + 3Δt`, and no segment is accepted before `now + Δt`.
    pub fn start_recovery(&mut self, now: Timestamp) {
        self.send_quiet_until = Some(now + self.s.stimer());
        self.recv_quiet_until = Some(now + self.s.delta_t.duration());
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Number of connection records (including `TIME_WAIT`).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    // ---- application calls --------------------------------------------------

    /// Accepts connections on `port`: a record is created by the first
    /// acceptable segment (data or rendezvous with the D flag).
    pub fn listen(&mut self, port: u16) -> Result<(), Error> {
        if port == 0 {
            return Err(Error::InvalidPort);
        }
        if !self.listeners.insert(port) {
            return Err(Error::PortInUse(port));
        }
        Ok(())
    }

    /// Stops listening; queued, unaccepted connections stay until closed.
    pub fn unlisten(&mut self, port: u16) {
        self.listeners.remove(&port);
    }

    /// Next connection created on a listened port.
    pub fn accept(&mut self) -> Option<ConnHandle> {
        self.accept_queue.pop_front()
    }

    /// Registers a peer (active open). Sends nothing: the first write opens
    /// the connection.
    pub fn connect(
        &mut self,
        remote: SocketAddr,
        remote_port: u16,
        local_port: u16,
    ) -> Result<ConnHandle, Error> {
        if remote_port == 0 || local_port == 0 {
            return Err(Error::InvalidPort);
        }
        let key = (local_port, remote, remote_port);
        if self.by_key.contains_key(&key) {
            return Err(Error::AddrInUse);
        }
        Ok(self.insert(key))
    }

    fn insert(&mut self, key: Key) -> ConnHandle {
        let handle = ConnHandle(self.next_handle);
        self.next_handle += 1;
        self.stats.connections_opened += 1;
        self.conns.insert(
            handle.0,
            Connection::new(handle, key.0, key.1, key.2, &self.s),
        );
        self.by_key.insert(key, handle.0);
        handle
    }

    fn conn(&mut self, h: ConnHandle) -> Result<&mut Connection, Error> {
        match self.conns.get_mut(&h.0) {
            Some(c) if !c.time_wait => Ok(c),
            _ => Err(Error::UnknownHandle),
        }
    }

    /// Queues bytes; returns how many fit (≥ 1), or `WouldBlock` when none did.
    pub fn write(&mut self, h: ConnHandle, data: &[u8]) -> Result<usize, Error> {
        let s = &self.s;
        match self.conns.get_mut(&h.0) {
            Some(c) if !c.time_wait => c.write(data, s),
            _ => Err(Error::UnknownHandle),
        }
    }

    /// Reads in-order bytes; `WouldBlock` when none are ready, the failure
    /// once a failed connection is drained.
    pub fn read(&mut self, h: ConnHandle, buf: &mut [u8]) -> Result<usize, Error> {
        let s = &self.s;
        match self.conns.get_mut(&h.0) {
            Some(c) if !c.time_wait => c.read(buf, s),
            _ => Err(Error::UnknownHandle),
        }
    }

    /// Bytes ready to read.
    pub fn readable(&self, h: ConnHandle) -> Result<usize, Error> {
        self.conns
            .get(&h.0)
            .filter(|c| !c.time_wait)
            .map(Connection::readable)
            .ok_or(Error::UnknownHandle)
    }

    /// The peer's UDP address.
    pub fn remote(&self, h: ConnHandle) -> Result<SocketAddr, Error> {
        self.conns
            .get(&h.0)
            .filter(|c| !c.time_wait)
            .map(|c| c.remote)
            .ok_or(Error::UnknownHandle)
    }

    /// Bytes written and not yet acknowledged (0 = everything delivered).
    pub fn unacked(&self, h: ConnHandle) -> Result<usize, Error> {
        self.conns
            .get(&h.0)
            .filter(|c| !c.time_wait)
            .map(Connection::unacked)
            .ok_or(Error::UnknownHandle)
    }

    /// Room in the send buffer.
    pub fn send_capacity(&self, h: ConnHandle) -> Result<usize, Error> {
        let s = &self.s;
        self.conns
            .get(&h.0)
            .filter(|c| !c.time_wait)
            .map(|c| c.send_capacity(s))
            .ok_or(Error::UnknownHandle)
    }

    /// The failure of a connection, if any.
    pub fn error(&self, h: ConnHandle) -> Result<Option<ConnectionError>, Error> {
        self.conns
            .get(&h.0)
            .filter(|c| !c.time_wait)
            .map(|c| c.failed.clone())
            .ok_or(Error::UnknownHandle)
    }

    /// Ends writing. Delta-t has no FIN: queued data is still delivered, the
    /// peer learns nothing (applications frame their own end of stream).
    pub fn shutdown(&mut self, h: ConnHandle) -> Result<(), Error> {
        self.conn(h)?.write_shutdown = true;
        Ok(())
    }

    /// Releases the handle. With both timers stopped the record is freed at
    /// once (CLOSED); otherwise it enters `TIME_WAIT` until both expire: queued
    /// data is still sent and retransmitted, inbound data is discarded and
    /// answered with a `Closed` nak.
    pub fn close(&mut self, h: ConnHandle) -> Result<(), Error> {
        let c = self.conn(h)?;
        c.time_wait = true;
        c.write_shutdown = true;
        self.accept_queue.retain(|q| *q != h);
        self.reap();
        Ok(())
    }

    // ---- network side -------------------------------------------------------

    fn ctx(&mut self, now: Timestamp) -> (Ctx<'_>, &mut BTreeMap<u64, Connection>) {
        let may_send_new = self.send_quiet_until.is_none_or(|t| now >= t);
        (
            Ctx {
                s: &self.s,
                wall: self.wall,
                stats: &mut self.stats,
                events: &mut self.events,
                may_send_new,
            },
            &mut self.conns,
        )
    }

    /// One received UDP payload from `remote`.
    pub fn handle_datagram(&mut self, now: Timestamp, remote: SocketAddr, bytes: &[u8]) {
        self.stats.datagrams_in += 1;
        let Ok(seg) = SegmentRepr::parse_bytes(bytes) else {
            self.stats.malformed += 1;
            return;
        };
        let skew = i64::try_from(self.s.cfg.clock_skew_tolerance.as_millis()).unwrap_or(i64::MAX);
        let remaining = seg.deadline.remaining_ms(self.wall.time_of_day(now));
        if remaining < -skew {
            self.stats.expired += 1;
            if matches!(seg.kind, SegmentType::Data | SegmentType::Rendezvous) {
                self.nak(now, remote, &seg, NakCode::Expired);
            }
            return;
        }
        if remaining > i64::from(seg.lifetime.secs()) * 1000 + skew {
            self.stats.deadline_too_far += 1;
            return;
        }
        if self.recv_quiet_until.is_some_and(|t| now < t) {
            self.stats.recovery_drops += 1;
            return;
        }
        let key = (seg.dst_port, remote, seg.src_port);
        let existing = self.by_key.get(&key).copied();
        let Some(id) = existing.or_else(|| self.open_record(now, remote, key, &seg)) else {
            return;
        };
        let (mut ctx, conns) = self.ctx(now);
        if let Some(c) = conns.get_mut(&id) {
            c.handle_segment(now, &seg, &mut ctx);
        }
    }

    /// A segment for no record: open one on a listened port if acceptable,
    /// otherwise count it (and nak data/rendezvous).
    fn open_record(
        &mut self,
        now: Timestamp,
        remote: SocketAddr,
        key: Key,
        seg: &SegmentRepr<'_>,
    ) -> Option<u64> {
        let opens = matches!(seg.kind, SegmentType::Data | SegmentType::Rendezvous);
        if !opens {
            self.stats.no_connection += 1;
            return None;
        }
        if !self.listeners.contains(&seg.dst_port) {
            self.stats.no_connection += 1;
            self.nak(now, remote, seg, NakCode::PortUnreachable);
            return None;
        }
        if !seg.flags.contains(Flags::D) {
            self.stats.not_in_data_run += 1;
            return None;
        }
        let queued = self
            .accept_queue
            .iter()
            .filter(|h| {
                self.conns
                    .get(&h.0)
                    .is_some_and(|c| c.local_port == seg.dst_port)
            })
            .count();
        if queued >= self.s.cfg.backlog {
            self.stats.backlog_full += 1;
            self.nak(now, remote, seg, NakCode::BacklogFull);
            return None;
        }
        let h = self.insert(key);
        self.accept_queue.push_back(h);
        self.events.push_back(Event::Incoming {
            local_port: seg.dst_port,
        });
        Some(h.0)
    }

    fn nak(&mut self, now: Timestamp, remote: SocketAddr, seg: &SegmentRepr<'_>, code: NakCode) {
        self.stats.naks_sent += 1;
        self.out
            .push_back((remote, Connection::nak(seg, code, now, &self.s, self.wall)));
    }

    /// Runs every timer due at `now` (idempotent).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.send_quiet_until.is_some_and(|t| now >= t) {
            self.send_quiet_until = None;
        }
        if self.recv_quiet_until.is_some_and(|t| now >= t) {
            self.recv_quiet_until = None;
        }
        let (mut ctx, conns) = self.ctx(now);
        for c in conns.values_mut() {
            c.handle_timeout(now, &mut ctx);
        }
        self.reap();
    }

    fn reap(&mut self) {
        let dead: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.is_reapable())
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            if let Some(c) = self.conns.remove(&id) {
                self.by_key.remove(&(c.local_port, c.remote, c.remote_port));
                self.events.push_back(Event::Closed(c.handle));
            }
        }
    }

    /// Panics if a connection's loss-recovery bookkeeping disagrees with a
    /// recount. For fuzzing and simulator tests; not needed in production.
    #[doc(hidden)]
    pub fn assert_consistent(&self) {
        for (id, c) in &self.conns {
            assert!(
                c.scoreboard_consistent(),
                "connection {id}: scoreboard counters drifted"
            );
        }
    }

    /// Writes the next segments into `buf` for one send: at most
    /// `max_datagrams`, all to one peer and of one size except possibly a
    /// shorter last one (one GSO `sendmsg`), at most
    /// [`MAX_TRANSMIT_BYTES`] in all. Returns what it wrote, or `None` when
    /// nothing may leave at `now`. `buf` is cleared first; no allocation per
    /// segment.
    ///
    /// Connections take turns by transmit: the first segment comes from the
    /// next connection with something to send (naks before all), the rest
    /// of the batch from that same connection.
    pub fn poll_transmit(
        &mut self,
        now: Timestamp,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        buf.clear();
        let (source, to, segment) = match self.held.take() {
            Some(Held { source, to }) => {
                buf.extend_from_slice(&self.held_bytes);
                (source, to, buf.len())
            }
            None => self.poll_segment(now, buf)?,
        };
        let mut count = 1;
        if let Some(id) = source {
            while count < max_datagrams && buf.len() + segment <= MAX_TRANSMIT_BYTES {
                let start = buf.len();
                let (mut ctx, conns) = self.ctx(now);
                let Some(conn) = conns.get_mut(&id) else {
                    break;
                };
                let Some(len) = conn.poll_transmit(now, &mut ctx, buf) else {
                    break;
                };
                self.stats.datagrams_out += 1;
                if len > segment {
                    // Longer than the batch's segments: it opens the next one.
                    self.held_bytes.clear();
                    self.held_bytes.extend_from_slice(&buf[start..]);
                    self.held = Some(Held { source, to });
                    buf.truncate(start);
                    break;
                }
                count += 1;
                if len < segment {
                    break;
                }
            }
        }
        Some(Transmit {
            destination: Some(to),
            size: buf.len(),
            segment_size: (count > 1).then_some(segment),
        })
    }

    /// Appends the next segment to `buf` (a nak first, then the
    /// connections in turn): the connection it came from (`None` for a
    /// nak), its peer and its length.
    fn poll_segment(
        &mut self,
        now: Timestamp,
        buf: &mut Vec<u8>,
    ) -> Option<(Option<u64>, SocketAddr, usize)> {
        if let Some((to, seg)) = self.out.pop_front() {
            self.stats.datagrams_out += 1;
            buf.extend_from_slice(seg.as_bytes());
            return Some((None, to, seg.as_bytes().len()));
        }
        let cursor = self.cursor;
        let (mut ctx, conns) = self.ctx(now);
        let mut hit = None;
        for (id, c) in conns.range_mut(cursor + 1..) {
            if let Some(len) = c.poll_transmit(now, &mut ctx, buf) {
                hit = Some((*id, c.remote, len));
                break;
            }
        }
        if hit.is_none() {
            for (id, c) in conns.range_mut(..=cursor) {
                if let Some(len) = c.poll_transmit(now, &mut ctx, buf) {
                    hit = Some((*id, c.remote, len));
                    break;
                }
            }
        }
        let (id, remote, len) = hit?;
        self.cursor = id;
        self.stats.datagrams_out += 1;
        Some((Some(id), remote, len))
    }

    /// Earliest timer over all connections.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let conns = self
            .conns
            .values()
            .filter_map(Connection::next_timeout)
            .min();
        let quiet = self.send_quiet_until.filter(|_| !self.conns.is_empty());
        match (conns, quiet) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

#[cfg(test)]
mod tests {
    //! Rules R1–R7 of the thesis, one test each, driving an endpoint with
    //! hand-built segments in virtual time.

    use std::time::Duration;

    use super::*;
    use crate::seq::Seq;
    use crate::wire::{Deadline, Lifetime, HEADER_LEN};

    const LOCAL: u16 = 8080;
    const REMOTE_PORT: u16 = 9090;

    fn remote() -> SocketAddr {
        "192.0.2.9:4000".parse().expect("address")
    }

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    /// Δt = 2 s (Rtimer 4 s, Stimer 6 s), R = 1 s.
    fn endpoint(recv_buffer: usize) -> Endpoint {
        let cfg = Config {
            max_packet_lifetime: Duration::from_millis(500),
            max_retransmit_time: Duration::from_secs(1),
            max_ack_delay: Duration::from_millis(500),
            initial_rto: Duration::from_millis(500),
            min_rto: Duration::from_millis(200),
            max_payload: 100,
            recv_buffer,
            ..Config::default()
        };
        Endpoint::new(cfg, WallClock::at_origin(1_000_000)).expect("config")
    }

    /// A segment from the peer, deadline `now + lifetime`.
    fn seg(
        ep: &Endpoint,
        now: Timestamp,
        kind: SegmentType,
        flags: Flags,
        sn: u32,
        len: usize,
        lifetime: u8,
    ) -> Vec<u8> {
        let lifetime = Lifetime::from_secs(lifetime).expect("lifetime");
        let payload = vec![0xab; len];
        SegmentRepr {
            src_port: REMOTE_PORT,
            dst_port: LOCAL,
            kind,
            flags,
            sn: Seq(sn),
            deadline: ep.wall.deadline(now, lifetime),
            lifetime,
            window: 65_535,
            payload: &payload,
        }
        .to_vec()
        .expect("segment")
    }

    fn deliver(ep: &mut Endpoint, now: Timestamp, bytes: &[u8]) {
        ep.handle_datagram(now, remote(), bytes);
    }

    fn run_until(ep: &mut Endpoint, until: Timestamp, sent: &mut Vec<(Timestamp, Vec<u8>)>) {
        let mut now = ms(0);
        loop {
            while let Some((_, d)) = next(ep, now) {
                sent.push((now, d));
            }
            match ep.poll_timeout() {
                Some(t) if t <= until => {
                    now = now.max(t);
                    ep.handle_timeout(now);
                }
                _ => return,
            }
        }
    }

    /// The next segment on its own (one datagram per transmit).
    fn next(ep: &mut Endpoint, now: Timestamp) -> Option<(SocketAddr, Vec<u8>)> {
        let mut buf = Vec::new();
        let t = ep.poll_transmit(now, 1, &mut buf)?;
        assert_eq!((t.size, t.segment_size), (buf.len(), None));
        Some((t.destination.expect("Delta-t segments have a peer"), buf))
    }

    fn events(ep: &mut Endpoint) -> Vec<Event> {
        std::iter::from_fn(|| ep.poll_event()).collect()
    }

    fn parsed(d: &[u8]) -> SegmentRepr<'_> {
        SegmentRepr::parse_bytes(d).expect("core emits valid segments")
    }

    #[test]
    fn r1_stimer_is_refreshed_by_each_new_sn() {
        let mut ep = endpoint(1000);
        let h = ep.connect(remote(), REMOTE_PORT, LOCAL).expect("connect");
        ep.write(h, b"a").expect("write");
        assert!(next(&mut ep, ms(0)).is_some());
        let ack = seg(&ep, ms(50), SegmentType::Ack, Flags::NONE, 1, 0, 2);
        deliver(&mut ep, ms(50), &ack);
        ep.write(h, b"b").expect("write");
        assert!(next(&mut ep, ms(3000)).is_some(), "new SN at t = 3 s");
        let ack = seg(&ep, ms(3050), SegmentType::Ack, Flags::NONE, 2, 0, 2);
        deliver(&mut ep, ms(3050), &ack);
        ep.handle_timeout(ms(6001));
        assert!(
            events(&mut ep).is_empty(),
            "Stimer must have been refreshed at 3 s"
        );
        ep.handle_timeout(ms(9001));
        assert_eq!(events(&mut ep), vec![Event::SendTimerExpired(h)]);
    }

    #[test]
    fn r2_exhausted_segment_blocks_new_sns_until_acked() {
        let mut ep = endpoint(1000);
        let h = ep.connect(remote(), REMOTE_PORT, LOCAL).expect("connect");
        ep.write(h, b"first").expect("write");
        let mut sent = Vec::new();
        run_until(&mut ep, ms(3500), &mut sent);
        let times: Vec<u64> = sent.iter().map(|(t, _)| t.as_millis()).collect();
        assert_eq!(
            times,
            vec![0, 500, 1000],
            "retransmitted until R = 1 s, then no more"
        );
        ep.write(h, b"second").expect("write");
        assert!(
            next(&mut ep, ms(3500)).is_none(),
            "R2: no new SN while an exhausted one is unacked"
        );
        let ack = seg(&ep, ms(3600), SegmentType::Ack, Flags::NONE, 5, 0, 2);
        deliver(&mut ep, ms(3600), &ack);
        let (_, d) = next(&mut ep, ms(3600)).expect("unblocked by the ack");
        assert_eq!(parsed(&d).payload, b"second");
    }

    #[test]
    fn r3_rtimer_is_refreshed_by_new_sn_and_by_overflow() {
        let mut ep = endpoint(100);
        ep.listen(LOCAL).expect("listen");
        let d = seg(&ep, ms(0), SegmentType::Data, Flags::D, 0, 100, 1);
        deliver(&mut ep, ms(0), &d); // Rtimer = 2 x 1 s
        let over = seg(&ep, ms(1500), SegmentType::Data, Flags::NONE, 100, 50, 1);
        deliver(&mut ep, ms(1500), &over); // window is 0: overflow
        assert_eq!(ep.stats().overflow_segments, 1);
        ep.handle_timeout(ms(2500));
        assert!(!events(&mut ep)
            .iter()
            .any(|e| matches!(e, Event::ReceiveTimerExpired(_))));
        ep.handle_timeout(ms(3500));
        assert!(events(&mut ep)
            .iter()
            .any(|e| matches!(e, Event::ReceiveTimerExpired(_))));
    }

    #[test]
    fn r4_rtimer_expiry_resets_the_receive_state() {
        let mut ep = endpoint(1000);
        ep.listen(LOCAL).expect("listen");
        let d = seg(&ep, ms(0), SegmentType::Data, Flags::D, 0, 10, 1);
        deliver(&mut ep, ms(0), &d);
        let h = ep.accept().expect("accepted");
        ep.handle_timeout(ms(2000));
        // The next in-sequence segment without D is no longer acceptable…
        let next = seg(&ep, ms(2100), SegmentType::Data, Flags::NONE, 10, 10, 1);
        deliver(&mut ep, ms(2100), &next);
        assert_eq!(ep.stats().not_in_data_run, 1);
        // …but a data run at any SN is.
        let run = seg(&ep, ms(2200), SegmentType::Data, Flags::D, 777_777, 10, 1);
        deliver(&mut ep, ms(2200), &run);
        assert_eq!(ep.readable(h), Ok(20));
    }

    #[test]
    fn r5_data_lifetime_counts_from_the_first_transmission() {
        let mut ep = endpoint(1000);
        let h = ep.connect(remote(), REMOTE_PORT, LOCAL).expect("connect");
        ep.write(h, b"x").expect("write");
        let mut sent = Vec::new();
        run_until(&mut ep, ms(800), &mut sent);
        assert_eq!(sent.len(), 2, "first send and one retransmission");
        let first = parsed(&sent[0].1);
        let again = parsed(&sent[1].1);
        assert_eq!(first.lifetime.secs(), 2, "lifetime field = Δt");
        assert_eq!(
            first.deadline,
            ep.wall.time_of_day(ms(0)).after(Duration::from_secs(2))
        );
        assert_eq!(
            again.deadline, first.deadline,
            "retransmission keeps the deadline"
        );
    }

    #[test]
    fn r6_ack_lifetime_starts_when_the_sn_is_tested() {
        let mut ep = endpoint(1000);
        ep.listen(LOCAL).expect("listen");
        let d = seg(&ep, ms(0), SegmentType::Data, Flags::D, 0, 10, 7);
        deliver(&mut ep, ms(1234), &d);
        let (_, ack) = next(&mut ep, ms(1234)).expect("ack");
        let ack = parsed(&ack);
        assert_eq!(ack.lifetime.secs(), 7, "acks carry the peer's Δt");
        assert_eq!(
            ack.deadline,
            ep.wall.time_of_day(ms(1234)).after(Duration::from_secs(7))
        );
    }

    #[test]
    fn r7_stimer_expiry_reports_unacked_data_as_an_error() {
        let mut ep = endpoint(1000);
        let h = ep.connect(remote(), REMOTE_PORT, LOCAL).expect("connect");
        ep.write(h, b"lost").expect("write");
        let mut sent = Vec::new();
        run_until(&mut ep, ms(6100), &mut sent);
        let failed = events(&mut ep);
        assert_eq!(
            failed,
            vec![Event::Failed {
                handle: h,
                error: ConnectionError::Unacknowledged { bytes: 4 }
            }]
        );
        assert_eq!(
            ep.write(h, b"more"),
            Err(Error::Failed(ConnectionError::Unacknowledged { bytes: 4 }))
        );
        assert_eq!(ep.stats().stimer_expirations, 1);
    }

    #[test]
    fn time_wait_holds_the_address_until_both_timers_expire() {
        let mut ep = endpoint(1000);
        ep.listen(LOCAL).expect("listen");
        let d = seg(&ep, ms(0), SegmentType::Data, Flags::D, 0, 10, 1);
        deliver(&mut ep, ms(0), &d);
        let h = ep.accept().expect("accepted");
        while next(&mut ep, ms(0)).is_some() {}
        ep.close(h).expect("close");
        assert_eq!(
            ep.connect(remote(), REMOTE_PORT, LOCAL),
            Err(Error::AddrInUse)
        );
        ep.handle_timeout(ms(2000));
        assert!(events(&mut ep).contains(&Event::Closed(h)));
        assert!(ep.connect(remote(), REMOTE_PORT, LOCAL).is_ok());
    }

    #[test]
    fn deadline_check_is_wrap_aware_and_tolerant() {
        let mut ep = endpoint(1000);
        ep.listen(LOCAL).expect("listen");
        let now = ms(10_000);
        let today = ep.wall.time_of_day(now);
        let mut bytes = seg(&ep, now, SegmentType::Data, Flags::D, 0, 10, 2);
        let late = Deadline::wrapping(u64::from(today.ms()) + 86_400_000 - 600);
        let mut s = crate::wire::Segment::new_unchecked(&mut bytes[..]);
        s.set_deadline(late);
        s.fill_checksum();
        deliver(&mut ep, now, &bytes);
        assert_eq!(
            ep.stats().expired,
            1,
            "600 ms late exceeds the 500 ms tolerance"
        );
    }

    #[test]
    fn a_transmit_batches_one_connections_segments_of_one_size() {
        let mut ep = endpoint(1000);
        let other: SocketAddr = "192.0.2.10:4000".parse().expect("address");
        let a = ep.connect(remote(), REMOTE_PORT, LOCAL).expect("connect");
        let b = ep.connect(other, REMOTE_PORT, LOCAL).expect("connect");
        ep.write(a, &[1; 350]).expect("write");
        ep.write(b, &[2; 150]).expect("write");
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        while let Some(t) = ep.poll_transmit(ms(0), 3, &mut buf) {
            assert_eq!(t.size, buf.len());
            let sizes: Vec<usize> = t.datagrams(&buf).map(|d| parsed(d).payload.len()).collect();
            let fill: Vec<u8> = t.datagrams(&buf).map(|d| parsed(d).payload[0]).collect();
            assert!(
                fill.iter().all(|f| *f == fill[0]),
                "one connection per transmit"
            );
            seen.push((t.destination.expect("peer"), t.segment_size, sizes));
        }
        let seg = Some(HEADER_LEN + 100);
        assert_eq!(
            seen,
            vec![
                (remote(), seg, vec![100, 100, 100]),
                (other, seg, vec![100, 50]),
                (remote(), None, vec![50]),
            ],
            "batches of at most 3, connections taking turns"
        );
        assert_eq!(ep.stats().datagrams_out, 6);
    }

    #[test]
    fn a_longer_segment_is_held_for_the_next_transmit() {
        let mut ep = endpoint(1000);
        ep.listen(LOCAL).expect("listen");
        let d = seg(&ep, ms(0), SegmentType::Data, Flags::D, 0, 10, 1);
        deliver(&mut ep, ms(0), &d);
        let h = ep.accept().expect("accepted");
        ep.write(h, &[8; 250]).expect("write");
        let mut buf = Vec::new();
        let mut kinds = Vec::new();
        while let Some(t) = ep.poll_transmit(ms(0), 8, &mut buf) {
            kinds.push(
                t.datagrams(&buf)
                    .map(|d| (parsed(d).kind, parsed(d).payload.len()))
                    .collect::<Vec<_>>(),
            );
        }
        assert_eq!(
            kinds,
            vec![
                vec![(SegmentType::Ack, 0)],
                vec![
                    (SegmentType::Data, 100),
                    (SegmentType::Data, 100),
                    (SegmentType::Data, 50)
                ],
            ],
            "the ack goes alone; the data segment that did not fit it opens the next batch"
        );
        assert_eq!(ep.stats().datagrams_out, 4);
    }
}
