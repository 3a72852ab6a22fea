//! `poll_timeout` and `handle_timeout` with 1, 100 and 10,000 open channels,
//! sender and receiver: the cost per call must not grow with the number of
//! channels (the timers are keyed by deadline, `time::Deadlines`). The cost
//! per datagram, which re-arms its channel's deadline, is in `path`.
#![allow(missing_docs)]
#![expect(clippy::unwrap_used, reason = "bench setup")]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use diodon_proto::wire::ChannelMeta;
use diodon_proto::{
    Receiver, ReceiverConfig, RepairRatio, Sender, SenderConfig, SessionId, Timestamp,
};
use std::hint::black_box;
use std::time::Duration;

fn sender(channels: usize, t0: Timestamp) -> Sender {
    let cfg = SenderConfig {
        repair: RepairRatio::percent(0).unwrap(),
        control_copies: 1,
        beacon_interval: Duration::from_secs(3600),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(7), t0).unwrap();
    let mut buf = vec![0u8; 65_536];
    for _ in 0..channels {
        let ch = s.open_channel(ChannelMeta::file("f", 1)).unwrap();
        s.write(t0, ch, b"x").unwrap();
    }
    while s.poll_transmit(t0, 1, &mut buf).is_some() {}
    s
}

/// A receiver with `channels` open channels.
fn receiver(channels: usize, t0: Timestamp) -> Receiver {
    let cfg = SenderConfig {
        repair: RepairRatio::percent(0).unwrap(),
        control_copies: 1,
        beacon_interval: Duration::from_secs(3600),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(9), t0).unwrap();
    for _ in 0..channels {
        s.open_channel(ChannelMeta::file("f", 1)).unwrap();
    }
    let mut buf = vec![0u8; 65_536];
    let mut datagrams = Vec::new();
    while let Some(t) = s.poll_transmit(t0, 1, &mut buf) {
        datagrams.push(buf[..t.size].to_vec());
    }
    let mut r = Receiver::new(
        ReceiverConfig {
            max_channels: channels,
            ..ReceiverConfig::default()
        },
        t0,
    );
    for d in &datagrams {
        r.handle_datagram(t0, d);
    }
    while r.poll_event().is_some() {}
    assert_eq!(r.open_channels(), channels);
    r
}

fn bench(c: &mut Criterion) {
    let t0 = Timestamp::from_millis(1);
    let mut group = c.benchmark_group("timers");
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(1));
    for n in [1usize, 100, 10_000] {
        let s = sender(n, t0);
        group.bench_function(BenchmarkId::new("sender_poll_timeout", n), |b| {
            b.iter(|| black_box(s.poll_timeout()));
        });
        let mut s = sender(n, t0);
        group.bench_function(
            BenchmarkId::new("sender_handle_timeout_nothing_due", n),
            |b| {
                b.iter(|| s.handle_timeout(black_box(t0)));
            },
        );
        let mut r = receiver(n, t0);
        group.bench_function(BenchmarkId::new("receiver_poll_timeout", n), |b| {
            b.iter(|| black_box(r.poll_timeout()));
        });
        group.bench_function(
            BenchmarkId::new("receiver_handle_timeout_nothing_due", n),
            |b| {
                b.iter(|| r.handle_timeout(black_box(t0)));
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
