//! Forward error correction behind a trait: a systematic erasure code where
//! any `k` of the `k + m` symbols of a block recover its `k` source symbols.
//!
//! ```text
//!  block (k·L bytes, zero-padded)     repair (m·L bytes)
//! +------+------+-----+------+        +------+-----+------+
//! | s0   | s1   | ... | sk-1 |  --->  | r0   | ... | rm-1 |
//! +------+------+-----+------+        +------+-----+------+
//! ```
//!
//! [`ReedSolomon`] implements it with `reed-solomon-simd` (Leopard-style
//! FFT Reed–Solomon over GF(2^16): O(n log n), up to 32768 + 32768 shards,
//! shard length L even). Its decoder runs on [`locator::ErasureLocator`],
//! the library's engine with the erasure locator computed at a cost that
//! follows the erasures instead of the field's size. A driver may hand it a
//! [`SumKernel`] (a platform instruction set the core cannot hold itself)
//! for the sums of the direct decoder and the butterflies of the encoder's
//! and the decoder's transforms ([`transforms`]).

mod direct;
mod kernel;
mod locator;
mod transforms;

pub use kernel::{KernelMap, ReferenceKernel, SumKernel};

use direct::DirectSolver;

use locator::ErasureLocator;
use reed_solomon_simd::rate::{DefaultRateDecoder, DefaultRateEncoder, RateDecoder, RateEncoder};
use std::sync::Arc;
use thiserror::Error;
use transforms::{KernelFactors, Transforms};

/// Why encoding or decoding failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FecError {
    /// The code cannot handle these parameters.
    #[error("unsupported code parameters k={k} m={m} shard={shard_len}")]
    Unsupported {
        /// Source symbols.
        k: usize,
        /// Repair symbols.
        m: usize,
        /// Shard length.
        shard_len: usize,
    },
    /// Fewer than `k` symbols are present.
    #[error("not enough symbols: have {have}, need {need}")]
    NotEnough {
        /// Symbols present.
        have: usize,
        /// Symbols needed.
        need: usize,
    },
    /// The underlying library refused (a bug if reached).
    #[error("erasure code failure: {0}")]
    Internal(String),
}

/// A systematic erasure code.
pub trait ErasureCode {
    /// Computes `m` repair shards of `shard_len` bytes into `repair`
    /// (`m · shard_len` bytes) from `data` (`k · shard_len` bytes).
    fn encode(
        &mut self,
        k: usize,
        m: usize,
        shard_len: usize,
        data: &[u8],
        repair: &mut [u8],
    ) -> Result<(), FecError>;

    /// Restores the missing source shards of `data` (`k · shard_len` bytes,
    /// `present[i]` tells which are valid) from the present ones and the
    /// given repair shards `(repair index 0..m, bytes)`.
    fn decode(
        &mut self,
        k: usize,
        m: usize,
        shard_len: usize,
        data: &mut [u8],
        present: &[bool],
        repair: &[(usize, &[u8])],
    ) -> Result<(), FecError>;
}

/// Reed–Solomon via `reed-solomon-simd`, reusing its work buffers.
#[derive(Default)]
pub struct ReedSolomon {
    encoder: Option<DefaultRateEncoder<Transforms>>,
    decoder: Option<DefaultRateDecoder<ErasureLocator>>,
    direct: Option<DirectSolver>,
    kernel: Option<Arc<dyn SumKernel>>,
    /// The kernel's form of the transforms' factors, made with the kernel.
    factors: Option<Arc<KernelFactors>>,
}

impl std::fmt::Debug for ReedSolomon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReedSolomon")
    }
}

impl ReedSolomon {
    /// A fresh codec.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the direct decoder's sums and the transforms' butterflies
    /// with `kernel` from now on (the result is the same byte for byte;
    /// only the cost differs). Prepares the kernel's factors: a few
    /// milliseconds, once.
    pub fn use_kernel(&mut self, kernel: Arc<dyn SumKernel>) {
        self.factors = Some(Arc::new(KernelFactors::new(Arc::clone(&kernel))));
        self.kernel = Some(kernel);
        // Built again on their next use, on the kernel.
        self.encoder = None;
        self.decoder = None;
    }

    /// A fresh codec on this one's kernel, sharing its prepared factors
    /// (no work buffers yet).
    pub(crate) fn sharing_kernel(&self) -> Self {
        ReedSolomon {
            kernel: self.kernel.clone(),
            factors: self.factors.clone(),
            ..Self::default()
        }
    }

    /// Whether `(k, m)` is supported (m may be 0: no coding needed).
    pub fn supports(k: usize, m: usize) -> bool {
        k >= 1 && (m == 0 || reed_solomon_simd::ReedSolomonEncoder::supports(k, m))
    }
}

fn internal(e: reed_solomon_simd::Error) -> FecError {
    FecError::Internal(e.to_string())
}

