//! Hostile and damaged input: reordering, duplication and corruption never
//! yield wrong bytes; a sender restart never mixes two sessions' data;
//! truncated, oversized, random and forged datagrams are rejected and
//! counted, never trusted, never a panic.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]
mod common;

use common::oracle::Oracle;
use common::{payload, Transfer};
use diodon_proto::wire::{parse_datagram, ChannelMeta, Integrity};
use diodon_proto::{
    ChannelId, Event, FailReason, Mismatch, Rate, Receiver, ReceiverConfig, RepairRatio, Sender,
    SenderConfig, SessionId, Timestamp,
};
use diodon_sim::{Corrupt, Duplicate, Link, Reorder, Seed, SeedReport};
use rand::{Rng, SeedableRng};
use std::time::Duration;

fn accounting_holds(r: &Receiver) {
    let s = r.stats();
    assert_eq!(
        s.datagrams,
        s.accepted + s.invalid() + s.stale_session + s.duplicates + s.too_old + s.expired,
        "every datagram is accepted or counted as rejected: {s:?}"
    );
}

#[test]
fn reordering_duplication_and_corruption_never_yield_wrong_bytes() {
    let seed = Seed::from_env_or(21);
    let _report = SeedReport::new("reorder_dup_corrupt", &seed);
    let payloads: Vec<Vec<u8>> = (0..8)
        .map(|i| payload(seed.0 + i, 150_000 * (i as usize + 1)))
        .collect();
    let scfg = SenderConfig {
        repair: RepairRatio::percent(25).unwrap(),
        rate: Rate::bits_per_sec(1_000_000_000),
        ..SenderConfig::default()
    };
    let (oracle, tally) = Oracle::new(scfg.integrity.clone());
    let mut link = Link::new()
        .with(Reorder::new(
            0.10,
            Duration::from_millis(20),
            seed.derive(1),
        ))
        .with(Duplicate::new(0.05, seed.derive(2)))
        .with(Corrupt::new(0.02, seed.derive(3)).truncate_probability(0.3))
        .with(oracle);
    let mut t = Transfer::new(scfg, ReceiverConfig::default(), 99, &payloads);
    t.run(&mut link, Duration::from_secs(30));
    for ((id, _, _), p) in t.channels.iter().zip(&payloads) {
        assert!(
            t.out.complete.get(id) == Some(p),
            "channel {id}: {:?}",
            t.out.failed.get(id)
        );
        assert!(tally.borrow().deliverable(*id));
    }
    let s = t.receiver.stats();
    assert!(s.duplicates > 0, "the link duplicated datagrams: {s:?}");
    assert!(
        s.bad_check + s.bad_length > 0,
        "the link corrupted datagrams: {s:?}"
    );
    accounting_holds(&t.receiver);
}

#[test]
fn heavy_corruption_without_repair_fails_channels_but_never_completes_wrong_bytes() {
    let seed = Seed::from_env_or(22);
    let _report = SeedReport::new("heavy_corruption", &seed);
    let payloads: Vec<Vec<u8>> = (0..10)
        .map(|i| payload(seed.0 + i, 40_000 * (i as usize + 1)))
        .collect();
    let scfg = SenderConfig {
        repair: RepairRatio::percent(0).unwrap(),
        ..SenderConfig::default()
    };
    let mut link = Link::new().with(Corrupt::new(0.05, seed.derive(1)));
    let mut t = Transfer::new(scfg, ReceiverConfig::default(), 5, &payloads);
    t.run(&mut link, Duration::from_secs(30));
    assert!(
        !t.out.failed.is_empty(),
        "5 % corruption without repair must fail some channel"
    );
    for ((id, _, _), p) in t.channels.iter().zip(&payloads) {
        if let Some(got) = t.out.complete.get(id) {
            assert!(got == p, "channel {id} completed with wrong bytes");
        } else {
            assert!(t.out.failed.contains_key(id), "channel {id} has no verdict");
        }
    }
    accounting_holds(&t.receiver);
}

/// Collects every datagram `sender` emits until it is idle (unpaced).
fn drain(sender: &mut Sender, now: Timestamp) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65_536];
    while let Some(t) = sender.poll_transmit(now, 1, &mut buf) {
        out.push(buf[..t.size].to_vec());
    }
    out
}

fn sender_with(
    session: u64,
    data: &[u8],
    now: Timestamp,
    integrity: Integrity,
) -> (Sender, ChannelId) {
    let cfg = SenderConfig {
        integrity,
        ..SenderConfig::default()
    };
    let mut s = Sender::new(cfg, SessionId(session), now).unwrap();
    let ch = s
        .open_channel(ChannelMeta::file("same-name", data.len() as u64))
        .unwrap();
    let n = s.write(now, ch, data).unwrap();
    assert_eq!(n, data.len());
    s.finish(now, ch).unwrap();
    (s, ch)
}

