//! How much repair a block needs: the loss model behind the FEC defaults and
//! `--expected-loss` (PROTOCOL.md, "Block sizes and repair").
//!
//! ```text
//!  block: k source + m repair symbols, n = k + m datagrams
//!  independent loss p:  P(block lost) = P(X > m),  X ~ Binomial(n, p)
//!  a file of B blocks:  P(file fails) = 1 − (1 − P(block lost))^B
//!  a burst of L consecutive datagrams over an interleave group of D blocks
//!  costs each block at most ⌈L / D⌉ symbols: repaired while ⌈L / D⌉ ≤ m
//! ```
//!
//! Everything here is pure arithmetic in log space (the tails reach 10⁻³⁰⁰),
//! used by the sender to size short blocks and by the CLI to choose a repair
//! ratio; `tests/fec_model.rs` checks the model against the simulator.
//!
//! The default block size follows the decoder ([`default_block`]): the
//! Reed–Solomon decoder works on `next_pow2(next_pow2(m) + k)` shards, so a
//! block that fills that power of two decodes at the least cost per byte
//! (224 + 23 at 10 % repair: 256 shards; 256 + 26 needed 512).

/// The loss a configuration is designed for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossModel {
    /// Probability that one datagram is lost, independently of the others.
    pub loss: f64,
    /// Longest run of consecutive datagrams lost at once that must always be
    /// repaired (a receive-ring overflow, a lost GSO super-packet).
    pub burst: usize,
}

/// The design point of the defaults: 1 % random loss, bursts of 64.
pub const DEFAULT_LOSS: LossModel = LossModel {
    loss: 0.01,
    burst: 64,
};

/// The bar the defaults meet: a 1 GB file fails less than once in a million.
pub const TARGET_FILE_FAILURE: f64 = 1e-6;
/// The file size that bar is stated for.
pub const TARGET_FILE_BYTES: u64 = 1_000_000_000;

fn ln_choose(n: u32, k: u32) -> f64 {
    ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k)
}

fn ln_factorial(n: u32) -> f64 {
    // Exact sum for small n (where Stirling is least accurate), Stirling with
    // two correction terms above (relative error < 1e-10 for n > 30).
    if n <= 30 {
        (2..=n).map(|i| f64::from(i).ln()).sum()
    } else {
        let x = f64::from(n);
        x * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI * x).ln() + 1.0 / (12.0 * x)
            - 1.0 / (360.0 * x * x * x)
    }
}

/// Probability that a block of `k` source and `m` repair symbols is lost:
/// more than `m` of its `k + m` datagrams lost, each with probability `p`.
pub fn block_failure(k: u32, m: u32, p: f64) -> f64 {
    let n = k + m;
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return if k == 0 { 0.0 } else { 1.0 };
    }
    let (lp, lq) = (p.ln(), (-p).ln_1p());
    // Sum the tail from its largest term down; the terms fall fast past the mean.
    let mut total = 0.0;
    for i in (m + 1)..=n {
        let term = (ln_choose(n, i) + f64::from(i) * lp + f64::from(n - i) * lq).exp();
        total += term;
        if term < total * 1e-17 && f64::from(i) > f64::from(n) * p {
            break;
        }
    }
    total.min(1.0)
}

/// Probability that at least one of `blocks` independent blocks, each lost
/// with probability `per_block`, is lost.
pub fn any_failure(per_block: f64, blocks: u64) -> f64 {
    if per_block >= 1.0 {
        return 1.0;
    }
    -(blocks as f64 * (-per_block).ln_1p()).exp_m1()
}

/// Probability that a file of `bytes` fails when cut into blocks of `k`
/// symbols of `symbol` bytes with `m` repair symbols each.
pub fn file_failure(bytes: u64, symbol: usize, k: u32, m: u32, p: f64) -> f64 {
    let per_block = (k as u64) * symbol as u64;
    let blocks = bytes.div_ceil(per_block.max(1));
    any_failure(block_failure(k, m, p), blocks)
}

