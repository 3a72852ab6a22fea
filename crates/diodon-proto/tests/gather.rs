//! The sender's gathered batches ([`Sender::poll_transmit_gather`]): a
//! data or repair datagram is three pieces (header and symbol sub-header,
//! the payload where its block holds it, the tag), which joined verify and
//! carry that payload; a beacon, open or trailer, and every datagram of the
//! encrypted mode, is one piece. Fed the joined pieces, a receiver verifies
//! every channel in each integrity mode, also channels whose last group
//! ended in the middle of a batch. The driver's cache hint
//! ([`Sender::use_prefetch`]) is handed, after each symbol, the payload of
//! the symbol that goes next.
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::crypto::CipherCache;
use diodon_proto::wire::{open_datagram, Body, ChannelMeta, Integrity, HEADER_LEN};
use diodon_proto::wire::{CRC_TAG_LEN, MAC_TAG_LEN, SYMBOL_HEADER_LEN};
use diodon_proto::ChannelId;
use diodon_proto::{
    Event, KeyRing, Receiver, ReceiverConfig, Secret, Sender, SenderConfig, SessionId, Timestamp,
};
use std::collections::HashMap;
use std::time::Duration;

fn payload(n: usize, seed: usize) -> Vec<u8> {
    (0..n).map(|i| ((i + seed) * 31 % 251) as u8).collect()
}

/// One channel per file, each written whole and finished at `now`.
fn queue_files(s: &mut Sender, now: Timestamp, files: &[Vec<u8>]) {
    for (i, data) in files.iter().enumerate() {
        let ch = s
            .open_channel(ChannelMeta::file(format!("f{i}"), data.len() as u64))
            .unwrap();
        assert_eq!(s.write(now, ch, data).unwrap(), data.len());
        s.finish(now, ch).unwrap();
    }
}

/// Sends a 300 kB channel and 20 small ones in batches of up to 64
/// datagrams; checks every piece; returns what the receiver verified and
/// how many symbols travelled as three pieces.
fn transfer(integrity: &Integrity) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64) {
    let mut now = Timestamp::ZERO;
    let config = SenderConfig {
        integrity: integrity.clone(),
        ..SenderConfig::default()
    };
    let mut s = Sender::new(config, SessionId(0x6A7E), now).unwrap();
    let mut files = vec![payload(300_000, 0)];
    files.extend((1..=20).map(|i| payload(100 * i + 7, i)));
    queue_files(&mut s, now, &files);
    let mut r = Receiver::new(
        ReceiverConfig {
            integrity: integrity.clone(),
            ..ReceiverConfig::default()
        },
        Timestamp::ZERO,
    );
    let (mut buf, mut plain, mut ciphers) = (Vec::new(), Vec::new(), CipherCache::new(None));
    if let Some(ring) = integrity.key_ring() {
        ciphers = CipherCache::new(Some(ring.clone()));
    }
    let (mut complete, mut gathered) = (Vec::new(), 0);
    let mut bytes: HashMap<ChannelId, Vec<u8>> = HashMap::new();
    let end = now + Duration::from_secs(5);
    while now < end {
        s.handle_timeout(now);
        let mut parts = Vec::new();
        let Some(t) = s.poll_transmit_gather(now, 64, &mut buf, &mut parts) else {
            now += Duration::from_millis(1);
            continue;
        };
        assert_eq!(parts.len(), 3 * t.datagram_count());
        let mut sizes = 0;
        let mut datagrams = Vec::new();
        for (i, p) in parts.chunks(3).enumerate() {
            let joined = p.concat();
            if i + 1 < t.datagram_count() {
                assert_eq!(joined.len(), t.segment_len());
            }
            sizes += joined.len();
            let repr = open_datagram(&joined, integrity, &mut ciphers, &mut plain)
                .unwrap_or_else(|e| panic!("datagram {i} of a batch: {e}"));
            match &repr.body {
                Body::Data(sym) | Body::Repair(sym) if !integrity.is_encrypted() => {
                    assert_eq!(p[0].len(), HEADER_LEN + SYMBOL_HEADER_LEN);
                    assert_eq!(p[1], sym.payload, "the payload piece is the symbol's");
                    let tag = if integrity.is_keyed() {
                        MAC_TAG_LEN
                    } else {
                        CRC_TAG_LEN
                    };
                    assert_eq!(p[2].len(), tag);
                    gathered += 1;
                }
                _ => assert!(p[1].is_empty() && p[2].is_empty(), "one piece"),
            }
            datagrams.push(joined);
        }
        assert_eq!(sizes, t.size);
        drop(parts);
        for d in &datagrams {
            r.handle_datagram(now, d);
            while let Some(e) = r.poll_event() {
                match e {
                    Event::ChannelData { channel, data, .. } => {
                        bytes.entry(channel).or_default().extend_from_slice(&data);
                    }
                    Event::ChannelComplete { channel, .. } => {
                        complete.push(bytes.remove(&channel).unwrap_or_default());
                    }
                    _ => {}
                }
            }
        }
        if complete.len() == files.len() {
            break;
        }
    }
    complete.sort();
    files.sort();
    (complete, files, gathered)
}

