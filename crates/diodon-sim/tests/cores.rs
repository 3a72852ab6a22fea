//! The loop with the real cores of both protocols, through the adapters:
//! a Delta-t connection over a lossy, delaying link in both directions, and
//! a one-way session over a lossy link, each reproducible by its seed.

use std::time::Duration;

use diodon_deltat::{Config, Endpoint, Error, WallClock};
use diodon_proto::wire::ChannelMeta;
use diodon_proto::{Receiver, ReceiverConfig, RepairRatio, Sender, SenderConfig, SessionId};
use diodon_sim::{DuplexLink, Impairment, Pair, Seed, SeedReport, Timestamp, ADDR_B};

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 + i / 97) as u8).collect()
}

#[test]
fn deltat_pair_delivers_every_byte_in_order_over_loss() {
    let seed = Seed::from_env_or(5);
    let _report = SeedReport::new("deltat_pair_delivers_every_byte_in_order_over_loss", &seed);
    let cfg = Config::default();
    let a = Endpoint::new(cfg.clone(), WallClock::at_origin(1000)).expect("config");
    let mut b = Endpoint::new(cfg, WallClock::at_origin(1000)).expect("config");
    b.listen(2).expect("listen");
    let link = DuplexLink::symmetric(
        &Impairment {
            loss: 0.05,
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(2),
            ..Impairment::default()
        },
        seed,
    );
    let mut pair = Pair::new(a, b, link).with_seed(seed);
    let h = pair.a.connect(ADDR_B, 2, 1).expect("connect");
    let data = bytes(200_000);
    let (mut written, mut got) = (0, Vec::new());
    let mut rx = None;
    let mut buf = vec![0u8; 65_536];
    let done = pair.run_until(Timestamp::from_millis(600_000), |p| {
        if written < data.len() {
            written += p.a.write(h, &data[written..]).unwrap_or(0);
        }
        rx = rx.or_else(|| p.b.accept());
        if let Some(r) = rx {
            loop {
                match p.b.read(r, &mut buf) {
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("seed {seed}: read: {e}"),
                }
            }
        }
        got.len() == data.len()
    });
    assert!(done, "seed {seed}: {} of {} bytes", got.len(), data.len());
    assert!(got == data, "seed {seed}: bytes differ");
    let link = pair.link.totals();
    assert!(link.dropped > 0, "seed {seed}: the link lost nothing");
    assert!(pair.a.stats().retransmissions > 0);
}

#[test]
fn one_way_pair_recovers_losses_with_repair() {
    let seed = Seed::from_env_or(6);
    let _report = SeedReport::new("one_way_pair_recovers_losses_with_repair", &seed);
    let now = Timestamp::from_millis(1);
    let scfg = SenderConfig {
        repair: RepairRatio::percent(25).expect("ratio"),
        ..SenderConfig::default()
    };
    let mut sender = Sender::new(scfg, SessionId(9), now).expect("config");
    let data = bytes(2_000_000);
    let ch = sender
        .open_channel(ChannelMeta::file("f", data.len() as u64))
        .expect("open");
    let mut written = 0;
    let receiver = Receiver::new(ReceiverConfig::default(), now);
    let link = DuplexLink::one_way(Impairment::loss(0.02).link(seed));
    let mut pair = Pair::new(sender, receiver, link)
        .starting_at(now)
        .with_seed(seed);
    let mut delivered = 0;
    let done = pair.run_until(now + Duration::from_secs(60), |p| {
        if written < data.len() {
            written += p.a.write(p.now(), ch, &data[written..]).expect("write");
            if written == data.len() {
                p.a.finish(p.now(), ch).expect("finish");
            }
        }
        while let Some(e) = p.b.poll_event() {
            if let diodon_proto::Event::ChannelData { data, .. } = e {
                delivered += data.len();
            }
        }
        p.b.stats().channels_complete == 1
    });
    assert!(done, "seed {seed}: {:?}", pair.b.stats());
    assert_eq!(delivered, data.len());
    assert!(
        pair.b.stats().recovered_symbols > 0,
        "seed {seed}: nothing lost"
    );
}
