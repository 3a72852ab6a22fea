//! [`Pair`]: the simulator loop. Two [`SimEndpoint`]s (either protocol, any
//! mix) joined by a [`DuplexLink`], stepped in virtual time.
//!
//! ```text
//!  step_until(limit):
//!   1. transmit at now     A.poll_transmit ─▶ a_to_b      B.poll_transmit ─▶ b_to_a
//!                          (until None, or the transmit budget per step is spent)
//!   2. jump the clock      now = min(next delivery, A/B poll_timeout, limit)
//!   3. at the new now      A: handle_timeout if due, then every datagram due from b_to_a
//!                          B: handle_timeout if due, then every datagram due from a_to_b
//!      (the caller acts between steps: writes, reads, events, then steps again)
//! ```
//!
//! The clock only ever jumps to the earliest wake-up: a step never runs at a
//! time when nothing is due (except the final jump to `limit` when nothing
//! is pending at all). A datagram sent with no delay is delivered in the same
//! step it was sent in, at the same instant. Timers fire only once
//! `poll_timeout` has passed, as in a real driver.
//!
//! A runaway loop (a bug in an endpoint that transmits forever at one
//! instant, or a test that never finishes) hits a step limit and panics with
//! the seed that reproduces it.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use diodon_sansio::Timestamp;

use crate::clock::VirtualClock;
use crate::duplex::DuplexLink;
use crate::endpoint::{Side, SimEndpoint, Transmit};
use crate::seed::{Seed, SIM_SEED_VAR};

/// Default address of endpoint A (`10.0.0.1:4000`).
pub const ADDR_A: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4000);
/// Default address of endpoint B (`10.0.0.2:4000`).
pub const ADDR_B: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4000);

/// Spare datagram buffers kept for reuse (beyond that, they are freed).
const SPARE_BUFFERS: usize = 4096;

/// A tracing hook: which side sent a datagram, when, and its bytes.
pub type Trace = Box<dyn FnMut(Side, Timestamp, &[u8])>;

/// Two endpoints and the link between them, in virtual time.
///
/// Drive it with [`step`](Pair::step) / [`step_until`](Pair::step_until),
/// acting on the endpoints (`pair.a`, `pair.b`) between steps, or with
/// [`run_until`](Pair::run_until).
pub struct Pair<A, B> {
    /// Endpoint A.
    pub a: A,
    /// Endpoint B.
    pub b: B,
    /// The link: `a_to_b` carries what A sends, `b_to_a` what B sends.
    pub link: DuplexLink,
    clock: VirtualClock,
    addr: [SocketAddr; 2],
    seed: Option<Seed>,
    budget: usize,
    max_datagrams: usize,
    max_steps: u64,
    max_steps_per_instant: u64,
    steps: u64,
    steps_at_now: u64,
    /// The endpoint stopped transmitting because its budget ran out.
    more: [bool; 2],
    /// The endpoint the loop last called into (for the observer).
    current: Option<Side>,
    buf: Vec<u8>,
    spare: Vec<Vec<u8>>,
    trace: Option<Trace>,
}

impl<A: SimEndpoint, B: SimEndpoint> Pair<A, B> {
    /// `a` and `b` joined by `link`, at virtual time zero, at [`ADDR_A`] and
    /// [`ADDR_B`], sending everything each has at every step.
    pub fn new(a: A, b: B, link: DuplexLink) -> Pair<A, B> {
        Pair {
            a,
            b,
            link,
            clock: VirtualClock::new(Timestamp::ZERO),
            addr: [ADDR_A, ADDR_B],
            seed: None,
            budget: usize::MAX,
            max_datagrams: usize::MAX,
            max_steps: 50_000_000,
            max_steps_per_instant: 1_000_000,
            steps: 0,
            steps_at_now: 0,
            more: [false; 2],
            current: None,
            buf: Vec::new(),
            spare: Vec::new(),
            trace: None,
        }
    }

    /// Builder: the clock starts at `start`.
    #[must_use]
    pub fn starting_at(mut self, start: Timestamp) -> Pair<A, B> {
        self.clock = VirtualClock::new(start);
        self
    }

    /// Builder: the seed the link was built from, named when the loop
    /// panics so the run can be replayed (`SIM_SEED=…`).
    #[must_use]
    pub fn with_seed(mut self, seed: Seed) -> Pair<A, B> {
        self.seed = Some(seed);
        self
    }

