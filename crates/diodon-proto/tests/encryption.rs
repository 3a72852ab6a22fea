//! The encrypted mode (PROTOCOL.md § 4.3, § 4.4) end to end through the
//! cores: a transfer verifies; an altered header, body or tag, a wrong key
//! and a mode mismatch are refused and counted; replays are duplicates; a
//! key rollover in the middle of a channel loses nothing, with the MAC as
//! with encryption, whether timed or by keys read again; the sender stops
//! before its sequence number could repeat a nonce.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::crypto::SEQ_LIMIT;
use diodon_proto::wire::{ChannelMeta, Integrity, Packet};
use diodon_proto::{
    Event, KeyRing, Mismatch, Receiver, ReceiverConfig, ReceiverStats, Secret, Sender,
    SenderConfig, SessionId, Timestamp,
};
use std::time::Duration;

const KEY_A: [u8; 32] = [0xA1; 32];
const KEY_B: [u8; 32] = [0xB2; 32];

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn ring_a() -> Integrity {
    Integrity::Encrypted(KeyRing::new((1, Secret::new(KEY_A)), None).unwrap())
}

/// A sender of one channel holding `data`, everything queued at `now`.
fn sender(config: SenderConfig, data: &[u8], now: Timestamp) -> Sender {
    let mut s = Sender::new(config, SessionId(0x005E_C2E7), now).unwrap();
    let ch = s
        .open_channel(ChannelMeta::file("secret.bin", data.len() as u64))
        .unwrap();
    assert_eq!(s.write(now, ch, data).unwrap(), data.len());
    s.finish(now, ch).unwrap();
    s
}

fn with(integrity: Integrity) -> SenderConfig {
    SenderConfig {
        integrity,
        ..SenderConfig::default()
    }
}

/// Every datagram the sender emits, one per call, the clock moving `step`
/// after each.
fn drain(s: &mut Sender, mut now: Timestamp, step: Duration) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    loop {
        s.handle_timeout(now);
        match s.poll_transmit(now, 1, &mut buf) {
            Some(t) => out.push(buf[..t.size].to_vec()),
            None if s.poll_timeout().is_some_and(|t| t > now) && out.len() > 10 => {
                let idle = s.poll_timeout().unwrap();
                // Only beacons would follow: done.
                if idle - now >= Duration::from_millis(200) {
                    break;
                }
            }
            None => {}
        }
        now += step;
    }
    out
}

fn receiver(integrity: Integrity) -> Receiver {
    Receiver::new(
        ReceiverConfig {
            integrity,
            ..ReceiverConfig::default()
        },
        Timestamp::ZERO,
    )
}

/// Feeds `datagrams`; returns the complete channels' bytes and the events.
fn feed(r: &mut Receiver, datagrams: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<Event>) {
    let mut bytes = Vec::new();
    let mut complete = Vec::new();
    let mut events = Vec::new();
    for d in datagrams {
        r.handle_datagram(Timestamp::from_millis(1), d);
        while let Some(e) = r.poll_event() {
            match e {
                Event::ChannelData { data, .. } => bytes.extend_from_slice(&data),
                Event::ChannelComplete { .. } => complete.push(std::mem::take(&mut bytes)),
                other => events.push(other),
            }
        }
    }
    (complete, events)
}

fn accounting_holds(s: &ReceiverStats) {
    assert_eq!(
        s.datagrams,
        s.accepted + s.invalid() + s.stale_session + s.duplicates + s.too_old + s.expired,
        "every datagram is accepted or counted as rejected: {s:?}"
    );
}

#[test]
fn an_encrypted_transfer_verifies_and_hides_its_bytes() {
    let data = payload(300_000);
    let now = Timestamp::ZERO;
    let wire = drain(
        &mut sender(with(ring_a()), &data, now),
        now,
        Duration::from_micros(10),
    );
    let mut r = receiver(ring_a());
    let (complete, _) = feed(&mut r, &wire);
    assert_eq!(complete, vec![data.clone()]);
    // No 16-byte run of the file (nor its name) appears on the wire.
    let all: Vec<u8> = wire.concat();
    for probe in [&data[1000..1016], &data[200_000..200_016], b"secret.bin"] {
        assert!(
            !all.windows(probe.len()).any(|w| w == probe),
            "plaintext on the wire"
        );
    }
    let s = r.stats();
    assert_eq!((s.bad_check, s.integrity_mismatch), (0, 0));
    accounting_holds(&s);
}

