//! What a driver may hand the codec for its sums and transforms: a
//! kernel for `dst ^= M · src` (and the transforms' butterflies built on
//! it) on shards in the library's layout
//! ([`SumKernel`], the form of its maps [`KernelMap`]), and the kernel by
//! its definition ([`ReferenceKernel`]) that any platform kernel must match.

/// A linear map of 16-bit elements in a kernel's own form (made by
/// [`SumKernel::prepare`], read only by the same kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelMap(pub [u64; 4]);

/// `dst ^= M · src` over shards in the library's layout (64-byte chunks of
/// 32 elements: their 32 low bytes, then their 32 high bytes), with
/// instructions the core may not use itself: a driver hands one in
/// ([`super::ReedSolomon::use_kernel`]) and the direct decoder then takes each of
/// its products in one pass, read straight from the received symbol.
pub trait SumKernel: Send + Sync {
    /// The kernel's form of the GF(2)-linear map that sends input bit `b`
    /// (bit 0 the low byte's lowest) to `images[b]`.
    fn prepare(&self, images: &[u16; 16]) -> KernelMap;
    /// `dst[c] ^= map · src[c]` for every chunk; both have the same length.
    fn mul_add(&self, dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &KernelMap);

    /// The transforms' step on two rows of the same length: `x ^= map · y`,
    /// then `y ^= x`. A kernel that can should do it in one pass.
    fn butterfly(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        self.mul_add(x, y, map);
        add(y, x);
    }

    /// The inverse transforms' step: `y ^= x`, then `x ^= map · y`.
    fn butterfly_inverse(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        add(y, x);
        self.mul_add(x, y, map);
    }
}

/// `dst ^= src`, chunk by chunk.
fn add(dst: &mut [[u8; 64]], src: &[[u8; 64]]) {
    for (d, s) in dst.iter_mut().zip(src) {
        for (a, b) in d.iter_mut().zip(s) {
            *a ^= b;
        }
    }
}

/// [`SumKernel`] by its definition, one element and one bit at a time: the
/// kernel a platform kernel must match byte for byte (it is far slower
/// than the library's multiply and is meant for tests).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceKernel;

impl SumKernel for ReferenceKernel {
    fn prepare(&self, images: &[u16; 16]) -> KernelMap {
        let word = |q: usize| {
            (0..4).fold(0u64, |acc, j| {
                acc | u64::from(images[4 * q + j]) << (16 * j)
            })
        };
        KernelMap([word(0), word(1), word(2), word(3)])
    }

    fn mul_add(&self, dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &KernelMap) {
        assert_eq!(dst.len(), src.len(), "chunks to add and chunks added");
        let image = |b: usize| (map.0[b / 4] >> (16 * (b % 4))) as u16;
        for (out, input) in dst.iter_mut().zip(src) {
            for e in 0..32 {
                let x = u16::from(input[e]) | u16::from(input[32 + e]) << 8;
                let y = (0..16)
                    .filter(|b| x >> b & 1 == 1)
                    .fold(0u16, |acc, b| acc ^ image(b));
                out[e] ^= y as u8;
                out[32 + e] ^= (y >> 8) as u8;
            }
        }
    }
}