/// Refuses what the library's decoder would refuse: a repair index past
/// `m`, one given twice, a shard of another length.
fn check_repair(m: usize, shard_len: usize, repair: &[(usize, &[u8])]) -> Result<(), FecError> {
    let mut seen = vec![false; m];
    for &(index, shard) in repair {
        if index >= m || std::mem::replace(&mut seen[index], true) {
            return Err(FecError::Internal(format!(
                "repair symbol {index} is out of range or given twice (m = {m})"
            )));
        }
        if shard.len() != shard_len {
            return Err(FecError::Internal(format!(
                "repair symbol {index} has {} bytes, the block's symbols {shard_len}",
                shard.len()
            )));
        }
    }
    Ok(())
}

impl ErasureCode for ReedSolomon {
    fn encode(
        &mut self,
        k: usize,
        m: usize,
        shard_len: usize,
        data: &[u8],
        repair: &mut [u8],
    ) -> Result<(), FecError> {
        if m == 0 {
            return Ok(());
        }
        if !Self::supports(k, m) || shard_len == 0 || !shard_len.is_multiple_of(2) {
            return Err(FecError::Unsupported { k, m, shard_len });
        }
        let encoder = match &mut self.encoder {
            Some(e) => {
                e.reset(k, m, shard_len).map_err(internal)?;
                e
            }
            None => self.encoder.insert(
                DefaultRateEncoder::new(
                    k,
                    m,
                    shard_len,
                    Transforms::new(self.factors.as_ref()),
                    None,
                )
                .map_err(internal)?,
            ),
        };
        for shard in data.chunks_exact(shard_len).take(k) {
            encoder.add_original_shard(shard).map_err(internal)?;
        }
        let result = encoder.encode().map_err(internal)?;
        for (out, shard) in repair
            .chunks_exact_mut(shard_len)
            .zip(result.recovery_iter())
        {
            out.copy_from_slice(shard);
        }
        Ok(())
    }

