//! The built-in link elements.
//!
//! ```text
//!   loss:        Bernoulli, GilbertElliott, Bursts, Outage, Mtu
//!   queueing:    TailDropBuffer (finite, drops), RateLimit (unbounded, no drop)
//!   timing:      Delay (fixed + optional jitter), Reorder (random hold-back)
//!   damage:      Duplicate, Corrupt (bit flips or truncation)
//! ```
//!
//! Random elements each own a [`ChaCha8Rng`] seeded from the [`Seed`] given to
//! their constructor, so a chain's behaviour depends only on its seeds and the
//! sequence of offers. Probabilities must lie in `[0, 1]`; constructors panic
//! on an invalid configuration (these are test fixtures: a typo should be loud).

use std::collections::VecDeque;
use std::time::Duration;

use diodon_sansio::Timestamp;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::node::{LinkNode, NodeStats};
use crate::seed::Seed;

/// Drops each datagram independently with a fixed probability.
#[derive(Debug)]
pub struct Bernoulli {
    loss_probability: f64,
    rng: ChaCha8Rng,
    stats: NodeStats,
}

impl Bernoulli {
    /// Drops each datagram with probability `loss_probability`.
    pub fn new(loss_probability: f64, seed: Seed) -> Bernoulli {
        check_probability("Bernoulli loss_probability", loss_probability);
        Bernoulli {
            loss_probability,
            rng: seed.rng(),
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for Bernoulli {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        if self.rng.random_bool(self.loss_probability) {
            self.stats.dropped += 1;
        } else {
            self.stats.passed += 1;
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "bernoulli"
    }
}

/// Drops runs of exactly `length` consecutive datagrams, separated by at
/// least `min_gap` passed datagrams plus a random gap (geometric, mean
/// `mean_extra_gap`): isolated bursts such as a receive-ring overflow or a
/// lost GSO super-packet, at a long-run loss of
/// `length / (length + min_gap + mean_extra_gap)`.
///
/// ```text
///   pass ≥ min_gap + Geom(mean_extra_gap) ──▶ drop `length` ──▶ pass … ──▶ drop `length`
/// ```
#[derive(Debug)]
pub struct Bursts {
    length: u64,
    min_gap: u64,
    extra_gap_probability: f64,
    /// Datagrams left to pass before the next burst; then `length` to drop.
    to_pass: u64,
    to_drop: u64,
    rng: ChaCha8Rng,
    stats: NodeStats,
    /// Bursts started.
    started: u64,
}

impl Bursts {
    /// Bursts of `length`, at least `min_gap` apart, with a geometric extra
    /// gap of mean `mean_extra_gap` datagrams (0: exactly `min_gap`).
    pub fn new(length: u64, min_gap: u64, mean_extra_gap: f64, seed: Seed) -> Bursts {
        assert!(length > 0, "Bursts length must be positive");
        assert!(mean_extra_gap >= 0.0, "Bursts mean_extra_gap must be >= 0");
        let mut b = Bursts {
            length,
            min_gap,
            // Geometric on {0, 1, …} with mean μ: success probability 1/(1+μ).
            extra_gap_probability: 1.0 / (1.0 + mean_extra_gap),
            to_pass: 0,
            to_drop: 0,
            rng: seed.rng(),
            stats: NodeStats::default(),
            started: 0,
        };
        b.to_pass = b.next_gap();
        b
    }

    /// Bursts of `length` at a long-run loss of `loss`, never closer than
    /// `min_gap`.
    pub fn at_loss(length: u64, loss: f64, min_gap: u64, seed: Seed) -> Bursts {
        check_probability("Bursts loss", loss);
        let mean_gap = length as f64 * (1.0 - loss) / loss.max(f64::MIN_POSITIVE);
        Bursts::new(length, min_gap, (mean_gap - min_gap as f64).max(0.0), seed)
    }

    /// Bursts started so far.
    pub fn bursts(&self) -> u64 {
        self.started
    }

    fn next_gap(&mut self) -> u64 {
        let mut extra = 0u64;
        while !self.rng.random_bool(self.extra_gap_probability) {
            extra += 1;
        }
        self.min_gap + extra
    }
}

impl LinkNode for Bursts {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        if self.to_drop == 0 && self.to_pass == 0 {
            self.to_drop = self.length;
            self.started += 1;
        }
        if self.to_drop > 0 {
            self.to_drop -= 1;
            self.stats.dropped += 1;
            if self.to_drop == 0 {
                self.to_pass = self.next_gap().max(1);
            }
        } else {
            self.to_pass -= 1;
            self.stats.passed += 1;
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "bursts"
    }
}

/// Two-state Markov (Gilbert–Elliott) burst loss.
///
/// ```text
///            p_good_to_bad
///      ┌──────┐ ──────▶ ┌─────┐
///      │ Good │         │ Bad │      loss probability: loss_in_good / loss_in_bad
///      └──────┘ ◀────── └─────┘
///            p_bad_to_good
/// ```
///
/// Per datagram: the loss is decided in the current state, then the state
/// makes one transition. The initial state is drawn from the stationary
/// distribution, so the long-run loss rate holds from the first datagram:
/// `π_bad = p / (p + r)`, loss = `π_good·loss_in_good + π_bad·loss_in_bad`.
/// With `loss_in_good = 0, loss_in_bad = 1` loss bursts are exactly the stays
/// in Bad, geometric with mean `1 / p_bad_to_good`.
#[derive(Debug)]
pub struct GilbertElliott {
    p_good_to_bad: f64,
    p_bad_to_good: f64,
    loss_in_good: f64,
    loss_in_bad: f64,
    bad: bool,
    rng: ChaCha8Rng,
    stats: NodeStats,
}

impl GilbertElliott {
    /// A Gilbert–Elliott channel with the given transition and per-state loss
    /// probabilities.
    pub fn new(
        p_good_to_bad: f64,
        p_bad_to_good: f64,
        loss_in_good: f64,
        loss_in_bad: f64,
        seed: Seed,
    ) -> GilbertElliott {
        check_probability("GilbertElliott p_good_to_bad", p_good_to_bad);
        check_probability("GilbertElliott p_bad_to_good", p_bad_to_good);
        check_probability("GilbertElliott loss_in_good", loss_in_good);
        check_probability("GilbertElliott loss_in_bad", loss_in_bad);
        let mut rng = seed.rng();
        let total = p_good_to_bad + p_bad_to_good;
        let bad = total > 0.0 && rng.random_bool(p_good_to_bad / total);
        GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_good,
            loss_in_bad,
            bad,
            rng,
            stats: NodeStats::default(),
        }
    }

    /// The classic burst model (`loss_in_good = 0`, `loss_in_bad = 1`) with a
    /// long-run loss rate `avg_loss` and mean burst length `mean_burst_len`
    /// datagrams: `p_bad_to_good = 1 / mean_burst_len`,
    /// `p_good_to_bad = avg_loss · p_bad_to_good / (1 − avg_loss)`.
    ///
    /// # Panics
    /// Unless `0 <= avg_loss < 1`, `mean_burst_len >= 1`, and the resulting
    /// `p_good_to_bad <= 1` (very high loss with very short bursts is not
    /// reachable by this model).
    pub fn with_mean_burst(avg_loss: f64, mean_burst_len: f64, seed: Seed) -> GilbertElliott {
        assert!(
            (0.0..1.0).contains(&avg_loss),
            "GilbertElliott avg_loss must be in [0, 1), got {avg_loss}"
        );
        assert!(
            mean_burst_len >= 1.0,
            "GilbertElliott mean_burst_len must be >= 1, got {mean_burst_len}"
        );
        let p_bad_to_good = 1.0 / mean_burst_len;
        let p_good_to_bad = avg_loss * p_bad_to_good / (1.0 - avg_loss);
        assert!(
            p_good_to_bad <= 1.0,
            "GilbertElliott: avg_loss {avg_loss} with mean burst {mean_burst_len} needs \
             p_good_to_bad = {p_good_to_bad} > 1"
        );
        GilbertElliott::new(p_good_to_bad, p_bad_to_good, 0.0, 1.0, seed)
    }

    /// Whether the channel is currently in the Bad state.
    pub fn is_bad(&self) -> bool {
        self.bad
    }

    /// The long-run loss probability these parameters give.
    pub fn stationary_loss(&self) -> f64 {
        let total = self.p_good_to_bad + self.p_bad_to_good;
        if total == 0.0 {
            return if self.bad {
                self.loss_in_bad
            } else {
                self.loss_in_good
            };
        }
        let pi_bad = self.p_good_to_bad / total;
        (1.0 - pi_bad) * self.loss_in_good + pi_bad * self.loss_in_bad
    }
}

impl LinkNode for GilbertElliott {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        let loss = if self.bad {
            self.loss_in_bad
        } else {
            self.loss_in_good
        };
        let lost = self.rng.random_bool(loss);
        let flip = if self.bad {
            self.p_bad_to_good
        } else {
            self.p_good_to_bad
        };
        if self.rng.random_bool(flip) {
            self.bad = !self.bad;
        }
        if lost {
            self.stats.dropped += 1;
        } else {
            self.stats.passed += 1;
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "gilbert-elliott"
    }
}

/// Serialises bytes at a fixed bit rate, exactly: time is kept in units of
/// `1 / rate` nanoseconds, so no rounding error accumulates over a stream.
#[derive(Clone, Debug)]
struct Serializer {
    rate_bits_per_sec: u64,
    /// When the last queued bit leaves, in nanoseconds × `rate_bits_per_sec`.
    busy_until_scaled: u128,
}

impl Serializer {
    fn new(what: &str, rate_bits_per_sec: u64) -> Serializer {
        assert!(rate_bits_per_sec > 0, "{what} rate must be > 0 bit/s");
        Serializer {
            rate_bits_per_sec,
            busy_until_scaled: 0,
        }
    }

    /// Queues `len` bytes arriving at `now`; returns when their last bit
    /// leaves (rounded up to the nanosecond).
    fn enqueue(&mut self, now: Timestamp, len: usize) -> Timestamp {
        let rate = u128::from(self.rate_bits_per_sec);
        let now_scaled = u128::from(now.as_nanos()).saturating_mul(rate);
        let start = self.busy_until_scaled.max(now_scaled);
        let bits = (len as u128).saturating_mul(8);
        let finish = start.saturating_add(bits.saturating_mul(1_000_000_000));
        self.busy_until_scaled = finish;
        Timestamp::from_nanos(u64::try_from(finish.div_ceil(rate)).unwrap_or(u64::MAX))
    }
}

/// A finite FIFO drained at a fixed rate: a receiver's socket buffer, or a
/// bottleneck queue with tail drop.
///
/// ```text
///   arrivals ──▶ [ queued bytes ≤ capacity ] ──drain at rate──▶ delivery
///                   └─ full: the arriving datagram is dropped (tail drop)
/// ```
///
/// A datagram occupies the buffer from its arrival until its last bit has
/// been drained; it is delivered at that moment. A datagram arriving when
/// `queued bytes + its length > capacity` is dropped. Back-to-back datagrams
/// leave `len · 8 / rate` seconds apart. Deterministic: no RNG.
#[derive(Debug)]
pub struct TailDropBuffer {
    capacity_bytes: usize,
    drain: Serializer,
    /// `(drained at, length)` of the datagrams in the buffer, in FIFO order.
    queue: VecDeque<(Timestamp, usize)>,
    queued_bytes: usize,
    high_water_bytes: usize,
    stats: NodeStats,
}

impl TailDropBuffer {
    /// A buffer of `capacity_bytes` drained at `drain_rate_bits_per_sec`.
    ///
    /// # Panics
    /// If the drain rate is zero.
    pub fn new(capacity_bytes: usize, drain_rate_bits_per_sec: u64) -> TailDropBuffer {
        TailDropBuffer {
            capacity_bytes,
            drain: Serializer::new("TailDropBuffer drain", drain_rate_bits_per_sec),
            queue: VecDeque::new(),
            queued_bytes: 0,
            high_water_bytes: 0,
            stats: NodeStats::default(),
        }
    }

    /// Datagrams dropped because the buffer was full.
    pub fn drops(&self) -> u64 {
        self.stats.dropped
    }

    /// Bytes in the buffer as of the last offer.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// The most bytes the buffer has held at once.
    pub fn high_water_bytes(&self) -> usize {
        self.high_water_bytes
    }
}

impl LinkNode for TailDropBuffer {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        while let Some(&(drained_at, len)) = self.queue.front() {
            if drained_at > now {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= len;
        }
        let len = datagram.len();
        if self.queued_bytes.saturating_add(len) > self.capacity_bytes {
            self.stats.dropped += 1;
            return;
        }
        let at = self.drain.enqueue(now, len);
        self.queue.push_back((at, len));
        self.queued_bytes += len;
        self.high_water_bytes = self.high_water_bytes.max(self.queued_bytes);
        self.stats.passed += 1;
        out.push((at, datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "tail-drop-buffer"
    }
}

/// An unbounded FIFO serialising at a fixed rate: pure serialisation delay,
/// never a drop. A datagram leaves when its last bit is sent.
#[derive(Debug)]
pub struct RateLimit {
    serializer: Serializer,
    stats: NodeStats,
}

impl RateLimit {
    /// A link of `bits_per_sec`.
    ///
    /// # Panics
    /// If the rate is zero.
    pub fn new(bits_per_sec: u64) -> RateLimit {
        RateLimit {
            serializer: Serializer::new("RateLimit", bits_per_sec),
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for RateLimit {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        let at = self.serializer.enqueue(now, datagram.len());
        out.push((at, datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "rate-limit"
    }
}

/// Holds back a random subset of datagrams so later ones overtake them.
///
/// With probability `p` a datagram gets an extra delay: uniform in
/// `(0, max_extra_delay]` (at nanosecond resolution) with [`Reorder::new`],
/// exactly `gap` with [`Reorder::with_gap`] (what `netem`'s reorder and the
/// impairment relay do); the others pass at once. `reordered` counts the
/// held-back datagrams (whether or not anything actually overtook them).
/// Nothing is lost.
#[derive(Debug)]
pub struct Reorder {
    probability: f64,
    max_extra_nanos: u64,
    /// Hold back by exactly `max_extra_nanos` instead of a uniform draw.
    fixed: bool,
    rng: ChaCha8Rng,
    stats: NodeStats,
}

impl Reorder {
    /// Holds back each datagram with `probability`, by up to `max_extra_delay`.
    pub fn new(probability: f64, max_extra_delay: Duration, seed: Seed) -> Reorder {
        check_probability("Reorder probability", probability);
        Reorder {
            probability,
            max_extra_nanos: duration_nanos(max_extra_delay),
            fixed: false,
            rng: seed.rng(),
            stats: NodeStats::default(),
        }
    }

    /// Holds back each datagram with `probability`, by exactly `gap`.
    pub fn with_gap(probability: f64, gap: Duration, seed: Seed) -> Reorder {
        Reorder {
            fixed: true,
            ..Reorder::new(probability, gap, seed)
        }
    }
}

impl LinkNode for Reorder {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        if self.max_extra_nanos > 0 && self.rng.random_bool(self.probability) {
            self.stats.reordered += 1;
            let extra = if self.fixed {
                self.max_extra_nanos
            } else {
                self.rng.random_range(1..=self.max_extra_nanos)
            };
            out.push((now + Duration::from_nanos(extra), datagram));
        } else {
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "reorder"
    }
}

/// Emits a second copy of a random subset of datagrams, at the same time.
#[derive(Debug)]
pub struct Duplicate {
    probability: f64,
    rng: ChaCha8Rng,
    stats: NodeStats,
}

impl Duplicate {
    /// Duplicates each datagram with `probability`.
    pub fn new(probability: f64, seed: Seed) -> Duplicate {
        check_probability("Duplicate probability", probability);
        Duplicate {
            probability,
            rng: seed.rng(),
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for Duplicate {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        if self.rng.random_bool(self.probability) {
            self.stats.duplicated += 1;
            self.stats.passed += 1;
            out.push((now, datagram.clone()));
        }
        out.push((now, datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "duplicate"
    }
}

/// Damages a random subset of datagrams and passes them on.
///
/// A damaged datagram has 1 to 3 distinct bits flipped in one random byte,
/// or, with the [`truncate_probability`](Corrupt::truncate_probability)
/// option, is instead cut to a random shorter length (possibly zero). Empty
/// datagrams pass untouched. Both kinds count as `corrupted`.
#[derive(Debug)]
pub struct Corrupt {
    probability: f64,
    truncate_probability: f64,
    truncated: u64,
    rng: ChaCha8Rng,
    stats: NodeStats,
}

impl Corrupt {
    /// Damages each datagram with `probability` (bit flips only, by default).
    pub fn new(probability: f64, seed: Seed) -> Corrupt {
        check_probability("Corrupt probability", probability);
        Corrupt {
            probability,
            truncate_probability: 0.0,
            truncated: 0,
            rng: seed.rng(),
            stats: NodeStats::default(),
        }
    }

    /// Builder option: a damaged datagram is truncated instead of bit-flipped
    /// with probability `p` (so truncation happens to a fraction
    /// `probability · p` of all datagrams).
    #[must_use]
    pub fn truncate_probability(mut self, p: f64) -> Corrupt {
        check_probability("Corrupt truncate_probability", p);
        self.truncate_probability = p;
        self
    }

    /// How many of the corrupted datagrams were truncated.
    pub fn truncated(&self) -> u64 {
        self.truncated
    }
}

impl LinkNode for Corrupt {
    fn offer(
        &mut self,
        now: Timestamp,
        mut datagram: Vec<u8>,
        out: &mut Vec<(Timestamp, Vec<u8>)>,
    ) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        let len = datagram.len();
        if len > 0 && self.rng.random_bool(self.probability) {
            self.stats.corrupted += 1;
            if self.rng.random_bool(self.truncate_probability) {
                self.truncated += 1;
                datagram.truncate(self.rng.random_range(0..len));
            } else {
                let pos = self.rng.random_range(0..len);
                let bits: u32 = self.rng.random_range(1..=3);
                let mut mask = 0u8;
                while mask.count_ones() < bits {
                    mask |= 1 << self.rng.random_range(0..8u32);
                }
                if let Some(byte) = datagram.get_mut(pos) {
                    *byte ^= mask;
                }
            }
        }
        out.push((now, datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "corrupt"
    }
}

/// Drops datagrams longer than the path MTU. IP fragmentation is never
/// modelled: an oversize datagram simply does not arrive.
#[derive(Debug)]
pub struct Mtu {
    max_len: usize,
    stats: NodeStats,
}

impl Mtu {
    /// Passes datagrams of at most `max_len` bytes.
    pub fn new(max_len: usize) -> Mtu {
        Mtu {
            max_len,
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for Mtu {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        if datagram.len() > self.max_len {
            self.stats.dropped += 1;
        } else {
            self.stats.passed += 1;
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "mtu"
    }
}

/// A propagation delay: fixed, plus optional uniform jitter.
///
/// With jitter, each datagram gets `fixed + U[0, jitter]` (nanosecond
/// resolution, independent per datagram), so datagrams sent closer together
/// than `jitter` may be reordered. That is intended; use a fixed delay for
/// an order-preserving link.
#[derive(Debug)]
pub struct Delay {
    fixed: Duration,
    jitter_nanos: u64,
    rng: Option<ChaCha8Rng>,
    stats: NodeStats,
}

impl Delay {
    /// A fixed delay (order preserving).
    pub fn new(fixed: Duration) -> Delay {
        Delay {
            fixed,
            jitter_nanos: 0,
            rng: None,
            stats: NodeStats::default(),
        }
    }

    /// A delay of `fixed` plus a uniform random `[0, jitter]` per datagram
    /// (may reorder).
    pub fn with_jitter(fixed: Duration, jitter: Duration, seed: Seed) -> Delay {
        Delay {
            fixed,
            jitter_nanos: duration_nanos(jitter),
            rng: Some(seed.rng()),
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for Delay {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        self.stats.passed += 1;
        let extra = match &mut self.rng {
            Some(rng) if self.jitter_nanos > 0 => rng.random_range(0..=self.jitter_nanos),
            _ => 0,
        };
        out.push((now + self.fixed + Duration::from_nanos(extra), datagram));
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "delay"
    }
}

/// The link is down during `[from, until)`: every datagram offered in that
/// window is dropped (a cable pull, a receiver restart).
#[derive(Debug)]
pub struct Outage {
    from: Timestamp,
    until: Timestamp,
    stats: NodeStats,
}

impl Outage {
    /// Drops everything offered at `from <= now < until`.
    pub fn new(from: Timestamp, until: Timestamp) -> Outage {
        Outage {
            from,
            until,
            stats: NodeStats::default(),
        }
    }
}

impl LinkNode for Outage {
    fn offer(&mut self, now: Timestamp, datagram: Vec<u8>, out: &mut Vec<(Timestamp, Vec<u8>)>) {
        self.stats.offered += 1;
        if (self.from..self.until).contains(&now) {
            self.stats.dropped += 1;
        } else {
            self.stats.passed += 1;
            out.push((now, datagram));
        }
    }

    fn stats(&self) -> NodeStats {
        self.stats.clone()
    }

    fn name(&self) -> &'static str {
        "outage"
    }
}

fn check_probability(what: &str, p: f64) {
    assert!(
        (0.0..=1.0).contains(&p),
        "{what} must be a probability in [0, 1], got {p}"
    );
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