#[test]
fn an_altered_header_body_or_tag_is_refused_and_counted() {
    let data = payload(50_000);
    let now = Timestamp::ZERO;
    let wire = drain(
        &mut sender(with(ring_a()), &data, now),
        now,
        Duration::from_micros(10),
    );
    let mut altered = Vec::new();
    for d in &wire {
        // Channel id (header), first body byte, last tag byte.
        for at in [23, 32, d.len() - 1] {
            let mut x = d.clone();
            x[at] ^= 0x10;
            altered.push(x);
        }
    }
    let mut r = receiver(ring_a());
    let (complete, _) = feed(&mut r, &altered);
    assert!(complete.is_empty());
    assert_eq!(r.stats().bad_check, altered.len() as u64);
    assert_eq!(r.session_id(), None, "nothing altered may start a session");
    let (complete, _) = feed(&mut r, &wire);
    assert_eq!(complete, vec![data]);
    accounting_holds(&r.stats());
}

#[test]
fn replayed_encrypted_datagrams_are_duplicates() {
    let data = payload(40_000);
    let now = Timestamp::ZERO;
    let wire = drain(
        &mut sender(with(ring_a()), &data, now),
        now,
        Duration::from_micros(10),
    );
    let mut r = receiver(ring_a());
    feed(&mut r, &wire);
    feed(&mut r, &wire);
    let s = r.stats();
    assert_eq!(s.duplicates, wire.len() as u64);
    assert_eq!((s.channels_complete, s.bad_check), (1, 0));
    accounting_holds(&s);
}

#[test]
fn a_wrong_key_or_an_unknown_key_id_is_a_bad_check() {
    let data = payload(20_000);
    let now = Timestamp::ZERO;
    let other = Integrity::Encrypted(KeyRing::new((1, Secret::new([9; 32])), None).unwrap());
    let wire = drain(
        &mut sender(with(other), &data, now),
        now,
        Duration::from_micros(10),
    );
    let mut r = receiver(ring_a());
    let (complete, events) = feed(&mut r, &wire);
    assert!(complete.is_empty() && events.is_empty(), "{events:?}");
    assert_eq!(r.stats().bad_check, wire.len() as u64);
    // The right key under another id does not open either.
    let id9 = Integrity::Encrypted(KeyRing::new((9, Secret::new(KEY_A)), None).unwrap());
    let wire = drain(
        &mut sender(with(id9), &data, now),
        now,
        Duration::from_micros(10),
    );
    let mut r = receiver(ring_a());
    feed(&mut r, &wire);
    assert_eq!(r.stats().bad_check, wire.len() as u64);
}

#[test]
fn either_mac_is_taken_by_a_mac_receiver_and_an_altered_gmac_is_refused() {
    let data = payload(120_000);
    let now = Timestamp::ZERO;
    let gmac = || Integrity::Gmac(KeyRing::single(KEY_A));
    for (sent, expected) in [
        (gmac(), Integrity::mac(KEY_A)),
        (gmac(), gmac()),
        (Integrity::mac(KEY_A), gmac()),
    ] {
        let wire = drain(
            &mut sender(with(sent.clone()), &data, now),
            now,
            Duration::from_micros(10),
        );
        let gmac_flag = u16::from_be_bytes([wire[0][2], wire[0][3]]) & 0x0004 != 0;
        assert_eq!(
            gmac_flag,
            matches!(sent, Integrity::Gmac(_)),
            "the flag says which MAC"
        );
        let mut altered = Vec::new();
        for d in &wire {
            for at in [13, 23, 40, d.len() - 1] {
                let mut x = d.clone();
                x[at] ^= 0x10;
                altered.push(x);
            }
        }
        let mut r = receiver(expected);
        let (complete, _) = feed(&mut r, &altered);
        assert!(complete.is_empty());
        assert_eq!(r.stats().bad_check, altered.len() as u64, "{sent:?}");
        let (complete, _) = feed(&mut r, &wire);
        assert_eq!(complete, vec![data.clone()], "{sent:?}");
        accounting_holds(&r.stats());
    }
    // Another key, or the right key under another id: a bad check.
    for other in [
        Integrity::Gmac(KeyRing::single([9; 32])),
        Integrity::Gmac(KeyRing::new((9, Secret::new(KEY_A)), None).unwrap()),
    ] {
        let wire = drain(
            &mut sender(with(other), &data, now),
            now,
            Duration::from_micros(10),
        );
        let mut r = receiver(Integrity::mac(KEY_A));
        feed(&mut r, &wire);
        assert_eq!(r.stats().bad_check, wire.len() as u64);
    }
}

