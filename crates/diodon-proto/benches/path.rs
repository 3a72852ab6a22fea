//! The whole in-memory path on one core: sender (cut, FEC encode, BLAKE3,
//! CRC32C, emit) → receiver (validate, gather, deliver, BLAKE3, verify), no
//! loss, unpaced. Throughput is channel payload bytes; at 10 % repair and
//! 8952-byte symbols the goal is ≥ 8 Gbit/s (1 GB/s). A second case loses
//! 5 % of datagrams (every 20th) so the receiver decodes too.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use diodon_proto::wire::ChannelMeta;
use diodon_proto::{
    Event, Receiver, ReceiverConfig, RepairRatio, Sender, SenderConfig, SessionId, SymbolSize,
    Timestamp,
};

const CHANNEL: usize = 32 << 20;

fn transfer(symbol: usize, repair: u32, drop_every: usize, data: &[u8]) -> u64 {
    let mut now = Timestamp::from_millis(1);
    let cfg = SenderConfig {
        symbol_size: SymbolSize::new(symbol).expect("symbol"),
        repair: RepairRatio::percent(repair).expect("repair"),
        buffer_limit: 64 << 20,
        max_batch: 64,
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(1), now).expect("config");
    let mut r = Receiver::new(ReceiverConfig::default(), now);
    let ch = s
        .open_channel(ChannelMeta::file("bench", data.len() as u64))
        .expect("open");
    let mut written = 0;
    let mut buf = Vec::with_capacity(1 << 20);
    let mut delivered = 0u64;
    let mut n = 0usize;
    let mut finished = false;
    loop {
        if written < data.len() {
            written += s.write(now, ch, &data[written..]).expect("write");
        } else if !finished {
            s.finish(now, ch).expect("finish");
            finished = true;
        }
        buf.clear();
        let Some(batch) = s.poll_batch(now, &mut buf) else {
            if finished && s.is_idle() {
                break;
            }
            // Only timers (trailer copies, beacons) are left: jump to them.
            if let Some(t) = s.poll_timeout() {
                now = now.max(t);
                s.handle_timeout(now);
            }
            continue;
        };
        for d in buf.chunks(batch.segment_size) {
            n += 1;
            if drop_every == 0 || !n.is_multiple_of(drop_every) {
                r.handle_datagram(now, d);
            }
        }
        while let Some(e) = r.poll_event() {
            if let Event::ChannelData { data, .. } = e {
                delivered += data.len() as u64;
            }
        }
    }
    assert_eq!(r.stats().channels_complete, 1, "{:?}", r.stats());
    delivered
}

fn bench(c: &mut Criterion) {
    let data: Vec<u8> = (0..CHANNEL).map(|i| (i ^ (i >> 9)) as u8).collect();
    let mut group = c.benchmark_group("path");
    group.throughput(Throughput::Bytes(CHANNEL as u64));
    group.sample_size(10);
    for (symbol, repair, drop_every) in [
        (8952usize, 10u32, 0usize),
        (1452, 10, 0),
        (8952, 10, 20),
        (8952, 0, 0),
    ] {
        let name = if drop_every > 0 {
            format!("{symbol}B/{repair}%/5%loss")
        } else {
            format!("{symbol}B/{repair}%")
        };
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| assert_eq!(transfer(symbol, repair, drop_every, &data), CHANNEL as u64));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
