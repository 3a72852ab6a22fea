//! The one place Diodon reads clocks: [`MonotonicClock`] maps
//! [`std::time::Instant`] onto the core's [`Timestamp`] (nanoseconds since the
//! clock was created), [`MonotonicClock::sleep_until`] waits precisely enough
//! for a pacer, and [`unix_time_ms`] gives wall time for logs and reports.
//!
//! ```text
//!   now ──sleep(remaining − SPIN_WINDOW)──► deadline − ~100 µs ──spin──► deadline
//! ```
//!
//! `thread::sleep` alone overshoots by the timer slack (≈ 50 µs on Linux) plus
//! scheduling delay; at 1 Gbit/s a 1500-byte datagram lasts 12 µs, so the last
//! stretch is spun. A pacer that advances its deadline by a fixed interval
//! (rather than from the wake-up time) keeps its long-run rate exact even when
//! a single wake-up is late.
#![expect(
    clippy::disallowed_methods,
    reason = "diodon-io is the one crate that reads clocks"
)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use diodon_sansio::Timestamp;

/// How long before a deadline [`MonotonicClock::sleep_until`] stops sleeping
/// and starts spinning.
pub const SPIN_WINDOW: Duration = Duration::from_micros(100);

/// A monotonic clock whose origin is the moment it was created.
///
/// Clones share the origin, so timestamps from clones are comparable.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl MonotonicClock {
    /// A clock whose [`Timestamp::ZERO`] is now.
    pub fn new() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }

    /// The current time, in nanoseconds since this clock's origin.
    pub fn now(&self) -> Timestamp {
        self.timestamp_of(Instant::now())
    }

    /// The timestamp of an `Instant` (zero if it precedes the origin).
    pub fn timestamp_of(&self, instant: Instant) -> Timestamp {
        let nanos = instant.saturating_duration_since(self.origin).as_nanos();
        Timestamp::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The `Instant` a timestamp stands for (saturating far in the future).
    pub fn instant_of(&self, t: Timestamp) -> Instant {
        let d = Duration::from_nanos(t.as_nanos());
        self.origin
            .checked_add(d)
            .unwrap_or_else(|| self.origin + Duration::from_secs(u64::from(u32::MAX)))
    }

    /// Time elapsed since `earlier` (zero if `earlier` is in the future).
    pub fn elapsed_since(&self, earlier: Timestamp) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// Blocks until `deadline`, returning the time of wake-up (never earlier
    /// than `deadline`).
    ///
    /// Sleeps until about [`SPIN_WINDOW`] before the deadline, then spins.
    /// Returns at once if the deadline has passed.
    pub fn sleep_until(&self, deadline: Timestamp) -> Timestamp {
        self.sleep_until_with(deadline, SPIN_WINDOW)
    }

    /// [`MonotonicClock::sleep_until`] with an explicit spin window (zero: sleep
    /// only, cheapest on CPU, least precise).
    pub fn sleep_until_with(&self, deadline: Timestamp, spin_window: Duration) -> Timestamp {
        loop {
            let now = self.now();
            if now >= deadline {
                return now;
            }
            let remaining = deadline.saturating_duration_since(now);
            if remaining > spin_window {
                std::thread::sleep(remaining.saturating_sub(spin_window));
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// Wall-clock time in milliseconds since the Unix epoch (0 if the system clock
/// is set before 1970).
pub fn unix_time_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Wall-clock time in nanoseconds since the Unix epoch (0 before 1970).
pub fn unix_time_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_monotonic_and_maps_back() {
        let clock = MonotonicClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        let i = clock.instant_of(b);
        assert_eq!(clock.timestamp_of(i), b);
        assert_eq!(clock.timestamp_of(clock.origin), Timestamp::ZERO);
    }

    #[test]
    fn sleep_until_never_wakes_early() {
        let clock = MonotonicClock::new();
        let mut late = Vec::new();
        for _ in 0..50 {
            let deadline = clock.now() + Duration::from_micros(300);
            let woke = clock.sleep_until(deadline);
            assert!(woke >= deadline);
            late.push(woke - deadline);
        }
        late.sort();
        // Median lateness is a few µs when spinning; allow a busy shared host.
        assert!(late[late.len() / 2] < Duration::from_millis(2), "{late:?}");
    }

    #[test]
    fn pacer_holds_one_gigabit_within_one_percent() {
        // 1500-byte datagrams at 1 Gbit/s: one every 12 µs; 20 000 of them = 240 ms.
        // Best of three runs: a shared CI core can preempt one run wholesale.
        let clock = MonotonicClock::new();
        let interval = Duration::from_micros(12);
        let ideal = interval.as_secs_f64() * 20_000.0;
        let mut errors = Vec::new();
        for _ in 0..3 {
            let start = clock.now();
            let mut deadline = start;
            for _ in 0..20_000 {
                deadline += interval;
                clock.sleep_until(deadline);
            }
            let elapsed = clock.elapsed_since(start).as_secs_f64();
            errors.push((elapsed - ideal).abs() / ideal);
            if errors[errors.len() - 1] < 0.01 {
                return;
            }
        }
        panic!("pacing error above 1 % in every run: {errors:?}");
    }

    #[test]
    fn wall_time_is_after_2020() {
        assert!(unix_time_ms() > 1_577_836_800_000);
    }
}