    fn decode(
        &mut self,
        k: usize,
        m: usize,
        shard_len: usize,
        data: &mut [u8],
        present: &[bool],
        repair: &[(usize, &[u8])],
    ) -> Result<(), FecError> {
        let have = present.iter().filter(|p| **p).count();
        if have == k {
            return Ok(());
        }
        if have + repair.len() < k {
            return Err(FecError::NotEnough {
                have: have + repair.len(),
                need: k,
            });
        }
        if !Self::supports(k, m) || m == 0 {
            return Err(FecError::Unsupported { k, m, shard_len });
        }
        check_repair(m, shard_len, repair)?;
        if DirectSolver::cheaper(k, m, k - have, self.kernel.is_some()) {
            self.direct.get_or_insert_with(DirectSolver::new).restore(
                (k, m, shard_len),
                data,
                present,
                repair,
                self.kernel.as_deref(),
            );
            return Ok(());
        }
        let decoder = match &mut self.decoder {
            Some(d) => {
                d.reset(k, m, shard_len).map_err(internal)?;
                d
            }
            None => self.decoder.insert(
                DefaultRateDecoder::new(
                    k,
                    m,
                    shard_len,
                    ErasureLocator::new(Transforms::new(self.factors.as_ref())),
                    None,
                )
                .map_err(internal)?,
            ),
        };
        for (i, shard) in data.chunks_exact(shard_len).enumerate().take(k) {
            if present[i] {
                decoder.add_original_shard(i, shard).map_err(internal)?;
            }
        }
        for (index, shard) in repair {
            decoder
                .add_recovery_shard(*index, shard)
                .map_err(internal)?;
        }
        let result = decoder.decode().map_err(internal)?;
        for (i, restored) in result.restored_original_iter() {
            data[i * shard_len..(i + 1) * shard_len].copy_from_slice(restored);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded numbers below `n` (xorshift): loss patterns that repeat.
    pub(super) fn below(seed: u64) -> impl FnMut(usize) -> usize {
        let mut state = seed;
        move |n| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        }
    }

    fn block(k: usize, len: usize) -> Vec<u8> {
        (0..k * len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn any_k_of_k_plus_m_recover() {
        let (k, m, len) = (10, 4, 64);
        let data = block(k, len);
        let mut repair = vec![0; m * len];
        let mut rs = ReedSolomon::new();
        rs.encode(k, m, len, &data, &mut repair).unwrap();
        // Lose 4 source symbols (the maximum), keep all repair.
        for lost in [[0, 1, 2, 3], [6, 7, 8, 9], [0, 3, 5, 9]] {
            let mut damaged = data.clone();
            let mut present = vec![true; k];
            for &i in &lost {
                present[i] = false;
                damaged[i * len..(i + 1) * len].fill(0xEE);
            }
            let rep: Vec<(usize, &[u8])> = repair.chunks(len).enumerate().collect();
            rs.decode(k, m, len, &mut damaged, &present, &rep).unwrap();
            assert_eq!(damaged, data, "lost {lost:?}");
        }
    }

    #[test]
    fn every_layout_recovers_random_losses_up_to_m() {
        // High rate (the direct locator, and the transforms past its
        // budget) and low rate (short blocks with more repair than data,
        // always the transforms), losses of source and repair mixed.
        let mut next = below(0x2545_f491_4f6c_dd1d);
        let len = 64;
        for (k, m) in [
            (256, 26),
            (1024, 103),
            (722, 73),
            (1, 4),
            (8, 6),
            (3, 10),
            (2, 1),
        ] {
            let data = block(k, len);
            let mut repair = vec![0; m * len];
            let mut rs = ReedSolomon::new();
            rs.encode(k, m, len, &data, &mut repair).unwrap();
            for _ in 0..6 {
                let lost = 1 + next(m);
                let mut gone = vec![false; k + m];
                for _ in 0..lost {
                    gone[next(k + m)] = true;
                }
                let mut damaged = data.clone();
                let present: Vec<bool> = (0..k).map(|i| !gone[i]).collect();
                for i in (0..k).filter(|&i| gone[i]) {
                    damaged[i * len..(i + 1) * len].fill(0xEE);
                }
                let rep: Vec<(usize, &[u8])> = repair
                    .chunks(len)
                    .enumerate()
                    .filter(|(i, _)| !gone[k + i])
                    .collect();
                rs.decode(k, m, len, &mut damaged, &present, &rep).unwrap();
                assert!(damaged == data, "k={k} m={m} lost {lost}");
            }
        }
    }

    #[test]
    fn the_kernel_transforms_give_the_library_s_bytes() {
        // The encoder's transforms on the reference kernel against the
        // library's engine: the same repair bytes for high-rate, low-rate
        // and one-symbol blocks, shards of whole chunks and with a tail;
        // and the same restored bytes when more is lost than the direct
        // decoder takes (the decoder's transforms).
        let mut next = below(0x9E37_79B9_7F4A_7C15);
        for (k, m, len) in [
            (224, 23, 130),
            (192, 20, 128),
            (40, 9, 66),
            (3, 10, 130),
            (1, 4, 64),
            (16, 4, 2),
        ] {
            let data: Vec<u8> = (0..k * len).map(|_| next(256) as u8).collect();
            let mut library = ReedSolomon::new();
            let mut kernel = ReedSolomon::new();
            kernel.use_kernel(Arc::new(ReferenceKernel));
            let mut want = vec![0; m * len];
            let mut got = vec![0xEE; m * len];
            library.encode(k, m, len, &data, &mut want).unwrap();
            kernel.encode(k, m, len, &data, &mut got).unwrap();
            assert!(got == want, "repair of k={k} m={m} len={len}");
            let lost = m.min(k);
            let mut present = vec![true; k];
            while present.iter().filter(|p| !**p).count() < lost {
                present[next(k)] = false;
            }
            let repair: Vec<(usize, &[u8])> = want.chunks(len).enumerate().collect();
            for rs in [&mut library, &mut kernel] {
                let mut damaged = data.clone();
                for i in (0..k).filter(|&i| !present[i]) {
                    damaged[i * len..(i + 1) * len].fill(0xEE);
                }
                rs.decode(k, m, len, &mut damaged, &present, &repair)
                    .unwrap();
                assert!(damaged == data, "k={k} m={m} len={len}, {lost} lost");
            }
        }
    }

    #[test]
    fn too_few_symbols_is_an_error_not_garbage() {
        let (k, m, len) = (4, 1, 32);
        let mut data = block(k, len);
        let present = [false, false, true, true];
        let repair = vec![0u8; len];
        let err = ReedSolomon::new().decode(k, m, len, &mut data, &present, &[(0, &repair)]);
        assert_eq!(err, Err(FecError::NotEnough { have: 3, need: 4 }));
    }

    #[test]
    fn a_forged_repair_list_is_an_error_not_a_panic() {
        let (k, m, len) = (4, 2, 32);
        let mut data = block(k, len);
        let present = [false, true, true, true];
        let shard = vec![0u8; len];
        let short = vec![0u8; len - 2];
        for repair in [
            vec![(2, &shard[..])],
            vec![(1, &shard[..]), (1, &shard[..])],
            vec![(0, &short[..])],
        ] {
            let err = ReedSolomon::new().decode(k, m, len, &mut data, &present, &repair);
            assert!(matches!(err, Err(FecError::Internal(_))), "{err:?}");
        }
    }

    #[test]
    fn odd_shard_is_refused() {
        let mut out = vec![0; 3];
        assert!(ReedSolomon::new()
            .encode(1, 1, 3, &[1, 2, 3], &mut out)
            .is_err());
    }
}
