//! Virtual time for the sans-IO cores: [`Timestamp`] (a monotonic instant the
//! caller supplies), [`TimerTable`] (one slot per timer kind, indexed by the
//! core's own timer enum through [`TimerSlot`]; the minimum is the next
//! wake-up) and [`Deadlines`] (one deadline per channel, ordered by time, so
//! `poll_timeout` does not scan the channels).
//!
//! `Deadlines` is an ordered set of `(deadline, key)` plus a map from key
//! to its deadline, with the earliest entry cached: re-arming a key costs
//! O(log n), the earliest deadline O(1), taking the due ones O(log n) each.
//! Measured against the alternatives for the core's pattern (every datagram
//! re-arms its channel's silence deadline; only the earliest is asked for):
//! a `BinaryHeap` with lazy invalidation would push one stale entry per
//! re-arm (one per datagram) and needs `&mut self` to discard them in
//! `poll_timeout`; a timer wheel needs a tick, while the timer tests pin
//! deadlines to the nanosecond on both sides. Re-arming to the same
//! deadline (every datagram of a batch shares `now`) is a no-op.
//!
//! The core never reads a clock. Drivers convert their monotonic clock into a
//! `Timestamp` (nanoseconds since an arbitrary origin) and pass it to every
//! `handle_*` / `poll_*` call; the simulator does the same with its virtual
//! clock, which is what makes every timer edge testable.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A monotonic instant, in nanoseconds since an origin chosen by the driver.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The origin (t = 0).
    pub const ZERO: Timestamp = Timestamp(0);
    /// The far future; used as "never".
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// A timestamp `nanos` nanoseconds after the origin.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// A timestamp `micros` microseconds after the origin.
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros.saturating_mul(1_000))
    }

    /// A timestamp `millis` milliseconds after the origin.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole milliseconds since the origin.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> Timestamp {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(nanos))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    fn sub(self, rhs: Timestamp) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    /// `self − d`, saturating at [`Timestamp::ZERO`].
    fn sub(self, rhs: Duration) -> Timestamp {
        let nanos = u64::try_from(rhs.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(nanos))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:.6}s", self.0 as f64 / 1e9)
    }
}

/// A timer kind: a small fieldless enum whose variants are the slots of a
/// [`TimerTable`]. Implement it with `index` returning `self as usize` and
/// `COUNT` the number of variants (at most [`MAX_TIMER_SLOTS`]).
pub trait TimerSlot: Copy {
    /// Number of slots (variants).
    const COUNT: usize;
    /// This timer's slot, below `COUNT`.
    fn index(self) -> usize;
}

/// Most slots a [`TimerTable`] holds (checked at compile time).
pub const MAX_TIMER_SLOTS: usize = 8;

/// One deadline slot per timer kind `K` (an enum implementing [`TimerSlot`]).
///
/// `next()` is the earliest armed deadline; `take_expired(k, now)` reports
/// (and disarms) slot `k` if its deadline is `<= now`, so handling a timeout
/// twice at the same instant does nothing the second time.
#[derive(Clone, Debug)]
pub struct TimerTable<K: TimerSlot> {
    slots: [Option<Timestamp>; MAX_TIMER_SLOTS],
    kind: PhantomData<K>,
}

impl<K: TimerSlot> Default for TimerTable<K> {
    fn default() -> Self {
        const { assert!(K::COUNT <= MAX_TIMER_SLOTS, "too many timer kinds") };
        TimerTable {
            slots: [None; MAX_TIMER_SLOTS],
            kind: PhantomData,
        }
    }
}

impl<K: TimerSlot> TimerTable<K> {
    fn slot(timer: K) -> usize {
        let i = timer.index();
        debug_assert!(i < K::COUNT, "timer index {i} out of 0..{}", K::COUNT);
        i
    }

    /// Arms `timer` to fire at `at` (replacing any earlier deadline).
    pub fn set(&mut self, timer: K, at: Timestamp) {
        self.slots[Self::slot(timer)] = Some(at);
    }

    /// Disarms `timer`.
    pub fn stop(&mut self, timer: K) {
        self.slots[Self::slot(timer)] = None;
    }