    /// Builder: the endpoints' addresses (what each sees as the other's
    /// source address, and where each must send).
    #[must_use]
    pub fn with_addresses(mut self, a: SocketAddr, b: SocketAddr) -> Pair<A, B> {
        self.addr = [a, b];
        self
    }

    /// Builder: at most `transmits` calls of `poll_transmit` that return
    /// something, per endpoint and step (default: until it returns `None`).
    /// With a budget of one, a sender's transmissions and the receiver's
    /// handling of them alternate, batch by batch, as on two threads.
    ///
    /// # Panics
    /// If `transmits` is zero.
    #[must_use]
    pub fn with_transmit_budget(mut self, transmits: usize) -> Pair<A, B> {
        assert!(transmits > 0, "a transmit budget of zero never sends");
        self.budget = transmits;
        self
    }

    /// Builder: the most datagrams one `poll_transmit` may write (default:
    /// no limit, the endpoint batches as it likes). With one, an endpoint
    /// writes each datagram straight into the buffer the link carries.
    ///
    /// # Panics
    /// If `datagrams` is zero.
    #[must_use]
    pub fn with_max_datagrams(mut self, datagrams: usize) -> Pair<A, B> {
        assert!(datagrams > 0, "a transmit of zero datagrams is nothing");
        self.max_datagrams = datagrams;
        self
    }

    /// Builder: the runaway guard. The loop panics after `total` steps, or
    /// after `per_instant` consecutive steps without the clock moving.
    #[must_use]
    pub fn with_step_limit(mut self, total: u64, per_instant: u64) -> Pair<A, B> {
        self.max_steps = total;
        self.max_steps_per_instant = per_instant;
        self
    }

    /// Builder: calls `trace` for every datagram an endpoint sends.
    #[must_use]
    pub fn with_trace(mut self, trace: Trace) -> Pair<A, B> {
        self.trace = Some(trace);
        self
    }

