//! The CPU's Galois Field New Instructions (GFNI) applied to 16-bit
//! elements: `dst ^= M · src` for a GF(2)-linear map `M`, and the two
//! butterflies of a transform built on it (`x ^= M·y; y ^= x` and its
//! inverse), 32 elements per 64-byte chunk, on x86-64 CPUs that have GFNI
//! and AVX2 (found at run time). This module knows no code and no protocol: the caller says what
//! `M` does to each of the 16 bits of an element, and which field that is
//! (multiplying by a constant in any GF(2¹⁶) is such a map) is the caller's.
//!
//! ```text
//!  chunk of 64 bytes: lo[0..32] (low bytes of 32 elements), hi[0..32] (their high bytes)
//!  M as four 8×8 bit blocks:   y.lo = A·lo ⊕ B·hi      y.hi = C·lo ⊕ D·hi
//!  AVX-512: [lo|hi]·[A|D] ⊕ [hi|lo]·[B|C], two VGF2P8AFFINEQB per chunk
//!  AVX2:    one VGF2P8AFFINEQB per block and half chunk;   dst ^= y
//! ```

/// A linear map of 16-bit elements in the form the kernel applies: the four
/// 8×8 bit blocks, each as the 64-bit matrix operand of `GF2P8AFFINEQB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split16Map([u64; 4]);

impl Split16Map {
    /// The map whose image of input bit `b` (bit 0 the low byte's lowest)
    /// is `images[b]`.
    pub fn from_images(images: &[u16; 16]) -> Self {
        // GF2P8AFFINEQB: output bit i of a byte is the parity of the matrix
        // operand's byte 7 − i ANDed with the input byte. Block (out, in)
        // takes input bits 8·in.. of the element to output bits 8·out..:
        // its columns (byte j: the `out` byte of input bit 8·in + j's
        // image), transposed to rows, the rows in reverse byte order.
        let block = |out: usize, input: usize| -> u64 {
            let columns = (0..8).fold(0u64, |acc, j| {
                acc | u64::from((images[8 * input + j] >> (8 * out)) as u8) << (8 * j)
            });
            transpose_bits(columns).swap_bytes()
        };
        Split16Map([block(0, 0), block(0, 1), block(1, 0), block(1, 1)])
    }

    /// The four matrix operands, for a caller that keeps the map as words.
    pub fn into_words(self) -> [u64; 4] {
        self.0
    }

    /// The map from the words [`Split16Map::into_words`] gave.
    pub fn from_words(words: [u64; 4]) -> Self {
        Split16Map(words)
    }
}

/// The 8×8 bit matrix (byte `r`, bit `c`) transposed: bit `8r + c` moves
/// to `8c + r` (three exchanges of bit groups).
fn transpose_bits(mut x: u64) -> u64 {
    let t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    let t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    let t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^ t ^ (t << 28)
}

/// Proof that this CPU runs the kernel: only [`Gfni::detect`] makes one.
#[derive(Debug, Clone, Copy)]
pub struct Gfni(Width);

/// The registers the kernel runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// AVX-512: a whole chunk per register, its halves swapped for the
    /// cross terms.
    Zmm,
    /// AVX2: each half of a chunk in its own register.
    Ymm,
}

