//! The loop itself, with toy endpoints whose schedule is known exactly.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use crate::link::Link;
use crate::nodes::{Bernoulli, Delay};

fn ms(v: u64) -> Timestamp {
    Timestamp::from_millis(v)
}

/// Sends one numbered datagram at each of `schedule`'s times (woken by its
/// timer), and records what comes back.
#[derive(Default)]
struct Ticker {
    schedule: VecDeque<Timestamp>,
    next: u8,
    received: Vec<(Timestamp, SocketAddr, Vec<u8>)>,
    timeouts: Vec<Timestamp>,
}

impl SimEndpoint for Ticker {
    fn handle_datagram(&mut self, now: Timestamp, from: SocketAddr, datagram: &[u8]) {
        self.received.push((now, from, datagram.to_vec()));
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.timeouts.push(now);
    }

    fn poll_transmit(&mut self, now: Timestamp, _: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        if self.schedule.front().is_some_and(|t| *t <= now) {
            self.schedule.pop_front();
            buf.clear();
            buf.push(self.next);
            self.next += 1;
            return Some(Transmit {
                destination: Some(ADDR_B),
                size: 1,
                segment_size: None,
            });
        }
        None
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.schedule.front().copied()
    }
}

/// Answers every datagram at once with the same bytes.
#[derive(Default)]
struct Echo {
    queue: VecDeque<Vec<u8>>,
    received: Vec<Timestamp>,
}

impl SimEndpoint for Echo {
    fn handle_datagram(&mut self, now: Timestamp, _from: SocketAddr, datagram: &[u8]) {
        self.received.push(now);
        self.queue.push_back(datagram.to_vec());
    }

    fn handle_timeout(&mut self, _now: Timestamp) {}

    fn poll_transmit(&mut self, _: Timestamp, _: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let d = self.queue.pop_front()?;
        buf.clear();
        buf.extend_from_slice(&d);
        Some(Transmit {
            destination: None,
            size: d.len(),
            segment_size: None,
        })
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
}

/// Has `pending` datagrams, and sends them three to a transmit (GSO style).
struct Burst {
    pending: u32,
}

impl SimEndpoint for Burst {
    fn handle_datagram(&mut self, _: Timestamp, _: SocketAddr, _: &[u8]) {}

    fn handle_timeout(&mut self, _: Timestamp) {}

    fn poll_transmit(&mut self, _: Timestamp, max: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let n = self
            .pending
            .min(3)
            .min(u32::try_from(max).unwrap_or(u32::MAX));
        if n == 0 {
            return None;
        }
        buf.clear();
        for _ in 0..n {
            buf.extend_from_slice(&self.pending.to_be_bytes());
            self.pending -= 1;
        }
        Some(Transmit {
            destination: None,
            size: buf.len(),
            segment_size: Some(4),
        })
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
}

/// Counts what it receives.
#[derive(Default)]
struct Sink {
    received: Vec<u32>,
}

impl SimEndpoint for Sink {
    fn handle_datagram(&mut self, _: Timestamp, _: SocketAddr, d: &[u8]) {
        self.received
            .push(u32::from_be_bytes(d.try_into().expect("4 bytes")));
    }

    fn handle_timeout(&mut self, _: Timestamp) {}

