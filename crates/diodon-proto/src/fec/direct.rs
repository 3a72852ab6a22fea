//! Restoring a few lost source symbols directly, at a cost that follows
//! the losses.
//!
//! The Leopard-style decoder of `reed-solomon-simd` rebuilds lost symbols
//! with an inverse transform, a formal derivative and a forward transform
//! over the whole block (`next_pow2(next_pow2(m) + k)` shards), whatever
//! is missing: at 1 % loss, where a block of 224 misses two or three
//! source symbols, that is most of the receiver's decoding. The same
//! three steps have a closed form (the derivative of the interpolating
//! polynomial over an additive subgroup is `Σ v_q / (p ⊕ q)`), so each lost
//! source symbol at position `p` is one sum over `k` received symbols `q`
//! (the present source symbols, and only as many repair symbols as source
//! symbols are lost: the others count as erased):
//!
//! ```text
//! s_p = Σ_q  s_q · Λ(q) / ((p ⊕ q) · Λ(p))      Λ(x) = Π_{e erased, e ≠ x} (x ⊕ e)
//! ```
//!
//! (positions as the library numbers them: repair `r` at `r`, source `i`
//! at `next_pow2(m) + i`, the unused repair positions up to `next_pow2(m)`
//! counted as erased). [`DirectSolver`] takes that sum with the library's
//! multiply (AVX2, SSSE3 or portable, picked at run time), lost symbols ×
//! received symbols shard products, and only when that is cheaper than the
//! transforms ([`DirectSolver::cheaper`]); `restores_what_the_transforms_do`
//! checks it against the library byte for byte. With a [`SumKernel`] from
//! the driver, each product is one pass of that kernel straight from the
//! received symbol (its multiply by a constant given as the images of the
//! 16 bits), instead of a copy, a multiply in place and an add.

use super::kernel::SumKernel;
use reed_solomon_simd::engine::{tables, DefaultEngine, Engine, GfElement, GF_MODULUS};

/// Shard products per 4 transform butterflies at which the direct sum
/// costs what the transforms cost. A product here is a multiply in place
/// and an add of one shard (about 65 ns for 1452 B on the AVX-512 EPYC of
/// BENCHMARKS.md); the transforms cost about 57 ns per butterfly, the
/// locator multiplies and the derivative included (`fec/losses` bench:
/// 224 + 23 decodes in 116 µs whatever is lost, directly in about 15 µs per
/// lost symbol; the two meet between 7 and 8 lost).
const PRODUCTS_PER_4_BUTTERFLIES: usize = 3;
/// The same with a driver's [`SumKernel`] (GFNI): a product costs about
/// 40 ns for 1452 B and 160 ns for 8918 B (`fec/losses` bench, ", gfni"),
/// and the two meet at about 12 lost symbols of 224 + 23 (1452 B) and past
/// 25 of 192 + 20 (8918 B); 5 keeps the direct sum on the cheaper side of
/// both.
const PRODUCTS_PER_4_BUTTERFLIES_BY_KERNEL: usize = 5;

/// Restores lost source symbols as a sum over the received ones.
pub(super) struct DirectSolver {
    engine: DefaultEngine,
    /// One received shard in the library's layout, multiplied in place.
    product: Vec<[u8; 64]>,
    /// The sums, one shard per lost source symbol.
    sums: Vec<[u8; 64]>,
    erased: Vec<usize>,
    /// The log of each received symbol's coefficient per lost symbol.
    factors: Vec<GfElement>,
}

impl DirectSolver {
    pub(super) fn new() -> Self {
        DirectSolver {
            engine: DefaultEngine::new(),
            product: Vec::new(),
            sums: Vec::new(),
            erased: Vec::new(),
            factors: Vec::new(),
        }
    }

