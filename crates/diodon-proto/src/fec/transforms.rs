//! The codec's transforms on the library's engine or on a driver's kernel.
//!
//! `reed-solomon-simd` encodes and decodes with an additive FFT over
//! GF(2¹⁶) and its inverse, in layers of butterflies on pairs of rows
//! (`x ^= m·y; y ^= x`, or the inverse order), the factor `m` a power of
//! the field's generator taken from its skew table. [`Transforms`] is the
//! engine the encoder and the decoder run on: the library's own (AVX2,
//! SSSE3 or portable, picked at run time), or the same steps with each
//! butterfly one call of a [`SumKernel`] a driver handed in (GFNI: one pass
//! over both rows, the multiply a few instructions per 64 bytes instead of
//! table lookups). The kernel's form of every power of the generator is
//! prepared once per codec ([`KernelFactors`]). Both run the library's
//! steps in the library's order, so the repair symbols and the restored
//! bytes are the same whichever runs (`the_kernel_transforms_give_the_library_s_bytes`).

use super::kernel::{KernelMap, SumKernel};
use reed_solomon_simd::engine::{
    tables, utils, DefaultEngine, Engine, GfElement, ShardsRefMut, GF_MODULUS,
};
use std::sync::Arc;

/// Every power of the field's generator in a kernel's form: entry `l` is
/// the map "multiply by `exp(l)`" (65,535 entries of 32 bytes).
pub(crate) struct KernelFactors {
    kernel: Arc<dyn SumKernel>,
    maps: Box<[KernelMap]>,
}

impl KernelFactors {
    /// Prepares every factor with `kernel` (a few milliseconds, once per
    /// codec).
    pub(crate) fn new(kernel: Arc<dyn SumKernel>) -> Self {
        let exp_log = tables::get_exp_log();
        // The image of bit b under a multiply by exp(l) is
        // exp(log(2^b) + l), the library's sum of logs.
        let bit_logs: [u32; 16] = std::array::from_fn(|b| u32::from(exp_log.log[1 << b]));
        let maps = (0..u32::from(GF_MODULUS))
            .map(|l| {
                let images = std::array::from_fn(|b| {
                    let sum = bit_logs[b] + l;
                    exp_log.exp[((sum + (sum >> 16)) & 0xFFFF) as usize]
                });
                kernel.prepare(&images)
            })
            .collect();
        KernelFactors { kernel, maps }
    }
}

/// The engine the codec's encoder and decoder run on.
pub enum Transforms {
    /// The library's engine for this CPU.
    Library(DefaultEngine),
    /// The library's steps, each butterfly on the driver's kernel.
    Kernel(KernelTransforms),
}

impl Transforms {
    /// The library's engine, or the kernel's when one is given.
    pub(crate) fn new(factors: Option<&Arc<KernelFactors>>) -> Self {
        match factors {
            None => Transforms::Library(DefaultEngine::new()),
            Some(f) => Transforms::Kernel(KernelTransforms {
                factors: Arc::clone(f),
                skew: tables::get_skew(),
                library: DefaultEngine::new(),
            }),
        }
    }
}

/// The transforms on a kernel (see the module's description).
pub struct KernelTransforms {
    factors: Arc<KernelFactors>,
    skew: &'static tables::Skew,
    /// For the in-place multiply, which only the decoder's last step uses.
    library: DefaultEngine,
}

/// Which butterfly a layer runs: the forward transform's or the inverse's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Inverse,
}

impl KernelTransforms {
    /// One butterfly on rows `x` and `y` with the factor `exp(log_m)`;
    /// `GF_MODULUS` stands for the factor 0 (only the sum is left).
    fn butterfly(
        &self,
        direction: Direction,
        x: &mut [[u8; 64]],
        y: &mut [[u8; 64]],
        log_m: GfElement,
    ) {
        if log_m == GF_MODULUS {
            utils::xor(y, x);
            return;
        }
        let kernel = &*self.factors.kernel;
        let map = &self.factors.maps[usize::from(log_m)];
        match direction {
            Direction::Forward => kernel.butterfly(x, y, map),
            Direction::Inverse => kernel.butterfly_inverse(x, y, map),
        }
    }

