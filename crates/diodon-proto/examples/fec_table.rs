//! Prints the table of PROTOCOL.md "Block sizes and repair": the chance
//! that a 1 GB file fails, by block size, repair ratio and random loss, and
//! the longest burst each interleaved configuration always repairs.
//!
//! `cargo run -p diodon-proto --example fec_table`

use diodon_proto::fec_plan::{choose_repair, file_failure, LossModel, TARGET_FILE_BYTES};
use diodon_proto::SenderConfig;

fn main() {
    let symbol = 1418; // MTU 1500, IPv4, CRC32C
    let depth = 4usize;
    println!("| k | repair | m | burst repaired (depth {depth}) | p = 0.1 % | p = 1 % | p = 5 % |");
    println!("|---|---|---|---|---|---|---|");
    for k in [64u32, 128, 256, 512, 1024] {
        for percent in [5u32, 10, 15, 20, 25] {
            let m = (k * percent).div_ceil(100);
            let cells: Vec<String> = [0.001, 0.01, 0.05]
                .iter()
                .map(|&p| {
                    let f = file_failure(TARGET_FILE_BYTES, symbol, k, m, p);
                    if f < 1e-30 {
                        "< 1e-30".to_owned()
                    } else if f > 0.99 {
                        "≈ 1".to_owned()
                    } else {
                        format!("{f:.1e}")
                    }
                })
                .collect();
            println!(
                "| {k} | {percent} % | {m} | {} | {} |",
                m as usize * depth,
                cells.join(" | ")
            );
        }
    }
    println!();
    for loss in [0.001, 0.01, 0.05] {
        let c = choose_repair(LossModel { loss, burst: 64 }, symbol, None, depth);
        println!("--expected-loss {}: {c:?}", loss * 100.0);
    }
    let c = SenderConfig::default();
    for k in [1u16, 8, 64] {
        println!(
            "short block of {k}: {} repair symbols",
            c.short_block_repair(k)
        );
    }
}