    /// Whether restoring `lost` source symbols of a `k + m` block (`lost`
    /// sums of `k` products) is cheaper directly than by the transforms.
    /// Only the library's high-rate layout (the one above) is solved here;
    /// it takes the low-rate one for blocks with more repair than source.
    pub(super) fn cheaper(k: usize, m: usize, lost: usize, by_kernel: bool) -> bool {
        let (k_pow2, m_pow2) = (k.next_power_of_two(), m.next_power_of_two());
        let high_rate = k_pow2 > m_pow2 || (k_pow2 == m_pow2 && k <= m);
        if !high_rate {
            return false;
        }
        let work = (m.next_power_of_two() + k).next_power_of_two();
        let butterflies = work / 2 * work.trailing_zeros() as usize * 2;
        let products = if by_kernel {
            PRODUCTS_PER_4_BUTTERFLIES_BY_KERNEL
        } else {
            PRODUCTS_PER_4_BUTTERFLIES
        };
        lost * k * 4 <= butterflies * products
    }

    /// Restores the source symbols of `data` that `present` marks missing
    /// from the present ones and `repair` (at least `k` in all, checked by
    /// the caller), with `kernel` when the driver gave one.
    pub(super) fn restore(
        &mut self,
        (k, m, shard_len): (usize, usize, usize),
        data: &mut [u8],
        present: &[bool],
        repair: &[(usize, &[u8])],
        kernel: Option<&dyn SumKernel>,
    ) {
        let chunk = m.next_power_of_two();
        // Exactly k symbols are needed: as many repair symbols as source
        // symbols are lost, the others counted as erased (a product fewer
        // per lost symbol for each repair symbol left out).
        let lost_count = present[..k].iter().filter(|p| !**p).count();
        let repair = &repair[..lost_count.min(repair.len())];
        let mut repair_received = vec![false; m];
        for &(index, _) in repair {
            repair_received[index] = true;
        }
        self.erased.clear();
        self.erased
            .extend((0..chunk).filter(|&r| r >= m || !repair_received[r]));
        self.erased
            .extend((0..k).filter(|&i| !present[i]).map(|i| chunk + i));
        let lost: Vec<usize> = (0..k).filter(|&i| !present[i]).collect();
        if lost.is_empty() {
            return;
        }

        let chunks = shard_len.div_ceil(64);
        self.sums.clear();
        self.sums.resize(chunks * lost.len(), [0; 64]);

        let log = &tables::get_exp_log().log;
        let erased = &self.erased;
        let locator = |x: usize| -> u64 {
            erased
                .iter()
                .filter(|&&e| e != x)
                .map(|&e| u64::from(log[x ^ e]))
                .sum::<u64>()
                % u64::from(GF_MODULUS)
        };
        let lost_locators: Vec<u64> = lost.iter().map(|&i| locator(chunk + i)).collect();
        let sources = data
            .chunks_exact(shard_len)
            .take(k)
            .enumerate()
            .filter(|&(i, _)| present[i])
            .map(|(i, shard)| (chunk + i, shard));
        let received: Vec<(usize, &[u8])> = sources
            .chain(repair.iter().map(|&(r, shard)| (r, shard)))
            .collect();
        // The log of each received symbol's coefficient in each lost
        // symbol's sum: one row of `lost.len()` per received symbol.
        let modulus = u64::from(GF_MODULUS);
        self.factors.clear();
        for &(position, _) in &received {
            let received_locator = locator(position);
            self.factors
                .extend(lost.iter().zip(&lost_locators).map(|(&i, &lost_locator)| {
                    ((received_locator + 2 * modulus
                        - u64::from(log[(chunk + i) ^ position])
                        - lost_locator)
                        % modulus) as GfElement
                }));
        }
        let terms = received
            .iter()
            .map(|&(_, shard)| shard)
            .zip(self.factors.chunks_exact(lost.len()));
        match kernel {
            Some(kernel) => sum_by_kernel(kernel, terms, &mut self.sums, chunks),
            None => sum_by_engine(
                &self.engine,
                terms,
                &mut self.product,
                &mut self.sums,
                chunks,
            ),
        }
        for (&i, sum) in lost.iter().zip(self.sums.chunks_exact(chunks)) {
            from_layout(sum, &mut data[i * shard_len..(i + 1) * shard_len]);
        }
    }
}

