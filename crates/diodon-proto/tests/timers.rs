//! Timer behaviour in virtual time, with both sides of every boundary
//! tested (s2n-quic's blackhole tests are the model): `LinkSilent` exactly
//! at the silence timeout, state freed exactly 2Δt after the last datagram,
//! a lost block declared exactly one reorder grace after the sender moved
//! past it, lifetime expiry, and idempotent `handle_timeout`.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]
mod common;

use common::payload;
use diodon_proto::wire::{ChannelMeta, Integrity};
use diodon_proto::{
    Event, FailReason, Receiver, ReceiverConfig, RepairRatio, Sender, SenderConfig, SessionId,
    Timestamp,
};
use std::time::Duration;

const NS: Duration = Duration::from_nanos(1);

fn datagrams(session: u64, data: &[u8], now: Timestamp, finish: bool) -> Vec<Vec<u8>> {
    // 64-symbol blocks, no repair, no interleaving: the tests count blocks.
    let cfg = SenderConfig {
        block_symbols: 64,
        repair: RepairRatio::percent(0).unwrap(),
        interleave_depth: 1,
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(session), now).unwrap();
    let ch = s
        .open_channel(ChannelMeta::file("f", data.len() as u64))
        .unwrap();
    s.write(now, ch, data).unwrap();
    if finish {
        s.finish(now, ch).unwrap();
    } else {
        s.flush(now, ch).unwrap();
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
        out.push(buf[..t.size].to_vec());
    }
    out
}

fn events(r: &mut Receiver) -> Vec<Event> {
    std::iter::from_fn(|| r.poll_event())
        .filter(|e| !matches!(e, Event::ChannelData { .. }))
        .collect()
}

fn config() -> ReceiverConfig {
    ReceiverConfig {
        delta_t: Duration::from_millis(500),
        silence_timeout: Duration::from_millis(300),
        reorder_grace: Duration::from_millis(40),
        integrity: Integrity::Crc32c,
        ..ReceiverConfig::default()
    }
}

#[test]
fn link_silent_exactly_at_the_timeout_and_resumed_after() {
    let t0 = Timestamp::from_millis(10);
    let mut r = Receiver::new(config(), t0);
    let d = datagrams(1, &payload(1, 5000), t0, true);
    let t1 = t0 + Duration::from_millis(100);
    for x in &d {
        r.handle_datagram(t1, x);
    }
    let _ = events(&mut r);
    let silent_at = t1 + Duration::from_millis(300);
    r.handle_timeout(silent_at - NS);
    assert!(!events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::LinkSilent { .. })));
    assert!(r.poll_timeout().is_some_and(|t| t <= silent_at));
    r.handle_timeout(silent_at);
    assert_eq!(events(&mut r), vec![Event::LinkSilent { last_heard: t1 }]);
    r.handle_timeout(silent_at);
    assert!(events(&mut r).is_empty(), "handle_timeout is idempotent");
    let more = datagrams(2, &payload(2, 10), silent_at, true);
    r.handle_datagram(silent_at + NS, &more[0]);
    assert!(events(&mut r).contains(&Event::LinkResumed));
}

#[test]
fn state_is_freed_exactly_two_delta_t_after_the_last_datagram() {
    let t0 = Timestamp::from_millis(10);
    let mut r = Receiver::new(config(), t0);
    // A stream that stops without a trailer (the sender vanished).
    let d = datagrams(3, &payload(3, 200_000), t0, false);
    let last = t0 + Duration::from_millis(7);
    for x in &d {
        r.handle_datagram(last, x);
    }
    let _ = events(&mut r);
    let free_at = last + Duration::from_secs(1);
    r.handle_timeout(free_at - NS);
    let before = events(&mut r);
    assert!(
        !before.iter().any(|e| matches!(
            e,
            Event::ChannelFailed { .. } | Event::SessionExpired { .. }
        )),
        "{before:?}"
    );
    assert!(r.session_id().is_some());
    assert_eq!(r.open_channels(), 1);
    r.handle_timeout(free_at);
    let after = events(&mut r);
    assert!(
        after.iter().any(|e| matches!(
            e,
            Event::ChannelFailed {
                reason: FailReason::TimedOut | FailReason::TrailerLost,
                ..
            }
        )),
        "{after:?}"
    );
    assert!(
        after.contains(&Event::SessionExpired {
            session: SessionId(3)
        }),
        "{after:?}"
    );
    assert_eq!(r.session_id(), None, "session state freed");
    assert_eq!(r.buffered_bytes(), 0);
    assert_eq!(r.stats().channels_failed, 1);
}

