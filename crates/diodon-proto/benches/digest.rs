//! What the file digest (BLAKE3, PROTOCOL.md § 5.4) costs depending on how
//! its bytes are handed to it: a whole block at a time, as the receiver
//! does now (it copies each symbol into its block, then hashes the block),
//! or one symbol payload at a time, as a receiver that kept every symbol
//! where the kernel wrote it would have to (1418 bytes at MTU 1500, 8918
//! at 9000). BLAKE3 hashes many 1 KiB chunks at once only when one call
//! holds them; the difference is what that copy buys. Throughput is bytes
//! hashed; the input is 4 MiB, warm in the cache as a just-copied block is.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

const INPUT: usize = 4 << 20;

fn bench(c: &mut Criterion) {
    let data: Vec<u8> = (0..INPUT).map(|i| (i as u8).wrapping_mul(31)).collect();
    let mut g = c.benchmark_group("digest");
    g.throughput(Throughput::Bytes(INPUT as u64));
    for (name, piece) in [
        ("block of 224 x 1418 B", 224 * 1418),
        ("block of 64 x 8918 B", 64 * 8918),
        ("symbol of 8918 B", 8918),
        ("symbol of 1418 B", 1418),
    ] {
        g.bench_with_input(BenchmarkId::from_parameter(name), &piece, |b, &piece| {
            b.iter(|| {
                let mut h = blake3::Hasher::new();
                for p in data.chunks(piece) {
                    h.update(p);
                }
                h.finalize()
            });
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