/// The sums with the library's multiply: each received shard copied into
/// its layout once, then multiplied in place from one lost symbol's factor
/// to the next (no copy per lost symbol) and added to that symbol's sum.
fn sum_by_engine<'a>(
    engine: &DefaultEngine,
    received: impl Iterator<Item = (&'a [u8], &'a [GfElement])>,
    product: &mut Vec<[u8; 64]>,
    sums: &mut [[u8; 64]],
    chunks: usize,
) {
    let modulus = u64::from(GF_MODULUS);
    product.resize(chunks, [0; 64]);
    for (shard, factors) in received {
        to_layout(shard, product);
        let mut applied = 0;
        for (&factor, sum) in factors.iter().zip(sums.chunks_exact_mut(chunks)) {
            let factor = u64::from(factor);
            let step = (factor + modulus - applied) % modulus;
            engine.mul(product, step as GfElement);
            applied = factor;
            for (s, p) in sum.iter_mut().zip(product.iter()) {
                for (a, b) in s.iter_mut().zip(p) {
                    *a ^= b;
                }
            }
        }
    }
}

/// The sums with the driver's kernel: each product in one pass straight
/// from the received shard (only a short tail goes through the layout).
fn sum_by_kernel<'a>(
    kernel: &dyn SumKernel,
    received: impl Iterator<Item = (&'a [u8], &'a [GfElement])>,
    sums: &mut [[u8; 64]],
    chunks: usize,
) {
    let exp_log = tables::get_exp_log();
    // log(2^b): the image of bit b under a multiply by exp(f) is
    // exp(log(2^b) + f), the library's sum of logs.
    let bit_logs: [u32; 16] = std::array::from_fn(|b| u32::from(exp_log.log[1 << b]));
    let mut tail_chunk = [[0u8; 64]];
    for (shard, factors) in received {
        let (whole, tail) = shard.as_chunks::<64>();
        if !tail.is_empty() {
            to_layout(tail, &mut tail_chunk);
        }
        for (&factor, sum) in factors.iter().zip(sums.chunks_exact_mut(chunks)) {
            let images = std::array::from_fn(|b| {
                let sum = bit_logs[b] + u32::from(factor);
                exp_log.exp[((sum + (sum >> 16)) & 0xFFFF) as usize]
            });
            let map = kernel.prepare(&images);
            let (sum_whole, sum_tail) = sum.split_at_mut(whole.len());
            kernel.mul_add(sum_whole, whole, &map);
            if !tail.is_empty() {
                kernel.mul_add(sum_tail, &tail_chunk, &map);
            }
        }
    }
}

/// Copies a shard into the library's layout: whole 64-byte chunks as they
/// are (32 low bytes, then 32 high bytes of 32 field elements), and a
/// shorter tail split in halves into the low and the high part of the last
/// chunk.
fn to_layout(shard: &[u8], out: &mut [[u8; 64]]) {
    let (whole, tail) = shard.as_chunks::<64>();
    out[..whole.len()].copy_from_slice(whole);
    if !tail.is_empty() {
        let half = tail.len() / 2;
        let last = &mut out[whole.len()];
        last.fill(0);
        last[..half].copy_from_slice(&tail[..half]);
        last[32..32 + half].copy_from_slice(&tail[half..]);
    }
}

