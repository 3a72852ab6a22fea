//! A full block encoded by its reader (`SenderConfig::block_coding`) has
//! the repair symbols the sender's own encode gives it, on the library's
//! engine and on a kernel, with codecs reused; anything but a full block
//! is given back untouched. (That the sender sends them as they came, and
//! re-encodes those of another code, is `write_sizes.rs`.)

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::fec::{ErasureCode, ReedSolomon, ReferenceKernel};
use diodon_proto::{RepairRatio, SenderConfig};
use std::sync::Arc;

fn config() -> SenderConfig {
    SenderConfig {
        block_symbols: 16,
        repair: RepairRatio::percent(25).unwrap(),
        ..SenderConfig::default()
    }
}

#[test]
fn a_full_block_is_encoded_as_the_sender_would() {
    let config = config();
    let coding = config.block_coding(None);
    let data: Vec<u8> = (0..config.block_bytes())
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    let s = config.symbol_size.get();
    let mut expected = vec![0; 4 * s];
    ReedSolomon::new()
        .encode(16, 4, s, &data, &mut expected)
        .unwrap();
    // A repair buffer too short, then too long: resized either way.
    for old in [vec![0xAB; 5], vec![0xCD; 9 * s]] {
        let block = coding.encode(data.clone(), old).unwrap();
        assert_eq!(block.repair(), &expected[..]);
        assert_eq!(block.data(), &data[..]);
    }
    // On a kernel: the same bytes, and again with the codec reused.
    let on_kernel = config.block_coding(Some(Arc::new(ReferenceKernel)));
    for _ in 0..2 {
        let again = on_kernel.encode(data.clone(), Vec::new()).unwrap();
        assert_eq!(again.repair(), &expected[..]);
    }
    assert_eq!(coding.repair_bytes(), 4 * s);
    assert_eq!(coding.block_bytes(), config.block_bytes());
}

#[test]
fn anything_but_a_full_block_is_given_back() {
    let config = config();
    let coding = config.block_coding(None);
    for len in [0, 1, config.block_bytes() - 1, config.block_bytes() + 1] {
        let data = vec![1u8; len];
        let back = coding.encode(data, Vec::new()).unwrap_err();
        assert_eq!(back.len(), len);
    }
}
