//! The Delta-t test fixture: two endpoints on a seeded, lossy,
//! bidirectional link, stepped in virtual time by the simulator loop
//! (`diodon_sim::Pair`; no clock, no sockets).
//!
//! ```text
//!   A ──poll_transmit──▶ a_to_b: [outage?] loss ─ corrupt ─ dup ─ delay+jitter ─ reorder ──▶ B
//!   A ◀───────────────── b_to_a: [outage?] same impairments, drawn independently ◀───────── B
//! ```
//!
//! Each direction is a `diodon_sim::Impairment` chain seeded from the test's
//! seed; `SIM_SEED=<n>` runs only seed `n` of a seeded loop ([`seeds`]).

use std::ops::Range;
use std::time::Duration;

use diodon_deltat::{Config, ConnHandle, Endpoint, Error, Stats, WallClock};
use diodon_sansio::Timestamp;
use diodon_sim::{DuplexLink, Impairment, Link, Outage, Pair, Seed, SeedReport, Side};

pub use diodon_sim::ADDR_B;

/// Impairments of one direction (both directions use the same settings).
#[derive(Debug, Clone, Copy)]
pub struct LinkConfig {
    pub loss: f64,
    pub delay: Duration,
    pub jitter: Duration,
    /// Probability that a datagram is held back by three times `delay`.
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

    /// The same impairments as a simulator node chain.
    pub fn impairment(&self) -> Impairment {
        Impairment {
            loss: self.loss,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            delay: self.delay,
            jitter: self.jitter,
            reorder: self.reorder,
            reorder_gap: self.delay * 3,
        }
    }
}

/// Two Delta-t endpoints joined by a link, in virtual time.
pub type Sim = Pair<Endpoint, Endpoint>;

/// `a` and `b` on a link impaired by `link` in both directions (drawn
/// independently from `seed`), which goes down for good at `cut_at`.
/// `DELTAT_TRACE=1` prints every segment sent.
pub fn sim(
    a: Endpoint,
    b: Endpoint,
    seed: u64,
    link: LinkConfig,
    cut_at: Option<Timestamp>,
) -> Sim {
    let seed = Seed(seed);
    let direction = |stream| {
        let mut l = Link::new();
        if let Some(t) = cut_at {
            l = l.with(Outage::new(t, Timestamp::MAX));
        }
        link.impairment().append_to(l, seed.derive(stream))
    };
    let pair = Pair::new(a, b, DuplexLink::new(direction(0), direction(1))).with_seed(seed);
    if std::env::var_os("DELTAT_TRACE").is_none() {
        return pair;
    }
    pair.with_trace(Box::new(|side: Side, now: Timestamp, d: &[u8]| {
        eprintln!(
            "{now:?} {side:?}> {}",
            diodon_deltat::SegmentRepr::parse_bytes(d)
                .map_or_else(|e| e.to_string(), |r| r.to_string())
        );
    }))
}

/// The seeds a seeded loop runs: `range`, or only `SIM_SEED` when it is set
/// (`DELTAT_SEED` is read too, as before).
pub fn seeds(range: Range<u64>) -> Range<u64> {
    match replay_seed() {
        Some(s) => s..s + 1,
        None => range,
    }
}

/// Whether a single seed is being replayed (`SIM_SEED`): assertions over
/// the whole set of seeds do not apply then.
pub fn replaying() -> bool {
    replay_seed().is_some()
}

fn replay_seed() -> Option<u64> {
    ["SIM_SEED", "DELTAT_SEED"]
        .into_iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .map(|v| Seed::from_value_or(Some(&v), 0).expect("a valid seed").0)
}

/// Arms the `SIM_SEED=… reproduces this failure` line for a run of `seed`.
pub fn report(test: &str, seed: u64) -> SeedReport {
    SeedReport::new(test, &Seed(seed))
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
    let mut sim = sim(a, b, seed, link, None);
    let h = sim.a.connect(ADDR_B, 2, 1).expect("connect");
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
    let _report = report("one_way_transfer", seed);
    let (mut sim, h) = connected_sim(cfg, seed, link);
    let (mut written, mut read) = (0, 0);
    let mut rx = None;
    let mut buf = vec![0u8; 1 << 20];
    while read < total {
        if let Ok(Some(e)) = sim.a.error(h) {
            return Err(format!(
                "seed {seed}: failed at {:?}: {e}; a {:?}",
                sim.now(),
                sim.a.stats()
            ));
        }
        assert!(
            sim.now().as_millis() < 3_600_000,
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
        elapsed: sim.now().saturating_duration_since(Timestamp::ZERO),
        a: sim.a.stats().clone(),
    })
}