impl Gfni {
    /// The kernel, when this CPU has GFNI and AVX2 (AVX-512 is used where
    /// the CPU has it too).
    pub fn detect() -> Option<Gfni> {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("gfni") && has!("avx512f") {
                return Some(Gfni(Width::Zmm));
            }
            if has!("gfni") && has!("avx2") {
                return Some(Gfni(Width::Ymm));
            }
        }
        None
    }

    /// The instructions it runs on, for a log line.
    pub fn describe(self) -> &'static str {
        match self.0 {
            Width::Zmm => "GFNI on AVX-512",
            Width::Ymm => "GFNI on AVX2",
        }
    }

    /// `dst[c] ^= map · src[c]` for every chunk `c` (element `e` of a chunk
    /// is `chunk[e] | chunk[32 + e] << 8`).
    ///
    /// # Panics
    /// If `dst` and `src` differ in length.
    pub fn mul_add(self, dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &Split16Map) {
        assert_eq!(dst.len(), src.len(), "chunks to add and chunks added");
        #[cfg(target_arch = "x86_64")]
        #[expect(
            unsafe_code,
            reason = "calling a kernel compiled for GFNI and AVX2 or AVX-512"
        )]
        match self.0 {
            // SAFETY: a `Gfni` of this width exists only where `detect`
            // found GFNI and AVX-512F, the features the kernel is compiled for.
            Width::Zmm => unsafe { x86::mul_add_zmm(dst, src, &map.0) },
            // SAFETY: as above, with GFNI and AVX2 (every width's CPU has them).
            Width::Ymm => unsafe { x86::mul_add_ymm(dst, src, &map.0) },
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (dst, src, map);
            unreachable!("no Gfni value exists on this architecture");
        }
    }

    /// `x[c] ^= map · y[c]`, then `y[c] ^= x[c]`, for every chunk `c`, in
    /// one pass over both (the step a transform repeats on pairs of rows).
    ///
    /// # Panics
    /// If `x` and `y` differ in length.
    pub fn butterfly(self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &Split16Map) {
        self.pair::<true>(x, y, map);
    }

    /// The inverse of [`Gfni::butterfly`]: `y[c] ^= x[c]`, then
    /// `x[c] ^= map · y[c]`, in one pass over both.
    ///
    /// # Panics
    /// If `x` and `y` differ in length.
    pub fn butterfly_inverse(self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &Split16Map) {
        self.pair::<false>(x, y, map);
    }

    /// The forward butterfly, or with `FORWARD` false the inverse.
    fn pair<const FORWARD: bool>(self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &Split16Map) {
        assert_eq!(x.len(), y.len(), "the two rows of a butterfly");
        #[cfg(target_arch = "x86_64")]
        #[expect(
            unsafe_code,
            reason = "calling a kernel compiled for GFNI and AVX2 or AVX-512"
        )]
        match self.0 {
            // SAFETY: as in `mul_add`: this width exists only where
            // `detect` found GFNI and AVX-512F.
            Width::Zmm => unsafe { x86::pair_zmm::<FORWARD>(x, y, &map.0) },
            // SAFETY: as above, with GFNI and AVX2.
            Width::Ymm => unsafe { x86::pair_ymm::<FORWARD>(x, y, &map.0) },
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (x, y, map);
            unreachable!("no Gfni value exists on this architecture");
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[expect(
    clippy::cast_ptr_alignment,
    reason = "the unaligned loads and stores take any address"
)]
mod x86 {
    use std::arch::x86_64::{
        __m256i, __m512i, _mm256_gf2p8affine_epi64_epi8, _mm256_loadu_si256, _mm256_set1_epi64x,
        _mm256_storeu_si256, _mm256_xor_si256, _mm512_gf2p8affine_epi64_epi8, _mm512_loadu_si512,
        _mm512_set_epi64, _mm512_shuffle_i64x2, _mm512_storeu_si512, _mm512_xor_si512,
    };

    /// One chunk per register: `[lo | hi]` times `[A A A A D D D D]` plus
    /// `[hi | lo]` times `[B B B B C C C C]` is `[y.lo | y.hi]`.
    ///
    /// # Safety
    /// The CPU must have GFNI and AVX-512F.
    #[target_feature(enable = "gfni,avx512f")]
    #[expect(unsafe_code, reason = "GFNI and AVX-512 intrinsics on 64-byte chunks")]
    pub(super) unsafe fn mul_add_zmm(dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &[u64; 4]) {
        // The blocks: low from low, low from high, high from low, high from high.
        let [ll, lh, hl, hh] = map.map(u64::cast_signed);
        let same = _mm512_set_epi64(hh, hh, hh, hh, ll, ll, ll, ll);
        let cross = _mm512_set_epi64(hl, hl, hl, hl, lh, lh, lh, lh);
        for (out, input) in dst.iter_mut().zip(src) {
            // SAFETY: each pointer is to a whole 64-byte chunk; the
            // unaligned forms take any address.
            unsafe {
                let x = _mm512_loadu_si512(input.as_ptr().cast::<__m512i>());
                let swapped = _mm512_shuffle_i64x2::<0b0100_1110>(x, x);
                let y = _mm512_xor_si512(
                    _mm512_gf2p8affine_epi64_epi8::<0>(x, same),
                    _mm512_gf2p8affine_epi64_epi8::<0>(swapped, cross),
                );
                let ptr = out.as_mut_ptr().cast::<__m512i>();
                _mm512_storeu_si512(ptr, _mm512_xor_si512(_mm512_loadu_si512(ptr), y));
            }
        }
    }

    /// `M · v` for one chunk in a register (see [`mul_add_zmm`]).
    #[target_feature(enable = "gfni,avx512f")]
    #[inline]
    fn apply_zmm(v: __m512i, same: __m512i, cross: __m512i) -> __m512i {
        let swapped = _mm512_shuffle_i64x2::<0b0100_1110>(v, v);
        _mm512_xor_si512(
            _mm512_gf2p8affine_epi64_epi8::<0>(v, same),
            _mm512_gf2p8affine_epi64_epi8::<0>(swapped, cross),
        )
    }

    /// A butterfly over two rows of chunks, one chunk of each per register
    /// (`FORWARD`: `x ^= M·y`, then `y ^= x`; otherwise the inverse order).
    ///
    /// # Safety
    /// The CPU must have GFNI and AVX-512F.
    #[target_feature(enable = "gfni,avx512f")]
    #[expect(unsafe_code, reason = "GFNI and AVX-512 intrinsics on 64-byte chunks")]
    pub(super) unsafe fn pair_zmm<const FORWARD: bool>(
        x: &mut [[u8; 64]],
        y: &mut [[u8; 64]],
        map: &[u64; 4],
    ) {
        let [ll, lh, hl, hh] = map.map(u64::cast_signed);
        let same = _mm512_set_epi64(hh, hh, hh, hh, ll, ll, ll, ll);
        let cross = _mm512_set_epi64(hl, hl, hl, hl, lh, lh, lh, lh);
        for (a, b) in x.iter_mut().zip(y.iter_mut()) {
            let a_ptr = a.as_mut_ptr().cast::<__m512i>();
            let b_ptr = b.as_mut_ptr().cast::<__m512i>();
            // SAFETY: each pointer is to a whole 64-byte chunk; the
            // unaligned forms take any address.
            unsafe {
                let mut va = _mm512_loadu_si512(a_ptr);
                let mut vb = _mm512_loadu_si512(b_ptr);
                if FORWARD {
                    va = _mm512_xor_si512(va, apply_zmm(vb, same, cross));
                    vb = _mm512_xor_si512(vb, va);
                } else {
                    vb = _mm512_xor_si512(vb, va);
                    va = _mm512_xor_si512(va, apply_zmm(vb, same, cross));
                }
                _mm512_storeu_si512(a_ptr, va);
                _mm512_storeu_si512(b_ptr, vb);
            }
        }
    }

    /// `M · [lo | hi]` for one chunk in two registers (see [`mul_add_ymm`]).
    #[target_feature(enable = "gfni,avx2")]
    #[inline]
    fn apply_ymm(lo: __m256i, hi: __m256i, blocks: &[__m256i; 4]) -> (__m256i, __m256i) {
        let [ll, lh, hl, hh] = *blocks;
        (
            _mm256_xor_si256(
                _mm256_gf2p8affine_epi64_epi8::<0>(lo, ll),
                _mm256_gf2p8affine_epi64_epi8::<0>(hi, lh),
            ),
            _mm256_xor_si256(
                _mm256_gf2p8affine_epi64_epi8::<0>(lo, hl),
                _mm256_gf2p8affine_epi64_epi8::<0>(hi, hh),
            ),
        )
    }

    /// A butterfly over two rows of chunks, each half chunk in its own
    /// register (`FORWARD` as in [`pair_zmm`]).
    ///
    /// # Safety
    /// The CPU must have GFNI and AVX2.
    #[target_feature(enable = "gfni,avx2")]
    #[expect(unsafe_code, reason = "GFNI and AVX2 intrinsics on 32-byte halves")]
    pub(super) unsafe fn pair_ymm<const FORWARD: bool>(
        x: &mut [[u8; 64]],
        y: &mut [[u8; 64]],
        map: &[u64; 4],
    ) {
        let blocks = map.map(|m| _mm256_set1_epi64x(m.cast_signed()));
        for (a, b) in x.iter_mut().zip(y.iter_mut()) {
            let a_ptr = a.as_mut_ptr().cast::<__m256i>();
            let b_ptr = b.as_mut_ptr().cast::<__m256i>();
            // SAFETY: each chunk is 64 bytes, two 32-byte halves at its
            // pointer and 32 bytes on; the unaligned forms take any address.
            unsafe {
                let (mut a_lo, mut a_hi) =
                    (_mm256_loadu_si256(a_ptr), _mm256_loadu_si256(a_ptr.add(1)));
                let (mut b_lo, mut b_hi) =
                    (_mm256_loadu_si256(b_ptr), _mm256_loadu_si256(b_ptr.add(1)));
                if FORWARD {
                    let (p_lo, p_hi) = apply_ymm(b_lo, b_hi, &blocks);
                    a_lo = _mm256_xor_si256(a_lo, p_lo);
                    a_hi = _mm256_xor_si256(a_hi, p_hi);
                    b_lo = _mm256_xor_si256(b_lo, a_lo);
                    b_hi = _mm256_xor_si256(b_hi, a_hi);
                } else {
                    b_lo = _mm256_xor_si256(b_lo, a_lo);
                    b_hi = _mm256_xor_si256(b_hi, a_hi);
                    let (p_lo, p_hi) = apply_ymm(b_lo, b_hi, &blocks);
                    a_lo = _mm256_xor_si256(a_lo, p_lo);
                    a_hi = _mm256_xor_si256(a_hi, p_hi);
                }
                _mm256_storeu_si256(a_ptr, a_lo);
                _mm256_storeu_si256(a_ptr.add(1), a_hi);
                _mm256_storeu_si256(b_ptr, b_lo);
                _mm256_storeu_si256(b_ptr.add(1), b_hi);
            }
        }
    }

    /// Each half of a chunk in its own register: four products, two sums.
    ///
    /// # Safety
    /// The CPU must have GFNI and AVX2.
    #[target_feature(enable = "gfni,avx2")]
    #[expect(unsafe_code, reason = "GFNI and AVX2 intrinsics on 32-byte halves")]
    pub(super) unsafe fn mul_add_ymm(dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &[u64; 4]) {
        let [ll, lh, hl, hh] = map.map(|m| _mm256_set1_epi64x(m.cast_signed()));
        for (out, input) in dst.iter_mut().zip(src) {
            let (in_lo, in_hi) = input.split_at(32);
            let (out_lo, out_hi) = out.split_at_mut(32);
            // SAFETY: every pointer is to 32 readable (or writable) bytes
            // of a 64-byte chunk; the unaligned forms take any address.
            unsafe {
                let lo = _mm256_loadu_si256(in_lo.as_ptr().cast::<__m256i>());
                let hi = _mm256_loadu_si256(in_hi.as_ptr().cast::<__m256i>());
                let y_lo = _mm256_xor_si256(
                    _mm256_gf2p8affine_epi64_epi8::<0>(lo, ll),
                    _mm256_gf2p8affine_epi64_epi8::<0>(hi, lh),
                );
                let y_hi = _mm256_xor_si256(
                    _mm256_gf2p8affine_epi64_epi8::<0>(lo, hl),
                    _mm256_gf2p8affine_epi64_epi8::<0>(hi, hh),
                );
                let lo_ptr = out_lo.as_mut_ptr().cast::<__m256i>();
                let hi_ptr = out_hi.as_mut_ptr().cast::<__m256i>();
                _mm256_storeu_si256(lo_ptr, _mm256_xor_si256(_mm256_loadu_si256(lo_ptr), y_lo));
                _mm256_storeu_si256(hi_ptr, _mm256_xor_si256(_mm256_loadu_si256(hi_ptr), y_hi));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The map applied one element and one bit at a time.
    fn reference(dst: &mut [[u8; 64]], src: &[[u8; 64]], images: &[u16; 16]) {
        for (out, input) in dst.iter_mut().zip(src) {
            for e in 0..32 {
                let x = u16::from(input[e]) | u16::from(input[32 + e]) << 8;
                let y = (0..16)
                    .filter(|b| x >> b & 1 == 1)
                    .fold(0u16, |acc, b| acc ^ images[b]);
                out[e] ^= y as u8;
                out[32 + e] ^= (y >> 8) as u8;
            }
        }
    }

    /// The detected kernel and, where the CPU has AVX2, the AVX2 width too
    /// (a CPU with AVX-512 runs both).
    fn widths(gfni: Gfni) -> Vec<Gfni> {
        let mut all = vec![gfni];
        #[cfg(target_arch = "x86_64")]
        if gfni.0 == Width::Zmm && std::arch::is_x86_feature_detected!("avx2") {
            all.push(Gfni(Width::Ymm));
        }
        all
    }

    fn bytes(seed: u64, n: usize) -> Vec<[u8; 64]> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                std::array::from_fn(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
            })
            .collect()
    }

    #[test]
    fn the_kernel_applies_the_map_every_bit_sends_where_it_is_told() {
        let Some(gfni) = Gfni::detect() else {
            eprintln!("this CPU has no GFNI: the kernel is not used here");
            return;
        };
        for seed in 1..50u64 {
            let words = bytes(seed * 7919, 1);
            let images: [u16; 16] = std::array::from_fn(|b| {
                u16::from(words[0][2 * b]) | u16::from(words[0][2 * b + 1]) << 8
            });
            let src = bytes(seed, 9);
            let mut want = bytes(seed + 1000, 9);
            let before = want.clone();
            reference(&mut want, &src, &images);
            for kernel in widths(gfni) {
                let mut got = before.clone();
                kernel.mul_add(&mut got, &src, &Split16Map::from_images(&images));
                assert_eq!(got, want, "seed {seed}, {kernel:?}");
            }
        }
    }

    #[test]
    fn a_butterfly_is_a_multiply_add_and_a_sum_and_its_inverse_undoes_it() {
        let Some(gfni) = Gfni::detect() else {
            return;
        };
        for seed in 1..30u64 {
            let words = bytes(seed * 104_729, 1);
            let images: [u16; 16] = std::array::from_fn(|b| {
                u16::from(words[0][2 * b]) | u16::from(words[0][2 * b + 1]) << 8
            });
            let map = Split16Map::from_images(&images);
            let (x0, y0) = (bytes(seed, 7), bytes(seed + 500, 7));
            // Forward: x ^= M·y, then y ^= x.
            let mut want_x = x0.clone();
            reference(&mut want_x, &y0, &images);
            let want_y: Vec<[u8; 64]> = y0
                .iter()
                .zip(&want_x)
                .map(|(a, b)| std::array::from_fn(|i| a[i] ^ b[i]))
                .collect();
            for kernel in widths(gfni) {
                let (mut x, mut y) = (x0.clone(), y0.clone());
                kernel.butterfly(&mut x, &mut y, &map);
                assert_eq!((&x, &y), (&want_x, &want_y), "seed {seed}, {kernel:?}");
                kernel.butterfly_inverse(&mut x, &mut y, &map);
                assert_eq!((&x, &y), (&x0, &y0), "seed {seed}, {kernel:?} inverse");
            }
        }
    }

    #[test]
    fn the_transpose_moves_every_bit_across_the_diagonal() {
        for r in 0..8 {
            for c in 0..8 {
                assert_eq!(
                    transpose_bits(1 << (8 * r + c)),
                    1 << (8 * c + r),
                    "{r},{c}"
                );
            }
        }
    }

    #[test]
    fn a_single_bit_goes_to_its_image_and_nowhere_else() {
        let Some(gfni) = Gfni::detect() else {
            return;
        };
        for bit in 0..16 {
            let mut images = [0u16; 16];
            images[bit] = 0xA5C3;
            let mut src = [[0u8; 64]];
            if bit < 8 {
                src[0][5] = 1 << bit;
            } else {
                src[0][32 + 5] = 1 << (bit - 8);
            }
            let mut want = [0u8; 64];
            want[5] = 0xC3;
            want[32 + 5] = 0xA5;
            for kernel in widths(gfni) {
                let mut dst = [[0u8; 64]];
                kernel.mul_add(&mut dst, &src, &Split16Map::from_images(&images));
                assert_eq!(dst[0], want, "bit {bit}, {kernel:?}");
            }
        }
    }
}