/// The inverse of [`to_layout`].
fn from_layout(chunks: &[[u8; 64]], shard: &mut [u8]) {
    let whole = shard.len() / 64;
    let (head, tail) = shard.split_at_mut(whole * 64);
    head.copy_from_slice(chunks[..whole].as_flattened());
    if !tail.is_empty() {
        let half = tail.len() / 2;
        let last = &chunks[whole];
        tail[..half].copy_from_slice(&last[..half]);
        tail[half..].copy_from_slice(&last[32..32 + half]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fec::{ErasureCode, ReedSolomon, ReferenceKernel};

    /// The library's multiply, and a kernel by its definition.
    const KERNELS: [Option<&dyn SumKernel>; 2] = [None, Some(&ReferenceKernel)];

    #[test]
    fn the_low_rate_layout_and_many_losses_are_left_to_the_transforms() {
        for by_kernel in [false, true] {
            assert!(!DirectSolver::cheaper(3, 10, 1, by_kernel));
            assert!(!DirectSolver::cheaper(4, 3, 1, by_kernel));
        }
        assert!(DirectSolver::cheaper(224, 23, 6, false));
        assert!(
            !DirectSolver::cheaper(224, 23, 7, false),
            "the transforms from 7 lost"
        );
        assert!(DirectSolver::cheaper(224, 23, 11, true));
        assert!(
            !DirectSolver::cheaper(224, 23, 12, true),
            "with a kernel, the transforms from 12 lost"
        );
    }

    /// The block `data` (repair `parity`) after losing the symbols `gone`
    /// marks (source `0..k`, repair `k..k + m`; a lost source symbol's bytes
    /// overwritten with `fill`) and restoring it directly.
    fn restored(
        (k, m, len): (usize, usize, usize),
        data: &[u8],
        parity: &[u8],
        gone: &[bool],
        fill: u8,
        kernel: Option<&dyn SumKernel>,
    ) -> Vec<u8> {
        let present: Vec<bool> = (0..k).map(|i| !gone[i]).collect();
        let repair: Vec<(usize, &[u8])> = parity
            .chunks(len)
            .enumerate()
            .filter(|(i, _)| !gone[k + i])
            .collect();
        let mut damaged = data.to_vec();
        for i in (0..k).filter(|&i| gone[i]) {
            damaged[i * len..(i + 1) * len].fill(fill);
        }
        DirectSolver::new().restore((k, m, len), &mut damaged, &present, &repair, kernel);
        damaged
    }

    #[test]
    fn every_small_high_rate_layout_restores_every_loss_count() {
        // Every k ≤ 40 with every m the high-rate layout takes, losses of
        // source and repair mixed, from one lost symbol to m.
        let mut next = crate::fec::tests::below(0xbb67_ae85_84ca_a73b);
        let len = 66;
        for k in 1..=40usize {
            for m in (1..=k.min(16)).filter(|&m| {
                let (kp, mp) = (k.next_power_of_two(), m.next_power_of_two());
                kp > mp || (kp == mp && k <= m)
            }) {
                let data: Vec<u8> = (0..k * len).map(|_| next(256) as u8).collect();
                let mut parity = vec![0; m * len];
                ReedSolomon::new()
                    .encode(k, m, len, &data, &mut parity)
                    .unwrap();
                let lost = 1 + next(m);
                let mut gone = vec![false; k + m];
                while gone.iter().filter(|g| **g).count() < lost {
                    gone[next(k + m)] = true;
                }
                for kernel in KERNELS {
                    let damaged = restored((k, m, len), &data, &parity, &gone, 0, kernel);
                    assert!(damaged == data, "k={k} m={m} gone {gone:?}");
                }
            }
        }
    }

    #[test]
    fn restores_what_the_transforms_do() {
        let mut next = crate::fec::tests::below(0x6a09_e667_f3bc_c908);
        for (k, m, len) in [
            (224, 23, 1452),
            (256, 26, 64),
            (192, 20, 8952),
            (10, 4, 130),
            (1, 1, 2),
            (3, 3, 66),
        ] {
            assert!(DirectSolver::cheaper(k, m, 1, false), "k={k} m={m}");
            let data: Vec<u8> = (0..k * len).map(|_| next(256) as u8).collect();
            let mut parity = vec![0; m * len];
            ReedSolomon::new()
                .encode(k, m, len, &data, &mut parity)
                .unwrap();
            for _ in 0..4 {
                let mut gone = vec![false; k + m];
                for _ in 0..=next(m) {
                    gone[next(k + m)] = true;
                }
                for kernel in KERNELS {
                    let damaged = restored((k, m, len), &data, &parity, &gone, 0xEE, kernel);
                    assert!(damaged == data, "k={k} m={m} len={len} gone {gone:?}");
                }
            }
        }
    }
}