#[test]
fn crc_batches_send_payloads_from_their_blocks() {
    let (complete, files, gathered) = transfer(&Integrity::Crc32c);
    assert!(complete == files, "the channels differ from what was sent");
    assert!(gathered > 200, "{gathered} symbols gathered");
}

#[test]
fn keyed_batches_send_payloads_from_their_blocks() {
    let (complete, files, gathered) = transfer(&Integrity::mac([7; 32]));
    assert!(complete == files, "the channels differ from what was sent");
    assert!(gathered > 200, "{gathered} symbols gathered");
}

#[test]
fn gmac_batches_send_payloads_from_their_blocks() {
    let ring = KeyRing::new((3, Secret::new([5; 32])), None).unwrap();
    let (complete, files, gathered) = transfer(&Integrity::Gmac(ring));
    assert!(complete == files, "the channels differ from what was sent");
    assert!(gathered > 200, "{gathered} symbols gathered");
}

#[test]
fn encrypted_batches_are_whole_datagrams() {
    let ring = KeyRing::new((1, Secret::new([9; 32])), None).unwrap();
    let (complete, files, gathered) = transfer(&Integrity::Encrypted(ring));
    assert!(complete == files, "the channels differ from what was sent");
    assert_eq!(gathered, 0);
}

thread_local! {
    /// Address and length of every slice the sender asked to prefetch.
    static PREFETCHED: std::cell::RefCell<Vec<(usize, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn record_prefetch(bytes: &[u8]) {
    PREFETCHED.with(|p| p.borrow_mut().push((bytes.as_ptr() as usize, bytes.len())));
}

#[test]
fn the_prefetch_hint_names_the_payload_that_goes_next() {
    let mut now = Timestamp::ZERO;
    let mut s = Sender::new(SenderConfig::default(), SessionId(0xCAC4E), now).unwrap();
    s.use_prefetch(record_prefetch);
    // One channel of several groups and 20 small ones, interleaved with
    // each other and with their opens, trailers and beacons; all queued
    // before the first batch, so a symbol always follows until the last.
    let mut files = vec![payload(3_000_000, 0)];
    files.extend((1..=20).map(|i| payload(100 * i + 7, i)));
    queue_files(&mut s, now, &files);
    let (mut buf, mut sent) = (Vec::new(), Vec::new());
    let end = now + Duration::from_secs(5);
    while now < end && !s.is_idle() {
        s.handle_timeout(now);
        let mut parts = Vec::new();
        if s.poll_transmit_gather(now, 64, &mut buf, &mut parts)
            .is_none()
        {
            now += Duration::from_millis(1);
            continue;
        }
        sent.extend(
            parts
                .chunks(3)
                .filter(|p| !p[1].is_empty())
                .map(|p| (p[1].as_ptr() as usize, p[1].len())),
        );
    }
    let prefetched = PREFETCHED.with(std::cell::RefCell::take);
    assert!(sent.len() > 2_000, "{} symbols sent", sent.len());
    assert_eq!(
        prefetched.len(),
        sent.len() - 1,
        "one hint per symbol but the last"
    );
    for (i, (hint, next)) in prefetched.iter().zip(&sent[1..]).enumerate() {
        assert_eq!(
            hint,
            next,
            "hint {i} is not the payload of symbol {}",
            i + 1
        );
    }
}