    /// The current virtual time.
    pub fn now(&self) -> Timestamp {
        self.clock.now
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The address of `side`.
    pub fn addr(&self, side: Side) -> SocketAddr {
        self.addr[index(side)]
    }

    /// When the loop next has work: the earliest delivery hint of the link,
    /// the earlier endpoint timer, or now if an endpoint ran out of its
    /// transmit budget. `None`: nothing is pending anywhere.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        if self.more.contains(&true) {
            return Some(self.clock.now);
        }
        [
            self.link.next_delivery(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// [`step_until`](Pair::step_until) at most `max` later than now.
    pub fn step(&mut self, max: Duration) -> bool {
        self.step_until(self.clock.now + max)
    }

    /// One step: transmit at now, jump the clock to the next wake-up (at
    /// most `limit`), fire due timers and deliver due datagrams there.
    /// Returns `false` (after moving the clock to `limit`) when nothing was
    /// pending at all.
    ///
    /// # Panics
    /// When the step limit is reached (see [`with_step_limit`](Pair::with_step_limit)),
    /// or an endpoint sends to an address that is not its peer's.
    pub fn step_until(&mut self, limit: Timestamp) -> bool {
        self.step_observed(limit, &mut |_| {})
    }

    /// [`step_until`](Pair::step_until), calling `observer(side)` whenever
    /// the loop starts calling into a different endpoint than the last one
    /// (to attribute CPU time to each side, say).
    pub fn step_observed(&mut self, limit: Timestamp, observer: &mut dyn FnMut(Side)) -> bool {
        self.count_step();
        self.transmit(Side::A, observer);
        self.transmit(Side::B, observer);
        let now = self.clock.now;
        let Some(next) = self.next_wakeup() else {
            self.clock.advance_to(limit.max(now));
            return false;
        };
        let to = next.min(limit).max(now);
        if to > now {
            self.steps_at_now = 0;
        }
        self.clock.advance_to(to);
        for side in [Side::A, Side::B] {
            self.fire_timers(side, observer);
            self.deliver(side, observer);
        }
        self.a.check_invariants();
        self.b.check_invariants();
        true
    }

    /// Steps until `done(self)` holds (checked before every step; returns
    /// `true`) or the clock reaches `limit` (returns `false`).
    pub fn run_until(&mut self, limit: Timestamp, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if self.clock.now >= limit {
                return false;
            }
            self.step_until(limit);
        }
    }

    fn count_step(&mut self) {
        self.steps += 1;
        self.steps_at_now += 1;
        if self.steps > self.max_steps {
            self.runaway(&format!("{} steps", self.max_steps));
        }
        if self.steps_at_now > self.max_steps_per_instant {
            self.runaway(&format!(
                "{} steps without the clock moving",
                self.max_steps_per_instant
            ));
        }
    }

    fn runaway(&self, what: &str) -> ! {
        let replay = match self.seed {
            Some(seed) => format!("{SIM_SEED_VAR}={seed} reproduces it"),
            None => "no seed given (Pair::with_seed)".to_owned(),
        };
        panic!(
            "diodon-sim: runaway loop: {what} at {:?} ({} datagrams in flight); {replay}",
            self.clock.now,
            self.link.in_flight()
        );
    }

    fn enter(&mut self, side: Side, observer: &mut dyn FnMut(Side)) {
        if self.current != Some(side) {
            self.current = Some(side);
            observer(side);
        }
    }

    /// Polls `side` for transmissions (up to the budget) and puts every
    /// datagram on its direction of the link.
    fn transmit(&mut self, side: Side, observer: &mut dyn FnMut(Side)) {
        let now = self.clock.now;
        self.more[index(side)] = false;
        let mut sent = 0;
        loop {
            if sent == self.budget {
                self.more[index(side)] = true;
                return;
            }
            self.enter(side, observer);
            let max = self.max_datagrams;
            let transmit = match side {
                Side::A => self.a.poll_transmit(now, max, &mut self.buf),
                Side::B => self.b.poll_transmit(now, max, &mut self.buf),
            };
            let Some(transmit) = transmit else {
                return;
            };
            sent += 1;
            if sent as u64 > self.max_steps_per_instant {
                self.runaway(&format!("{side:?} transmitted {sent} times at one instant"));
            }
            self.check_destination(side, transmit);
            self.send(side, transmit);
        }
    }

    fn check_destination(&self, side: Side, transmit: Transmit) {
        let peer = self.addr[index(side.peer())];
        if let Some(to) = transmit.destination {
            assert!(
                to == peer,
                "diodon-sim: {side:?} sent to {to}, but its peer is {peer} (Pair::with_addresses)"
            );
        }
    }

    /// Moves the datagrams of `transmit` (in `self.buf`) onto the link.
    fn send(&mut self, side: Side, transmit: Transmit) {
        let now = self.clock.now;
        let single = transmit
            .segment_size
            .is_none_or(|s| s >= transmit.size.min(self.buf.len()));
        if single {
            // One datagram: hand the buffer itself to the link.
            let mut datagram = self.spare.pop().unwrap_or_default();
            std::mem::swap(&mut datagram, &mut self.buf);
            datagram.truncate(transmit.size);
            if let Some(trace) = &mut self.trace {
                trace(side, now, &datagram);
            }
            self.link.from_side(side).send(now, datagram);
            return;
        }
        for segment in transmit.datagrams(&self.buf) {
            let mut datagram = self.spare.pop().unwrap_or_default();
            datagram.clear();
            datagram.extend_from_slice(segment);
            if let Some(trace) = &mut self.trace {
                trace(side, now, &datagram);
            }
            self.link.from_side(side).send(now, datagram);
        }
    }

    fn fire_timers(&mut self, side: Side, observer: &mut dyn FnMut(Side)) {
        let now = self.clock.now;
        let due = match side {
            Side::A => self.a.poll_timeout(),
            Side::B => self.b.poll_timeout(),
        }
        .is_some_and(|t| t <= now);
        if due {
            self.enter(side, observer);
            match side {
                Side::A => self.a.handle_timeout(now),
                Side::B => self.b.handle_timeout(now),
            }
        }
    }

    /// Hands `side` every datagram due for it, in delivery order.
    fn deliver(&mut self, side: Side, observer: &mut dyn FnMut(Side)) {
        let now = self.clock.now;
        let from = self.addr[index(side.peer())];
        while let Some((_, datagram)) = self.link.from_side(side.peer()).poll_deliver(now) {
            self.enter(side, observer);
            match side {
                Side::A => self.a.handle_datagram(now, from, &datagram),
                Side::B => self.b.handle_datagram(now, from, &datagram),
            }
            if self.spare.len() < SPARE_BUFFERS {
                self.spare.push(datagram);
            }
        }
    }
}

impl<A, B> fmt::Debug for Pair<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pair")
            .field("now", &self.clock.now)
            .field("steps", &self.steps)
            .field("seed", &self.seed)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

fn index(side: Side) -> usize {
    match side {
        Side::A => 0,
        Side::B => 1,
    }
}

#[cfg(test)]
mod tests;