#[test]
fn a_lost_block_is_declared_exactly_one_grace_after_the_sender_moved_on() {
    let t0 = Timestamp::from_millis(10);
    let mut r = Receiver::new(config(), t0);
    let d = datagrams(4, &payload(4, 3 * 64 * 1418), t0, true);
    // Drop one source symbol of block 0 (no repair, depth 1): datagram 0 is
    // the beacon, then opens, then symbols. Find a data symbol of block 0.
    let victim = d
        .iter()
        .position(|x| {
            matches!(diodon_proto::wire::parse_datagram(x, &Integrity::Crc32c).map(|p| p.body),
                Ok(diodon_proto::wire::Body::Data(s)) if s.block == 0 && s.index == 5)
        })
        .unwrap();
    let t1 = t0 + Duration::from_millis(1);
    let mut moved_on_at = None;
    for (i, x) in d.iter().enumerate() {
        if i == victim {
            continue;
        }
        r.handle_datagram(t1, x);
        if moved_on_at.is_none() {
            if let Ok(diodon_proto::wire::Body::Data(s)) =
                diodon_proto::wire::parse_datagram(x, &Integrity::Crc32c).map(|p| p.body)
            {
                if s.block >= 1 {
                    moved_on_at = Some(t1);
                }
            }
        }
    }
    let verdict_at = moved_on_at.unwrap() + Duration::from_millis(40);
    r.handle_timeout(verdict_at - NS);
    assert!(!events(&mut r)
        .iter()
        .any(|e| matches!(e, Event::ChannelFailed { .. })));
    r.handle_timeout(verdict_at);
    let ev = events(&mut r);
    assert!(
        ev.iter().any(|e| matches!(
            e,
            Event::ChannelFailed {
                reason: FailReason::BlockLost { block: 0, .. },
                ..
            }
        )),
        "{ev:?}"
    );
    assert_eq!(r.stats().blocks_lost, 1);
}

#[test]
fn datagrams_older_than_their_lifetime_are_expired() {
    let t0 = Timestamp::from_millis(10);
    let mut r = Receiver::new(config(), t0);
    // Default lifetime is 2 s; all datagrams carry the same sender time.
    let d = datagrams(5, &payload(5, 20_000), t0, true);
    let first = t0 + Duration::from_millis(3);
    r.handle_datagram(first, &d[0]);
    // Age exactly the lifetime: accepted. One millisecond more: expired.
    r.handle_datagram(first + Duration::from_secs(2), &d[1]);
    assert_eq!(r.stats().expired, 0);
    r.handle_datagram(first + Duration::from_millis(2001), &d[2]);
    assert_eq!(r.stats().expired, 1);
    assert_eq!(r.stats().accepted, 2);
}

#[test]
fn poll_timeout_is_the_minimum_of_armed_timers() {
    let t0 = Timestamp::from_millis(10);
    let r = Receiver::new(config(), t0);
    assert_eq!(r.poll_timeout(), Some(t0 + Duration::from_millis(300)));
    let s = Sender::new(SenderConfig::default(), SessionId(1), t0).unwrap();
    // A new sender owes its first beacon now.
    assert_eq!(s.poll_timeout(), Some(t0));
}

/// Channel count of the many-channel tests: the deadlines are keyed by time,
/// so each step below costs the same with 10,000 channels as with one.
const MANY: u32 = 10_000;

/// The order in which the many-channel tests touch their channels: a
/// permutation of `1..=MANY` that is neither id order nor hash order.
fn shuffled(p: u32) -> u32 {
    (p * 7919) % MANY + 1
}