    /// The deadline of `timer`, if armed.
    pub fn get(&self, timer: K) -> Option<Timestamp> {
        self.slots[Self::slot(timer)]
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Timestamp> {
        self.slots[..K::COUNT].iter().flatten().min().copied()
    }

    /// Returns whether `timer` is armed and due at `now`, disarming it if so.
    pub fn take_expired(&mut self, timer: K, now: Timestamp) -> bool {
        let i = Self::slot(timer);
        match self.slots[i] {
            Some(at) if at <= now => {
                self.slots[i] = None;
                true
            }
            _ => false,
        }
    }
}

/// One deadline per key `K` (a channel, a queued control datagram),
/// ordered by time; see the module docs for the costs.
///
/// `next()` is the earliest armed deadline; `pop_due(now)` takes the
/// earliest key whose deadline is `<= now` (ties in key order), disarming it.
#[derive(Clone, Debug)]
pub struct Deadlines<K> {
    order: BTreeSet<(Timestamp, K)>,
    armed: HashMap<K, Timestamp>,
    earliest: Option<(Timestamp, K)>,
}

impl<K> Default for Deadlines<K> {
    fn default() -> Self {
        Deadlines {
            order: BTreeSet::new(),
            armed: HashMap::new(),
            earliest: None,
        }
    }
}

impl<K: Copy + Ord + Hash> Deadlines<K> {
    /// Arms `key` to fire at `at`, replacing its earlier deadline; `None`
    /// disarms it. Setting the deadline it already has does nothing.
    pub fn set(&mut self, key: K, at: Option<Timestamp>) {
        let old = match at {
            Some(at) => match self.armed.insert(key, at) {
                Some(old) if old == at => return,
                old => old,
            },
            None => match self.armed.remove(&key) {
                Some(old) => Some(old),
                None => return,
            },
        };
        if let Some(old) = old {
            self.order.remove(&(old, key));
        }
        if let Some(at) = at {
            self.order.insert((at, key));
        }
        match (self.earliest, at) {
            // The earliest entry moved or went away: look it up again.
            (Some((_, k)), _) if k == key => self.earliest = self.order.first().copied(),
            (Some(e), Some(at)) if (at, key) < e => self.earliest = Some((at, key)),
            (None, Some(at)) => self.earliest = Some((at, key)),
            _ => {}
        }
    }

    /// The deadline of `key`, if armed.
    pub fn get(&self, key: K) -> Option<Timestamp> {
        self.armed.get(&key).copied()
    }

    /// The earliest armed deadline.
    pub fn next(&self) -> Option<Timestamp> {
        self.earliest.map(|(at, _)| at)
    }

    /// The earliest key due at `now` (deadline `<= now`), disarmed.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<K> {
        let (at, key) = self.earliest.filter(|(at, _)| *at <= now)?;
        debug_assert_eq!(self.armed.get(&key), Some(&at));
        self.set(key, None);
        Some(key)
    }

    /// Every key due at `now`, disarmed, in key order.
    pub fn take_due(&mut self, now: Timestamp) -> Vec<K> {
        let mut due: Vec<K> = std::iter::from_fn(|| self.pop_due(now)).collect();
        due.sort_unstable();
        due
    }

    /// Armed keys.
    pub fn len(&self) -> usize {
        self.armed.len()
    }

    /// Nothing armed.
    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        A,
        B,
    }

    impl TimerSlot for Kind {
        const COUNT: usize = 2;
        fn index(self) -> usize {
            self as usize
        }
    }

    #[test]
    fn timer_table_fires_once_at_deadline() {
        let mut t = TimerTable::<Kind>::default();
        t.set(Kind::A, Timestamp::from_millis(10));
        t.set(Kind::B, Timestamp::from_millis(5));
        assert_eq!(t.next(), Some(Timestamp::from_millis(5)));
        assert!(!t.take_expired(Kind::A, Timestamp::from_millis(9)));
        assert!(t.take_expired(Kind::A, Timestamp::from_millis(10)));
        assert!(!t.take_expired(Kind::A, Timestamp::from_millis(10)));
        assert_eq!(t.next(), Some(Timestamp::from_millis(5)));
        t.stop(Kind::B);
        assert_eq!(t.get(Kind::B), None);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn deadlines_keep_the_earliest_and_fire_in_order() {
        let ms = Timestamp::from_millis;
        let mut d = Deadlines::<u32>::default();
        assert_eq!(d.next(), None);
        d.set(3, Some(ms(30)));
        d.set(1, Some(ms(10)));
        d.set(2, Some(ms(20)));
        assert_eq!(d.next(), Some(ms(10)));
        // Re-arming the earliest later, disarming, re-arming earlier.
        d.set(1, Some(ms(25)));
        assert_eq!(d.next(), Some(ms(20)));
        d.set(2, None);
        assert_eq!(d.next(), Some(ms(25)));
        d.set(3, Some(ms(5)));
        assert_eq!((d.next(), d.get(3), d.len()), (Some(ms(5)), Some(ms(5)), 2));
        assert_eq!(d.pop_due(ms(4)), None);
        assert_eq!(d.pop_due(ms(5)), Some(3));
        assert_eq!(d.pop_due(ms(5)), None, "disarmed once taken");
        d.set(7, Some(ms(25)));
        assert_eq!(d.take_due(ms(100)), vec![1, 7]);
        assert!(d.is_empty());
        assert_eq!(d.next(), None);
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        let a = Timestamp::from_millis(1);
        assert_eq!(Timestamp::ZERO - a, Duration::ZERO);
        assert_eq!(Timestamp::MAX + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(a + Duration::from_millis(2), Timestamp::from_millis(3));
    }
}
