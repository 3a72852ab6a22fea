//! The whole in-memory path on one core: sender (cut, FEC encode, BLAKE3,
//! CRC32C, emit) → receiver (validate, gather, deliver, BLAKE3, verify),
//! unpaced. Throughput is channel payload bytes; at 10 % repair and
//! 8952-byte symbols the goal is ≥ 8 Gbit/s (1 GB/s). One case loses 2 % of
//! datagrams (seeded, `diodon_sim::transfer`) so the receiver decodes too.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use diodon_proto::{RepairRatio, SenderConfig, SymbolSize};
use diodon_sim::transfer::in_memory_transfer;

const CHANNEL: usize = 32 << 20;

fn config(symbol: usize, repair: u32) -> SenderConfig {
    SenderConfig {
        symbol_size: SymbolSize::new(symbol).expect("symbol"),
        repair: RepairRatio::percent(repair).expect("repair"),
        buffer_limit: 64 << 20,
        max_batch: 64,
        ..SenderConfig::default()
    }
}

fn bench(c: &mut Criterion) {
    let data: Vec<u8> = (0..CHANNEL).map(|i| (i ^ (i >> 9)) as u8).collect();
    let mut group = c.benchmark_group("path");
    group.throughput(Throughput::Bytes(CHANNEL as u64));
    group.sample_size(10);
    for (symbol, repair, loss) in [
        (8952usize, 10u32, 0u64),
        (1452, 10, 0),
        (8952, 10, 2),
        (8952, 0, 0),
    ] {
        let name = if loss > 0 {
            format!("{symbol}B/{repair}%/{loss}%loss")
        } else {
            format!("{symbol}B/{repair}%")
        };
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let (stats, delivered) = in_memory_transfer(config(symbol, repair), &data, loss);
                assert_eq!((stats.channels_complete, delivered), (1, CHANNEL as u64));
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
