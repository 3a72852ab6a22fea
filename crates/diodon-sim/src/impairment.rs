//! [`Impairment`]: the usual impairments of one direction of a link, as one
//! value, and the node chain that produces them. The Delta-t tests build
//! their links from it, and the real-time impairment relay
//! (`diodon-lab::relay`) runs the same chain on wall-clock time, so a loss
//! model means the same thing in a simulation and on a real socket.
//!
//! ```text
//!   send ─▶ Bernoulli(loss) ─▶ Corrupt ─▶ Duplicate ─▶ Reorder(+gap) ─▶ Delay(delay + U[0, jitter]) ─▶
//!            seed.derive(0)    derive(1)   derive(2)    derive(4)        derive(3)
//! ```
//!
//! A zero setting adds no node (an all-zero impairment is a perfect link),
//! and each random node draws from its own sub-seed, so turning one
//! impairment on or off does not change the draws of the others. Every
//! decision about a datagram (lost, damaged, copied, held back) is taken
//! the moment it is sent; only the delay follows.

use std::time::Duration;

use crate::link::Link;
use crate::nodes::{Bernoulli, Corrupt, Delay, Duplicate, Reorder};
use crate::seed::Seed;

/// Impairments of one direction. Probabilities lie in `[0, 1]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Impairment {
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram arrives with 1 to 3 bits flipped in one byte.
    pub corrupt: f64,
    /// Probability that a datagram arrives twice (each copy delayed on its own).
    pub duplicate: f64,
    /// One-way delay added to every datagram.
    pub delay: Duration,
    /// Extra delay, uniform in `[0, jitter]` per datagram (may reorder).
    pub jitter: Duration,
    /// Probability that a datagram is held back by `reorder_gap`, so the
    /// ones behind it overtake it.
    pub reorder: f64,
    /// Extra hold of a reordered datagram.
    pub reorder_gap: Duration,
}

impl Impairment {
    /// A link that only loses datagrams, with probability `loss`.
    pub fn loss(loss: f64) -> Impairment {
        Impairment {
            loss,
            ..Impairment::default()
        }
    }

    /// The chain of nodes producing these impairments, seeded from `seed`.
    ///
    /// # Panics
    /// If a probability lies outside `[0, 1]`.
    pub fn link(&self, seed: Seed) -> Link {
        self.append_to(Link::new(), seed)
    }

    /// Appends the nodes producing these impairments to `link` (after an
    /// [`Outage`](crate::nodes::Outage), say).
    ///
    /// # Panics
    /// If a probability lies outside `[0, 1]`.
    pub fn append_to(&self, mut link: Link, seed: Seed) -> Link {
        if self.loss > 0.0 {
            link = link.with(Bernoulli::new(self.loss, seed.derive(0)));
        }
        if self.corrupt > 0.0 {
            link = link.with(Corrupt::new(self.corrupt, seed.derive(1)));
        }
        if self.duplicate > 0.0 {
            link = link.with(Duplicate::new(self.duplicate, seed.derive(2)));
        }
        if self.reorder > 0.0 && !self.reorder_gap.is_zero() {
            link = link.with(Reorder::with_gap(
                self.reorder,
                self.reorder_gap,
                seed.derive(4),
            ));
        }
        if !self.jitter.is_zero() {
            link = link.with(Delay::with_jitter(self.delay, self.jitter, seed.derive(3)));
        } else if !self.delay.is_zero() {
            link = link.with(Delay::new(self.delay));
        }
        link
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_sansio::Timestamp;

    #[test]
    fn zero_impairment_is_a_perfect_link() {
        assert!(Impairment::default().link(Seed(1)).is_perfect());
        let names: Vec<&str> = Impairment {
            loss: 0.1,
            corrupt: 0.1,
            duplicate: 0.1,
            delay: Duration::from_millis(1),
            jitter: Duration::from_millis(1),
            reorder: 0.1,
            reorder_gap: Duration::from_millis(1),
        }
        .link(Seed(1))
        .stats()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
        assert_eq!(
            names,
            ["bernoulli", "corrupt", "duplicate", "reorder", "delay"]
        );
    }

    #[test]
    fn loss_and_delay_as_configured_and_reproducible() {
        let seed = Seed::from_env_or(31);
        let _report = crate::seed::SeedReport::new("impairment_loss_and_delay", &seed);
        let imp = Impairment {
            loss: 0.05,
            delay: Duration::from_millis(10),
            ..Impairment::default()
        };
        let run = || {
            let mut link = imp.link(seed);
            for i in 0..20_000u64 {
                link.send(Timestamp::from_micros(i), i.to_be_bytes().to_vec());
            }
            let delivered = link.drain();
            for (at, d) in &delivered {
                let sent = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
                assert_eq!(*at, Timestamp::from_micros(sent) + imp.delay);
            }
            delivered.len()
        };
        let delivered = run();
        assert_eq!(delivered, run(), "same seed, same losses");
        assert!((18_700..19_300).contains(&delivered), "{delivered}");
    }
}