#[test]
fn ten_thousand_receiver_channels_expire_each_at_its_own_deadline_in_order() {
    let t0 = Timestamp::from_millis(10);
    let cfg = SenderConfig {
        repair: RepairRatio::percent(0).unwrap(),
        control_copies: 1,
        beacon_interval: Duration::from_secs(3600),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(6), t0).unwrap();
    for _ in 0..MANY {
        s.open_channel(ChannelMeta::file("f", 1)).unwrap();
    }
    let mut buf = vec![0u8; 65_536];
    let mut opens = std::collections::HashMap::new();
    while let Some(t) = s.poll_transmit(t0, 1, &mut buf) {
        let d = buf[..t.size].to_vec();
        let p = diodon_proto::wire::parse_datagram(&d, &Integrity::Crc32c).unwrap();
        if matches!(p.body, diodon_proto::wire::Body::Open(_)) {
            opens.insert(p.header.channel.0, d);
        }
    }
    assert_eq!(opens.len(), MANY as usize);
    let expiry = 2 * config().delta_t;
    let mut r = Receiver::new(
        ReceiverConfig {
            max_channels: MANY as usize,
            silence_timeout: Duration::from_secs(60),
            ..config()
        },
        t0,
    );
    let heard = |p: u32| t0 + Duration::from_micros(u64::from(p));
    for p in 0..MANY {
        r.handle_datagram(heard(p), &opens[&shuffled(p)]);
    }
    let opened = events(&mut r);
    assert_eq!(opened.len(), 1 + MANY as usize, "session + every channel");
    assert_eq!(r.open_channels(), MANY as usize);
    for p in 0..MANY {
        let due = heard(p) + expiry;
        assert_eq!(r.poll_timeout(), Some(due), "earliest deadline at step {p}");
        r.handle_timeout(due - NS);
        assert_eq!(events(&mut r), vec![], "nothing before {due:?}");
        r.handle_timeout(due);
        let mut expected = vec![Event::ChannelFailed {
            channel: diodon_proto::ChannelId(shuffled(p)),
            reason: FailReason::TimedOut,
        }];
        if p == MANY - 1 {
            expected.push(Event::SessionExpired {
                session: SessionId(6),
            });
        }
        assert_eq!(events(&mut r), expected, "step {p}");
        r.handle_timeout(due);
        assert_eq!(events(&mut r), vec![], "idempotent at step {p}");
        assert_eq!(r.open_channels(), (MANY - 1 - p) as usize);
    }
    assert_eq!(r.stats().channels_failed, u64::from(MANY));
}

#[test]
fn ten_thousand_sender_channels_flush_each_at_its_own_deadline_in_order() {
    let t0 = Timestamp::from_millis(10);
    let cfg = SenderConfig {
        repair: RepairRatio::percent(0).unwrap(),
        control_copies: 1,
        beacon_interval: Duration::from_secs(3600),
        ..SenderConfig::default()
    };
    let flush = cfg.flush_delay;
    let mut s = Sender::new(cfg, SessionId(8), t0).unwrap();
    let mut buf = vec![0u8; 65_536];
    let channels: Vec<_> = (0..MANY)
        .map(|_| s.open_channel(ChannelMeta::file("f", 1)).unwrap())
        .collect();
    let written = |p: u32| t0 + Duration::from_micros(u64::from(p));
    for p in 0..MANY {
        let ch = channels[shuffled(p) as usize - 1];
        assert_eq!(s.write(written(p), ch, b"x"), Ok(1));
    }
    let end = written(MANY);
    let mut sent = 0;
    while s.poll_transmit(end, 1, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 1 + MANY, "the beacon and every channel-open");
    for p in 0..MANY {
        let due = written(p) + flush;
        assert_eq!(s.poll_timeout(), Some(due), "earliest flush at step {p}");
        s.handle_timeout(due - NS);
        assert_eq!(
            s.poll_transmit(due - NS, 1, &mut buf),
            None,
            "nothing before {due:?}"
        );
        s.handle_timeout(due);
        s.handle_timeout(due);
        let t = s
            .poll_transmit(due, 1, &mut buf)
            .expect("the flushed block");
        let d = diodon_proto::wire::parse_datagram(&buf[..t.size], &Integrity::Crc32c).unwrap();
        assert_eq!(d.header.channel.0, shuffled(p), "step {p}");
        assert!(matches!(d.body, diodon_proto::wire::Body::Data(_)));
        assert_eq!(
            s.poll_transmit(due, 1, &mut buf),
            None,
            "one block at step {p}"
        );
    }
    assert_eq!(s.stats().data_symbols, u64::from(MANY));
}
