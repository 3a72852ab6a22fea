//! The virtual clock a simulation advances by hand.
//!
//! It only ever moves forward; nothing here reads a real clock.

use std::time::Duration;

use diodon_sansio::Timestamp;

/// A virtual clock: the simulation's `now`, advanced explicitly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VirtualClock {
    /// The current virtual time.
    pub now: Timestamp,
}

impl VirtualClock {
    /// A clock reading `start`.
    pub fn new(start: Timestamp) -> VirtualClock {
        VirtualClock { now: start }
    }

    /// Moves the clock to `t`.
    ///
    /// # Panics
    /// If `t` is earlier than the current time (virtual time never runs backward).
    pub fn advance_to(&mut self, t: Timestamp) {
        assert!(
            t >= self.now,
            "VirtualClock::advance_to({t:?}) would move time backward from {:?}",
            self.now
        );
        self.now = t;
    }

    /// Moves the clock forward by `d` (saturating at [`Timestamp::MAX`]).
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_forward() {
        let mut c = VirtualClock::new(Timestamp::from_millis(1));
        c.advance(Duration::from_millis(2));
        assert_eq!(c.now, Timestamp::from_millis(3));
        c.advance_to(Timestamp::from_millis(3));
        c.advance_to(Timestamp::from_millis(10));
        assert_eq!(c.now, Timestamp::from_millis(10));
    }

    #[test]
    #[should_panic(expected = "backward")]
    fn refuses_to_go_backward() {
        let mut c = VirtualClock::new(Timestamp::from_millis(5));
        c.advance_to(Timestamp::from_millis(4));
    }
}
