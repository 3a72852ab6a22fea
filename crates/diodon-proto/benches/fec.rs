//! FEC encode/decode throughput (MB/s of source bytes) for 1452- and
//! 8952-byte symbols at 10/25/100 % repair, ~1 MiB blocks. Decode is the
//! worst case: `m` source symbols lost, rebuilt from `m` repair symbols.
//! `fec/default-block` is the decode a receiver does at 1 % loss with the
//! default block (256 + 26 symbols of 1418 B): 3 source symbols and 1
//! repair symbol lost, so the cost per block (locating the erasures), not
//! the cost per byte, is what differs between decoders. `fec/losses` is
//! the decode of a default block by the number of source symbols lost: the
//! direct sum up to its limit (`fec::direct`), the transforms past it;
//! ", gfni" is the same decode with the CPU's GFNI kernel that receivers
//! hand the codec where the CPU has it (`diodon_io::gfni`).
#![allow(missing_docs)]

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput,
};
use diodon_proto::fec::{ErasureCode, KernelMap, ReedSolomon, SumKernel};
use std::hint::black_box;
use std::sync::Arc;

/// Benches decoding `data` with the source symbols `present` says are
/// missing, from `repair`, as `id` in `group`, and checks that the decode
/// restored `data`.
fn bench_decode(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    rs: &mut ReedSolomon,
    (k, m, shard): (usize, usize, usize),
    data: &[u8],
    present: &[bool],
    repair: &[(usize, &[u8])],
) {
    let mut damaged = data.to_vec();
    group.bench_function(id, |b| {
        b.iter(|| {
            rs.decode(k, m, shard, black_box(&mut damaged), present, repair)
                .expect("decode");
        });
    });
    assert!(damaged == data);
}

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
            bench_decode(
                &mut group,
                BenchmarkId::new("decode", format!("{repair}%")),
                &mut rs,
                (k, m, shard),
                &data,
                &present,
                &repair_shards,
            );
            group.finish();
        }
    }
}

fn default_block(c: &mut Criterion) {
    // The decoder works on next_pow2(next_pow2(m) + k) shards: 512 for
    // 256 + 26 (288 of them used), 256 for 224 + 23, 512 for 448 + 45.
    let shard = 1418usize;
    let mut group = c.benchmark_group("fec/default-block");
    group.sample_size(30);
    for (k, m) in [(256usize, 26usize), (224, 23), (448, 45), (192, 20)] {
        let data: Vec<u8> = (0..k * shard).map(|i| (i * 13 + i / 241) as u8).collect();
        let mut rs = ReedSolomon::new();
        let mut parity = vec![0u8; m * shard];
        rs.encode(k, m, shard, &data, &mut parity).expect("encode");
        // About 1 % loss: 3 source symbols and 1 repair symbol (k = 256).
        let lost = (k * 3).div_ceil(256);
        let mut present = vec![true; k];
        for i in 0..lost {
            present[17 + i * (k / lost - 1)] = false;
        }
        let repair_shards: Vec<(usize, &[u8])> = parity
            .chunks(shard)
            .enumerate()
            .filter(|(i, _)| *i != 5)
            .collect();
        group.throughput(Throughput::Bytes((k * shard) as u64));
        bench_decode(
            &mut group,
            BenchmarkId::from_parameter(format!("decode {k}+{m}, {lost} lost")),
            &mut rs,
            (k, m, shard),
            &data,
            &present,
            &repair_shards,
        );
        group.bench_function(format!("encode {k}+{m}"), |b| {
            b.iter(|| {
                rs.encode(k, m, shard, black_box(&data), &mut parity)
                    .expect("encode");
            });
        });
    }
    group.finish();
}

/// `diodon-io`'s GFNI multiply-add as the codec's kernel, as the
/// receiver's driver hands it over (`diodon_apps::fec_kernel`).
struct Gfni(diodon_io::gfni::Gfni);

impl SumKernel for Gfni {
    fn prepare(&self, images: &[u16; 16]) -> KernelMap {
        KernelMap(diodon_io::gfni::Split16Map::from_images(images).into_words())
    }

    fn mul_add(&self, dst: &mut [[u8; 64]], src: &[[u8; 64]], map: &KernelMap) {
        self.0
            .mul_add(dst, src, &diodon_io::gfni::Split16Map::from_words(map.0));
    }

    fn butterfly(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        self.0
            .butterfly(x, y, &diodon_io::gfni::Split16Map::from_words(map.0));
    }

    fn butterfly_inverse(&self, x: &mut [[u8; 64]], y: &mut [[u8; 64]], map: &KernelMap) {
        self.0
            .butterfly_inverse(x, y, &diodon_io::gfni::Split16Map::from_words(map.0));
    }
}

fn losses(c: &mut Criterion) {
    let mut group = c.benchmark_group("fec/losses");
    group.sample_size(20);
    let gfni = diodon_io::gfni::Gfni::detect().map(|g| Arc::new(Gfni(g)) as Arc<dyn SumKernel>);
    for (k, m, shard) in [
        (224usize, 23usize, 1452usize),
        (448, 45, 1452),
        (192, 20, 8918),
    ] {
        let data: Vec<u8> = (0..k * shard).map(|i| (i * 11 + i / 239) as u8).collect();
        let mut parity = vec![0u8; m * shard];
        ReedSolomon::new()
            .encode(k, m, shard, &data, &mut parity)
            .expect("encode");
        let repair_shards: Vec<(usize, &[u8])> = parity.chunks(shard).enumerate().collect();
        group.throughput(Throughput::Bytes((k * shard) as u64));
        for (kernel, name) in [(None, ""), (gfni.clone(), ", gfni")] {
            if name == ", gfni" && kernel.is_none() {
                continue;
            }
            let mut rs = ReedSolomon::new();
            if let Some(kernel) = kernel {
                rs.use_kernel(kernel);
            }
            let mut out = vec![0u8; m * shard];
            group.bench_function(format!("encode {k}+{m} of {shard} B{name}"), |b| {
                b.iter(|| {
                    rs.encode(k, m, shard, black_box(&data), &mut out)
                        .expect("encode");
                });
            });
            for lost in [1usize, 2, 4, 6, 8, 12, 16, 20] {
                let present: Vec<bool> = (0..k)
                    .map(|i| i % (k / lost) != 7 || i / (k / lost) >= lost)
                    .collect();
                bench_decode(
                    &mut group,
                    BenchmarkId::from_parameter(format!(
                        "decode {k}+{m} of {shard} B, {lost} lost{name}"
                    )),
                    &mut rs,
                    (k, m, shard),
                    &data,
                    &present,
                    &repair_shards,
                );
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench, default_block, losses);
criterion_main!(benches);
