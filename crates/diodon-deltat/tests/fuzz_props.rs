//! Stable-toolchain property tests behind the `deltat_segment` fuzz target:
//! random bytes, and random bytes framed as well-formed segments, through
//! `diodon_deltat::fuzzing::deltat_segment`, plus the committed fuzz seeds.
//! (The segment round-trip and bit-flip properties live next to the parser,
//! in `src/wire.rs`.)

use diodon_deltat::fuzzing;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn deltat_segment_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::deltat_segment(&data);
    }

    /// Length-prefixed chunks whose control byte asks for the listened port
    /// and a current deadline, so most segments reach the connection logic.
    #[test]
    fn deltat_segment_on_framed_chunks(
        chunks in prop::collection::vec((0u8..64, prop::collection::vec(any::<u8>(), 0..84)), 0..24)
    ) {
        let mut data = Vec::new();
        for (len, bytes) in chunks {
            data.push(len << 2 | 1);
            data.extend_from_slice(&bytes);
        }
        fuzzing::deltat_segment(&data);
    }
}

/// The committed fuzz seeds stay valid inputs (and pass every check).
#[test]
fn fuzz_seeds_pass() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/deltat_segment"
    );
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        fuzzing::deltat_segment(&std::fs::read(entry.path()).expect("readable seed"));
    }
}
