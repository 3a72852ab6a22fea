//! In-memory rate of the pre-filter's pure work per frame (parse, classify,
//! flow key, rendezvous), on one core, for 0, 16, 1,000 and 10,000 rules:
//! what the capture path can at best add up to. Run with
//! `cargo run --release -p diodon-filter --example classify_rate`.
#![expect(
    clippy::disallowed_methods,
    reason = "a benchmark: it reads the clock to time itself"
)]

use diodon_filter::frame::Headers;
use diodon_filter::synth::Synth;
use diodon_filter::{Classifier, FlowKey, FlowMode, Rendezvous, RuleSet};
use std::fmt::Write as _;
use std::time::Instant;

/// Deterministic pseudo-random numbers (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// `n` rules in the shape of a block list: random /32 and /24 sources and
/// destinations, a fifth of them with a port, the last one allowing.
fn rules(n: usize, rng: &mut Rng) -> RuleSet {
    let mut text = String::from("default allow\n");
    for i in 0..n {
        let a = std::net::Ipv4Addr::from((rng.next() as u32) | 0x0100_0000);
        let (field, cidr) = if i % 2 == 0 {
            ("src", format!("{a}"))
        } else {
            let m = u32::from(a) & 0xffff_ff00;
            ("dst", format!("{}/24", std::net::Ipv4Addr::from(m)))
        };
        let port = if i % 5 == 0 {
            format!(" proto tcp dport {}", rng.next() % 1024)
        } else {
            String::new()
        };
        let _ = writeln!(text, "deny {field} {cidr}{port}");
    }
    RuleSet::parse(&text).expect("generated rules parse")
}

fn main() {
    let mut rng = Rng(0x5eed);
    let frames: Vec<Vec<u8>> = (0..4096)
        .map(|i| {
            let src = (rng.next() as u32).to_be_bytes();
            let dst = (rng.next() as u32).to_be_bytes();
            Synth::udp4(src, dst, 1024 + (i % 1000) as u16, 53, 18).emit()
        })
        .collect();
    println!("rules   agents  ns/frame  Mframes/s  (parse + classify + flow key + rendezvous)");
    for n in [0usize, 16, 1_000, 10_000] {
        let set = rules(n, &mut rng);
        let t0 = Instant::now();
        let c = Classifier::compile(&set);
        let build = t0.elapsed();
        for agents in [1usize, 4, 16] {
            let names: Vec<String> = (0..agents).map(|i| format!("agent-{i}")).collect();
            let rv = Rendezvous::new(&names);
            let rounds = 500;
            let t = Instant::now();
            let mut sum = 0usize;
            for _ in 0..rounds {
                for f in &frames {
                    if let Some(h) = Headers::parse(f) {
                        let v = c.classify(&h);
                        sum += v.rule.map_or(0, |r| r as usize);
                        sum += rv.pick(FlowKey::of(&h, FlowMode::FiveTuple).hash());
                    }
                }
            }
            let ns = t.elapsed().as_nanos() as f64 / (rounds * frames.len()) as f64;
            println!(
                "{n:>6}  {agents:>6}  {ns:>8.1}  {:>9.2}   (compiled in {build:.1?}; checksum {sum})",
                1000.0 / ns
            );
        }
    }
}
