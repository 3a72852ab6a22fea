//! The erasure locator, computed at a cost that follows the erasures.
//!
//! Before it can rebuild anything, a Leopard-style decoder evaluates the
//! erasure locator polynomial at every position of the block: in the log
//! domain, for each position `i`, `Σ log(i ⊕ j)` over the erased positions
//! `j` (mod 2¹⁶ − 1, with `log(0)` taken as 0). `reed-solomon-simd`
//! computes that sum as a dyadic convolution with two Walsh–Hadamard
//! transforms over the whole field, 65,536 elements whatever the block:
//! about 0.25 ms per decoded block here, a third of the receiver's decoding
//! at 1 % loss (BENCHMARKS.md, "CPU per byte"), where nearly every block of
//! 256 symbols misses a few.
//!
//! [`ErasureLocator`] is the library's engine with that one step replaced:
//! when the block's positions times its erasures stay below
//! [`DIRECT_BUDGET`], the sum is taken directly (a 256 + 26 block missing 4
//! symbols: 288 × 10 table reads, the 6 unused repair positions count as
//! erased); otherwise, and for the low-rate layout whose padding erases most
//! of the field, it falls back to the transforms. Both give the same value
//! modulo 2¹⁶ − 1, which is all the decoder uses
//! (`locator_matches_the_transform` checks it).

use super::transforms::Transforms;
use reed_solomon_simd::engine::{
    tables, DefaultEngine, Engine, GfElement, ShardsRefMut, GF_MODULUS, GF_ORDER,
};

/// Positions × erasures up to which the sum is taken directly. One term
/// costs about 0.5 ns here and the two transforms about 115 µs (AVX-512
/// EPYC, release build), so at this budget the direct sum takes at most
/// about half the transforms' time.
pub const DIRECT_BUDGET: usize = 1 << 17;

/// The codec's [`Transforms`] (the library's engine or a driver's kernel)
/// with the erasure locator taken directly when that is cheaper.
pub struct ErasureLocator(Transforms);

impl ErasureLocator {
    /// `transforms` with the direct locator.
    pub fn new(transforms: Transforms) -> Self {
        ErasureLocator(transforms)
    }
}

impl Engine for ErasureLocator {
    fn fft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        self.0.fft(data, pos, size, truncated_size, skew_delta);
    }

    fn ifft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        self.0.ifft(data, pos, size, truncated_size, skew_delta);
    }

    fn mul(&self, x: &mut [[u8; 64]], log_m: GfElement) {
        self.0.mul(x, log_m);
    }

    fn eval_poly(erasures: &mut [GfElement; GF_ORDER], truncated_size: usize) {
        if !eval_direct(erasures, truncated_size) {
            DefaultEngine::eval_poly(erasures, truncated_size);
        }
    }
}

/// Takes the locator directly when it is cheaper; `false` (and `erasures`
/// untouched) when the transforms should do it. `erasures` holds 1 at each
/// erased position below `truncated_size` and 0 everywhere else.
fn eval_direct(erasures: &mut [GfElement; GF_ORDER], truncated_size: usize) -> bool {
    // The low-rate decoder erases every position past its block and asks
    // for the whole field: the transforms are the cheap way there.
    if truncated_size == 0 || truncated_size >= GF_ORDER {
        return false;
    }
    let limit = DIRECT_BUDGET / truncated_size;
    let mut erased: Vec<usize> = Vec::with_capacity(limit.min(256));
    for (position, &e) in erasures[..truncated_size].iter().enumerate() {
        if e != 0 {
            if erased.len() == limit {
                return false;
            }
            erased.push(position);
        }
    }
    let log = &tables::get_exp_log().log;
    for (i, out) in erasures[..truncated_size].iter_mut().enumerate() {
        // At most DIRECT_BUDGET terms below 2¹⁶ each: no overflow.
        let sum: u64 = erased
            .iter()
            .map(|&j| {
                let x = i ^ j;
                if x == 0 {
                    0
                } else {
                    u64::from(log[x])
                }
            })
            .sum();
        *out = (sum % u64::from(GF_MODULUS)) as GfElement;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal as the decoder uses them: modulo 2¹⁶ − 1 (0 and 65,535 are
    /// the same logarithm).
    fn same_log(a: GfElement, b: GfElement) -> bool {
        a % GF_MODULUS == b % GF_MODULUS
    }

    fn erasures_at(positions: &[usize]) -> Box<[GfElement; GF_ORDER]> {
        let mut e: Box<[GfElement; GF_ORDER]> = vec![0; GF_ORDER]
            .into_boxed_slice()
            .try_into()
            .expect("GF_ORDER elements");
        for &p in positions {
            e[p] = 1;
        }
        e
    }

    #[test]
    fn locator_matches_the_transform() {
        // A 256 + 26 block (chunk 32, positions 0..288): repair 26..32 are
        // padding and always erased; then the lost ones of a few patterns.
        let mut next = crate::fec::tests::below(0x9e37_79b9_7f4a_7c15);
        for (truncated, padding, losses) in [
            (288, 26..32, 0),
            (288, 26..32, 3),
            (288, 26..32, 26),
            (1152, 103..128, 40),
            (9, 1..2, 1),
        ] {
            for _ in 0..8 {
                let mut positions: Vec<usize> = padding.clone().collect();
                for _ in 0..losses {
                    positions.push(next(truncated));
                }
                positions.sort_unstable();
                positions.dedup();
                let mut direct = erasures_at(&positions);
                assert!(eval_direct(&mut direct, truncated), "{truncated} direct");
                let mut transform = erasures_at(&positions);
                DefaultEngine::eval_poly(&mut transform, truncated);
                for i in 0..truncated {
                    assert!(
                        same_log(direct[i], transform[i]),
                        "position {i} of {truncated}, erased {positions:?}: {} != {}",
                        direct[i],
                        transform[i]
                    );
                }
            }
        }
    }

    #[test]
    fn many_erasures_or_the_whole_field_use_the_transforms() {
        let mut e = erasures_at(&(0..300).collect::<Vec<_>>());
        assert!(!eval_direct(&mut e, 1024), "300 × 1024 is over the budget");
        assert!(e[..300].iter().all(|&x| x == 1), "left untouched");
        assert!(e[300..].iter().all(|&x| x == 0), "left untouched");
        let mut e = erasures_at(&[1, 2]);
        assert!(!eval_direct(&mut e, GF_ORDER));
    }
}
