//! Traces for the tap's tests and benchmark, written as pcap files that
//! `tcpreplay` sends: the dpdk-prefilter thesis's traffic (sources
//! 10.0.0.0/28 to 10.0.1.1, UDP, one frame size) and its 16-ACL mix, and
//! random flows (both directions) for throughput runs.
//!
//! ```text
//!  Mix::Thesis   source 10.0.0.1–14 at random ─► 10.0.1.1      (Tables 4.1, 4.2)
//!  Mix::Thesis16 1/10 from 10.0.0.1, 1/10 from 10.0.0.2, 4/5 from addresses the
//!                16 rules deny (10.0.0.3–14, 192.168.0.0/16 ─►, ─► 172.16.0.0/12)  (Table 4.3)
//!  Mix::Random   N flows of random addresses and ports, both directions
//!  every frame: Ethernet + IPv4 + UDP, `size` bytes; timestamps 1/rate apart
//! ```
//!
//! Deterministic: the same seed writes the same file. (leaf)

use diodon_filter::synth::Synth;
use diodon_io::pcap::PcapWriter;
use std::io;
use std::path::Path;

/// Which traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Sources 10.0.0.1–14 to 10.0.1.1.
    Thesis,
    /// The 16-ACL table's mix: a fifth passes.
    Thesis16,
    /// Random flows.
    Random {
        /// Number of flows.
        flows: u32,
    },
}

/// xorshift64*: small, seeded, good enough for traffic.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn step(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.step() % n.max(1)
    }
}

/// The frame of packet `i`.
pub fn frame(mix: Mix, i: u64, size: usize, rng: &mut Rng) -> Vec<u8> {
    let payload = size.max(60).saturating_sub(42);
    let (src, dst, sport, dport) = match mix {
        Mix::Thesis => (
            [10, 0, 0, 1 + rng.below(14) as u8],
            [10, 0, 1, 1],
            1024,
            4739,
        ),
        Mix::Thesis16 => match rng.below(10) {
            0 => ([10, 0, 0, 1], [10, 0, 1, 1], 1024, 4739),
            1 => ([10, 0, 0, 2], [10, 0, 1, 1], 1024, 4739),
            2..=5 => (
                [10, 0, 0, 3 + rng.below(12) as u8],
                [10, 0, 1, 1],
                1024,
                4739,
            ),
            6 | 7 => {
                let b = 10 * (1 + rng.below(5)) as u8;
                (
                    [192, 168, b, rng.below(256) as u8],
                    [10, 0, 1, 1],
                    1024,
                    4739,
                )
            }
            _ => {
                let b = 1 + rng.below(5) as u8;
                (
                    [10, 0, 0, 1],
                    [172, 15 + b, b, rng.below(256) as u8],
                    1024,
                    4739,
                )
            }
        },
        Mix::Random { flows } => {
            // Flow f: a fixed 5-tuple; odd packets go the other way.
            let flow = rng.below(u64::from(flows.max(1)));
            let mut r = Rng(flow.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
            let a = ((r.step() as u32) | 0x0100_0000).to_be_bytes();
            let b = ((r.step() as u32) | 0x0100_0000).to_be_bytes();
            let (pa, pb) = (1024 + r.below(60_000) as u16, 1 + r.below(1023) as u16);
            if i.is_multiple_of(2) {
                (a, b, pa, pb)
            } else {
                (b, a, pb, pa)
            }
        }
    };
    let mut s = Synth::udp4(src, dst, sport, dport, payload);
    s.tag = i;
    s.emit()
}

/// Writes `count` frames of `size` bytes at `rate` frames per second.
pub fn write(
    path: &Path,
    mix: Mix,
    count: u64,
    size: usize,
    rate: u64,
    seed: u64,
) -> io::Result<()> {
    let mut w = PcapWriter::create(path, 65_535)?;
    let mut rng = Rng(seed | 1);
    let gap = 1_000_000_000 / rate.max(1);
    let start = 1_700_000_000_000_000_000u64;
    for i in 0..count {
        let bytes = frame(mix, i, size, &mut rng);
        w.write(start + i * gap, bytes.len() as u32, &bytes)?;
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_filter::{Classifier, Headers, RuleSet};

    #[test]
    fn the_thesis16_mix_passes_a_fifth_of_its_frames() {
        let rules = RuleSet::parse(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../results/tap/rules/thesis-16.acl"
            ))
            .expect("rule file"),
        )
        .expect("rules");
        assert_eq!(rules.rules.len(), 16);
        let c = Classifier::compile(&rules);
        let mut rng = Rng(7);
        let n = 20_000;
        let allowed = (0..n)
            .filter(|&i| {
                let f = frame(Mix::Thesis16, i, 574, &mut rng);
                assert_eq!(f.len(), 574);
                let h = Headers::parse(&f).expect("frame");
                c.classify(&h).action == diodon_filter::Action::Allow
            })
            .count();
        let share = allowed as f64 / n as f64;
        assert!((share - 0.2).abs() < 0.01, "{share}");
    }
}
