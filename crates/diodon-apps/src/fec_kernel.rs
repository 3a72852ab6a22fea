//! The codec's platform kernel: `diodon-io`'s GFNI multiply-add and
//! butterflies handed to the protocol core as its [`SumKernel`] (the core
//! holds no platform code, so the drivers bring it). On a CPU without GFNI
//! the core keeps the library's engine; the bytes encoded and restored are
//! the same either way.

use diodon_io::gfni::{Gfni, Split16Map};
use diodon_proto::fec::{KernelMap, SumKernel};
use std::sync::Arc;

/// The GFNI kernel as the core's [`SumKernel`].
#[derive(Debug, Clone, Copy)]
struct GfniSums(Gfni);

impl SumKernel for GfniSums {
    fn prepare(&self, images: &[u16; 16]) -> KernelMap {
        KernelMap(Split16Map::from_images(images).into_words())
    }

    fn mul_add(&self, dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &KernelMap) {
        self.0.mul_add(dst, src, &Split16Map::from_words(map.0));
    }

    fn butterfly(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        self.0.butterfly(x, y, &Split16Map::from_words(map.0));
    }

    fn butterfly_inverse(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        self.0
            .butterfly_inverse(x, y, &Split16Map::from_words(map.0));
    }
}

/// The fastest kernel this CPU runs for the codec's sums and transforms,
/// if any is faster than the library's engine.
pub fn best() -> Option<Arc<dyn SumKernel>> {
    Gfni::detect().map(|g| Arc::new(GfniSums(g)) as Arc<dyn SumKernel>)
}

/// What the codec's multiplies run on here, for the sender's and the
/// receiver's start lines.
pub fn describe() -> &'static str {
    Gfni::detect().map_or("the codec library's multiply (no GFNI)", Gfni::describe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_proto::fec::{ErasureCode, ReedSolomon, ReferenceKernel};

    #[test]
    fn the_cpu_kernel_encodes_and_restores_what_the_reference_and_the_library_do() {
        let Some(kernel) = best() else {
            eprintln!("this CPU has no GFNI: the library's multiply is used");
            return;
        };
        let mut x = 0x243F_6A88_85A3_08D3u64;
        let mut next = move |n: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        };
        for (k, m, len) in [
            (224, 23, 1418),
            (192, 20, 8918),
            (16, 4, 1418),
            (10, 4, 66),
            (3, 10, 1418),
        ] {
            let data: Vec<u8> = (0..k * len).map(|_| next(256) as u8).collect();
            let mut parity = vec![0; m * len];
            ReedSolomon::new()
                .encode(k, m, len, &data, &mut parity)
                .unwrap();
            // The encoder's transforms on the kernel: the library's bytes.
            let mut on_kernel = ReedSolomon::new();
            on_kernel.use_kernel(Arc::clone(&kernel));
            let mut kernel_parity = vec![0xEE; m * len];
            on_kernel
                .encode(k, m, len, &data, &mut kernel_parity)
                .unwrap();
            assert!(kernel_parity == parity, "repair of k={k} m={m} len={len}");
            // 1–3 lost: the direct decoder's sums; all m lost: the
            // decoder's transforms.
            for lost in (1..=3.min(m)).chain([m.min(k)]) {
                let mut present = vec![true; k];
                while present.iter().filter(|p| !**p).count() < lost {
                    present[next(k)] = false;
                }
                let repair: Vec<(usize, &[u8])> = parity.chunks(len).enumerate().collect();
                let mut restored = Vec::new();
                for with in [
                    None,
                    Some(Arc::new(ReferenceKernel) as Arc<dyn SumKernel>),
                    Some(Arc::clone(&kernel)),
                ] {
                    let mut rs = ReedSolomon::new();
                    if let Some(w) = with {
                        rs.use_kernel(w);
                    }
                    let mut damaged = data.clone();
                    for i in (0..k).filter(|&i| !present[i]) {
                        damaged[i * len..(i + 1) * len].fill(0xEE);
                    }
                    rs.decode(k, m, len, &mut damaged, &present, &repair)
                        .unwrap();
                    restored.push(damaged);
                }
                assert!(
                    restored.iter().all(|r| *r == data),
                    "k={k} m={m} len={len} lost {lost}"
                );
            }
        }
    }
}