/// The fewest repair symbols that keep a block of `k` symbols below
/// `per_block` failure probability at loss `p` (at most `max`).
pub fn repair_needed(k: u32, p: f64, per_block: f64, max: u32) -> u32 {
    (0..=max)
        .find(|&m| block_failure(k, m, p) <= per_block)
        .unwrap_or(max)
}

/// The per-block failure probability that keeps a 1 GB file below
/// [`TARGET_FILE_FAILURE`] with blocks of `k` symbols of `symbol` bytes.
pub fn per_block_target(symbol: usize, k: u32) -> f64 {
    let blocks = TARGET_FILE_BYTES.div_ceil((k as u64 * symbol as u64).max(1));
    TARGET_FILE_FAILURE / blocks as f64
}

/// Symbols a burst of `burst` consecutive datagrams costs one block of an
/// interleave group of `depth` blocks.
pub fn burst_share(burst: usize, depth: usize) -> usize {
    burst.div_ceil(depth.max(1))
}

/// The largest default block (source symbols).
pub const BLOCK_LIMIT: u32 = 256;

/// The default block size for `percent` repair: the largest `k` up to
/// [`BLOCK_LIMIT`] whose decoder work, `next_pow2(m) + k` shards with
/// `m = ⌈k · percent / 100⌉`, fits in [`BLOCK_LIMIT`] — no shard of the
/// decoder's transforms is padding. 240 at 5 %, 224 at 10 %, 213 at 15 %,
/// 192 at 20 % and 25 %, 128 at 100 %; 256 without repair.
pub fn default_block(percent: u32) -> u32 {
    (1..=BLOCK_LIMIT)
        .rev()
        .find(|&k| {
            let m = (k * percent.min(100)).div_ceil(100);
            m == 0 || m.next_power_of_two() + k <= BLOCK_LIMIT
        })
        .unwrap_or(1)
}

/// A repair ratio chosen for a loss model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RepairChoice {
    /// Repair, in percent of the source symbols of a full block.
    pub percent: u32,
    /// Source symbols of a full block (the given size, or the
    /// [`default_block`] of `percent`).
    pub block: u32,
    /// Repair symbols of a full block.
    pub repair_symbols: u32,
    /// Probability that a 1 GB file fails at the model's random loss.
    pub file_failure: f64,
    /// Whether a burst of the model's length is always repaired.
    pub burst_repaired: bool,
}