    fn poll_transmit(&mut self, _: Timestamp, _: usize, _: &mut Vec<u8>) -> Option<Transmit> {
        None
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
}

fn delayed(d: Duration) -> DuplexLink {
    DuplexLink::new(
        Link::new().with(Delay::new(d)),
        Link::new().with(Delay::new(d)),
    )
}

#[test]
fn known_schedule_round_trips_at_exact_times_without_idle_steps() {
    let ticker = Ticker {
        schedule: [ms(0), ms(10), ms(20)].into(),
        ..Ticker::default()
    };
    let mut pair = Pair::new(ticker, Echo::default(), delayed(Duration::from_millis(5)));
    let done = pair.run_until(ms(1000), |p| p.a.received.len() == 3);
    assert!(done);
    assert_eq!(pair.b.received, [ms(5), ms(15), ms(25)]);
    let back: Vec<(Timestamp, SocketAddr, Vec<u8>)> = [0u8, 1, 2]
        .iter()
        .zip([ms(10), ms(20), ms(30)])
        .map(|(n, t)| (t, ADDR_B, vec![*n]))
        .collect();
    assert_eq!(pair.a.received, back);
    // The ticker's timer fired when due (10 and 20 ms), never early.
    assert_eq!(pair.a.timeouts, [ms(10), ms(20)]);
    assert_eq!(pair.now(), ms(30));
    // Six wake-ups (5, 10, 15, 20, 25, 30) plus the sends at 0 and the
    // echo flushes: no step is spent where nothing is due.
    assert!(pair.steps() <= 7, "{} steps", pair.steps());
    // Nothing is left: the next step jumps straight to the limit.
    assert_eq!(pair.next_wakeup(), None);
    assert!(!pair.step_until(ms(1000)));
    assert_eq!(pair.now(), ms(1000));
}

#[test]
fn zero_delay_datagrams_arrive_in_the_step_they_are_sent() {
    let ticker = Ticker {
        schedule: [ms(3)].into(),
        ..Ticker::default()
    };
    let mut pair = Pair::new(ticker, Echo::default(), DuplexLink::perfect()).starting_at(ms(3));
    assert!(pair.step(Duration::from_secs(1)));
    assert_eq!(pair.b.received, [ms(3)]);
    assert_eq!(pair.now(), ms(3));
    assert!(pair.step(Duration::from_secs(1)));
    assert_eq!(pair.a.received.len(), 1);
    assert_eq!(pair.now(), ms(3));
}

#[test]
fn step_never_passes_its_limit() {
    let ticker = Ticker {
        schedule: [ms(0), ms(100)].into(),
        ..Ticker::default()
    };
    let mut pair = Pair::new(ticker, Echo::default(), delayed(Duration::from_millis(30)));
    assert!(pair.step(Duration::from_millis(10)));
    assert_eq!(pair.now(), ms(10));
    assert!(pair.b.received.is_empty());
    assert!(pair.step(Duration::from_millis(50)));
    assert_eq!(pair.now(), ms(30));
    assert_eq!(pair.b.received, [ms(30)]);
}

#[test]
fn batches_are_split_and_a_budget_interleaves_the_two_sides() {
    let mut all = Pair::new(Burst { pending: 7 }, Sink::default(), DuplexLink::perfect());
    assert!(all.step(Duration::ZERO));
    assert_eq!(all.b.received, [7, 6, 5, 4, 3, 2, 1]);

    let mut pair = Pair::new(Burst { pending: 7 }, Sink::default(), DuplexLink::perfect())
        .with_transmit_budget(1);
    let mut seen = Vec::new();
    for expect in [3, 6, 7] {
        assert!(pair.step_observed(ms(0), &mut |side| seen.push(side)));
        assert_eq!(pair.b.received.len(), expect);
    }
    // One transmit of A, then B handles it: the observer sees each switch.
    assert_eq!(seen, [Side::A, Side::B, Side::A, Side::B, Side::A, Side::B]);
    assert_eq!(pair.next_wakeup(), Some(ms(0)), "A may have more");
    assert!(!pair.step_until(ms(0)), "A had nothing more");
    assert_eq!(pair.steps(), 4);

    let mut single = Pair::new(Burst { pending: 7 }, Sink::default(), DuplexLink::perfect())
        .with_max_datagrams(1)
        .with_transmit_budget(2);
    assert!(single.step(Duration::ZERO));
    assert_eq!(single.b.received, [7, 6]);
}

#[test]
fn a_lossy_seeded_link_is_reproducible() {
    let run = |seed: Seed| {
        let link = DuplexLink::one_way(Link::new().with(Bernoulli::new(0.3, seed.derive(0))));
        let mut pair = Pair::new(Burst { pending: 1000 }, Sink::default(), link).with_seed(seed);
        pair.run_until(ms(1), |p| p.next_wakeup().is_none() && p.steps() > 0);
        (pair.b.received, pair.link.totals().dropped)
    };
    let seed = Seed::from_env_or(41);
    let _report = crate::seed::SeedReport::new("a_lossy_seeded_link_is_reproducible", &seed);
    let (got, dropped) = run(seed);
    assert_eq!((got.clone(), dropped), run(seed));
    assert_eq!(got.len() as u64 + dropped, 1000);
    assert!((200..400).contains(&dropped), "{dropped}");
}

/// Transmits forever at one instant.
struct Flood;

impl SimEndpoint for Flood {
    fn handle_datagram(&mut self, _: Timestamp, _: SocketAddr, _: &[u8]) {}

    fn handle_timeout(&mut self, _: Timestamp) {}

    fn poll_transmit(&mut self, _: Timestamp, _: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        buf.push(0);
        Some(Transmit {
            destination: None,
            size: 1,
            segment_size: None,
        })
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        None
    }
}

#[test]
#[should_panic(
    expected = "runaway loop: 100 steps without the clock moving at t+0.000000s (0 datagrams in flight); SIM_SEED=77 reproduces it"
)]
fn an_endless_exchange_at_one_instant_hits_the_guard_with_its_seed() {
    // Two echoes on a perfect link, one datagram between them: it bounces
    // forever without time passing.
    let mut a = Echo::default();
    a.queue.push_back(vec![1]);
    let mut pair = Pair::new(a, Echo::default(), DuplexLink::perfect())
        .with_seed(Seed(77))
        .with_step_limit(1_000, 100);
    pair.run_until(ms(1), |_| false);
}

#[test]
#[should_panic(expected = "SIM_SEED=78 reproduces it")]
fn an_endless_transmitter_hits_the_guard() {
    let mut pair = Pair::new(Flood, Sink::default(), DuplexLink::perfect())
        .with_seed(Seed(78))
        .with_step_limit(1_000, 100);
    pair.step(Duration::from_secs(1));
}

#[test]
#[should_panic(expected = "runaway loop: 50 steps")]
fn the_total_step_limit_holds() {
    let ticker = Ticker {
        schedule: (0..100).map(ms).collect(),
        ..Ticker::default()
    };
    let mut pair =
        Pair::new(ticker, Echo::default(), DuplexLink::perfect()).with_step_limit(50, 10);
    pair.run_until(ms(1000), |_| false);
}

#[test]
#[should_panic(expected = "sent to 10.0.0.2:4000, but its peer is 10.0.0.9:1")]
fn a_datagram_to_another_address_is_a_test_bug() {
    let ticker = Ticker {
        schedule: [ms(0)].into(),
        ..Ticker::default()
    };
    let mut pair = Pair::new(ticker, Echo::default(), DuplexLink::perfect())
        .with_addresses(ADDR_A, "10.0.0.9:1".parse().expect("address"));
    pair.step(Duration::ZERO);
}
