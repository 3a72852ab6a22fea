//! Sequence numbers: 32-bit, wrapping, compared with serial-number arithmetic
//! (RFC 1982). Every data octet consumes one SN, a rendezvous segment one SN,
//! acks and naks none.
//!
//! ```text
//!   una ............ nxt ............ una + window
//!    |<-- in flight -->|<-- usable -->|
//! ```

use std::fmt;

/// A Delta-t sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n`, wrapping.
    #[must_use]
    pub const fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }

    /// Signed distance `self - other` in serial arithmetic.
    #[expect(
        clippy::cast_possible_wrap,
        reason = "serial arithmetic: the wrap is the point"
    )]
    pub const fn diff(self, other: Seq) -> i64 {
        self.0.wrapping_sub(other.0) as i32 as i64
    }

    /// Whether `self` comes strictly before `other`.
    pub const fn before(self, other: Seq) -> bool {
        self.diff(other) < 0
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_comparison_survives_wrap() {
        let a = Seq(u32::MAX - 5);
        let b = a.add(10);
        assert_eq!(b.0, 4);
        assert_eq!(b.diff(a), 10);
        assert_eq!(a.diff(b), -10);
        assert!(a.before(b));
        assert!(!b.before(a));
    }
}