#[test]
fn sender_restart_never_mixes_sessions() {
    let now = Timestamp::from_millis(5);
    let a = payload(1, 500_000);
    let b = payload(2, 500_000);
    let (mut sa, ch_a) = sender_with(0xAAAA, &a, now, Integrity::Crc32c);
    let (mut sb, ch_b) = sender_with(0xBBBB, &b, now, Integrity::Crc32c);
    assert_eq!(
        ch_a, ch_b,
        "both sessions use channel 1: only the session id tells them apart"
    );
    let da = drain(&mut sa, now);
    let db = drain(&mut sb, now);
    let mut r = Receiver::new(ReceiverConfig::default(), now);
    // Half of session A, then session B (a restarted sender), then a late
    // datagram of A.
    for d in &da[..da.len() / 2] {
        r.handle_datagram(now, d);
    }
    for d in &db {
        r.handle_datagram(now, d);
    }
    r.handle_datagram(now, &da[da.len() / 2 + 1]);
    let events: Vec<Event> = std::iter::from_fn(|| r.poll_event()).collect();
    let position = |wanted: &dyn Fn(&Event) -> bool| events.iter().position(wanted);
    let failed_a = position(&|e| {
        *e == Event::ChannelFailed {
            channel: ch_a,
            reason: FailReason::SenderRestarted,
        }
    });
    let restarted = position(&|e| {
        *e == Event::SessionRestarted {
            old: SessionId(0xAAAA),
            new: SessionId(0xBBBB),
        }
    });
    let complete = position(&|e| matches!(e, Event::ChannelComplete { .. }));
    assert!(
        failed_a.is_some() && restarted.is_some() && complete.is_some(),
        "{events:?}"
    );
    assert!(
        failed_a < restarted && restarted < complete,
        "order: fail old, restart, complete new"
    );
    // Bytes delivered after the restart are exactly B's, from offset 0.
    let after: Vec<u8> = events[restarted.unwrap_or(0)..]
        .iter()
        .filter_map(|e| match e {
            Event::ChannelData { data, .. } => Some(data.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect();
    assert!(
        after == b,
        "session B delivered {} bytes, not B's",
        after.len()
    );
    assert_eq!(
        r.stats().stale_session,
        1,
        "the late datagram of A is stale"
    );
    accounting_holds(&r);
}

#[test]
fn garbage_is_rejected_and_counted() {
    let now = Timestamp::from_millis(1);
    let mut r = Receiver::new(ReceiverConfig::default(), now);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(Seed::from_env_or(23).0);
    let (mut s, _) = sender_with(7, &payload(3, 20_000), now, Integrity::Crc32c);
    let valid = drain(&mut s, now);
    let mut expected_invalid = 0;
    for _ in 0..5000 {
        let len = rng.random_range(0..2000);
        let junk: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        r.handle_datagram(now, &junk);
        expected_invalid += 1;
    }
    // Truncated, extended and bit-flipped valid datagrams.
    for d in &valid {
        r.handle_datagram(now, &d[..d.len() - 1]);
        let mut longer = d.clone();
        longer.push(0);
        r.handle_datagram(now, &longer);
        let mut flipped = d.clone();
        let i = rng.random_range(0..flipped.len());
        flipped[i] ^= 1 << rng.random_range(0..8);
        r.handle_datagram(now, &flipped);
        expected_invalid += 3;
    }
    // Oversized.
    r.handle_datagram(now, &vec![1u8; 70_000]);
    expected_invalid += 1;
    let st = r.stats();
    assert_eq!(st.invalid(), expected_invalid, "{st:?}");
    assert_eq!(st.accepted, 0);
    assert_eq!(r.session_id(), None, "no garbage may start a session");
    // The valid ones still work afterwards.
    for d in &valid {
        r.handle_datagram(now, d);
    }
    assert_eq!(r.stats().channels_complete, 1);
    accounting_holds(&r);
}

#[test]
fn forged_datagrams_fail_the_mac_and_mode_mismatch_is_reported() {
    let now = Timestamp::from_millis(1);
    let key = [7u8; 32];
    let data = payload(4, 100_000);
    let (mut good, _) = sender_with(1, &data, now, Integrity::mac(key));
    let (mut forger, _) = sender_with(1, &payload(5, 100_000), now, Integrity::mac([8u8; 32]));
    let mut r = Receiver::new(
        ReceiverConfig {
            integrity: Integrity::mac(key),
            ..ReceiverConfig::default()
        },
        now,
    );
    let forged = drain(&mut forger, now);
    for d in &forged {
        r.handle_datagram(now, d);
    }
    assert_eq!(r.stats().bad_check, forged.len() as u64);
    assert_eq!(r.session_id(), None);
    for d in drain(&mut good, now) {
        r.handle_datagram(now, &d);
    }
    assert_eq!(r.stats().channels_complete, 1);
    // An unkeyed receiver facing a keyed sender says so once, and counts.
    let mut plain = Receiver::new(ReceiverConfig::default(), now);
    for d in &forged {
        plain.handle_datagram(now, d);
    }
    assert_eq!(plain.stats().integrity_mismatch, forged.len() as u64);
    let mismatches: Vec<Event> = std::iter::from_fn(|| plain.poll_event()).collect();
    assert_eq!(
        mismatches,
        vec![Event::ConfigMismatch(Mismatch::Integrity {
            datagram_keyed: true
        })]
    );
    // The MAC covers the session id: replaying good datagrams under another
    // session id is impossible without the key.
    let d = drain(&mut sender_with(9, &data, now, Integrity::mac(key)).0, now).remove(0);
    let mut tampered = d.clone();
    tampered[4] ^= 0xFF;
    assert!(parse_datagram(&tampered, &Integrity::mac(key)).is_err());
}

#[test]
fn replayed_datagrams_are_duplicates() {
    let now = Timestamp::from_millis(1);
    let (mut s, _) = sender_with(3, &payload(6, 50_000), now, Integrity::mac([1; 32]));
    let d = drain(&mut s, now);
    let mut r = Receiver::new(
        ReceiverConfig {
            integrity: Integrity::mac([1; 32]),
            ..ReceiverConfig::default()
        },
        now,
    );
    for x in &d {
        r.handle_datagram(now, x);
    }
    for x in &d {
        r.handle_datagram(now, x);
    }
    let st = r.stats();
    assert_eq!(st.duplicates, d.len() as u64);
    assert_eq!(st.channels_complete, 1);
    assert_eq!(st.missing, 0);
    accounting_holds(&r);
}

#[test]
fn perfect_link_sanity_with_keyed_mode() {
    let payloads = vec![payload(8, 300_000)];
    let scfg = SenderConfig {
        integrity: Integrity::mac([3; 32]),
        ..SenderConfig::default()
    };
    let rcfg = ReceiverConfig {
        integrity: Integrity::mac([3; 32]),
        ..ReceiverConfig::default()
    };
    let mut t = Transfer::new(scfg, rcfg, 4, &payloads);
    t.run(&mut Link::new(), Duration::from_secs(10));
    assert_eq!(t.out.complete.values().next(), Some(&payloads[0]));
}

/// A channel the application refuses when its open is polled, after the
/// whole channel (one block and its trailer) arrived in the same batch:
/// its queued data and completion are withdrawn, the application hears
/// only the failure, and the counters say failed, not complete.
#[test]
fn a_channel_rejected_after_it_completed_in_the_same_batch_is_failed_not_verified() {
    let now = Timestamp::ZERO;
    let mut s = Sender::new(SenderConfig::default(), SessionId(5), now).unwrap();
    let ch = s.open_channel(ChannelMeta::file("small", 10_000)).unwrap();
    s.write(now, ch, &payload(3, 10_000)).unwrap();
    s.finish(now, ch).unwrap();
    let mut r = Receiver::new(ReceiverConfig::default(), now);
    let mut buf = vec![0u8; 65_536];
    while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
        r.handle_datagram(now, &buf[..t.size]);
    }
    let mut after = Vec::new();
    while let Some(e) = r.poll_event() {
        if let Event::ChannelOpened { channel, .. } = e {
            r.reject_channel(channel, std::io::Error::other("not wanted here"));
        } else {
            after.push(e);
        }
    }
    assert!(
        !after
            .iter()
            .any(|e| matches!(e, Event::ChannelData { .. } | Event::ChannelComplete { .. })),
        "{after:?}"
    );
    let failed: Vec<&Event> = after
        .iter()
        .filter(|e| matches!(e, Event::ChannelFailed { .. }))
        .collect();
    assert_eq!(failed.len(), 1, "{after:?}");
    assert!(
        matches!(failed[0], Event::ChannelFailed { reason: FailReason::Rejected(w), .. } if w.to_string() == "not wanted here"),
        "{failed:?}"
    );
    let st = r.stats();
    assert_eq!((st.channels_complete, st.channels_failed), (0, 1));
    // Once rejected, the channel stays failed: a second rejection adds nothing.
    r.reject_channel(ch, std::io::Error::other("again"));
    assert!(r.poll_event().is_none());
    assert_eq!(r.stats().channels_failed, 1);
}
