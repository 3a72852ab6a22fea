//! The loss model behind the FEC defaults (`diodon_proto::fec_plan`,
//! PROTOCOL.md "Block sizes and repair") held against the simulator:
//!
//! - block losses observed over thousands of seeded blocks match the
//!   binomial model within its confidence interval;
//! - short blocks get the repair the model asks for, no more;
//! - with the defaults, a file whose datagrams are lost in bursts of 64
//!   (1 % of them) arrives verified: every burst is spread over the
//!   interleave group and repaired.

use diodon_proto::fec_plan::{self, block_failure, burst_share};
use diodon_proto::{RepairRatio, SenderConfig, SymbolSize};
use diodon_sim::transfer::in_memory_transfer_over;
use diodon_sim::{Bernoulli, Bursts, Link, Seed, SeedReport};

/// One-block channels of `k` symbols of 64 bytes over `p` random loss: the
/// fraction of blocks lost, and the counts (lost, delivered).
fn observed_block_loss(k: u16, repair: u32, p: f64, blocks: usize, seed: Seed) -> (f64, u64, u64) {
    let config = SenderConfig {
        symbol_size: SymbolSize::new(64).expect("symbol"),
        block_symbols: k,
        repair: RepairRatio::percent(repair).expect("ratio"),
        interleave_depth: 1,
        ..SenderConfig::default()
    };
    let data = vec![0x5a; usize::from(k) * 64];
    let link = Link::new().with(Bernoulli::new(p, seed));
    let (stats, _) = in_memory_transfer_over(config, &data, blocks, link, &mut |_| {});
    // One block per channel: a channel completes exactly when its block is
    // not lost (its open and trailer go out in several copies). The run ends
    // when the link is empty, before the receiver's loss timers would fail
    // the others: every channel that did not complete lost its block.
    let delivered = stats.channels_complete;
    let lost = blocks as u64 - delivered;
    (lost as f64 / blocks as f64, lost, delivered)
}

#[test]
fn block_losses_match_the_binomial_model() {
    let seed = Seed::from_env_or(0xF3C);
    let _report = SeedReport::new("block_losses_match_the_binomial_model", &seed);
    // Parameters where failures are common enough to count: 16 + 2 at 5 %,
    // 32 + 4 and 64 + 7 (the old default), all at 5 %.
    for (i, (k, repair, p)) in [(16u16, 10u32, 0.05), (32, 10, 0.05), (64, 10, 0.05)]
        .into_iter()
        .enumerate()
    {
        let m = RepairRatio::percent(repair).expect("ratio").repair_for(k);
        let model = block_failure(u32::from(k), u32::from(m), p);
        let blocks = 3000;
        let (rate, lost, delivered) =
            observed_block_loss(k, repair, p, blocks, seed.derive(i as u64));
        let n = (lost + delivered) as f64;
        // 5 standard deviations of a binomial count.
        let tolerance = 5.0 * (model * (1.0 - model) / n).sqrt();
        eprintln!("k={k} m={m} p={p}: model {model:.4}, observed {rate:.4} ({lost}/{n})");
        assert!(
            (rate - model).abs() <= tolerance,
            "k={k} m={m} p={p}: observed {rate:.4}, model {model:.4} ± {tolerance:.4}"
        );
    }
}

#[test]
fn short_blocks_get_the_repair_the_model_asks_for() {
    let c = SenderConfig::default();
    assert_eq!(c.block_symbols, 224);
    assert_eq!(
        u32::from(c.block_symbols),
        fec_plan::default_block(c.repair.get()),
        "the default block is the one the decoder works on without padding"
    );
    assert_eq!(c.short_block_repair(224), 23, "a full block: 10 %");
    assert_eq!(c.short_block_repair(1000), 100, "a longer one: its share");
    let one = c.short_block_repair(1);
    let eight = c.short_block_repair(8);
    assert!((4..=6).contains(&one), "{one}");
    assert!(eight >= one && eight < 23, "{eight}");
    // Below the per-block target at the design loss (1 %), and one symbol
    // fewer would not be.
    let p = 0.01;
    let bar = fec_plan::per_block_target(c.symbol_size.get(), 224);
    assert!(block_failure(8, u32::from(eight), p) <= bar);
    assert!(block_failure(8, u32::from(eight) - 1, p) > bar);
    let no_loss = SenderConfig {
        design_loss_ppm: 0,
        ..c.clone()
    };
    assert_eq!(no_loss.short_block_repair(8), 1, "only the ratio's share");
    let heavy = SenderConfig {
        design_loss_ppm: 200_000,
        ..c.clone()
    };
    assert!(
        heavy.short_block_repair(8) > eight,
        "more loss, more repair"
    );
    let hopeless = SenderConfig {
        design_loss_ppm: 500_000,
        ..c
    };
    assert_eq!(
        hopeless.short_block_repair(8),
        23,
        "at most a full block's repair"
    );
}

#[test]
fn a_file_losing_one_percent_in_bursts_of_64_arrives_verified() {
    let seed = Seed::from_env_or(0xB64);
    let _report = SeedReport::new(
        "a_file_losing_one_percent_in_bursts_of_64_arrives_verified",
        &seed,
    );
    let config = SenderConfig::default();
    let depth = usize::from(config.interleave_depth);
    let m = config.repair.repair_for(config.block_symbols);
    assert!(
        burst_share(64, depth) <= usize::from(m),
        "the defaults repair one burst"
    );
    // Bursts at least one interleave group apart (a group is depth × (k + m)
    // datagrams): each burst is spread over the group's blocks.
    let group = depth as u64 * u64::from(config.block_symbols + m);
    let size = 256 << 20;
    let data: Vec<u8> = (0..size).map(|i| (i ^ (i >> 11)) as u8).collect();
    let link = Link::new().with(Bursts::at_loss(64, 0.01, group, seed));
    let (stats, delivered) = in_memory_transfer_over(config, &data, 1, link, &mut |_| {});
    eprintln!(
        "missing {}, recovered {}, blocks recovered {}, lost {}",
        stats.missing, stats.recovered_symbols, stats.blocks_recovered, stats.blocks_lost
    );
    assert_eq!(stats.channels_complete, 1, "{stats:?}");
    assert_eq!(stats.blocks_lost, 0, "{stats:?}");
    assert_eq!(delivered, size as u64);
    assert!(stats.missing > 1000, "the bursts hit: {stats:?}");
}