    /// Two layers on the rows `pos + i·dist`, `i` in 0..4: the forward
    /// transform pairs (0, 2), (1, 3) first and (0, 1), (2, 3) second, the
    /// inverse the other way round.
    fn two_layers(
        &self,
        direction: Direction,
        data: &mut ShardsRefMut,
        (pos, dist): (usize, usize),
        [log_m01, log_m23, log_m02]: [GfElement; 3],
    ) {
        let (s0, s1, s2, s3) = data.dist4_mut(pos, dist);
        if direction == Direction::Forward {
            self.butterfly(direction, s0, s2, log_m02);
            self.butterfly(direction, s1, s3, log_m02);
        }
        self.butterfly(direction, s0, s1, log_m01);
        self.butterfly(direction, s2, s3, log_m23);
        if direction == Direction::Inverse {
            self.butterfly(direction, s0, s2, log_m02);
            self.butterfly(direction, s1, s3, log_m02);
        }
    }

    /// The factors of the group of four rows at `r` with spacing `dist`.
    fn group_factors(&self, r: usize, dist: usize, skew_delta: usize) -> [GfElement; 3] {
        let base = r + dist + skew_delta - 1;
        [
            self.skew[base],
            self.skew[base + dist * 2],
            self.skew[base + dist],
        ]
    }
}

impl Engine for KernelTransforms {
    fn fft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        // Two layers at a time from the widest spacing down, then the
        // last single layer when the size is an odd power of two.
        let mut dist4 = size;
        let mut dist = size >> 2;
        while dist != 0 {
            for r in (0..truncated_size).step_by(dist4) {
                let factors = self.group_factors(r, dist, skew_delta);
                for i in r..r + dist {
                    self.two_layers(Direction::Forward, data, (pos + i, dist), factors);
                }
            }
            dist4 = dist;
            dist >>= 2;
        }
        if dist4 == 2 {
            for r in (0..truncated_size).step_by(2) {
                let (x, y) = data.dist2_mut(pos + r, 1);
                self.butterfly(Direction::Forward, x, y, self.skew[r + skew_delta]);
            }
        }
    }

    fn ifft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        // Two layers at a time from the narrowest spacing up, then the
        // last single layer when the size is an odd power of two.
        let mut dist = 1;
        let mut dist4 = 4;
        while dist4 <= size {
            for r in (0..truncated_size).step_by(dist4) {
                let factors = self.group_factors(r, dist, skew_delta);
                for i in r..r + dist {
                    self.two_layers(Direction::Inverse, data, (pos + i, dist), factors);
                }
            }
            dist = dist4;
            dist4 <<= 2;
        }
        if dist < size {
            let log_m = self.skew[dist + skew_delta - 1];
            let (mut low, mut high) = data.split_at_mut(pos + dist);
            for i in 0..dist {
                self.butterfly(Direction::Inverse, &mut low[pos + i], &mut high[i], log_m);
            }
        }
    }

    fn mul(&self, x: &mut [[u8; 64]], log_m: GfElement) {
        self.library.mul(x, log_m);
    }
}

impl Engine for Transforms {
    fn fft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        match self {
            Transforms::Library(e) => e.fft(data, pos, size, truncated_size, skew_delta),
            Transforms::Kernel(e) => e.fft(data, pos, size, truncated_size, skew_delta),
        }
    }

    fn ifft(
        &self,
        data: &mut ShardsRefMut,
        pos: usize,
        size: usize,
        truncated_size: usize,
        skew_delta: usize,
    ) {
        match self {
            Transforms::Library(e) => e.ifft(data, pos, size, truncated_size, skew_delta),
            Transforms::Kernel(e) => e.ifft(data, pos, size, truncated_size, skew_delta),
        }
    }

    fn mul(&self, x: &mut [[u8; 64]], log_m: GfElement) {
        match self {
            Transforms::Library(e) => e.mul(x, log_m),
            Transforms::Kernel(e) => e.mul(x, log_m),
        }
    }
}