#[test]
fn a_gmac_flag_with_encryption_or_without_a_key_is_malformed() {
    let data = payload(5_000);
    let now = Timestamp::ZERO;
    let wire = drain(
        &mut sender(with(Integrity::Gmac(KeyRing::single(KEY_A))), &data, now),
        now,
        Duration::from_micros(10),
    );
    for flags in [0x0004u16, 0x0006, 0x0007] {
        let mut x = wire[0].clone();
        x[2..4].copy_from_slice(&flags.to_be_bytes());
        let mut r = receiver(Integrity::mac(KEY_A));
        feed(&mut r, &[x]);
        let s = r.stats();
        assert_eq!(s.accepted, 0, "flags {flags:#06x}");
        assert_eq!(s.invalid(), 1, "flags {flags:#06x}: {s:?}");
    }
}

#[test]
fn a_mode_mismatch_is_refused_counted_and_reported_once() {
    let data = payload(20_000);
    let now = Timestamp::ZERO;
    let cases = [
        (
            ring_a(),
            Integrity::mac(KEY_A),
            Mismatch::Encryption {
                datagram_encrypted: true,
            },
        ),
        (
            Integrity::mac(KEY_A),
            ring_a(),
            Mismatch::Encryption {
                datagram_encrypted: false,
            },
        ),
        (
            Integrity::Gmac(KeyRing::single(KEY_A)),
            ring_a(),
            Mismatch::Encryption {
                datagram_encrypted: false,
            },
        ),
        (
            Integrity::Gmac(KeyRing::single(KEY_A)),
            Integrity::Crc32c,
            Mismatch::Integrity {
                datagram_keyed: true,
            },
        ),
        (
            Integrity::Crc32c,
            ring_a(),
            Mismatch::Integrity {
                datagram_keyed: false,
            },
        ),
        (
            ring_a(),
            Integrity::Crc32c,
            Mismatch::Integrity {
                datagram_keyed: true,
            },
        ),
    ];
    for (sent, expected, mismatch) in cases {
        let wire = drain(
            &mut sender(with(sent), &data, now),
            now,
            Duration::from_micros(10),
        );
        let mut r = receiver(expected);
        let (complete, events) = feed(&mut r, &wire);
        assert!(complete.is_empty());
        assert_eq!(events, vec![Event::ConfigMismatch(mismatch)]);
        assert_eq!(r.stats().integrity_mismatch, wire.len() as u64);
        accounting_holds(&r.stats());
    }
}

/// The ring of key A (id 1) and, optionally, key B (id 2).
fn ring(next: bool) -> KeyRing {
    KeyRing::new(
        (1, Secret::new(KEY_A)),
        next.then(|| (2, Secret::new(KEY_B))),
    )
    .unwrap()
}

/// Both keyed modes: the MAC and encryption.
const KEYED: [fn(KeyRing) -> Integrity; 3] =
    [Integrity::Keyed, Integrity::Gmac, Integrity::Encrypted];

#[test]
fn a_key_rollover_in_the_middle_of_a_channel_loses_nothing() {
    for mode in KEYED {
        let data = payload(1_500_000);
        let now = Timestamp::ZERO;
        let config = SenderConfig {
            next_key_after: Some(Duration::from_millis(5)),
            ..with(mode(ring(true)))
        };
        let mut s = sender(config, &data, now);
        assert_eq!(s.key_id(now), Some(1));
        let mut wire = drain(&mut s, now, Duration::from_micros(5));
        assert_eq!(s.key_id(now + Duration::from_millis(5)), Some(2));
        let ids: Vec<u8> = wire
            .iter()
            .map(|d| Packet::new_unchecked(d).key_id())
            .collect();
        let switch = ids
            .iter()
            .position(|&id| id == 2)
            .expect("the sender switched");
        assert!(
            switch > 100 && switch < wire.len() - 100,
            "{switch} of {}",
            wire.len()
        );
        assert!(ids[..switch].iter().all(|&id| id == 1) && ids[switch..].iter().all(|&id| id == 2));
        // Reordered across the switch: old-key datagrams arrive after new ones.
        for i in (switch - 40..switch + 40).step_by(2) {
            wire.swap(i, i + 1);
        }
        wire[switch - 60..switch + 60].reverse();
        let mut r = receiver(mode(ring(true)));
        let (complete, events) = feed(&mut r, &wire);
        assert_eq!(complete, vec![data], "{events:?}");
        let st = r.stats();
        assert_eq!((st.bad_check, st.missing), (0, 0), "{st:?}");
        accounting_holds(&st);
        let per_key = vec![(1, switch as u64), (2, (wire.len() - switch) as u64)];
        assert_eq!(r.key_use(), per_key, "authentic datagrams per key id");
        // A receiver that holds only the old key refuses exactly the new-key ones.
        let mut old_only = receiver(mode(ring(false)));
        feed(&mut old_only, &wire);
        assert_eq!(old_only.stats().bad_check, (ids.len() - switch) as u64);
        assert_eq!(old_only.key_use(), vec![(1, switch as u64)]);
    }
}

