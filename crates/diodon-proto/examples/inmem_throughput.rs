//! In-memory path throughput per CPU second: runs one session of five
//! 64 MiB channels through the in-memory transfer (`diodon_sim::transfer`:
//! the simulator loop, one batch at a time) and
//! divides payload by the CPU time this thread actually ran (from
//! /proc/thread-self/schedstat), so the figure holds on a busy machine where
//! wall-clock benchmarks are noisy.
//!
//! `cargo run --release -p diodon-proto --example inmem_throughput`

use diodon_proto::{RepairRatio, SenderConfig, SymbolSize};
use diodon_sim::transfer::{in_memory_transfer, in_memory_transfer_metered, Side};

fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    const SIZE: usize = 64 << 20;
    const RUNS: u32 = 5;
    let data: Vec<u8> = (0..SIZE).map(|i| (i ^ (i >> 9)) as u8).collect();
    println!("| symbol | repair | loss | whole path, one core | sender side | receiver side |");
    println!("|---|---|---|---|---|---|");
    for (symbol, repair, loss) in [
        (8952usize, 10u32, 0u64),
        (8952, 0, 0),
        (8952, 25, 0),
        (8952, 10, 2),
        (1452, 10, 0),
    ] {
        let config = SenderConfig {
            symbol_size: SymbolSize::new(symbol).expect("symbol"),
            repair: RepairRatio::percent(repair).expect("repair"),
            buffer_limit: 64 << 20,
            max_batch: 64,
            ..SenderConfig::default()
        };
        let _ = in_memory_transfer(config.clone(), &data, loss);
        let mut spent = [0u64; 2];
        let mut side = Side::Sender;
        let mut mark = cpu_ns();
        let mut meter = |next: Side| {
            let t = cpu_ns();
            spent[usize::from(side == Side::Receiver)] += t - mark;
            mark = t;
            side = next;
        };
        let (stats, delivered) =
            in_memory_transfer_metered(config.clone(), &data, RUNS as usize, loss, &mut meter);
        assert_eq!(
            (stats.channels_complete, delivered),
            (u64::from(RUNS), SIZE as u64 * u64::from(RUNS))
        );
        let bits = SIZE as f64 * f64::from(RUNS) * 8.0;
        let rate = |ns: u64| bits / (ns as f64 / 1e9) / 1e9;
        println!(
            "| {symbol} | {repair} % | {loss} % | {:.2} Gbit/s | {:.2} Gbit/s | {:.2} Gbit/s |",
            rate(spent[0] + spent[1]),
            rate(spent[0]),
            rate(spent[1])
        );
    }
}