/// The smallest whole-percent repair ratio (up to 100 %) for full blocks of
/// `block` symbols (`None`: each ratio's [`default_block`]) of `symbol`
/// bytes, interleaved `depth` deep, that meets [`TARGET_FILE_FAILURE`] for
/// a 1 GB file at `model.loss` and repairs a burst of `model.burst`
/// datagrams. `None` if even 100 % does not.
pub fn choose_repair(
    model: LossModel,
    symbol: usize,
    block: Option<u32>,
    depth: usize,
) -> Option<RepairChoice> {
    let burst = u32::try_from(burst_share(model.burst, depth)).unwrap_or(u32::MAX);
    (0..=100u32).find_map(|percent| {
        let k = block.unwrap_or_else(|| default_block(percent));
        let m = (k * percent).div_ceil(100);
        let fail = file_failure(TARGET_FILE_BYTES, symbol, k, m, model.loss);
        (fail <= TARGET_FILE_FAILURE && burst <= m).then_some(RepairChoice {
            percent,
            block: k,
            repair_symbols: m,
            file_failure: fail,
            burst_repaired: true,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn the_tail_matches_a_direct_sum() {
        // P(X > 1), X ~ Bin(3, 0.5) = 4/8.
        assert!(close(block_failure(2, 1, 0.5), 0.5, 1e-12));
        // P(X > 7), X ~ Bin(71, 0.01): the default block before this change.
        let direct: f64 = (8..=71i32)
            .map(|i| {
                let c: f64 = (0..i)
                    .map(|j| f64::from(71 - j) / f64::from(j + 1))
                    .product();
                c * 0.01f64.powi(i) * 0.99f64.powi(71 - i)
            })
            .sum();
        assert!(close(block_failure(64, 7, 0.01), direct, 1e-9), "{direct}");
        assert!(block_failure(64, 7, 0.0) <= 0.0);
        assert!(block_failure(64, 7, 1.0) >= 1.0);
    }

    #[test]
    fn ln_factorial_is_continuous_where_the_method_changes() {
        let exact: f64 = (2..=31u32).map(|i| f64::from(i).ln()).sum();
        assert!(close(ln_factorial(31), exact, 1e-12));
    }

    #[test]
    fn the_defaults_meet_the_bar_and_the_old_ones_did_not() {
        // 64 + 7 at 1 % loss: a 1 GB file of 1418-byte symbols fails ~0.7 %.
        let old = file_failure(TARGET_FILE_BYTES, 1418, 64, 7, 0.01);
        assert!(old > 1e-3, "{old}");
        let k = default_block(10);
        let m = (k * 10).div_ceil(100);
        assert_eq!((k, m), (224, 23));
        let new = file_failure(TARGET_FILE_BYTES, 1418, k, m, 0.01);
        assert!(new < TARGET_FILE_FAILURE, "{new}");
        assert!(burst_share(64, 4) <= m as usize);
    }

    #[test]
    fn choosing_repair_meets_the_target_with_the_least_ratio() {
        let c = choose_repair(DEFAULT_LOSS, 1418, Some(256), 4).expect("possible");
        assert_eq!(c.block, 256);
        assert!(c.file_failure <= TARGET_FILE_FAILURE);
        let less = (256 * (c.percent - 1)).div_ceil(100);
        assert!(
            file_failure(TARGET_FILE_BYTES, 1418, 256, less, 0.01) > TARGET_FILE_FAILURE
                || less < 16,
            "one percent less would do: {c:?}"
        );
        let heavy = choose_repair(
            LossModel {
                loss: 0.05,
                burst: 64,
            },
            1418,
            Some(256),
            4,
        )
        .expect("possible");
        assert!(heavy.percent > c.percent);
        assert!(choose_repair(
            LossModel {
                loss: 0.6,
                burst: 64
            },
            1418,
            None,
            4
        )
        .is_none());
        // Without a block size each ratio brings its own.
        let auto = choose_repair(DEFAULT_LOSS, 1418, None, 4).expect("possible");
        assert_eq!(auto.block, default_block(auto.percent));
        assert!(auto.file_failure <= TARGET_FILE_FAILURE);
    }

    #[test]
    fn the_default_block_fills_the_decoders_power_of_two() {
        for (percent, k) in [
            (0, 256),
            (5, 240),
            (10, 224),
            (15, 213),
            (20, 192),
            (25, 192),
            (100, 128),
        ] {
            assert_eq!(default_block(percent), k, "{percent} %");
        }
        for percent in 1..=100 {
            let k = default_block(percent);
            let m = (k * percent).div_ceil(100);
            assert!(m.next_power_of_two() + k <= BLOCK_LIMIT, "{percent} %");
            // One more source symbol would spill into the next power of two.
            let m1 = ((k + 1) * percent).div_ceil(100);
            assert!(
                k == BLOCK_LIMIT || m1.next_power_of_two() + k + 1 > BLOCK_LIMIT,
                "{percent} %"
            );
        }
    }

    #[test]
    fn short_blocks_need_few_repair_symbols() {
        let eps = per_block_target(1418, 256);
        let m1 = repair_needed(1, 0.01, eps, 26);
        let m8 = repair_needed(8, 0.01, eps, 26);
        assert!((4..=6).contains(&m1), "{m1}");
        assert!(m8 >= m1 && m8 <= 10, "{m8}");
        assert!(block_failure(8, m8, 0.01) <= eps);
        assert!(block_failure(8, m8 - 1, 0.01) > eps);
    }
}
