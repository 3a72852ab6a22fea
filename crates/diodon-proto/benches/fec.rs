//! FEC encode/decode throughput (MB/s of source bytes) for 1452- and
//! 8952-byte symbols at 10/25/100 % repair, ~1 MiB blocks. Decode is the
//! worst case: `m` source symbols lost, rebuilt from `m` repair symbols.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use diodon_proto::fec::{ErasureCode, ReedSolomon};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    for shard in [1452usize, 8952] {
        let k = (1 << 20) / shard;
        let data: Vec<u8> = (0..k * shard).map(|i| (i * 7 + i / 251) as u8).collect();
        for repair in [10usize, 25, 100] {
            let m = (k * repair).div_ceil(100).min(k);
            let mut rs = ReedSolomon::new();
            let mut parity = vec![0u8; m * shard];
            let mut group = c.benchmark_group(format!("fec/{shard}B"));
            group.throughput(Throughput::Bytes((k * shard) as u64));
            group.sample_size(20);
            group.bench_with_input(
                BenchmarkId::new("encode", format!("{repair}%")),
                &repair,
                |b, _| {
                    b.iter(|| {
                        rs.encode(k, m, shard, black_box(&data), &mut parity)
                            .expect("encode");
                    });
                },
            );
            rs.encode(k, m, shard, &data, &mut parity).expect("encode");
            let present: Vec<bool> = (0..k).map(|i| i >= m).collect();
            let repair_shards: Vec<(usize, &[u8])> = parity.chunks(shard).enumerate().collect();
            let mut damaged = data.clone();
            group.bench_with_input(
                BenchmarkId::new("decode", format!("{repair}%")),
                &repair,
                |b, _| {
                    b.iter(|| {
                        rs.decode(
                            k,
                            m,
                            shard,
                            black_box(&mut damaged),
                            &present,
                            &repair_shards,
                        )
                        .expect("decode");
                    });
                },
            );
            assert!(damaged == data);
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