#[test]
fn keys_read_again_switch_the_sender_at_once_and_retire_the_old_key_at_the_receiver() {
    for mode in KEYED {
        let data = payload(600_000);
        let now = Timestamp::ZERO;
        // Sender holds A only; the receiver A and B (step 1 of § 4.4).
        let mut s = sender(with(mode(ring(false))), &data, now);
        let mut r = receiver(mode(ring(true)));
        let step = Duration::from_micros(5);
        let mut wire = Vec::new();
        let mut buf = Vec::new();
        let mut t = now;
        while wire.len() < 200 {
            s.handle_timeout(t);
            if let Some(tx) = s.poll_transmit(t, 1, &mut buf) {
                wire.push(buf[..tx.size].to_vec());
            }
            t += step;
        }
        // The sender's key file now says `current 2 B`: SIGHUP.
        let b_only = KeyRing::new((2, Secret::new(KEY_B)), None).unwrap();
        assert_eq!(s.replace_keys(b_only.clone(), t), Some(2));
        let old = wire.len();
        wire.extend(drain(&mut s, t, step));
        assert!(wire[..old]
            .iter()
            .all(|d| Packet::new_unchecked(d).key_id() == 1));
        assert!(wire[old..]
            .iter()
            .all(|d| Packet::new_unchecked(d).key_id() == 2));
        // Everything up to the switch arrives; then the receiver, too, is
        // given `current 2 B` (step 3) and the rest arrives.
        let (mut complete, _) = feed(&mut r, &wire[..old + 50]);
        assert!(r.replace_keys(b_only.clone()));
        let (rest, events) = feed(&mut r, &wire[old + 50..]);
        complete.extend(rest);
        assert_eq!(complete, vec![data.clone()], "{events:?}");
        assert_eq!(r.stats().bad_check, 0);
        // An old-key datagram (a replay, or a sender still on A) no longer
        // opens: its key id is not held.
        let before = r.stats().bad_check;
        feed(&mut r, &wire[..1]);
        assert_eq!(r.stats().bad_check, before + 1);
        assert_eq!(
            r.key_use(),
            vec![(1, old as u64), (2, (wire.len() - old) as u64)]
        );
    }
    // CRC32C has no keys: nothing to replace.
    let mut s = sender(SenderConfig::default(), &payload(10), Timestamp::ZERO);
    assert_eq!(s.replace_keys(ring(false), Timestamp::ZERO), None);
    let mut r = receiver(Integrity::Crc32c);
    assert!(!r.replace_keys(ring(false)));
    assert!(r.key_use().is_empty());
}

#[test]
fn switching_keys_needs_a_next_key() {
    let config = SenderConfig {
        next_key_after: Some(Duration::ZERO),
        ..with(ring_a())
    };
    assert!(Sender::new(config, SessionId(1), Timestamp::ZERO).is_err());
}

#[test]
fn the_sender_stops_before_the_sequence_limit() {
    let now = Timestamp::ZERO;
    let mut s = sender(with(ring_a()), &payload(10_000), now);
    s.set_seq_for_test(SEQ_LIMIT - 3);
    let wire = drain_now(&mut s, now);
    assert_eq!(wire.len(), 3);
    assert_eq!(
        Packet::new_unchecked(&wire[2]).seq(),
        SEQ_LIMIT - 1,
        "the last sequence number used"
    );
    assert!(s.exhausted());
    assert_eq!(s.poll_timeout(), None);
    assert!(s
        .poll_transmit(now + Duration::from_secs(1), 32, &mut Vec::new())
        .is_none());
}

fn drain_now(s: &mut Sender, now: Timestamp) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = s.poll_transmit(now, 1, &mut buf) {
        out.push(buf[..t.size].to_vec());
    }
    out
}
