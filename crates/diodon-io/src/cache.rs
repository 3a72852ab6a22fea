//! Hints to the CPU's data caches: bytes a thread reads next are asked for
//! ahead, so that the read finds them in L1 instead of waiting on memory.
//!
//! The sender's core thread takes the CRC32C of each payload long after
//! its reader filled the block (a 2 MB block and the sender's queue have
//! left the caches by then), so the check waited on memory at every
//! datagram: 11 % of the sender's samples at MTU 9000. Asking for the next
//! datagram's payload while the current one is checked overlaps that wait
//! with work (BENCHMARKS.md, "The next payload asked for ahead").

/// Asks the CPU to bring `bytes` into its L1 data cache. A hint: it never
/// faults, never waits for the data, and does nothing on a CPU this
/// function has no instruction for.
#[cfg_attr(
    target_arch = "x86_64",
    expect(unsafe_code, reason = "the prefetch intrinsic has no safe wrapper")
)]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: PREFETCHT0 is SSE (every x86-64 CPU has it); it loads
        // nothing architecturally and cannot fault, and the address lies
        // inside `bytes`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefetch_changes_nothing_and_takes_any_slice() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        for range in [0..0, 0..1, 3..67, 0..10_000, 9_999..10_000] {
            super::prefetch(&bytes[range]);
        }
        assert!(bytes.iter().enumerate().all(|(i, &b)| b == i as u8));
    }
}
