//! A seeded, lossy, bidirectional in-memory link between two endpoints, and
//! a virtual-time loop that drives them (test fixture; no clock, no sockets).
//!
//! ```text
//!   A ──poll_transmit──▶ [loss, delay+jitter, reorder, dup, corrupt] ──▶ B
//!   A ◀──────────────── [          same, independent draws          ] ◀── B
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::time::Duration;

use diodon_deltat::{Config, ConnHandle, Endpoint, Error, Stats, WallClock};
use diodon_proto::Timestamp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Impairments of one direction (both directions use the same settings).
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    pub loss: f64,
    pub delay: Duration,
    pub jitter: Duration,
    pub reorder: f64,
    pub duplicate: f64,
    pub corrupt: f64,
}

impl LinkConfig {
    pub fn lossy(loss: f64) -> LinkConfig {
        LinkConfig {
            loss,
            delay: Duration::from_millis(10),
            jitter: Duration::from_millis(5),
            reorder: 0.05,
            duplicate: 0.02,
            corrupt: 0.01,
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Timestamp,
    order: u64,
    to_b: bool,
    data: Vec<u8>,
}

/// The link plus counters of what it did.
pub struct Link {
    rng: ChaCha8Rng,
    cfg: LinkConfig,
    queue: BinaryHeap<Reverse<InFlight>>,
    order: u64,
    /// Set to make the link drop everything from now on.
    pub cut: bool,
    pub dropped: u64,
    pub corrupted: u64,
    pub duplicated: u64,
}

impl Link {
    pub fn new(seed: u64, cfg: LinkConfig) -> Link {
        Link {
            rng: ChaCha8Rng::seed_from_u64(seed),
            cfg,
            queue: BinaryHeap::new(),
            order: 0,
            cut: false,
            dropped: 0,
            corrupted: 0,
            duplicated: 0,
        }
    }

    pub fn rng(&mut self) -> &mut ChaCha8Rng {
        &mut self.rng
    }

    fn send(&mut self, now: Timestamp, to_b: bool, mut data: Vec<u8>) {
        if self.cut || self.rng.random_bool(self.cfg.loss) {
            self.dropped += 1;
            return;
        }
        if !data.is_empty() && self.rng.random_bool(self.cfg.corrupt) {
            let bit = self.rng.random_range(0..data.len() * 8);
            data[bit / 8] ^= 1 << (bit % 8);
            self.corrupted += 1;
        }
        let copies = if self.rng.random_bool(self.cfg.duplicate) {
            self.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let jitter = self.cfg.jitter.mul_f64(self.rng.random::<f64>());
            let mut delay = self.cfg.delay + jitter;
            if self.rng.random_bool(self.cfg.reorder) {
                delay += self.cfg.delay * 3;
            }
            self.order += 1;
            self.queue.push(Reverse(InFlight {
                at: now + delay,
                order: self.order,
                to_b,
                data: data.clone(),
            }));
        }
    }

    pub fn next_arrival(&self) -> Option<Timestamp> {
        self.queue.peek().map(|Reverse(f)| f.at)
    }
}

pub const ADDR_A: &str = "10.0.0.1:4000";
pub const ADDR_B: &str = "10.0.0.2:4000";

pub fn addr(s: &str) -> SocketAddr {
    s.parse().expect("valid test address")
}

/// Two endpoints joined by a link, in virtual time.
pub struct Sim {
    pub a: Endpoint,
    pub b: Endpoint,
    pub link: Link,
    pub now: Timestamp,
}

impl Sim {
    pub fn new(a: Endpoint, b: Endpoint, link: Link) -> Sim {
        Sim {
            a,
            b,
            link,
            now: Timestamp::ZERO,
        }
    }

    /// Moves every pending transmission onto the link.
    pub fn flush(&mut self) {
        let trace = std::env::var_os("DELTAT_TRACE").is_some();
        while let Some((_, d)) = self.a.poll_transmit(self.now) {
            if trace {
                eprintln!(
                    "{:?} A> {}",
                    self.now,
                    diodon_deltat::SegmentRepr::parse_bytes(&d)
                        .map_or_else(|e| e.to_string(), |r| r.to_string())
                );
            }
            self.link.send(self.now, true, d);
        }
        while let Some((_, d)) = self.b.poll_transmit(self.now) {
            if trace {
                eprintln!(
                    "{:?} B> {}",
                    self.now,
                    diodon_deltat::SegmentRepr::parse_bytes(&d)
                        .map_or_else(|e| e.to_string(), |r| r.to_string())
                );
            }
            self.link.send(self.now, false, d);
        }
    }

    /// Flushes, then advances to the next arrival or timer (at most `max`
    /// later) and processes it. Returns false when nothing is pending at all.
    pub fn step(&mut self, max: Duration) -> bool {
        self.flush();
        let next = [
            self.link.next_arrival(),
            self.a.poll_timeout(),
            self.b.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let limit = self.now + max;
        let Some(next) = next else {
            self.now = limit;
            return false;
        };
        self.now = self.now.max(next.min(limit));
        while self.link.next_arrival().is_some_and(|t| t <= self.now) {
            let Some(Reverse(f)) = self.link.queue.pop() else {
                break;
            };
            if f.to_b {
                self.b.handle_datagram(self.now, addr(ADDR_A), &f.data);
            } else {
                self.a.handle_datagram(self.now, addr(ADDR_B), &f.data);
            }
        }
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.a.assert_consistent();
        self.b.assert_consistent();
        true
    }
}

/// Byte `i` of the test stream with id `stream`.
pub fn pattern(stream: u64, i: usize) -> u8 {
    let x =
        (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    (x >> 56) as u8
}

/// Writes stream 1's bytes `written..total` as far as the send buffer takes them.
pub fn write_pattern(ep: &mut Endpoint, h: ConnHandle, written: &mut usize, total: usize) {
    while *written < total {
        let end = (*written + 65_536).min(total);
        let chunk: Vec<u8> = (*written..end).map(|i| pattern(1, i)).collect();
        match ep.write(h, &chunk) {
            Ok(n) => *written += n,
            Err(Error::WouldBlock) => break,
            Err(e) => panic!("write: {e}"),
        }
    }
}

/// What a one-way transfer measured.
pub struct Outcome {
    /// Virtual time from the first write to the last byte read.
    pub elapsed: Duration,
    /// The sender's counters.
    pub a: Stats,
}

/// Two endpoints with `cfg` on a seeded link, B listening on port 2 and A
/// connected to it from port 1 (nothing sent yet): the start of a transfer.
pub fn connected_sim(cfg: &Config, seed: u64, link: LinkConfig) -> (Sim, ConnHandle) {
    let a = Endpoint::new(cfg.clone(), WallClock::at_origin(1000)).expect("cfg");
    let mut b = Endpoint::new(cfg.clone(), WallClock::at_origin(1000)).expect("cfg");
    b.listen(2).expect("listen");
    let mut sim = Sim::new(a, b, Link::new(seed, link));
    let h = sim.a.connect(addr(ADDR_B), 2, 1).expect("connect");
    (sim, h)
}

/// Sends `total` octets A→B over a seeded `link`, checks every byte read,
/// and returns the virtual time it took; `Err` (with the counters) when the
/// connection fails. Panics if it stalls for an hour of virtual time.
pub fn one_way_transfer(
    cfg: &Config,
    seed: u64,
    total: usize,
    link: LinkConfig,
) -> Result<Outcome, String> {
    let (mut sim, h) = connected_sim(cfg, seed, link);
    let (mut written, mut read) = (0, 0);
    let mut rx = None;
    let mut buf = vec![0u8; 1 << 20];
    while read < total {
        if let Ok(Some(e)) = sim.a.error(h) {
            return Err(format!(
                "seed {seed}: failed at {:?}: {e}; a {:?}",
                sim.now,
                sim.a.stats()
            ));
        }
        assert!(
            sim.now.as_millis() < 3_600_000,
            "seed {seed}: stalled at read {read} written {written}: a {:?} b {:?}",
            sim.a.stats(),
            sim.b.stats()
        );
        write_pattern(&mut sim.a, h, &mut written, total);
        if rx.is_none() {
            rx = sim.b.accept();
        }
        if let Some(r) = rx {
            loop {
                match sim.b.read(r, &mut buf) {
                    Ok(n) => {
                        for (k, byte) in buf[..n].iter().enumerate() {
                            assert_eq!(*byte, pattern(1, read + k), "seed {seed}");
                        }
                        read += n;
                    }
                    Err(Error::WouldBlock) => break,
                    Err(e) => return Err(format!("seed {seed}: read: {e}")),
                }
            }
        }
        sim.step(Duration::from_millis(50));
    }
    Ok(Outcome {
        elapsed: sim.now.saturating_duration_since(Timestamp::ZERO),
        a: sim.a.stats().clone(),
    })
}
