//! The datagrams on the wire do not depend on how the application cuts its
//! writes: one write of the whole stream, byte by byte, just below, at and
//! above a group, several groups at once, or sizes drawn at random, all give
//! the same datagrams. (Whole groups of one write are encoded straight from
//! the caller's bytes, the rest goes through the channel's pending buffer;
//! this holds both paths to one result.) A buffer of one whole block handed
//! over with `write_block` becomes the block without a copy; mixed with
//! writes, cut by flush timers or not, it gives the same datagrams too; so
//! does a block encoded by its reader (`BlockCoding`, `write_encoded_block`),
//! whose repair symbols go out as they came.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod common;

use common::payload;
use diodon_proto::wire::Integrity;
use diodon_proto::{
    BlockCoding, ChannelMeta, KeyRing, Rate, RepairRatio, Sender, SenderConfig, SessionId,
    Timestamp,
};
use std::time::Duration;

/// How one test cuts the stream: a name and the next write's size.
type Cuts = (&'static str, Box<dyn FnMut() -> usize>);

fn config() -> SenderConfig {
    SenderConfig {
        block_symbols: 8,
        interleave_depth: 2,
        rate: Rate::UNLIMITED,
        ..SenderConfig::default()
    }
}

/// Every datagram of a session that writes `data` in pieces of the sizes
/// `cuts` yields (cycled), finishes, and runs until only beacons are left.
fn wire(data: &[u8], cuts: impl FnMut() -> usize) -> Vec<Vec<u8>> {
    wire_with(data, cuts, false, Duration::ZERO)
}

/// [`wire`], handing pieces of one whole block over with `write_block`
/// when `blocks`, and running the sender for `gap` after each piece (a gap
/// beyond the flush delay makes the timer cut what waits).
fn wire_with(
    data: &[u8],
    cuts: impl FnMut() -> usize,
    blocks: bool,
    gap: Duration,
) -> Vec<Vec<u8>> {
    let hand = if blocks { Hand::Block } else { Hand::Write };
    wire_by(data, cuts, &hand, gap).0
}

/// How a piece of one whole block reaches the sender.
enum Hand {
    /// `write`, as every other piece.
    Write,
    /// `write_block`.
    Block,
    /// Encoded with this coding, then `write_encoded_block` (a piece the
    /// coding refuses goes by `write_block`).
    Encoded(BlockCoding),
}

/// [`wire_with`] for any [`Hand`]; also gives the blocks the sender took
/// with the repair symbols they came with.
fn wire_by(
    data: &[u8],
    mut cuts: impl FnMut() -> usize,
    hand: &Hand,
    gap: Duration,
) -> (Vec<Vec<u8>>, u64) {
    let start = Timestamp::ZERO;
    let mut tx = Sender::new(config(), SessionId(42), start).unwrap();
    let ch = tx.open_channel(ChannelMeta::stream("cuts")).unwrap();
    let mut out = Vec::new();
    let mut now = start;
    let mut at = 0;
    while at < data.len() {
        let n = cuts().clamp(1, data.len() - at);
        let piece = &data[at..at + n];
        let whole = n == tx.config().block_bytes();
        if let (Hand::Encoded(coding), true) = (hand, whole) {
            match coding.encode(piece.to_vec(), Vec::new()) {
                Ok(block) => {
                    let back = tx.write_encoded_block(now, ch, block).unwrap();
                    assert!(back.is_none(), "the buffer holds the whole test stream");
                }
                Err(data) => {
                    let back = tx.write_block(now, ch, data).unwrap();
                    assert!(back.is_none(), "the buffer holds the whole test stream");
                }
            }
        } else if matches!(hand, Hand::Block) && whole {
            let back = tx.write_block(now, ch, piece.to_vec()).unwrap();
            assert!(back.is_none(), "the buffer holds the whole test stream");
        } else {
            let took = tx.write(now, ch, piece).unwrap();
            assert_eq!(took, n, "the buffer holds the whole test stream");
        }
        at += n;
        if !gap.is_zero() {
            now = run(&mut tx, now, Some(now + gap), &mut out);
        }
    }
    tx.finish(now, ch).unwrap();
    run(&mut tx, now, None, &mut out);
    (out, tx.stats().blocks_encoded_by_source)
}

/// Sends until `until` (or, with `None`, until only beacons are left),
/// collecting the datagrams; returns the time reached.
fn run(
    tx: &mut Sender,
    mut now: Timestamp,
    until: Option<Timestamp>,
    out: &mut Vec<Vec<u8>>,
) -> Timestamp {
    let mut buf = Vec::new();
    for _ in 0..100_000 {
        while let Some(t) = tx.poll_transmit(now, 16, &mut buf) {
            out.extend(buf[..t.size].chunks(t.segment_len()).map(<[u8]>::to_vec));
        }
        if until.is_none() && tx.is_idle() {
            return now;
        }
        let mut next = tx
            .poll_timeout()
            .unwrap_or(now + Duration::from_millis(1))
            .max(now + Duration::from_micros(1));
        if let Some(end) = until {
            if now >= end {
                return now;
            }
            next = next.min(end);
        }
        now = next;
        tx.handle_timeout(now);
    }
    panic!("the sender never became idle");
}

#[test]
fn the_wire_is_the_same_however_the_writes_are_cut() {
    let group = config().block_bytes() * usize::from(config().interleave_depth);
    let data = payload(7, 5 * group + 123);
    let whole = wire(&data, || usize::MAX);
    assert!(whole.len() > 5 * 2 * 8, "{} datagrams", whole.len());
    let patterns: Vec<Cuts> = vec![
        ("1 byte", Box::new(|| 1)),
        ("group - 1", Box::new(move || group - 1)),
        ("group", Box::new(move || group)),
        ("group + 1", Box::new(move || group + 1)),
        ("3 groups + 7", Box::new(move || 3 * group + 7)),
        ("block / 3", Box::new(move || group / 6)),
        ("random", {
            let mut x = 7u64;
            Box::new(move || {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (x >> 33) as usize % (2 * group + 2)
            })
        }),
    ];
    for (name, cuts) in patterns {
        let got = wire(&data, cuts);
        assert_eq!(got.len(), whole.len(), "{name}: datagram count");
        for (i, (a, b)) in got.iter().zip(&whole).enumerate() {
            assert!(a == b, "{name}: datagram {i} differs");
        }
    }
}

#[test]
fn whole_blocks_handed_over_give_the_same_wire_as_their_bytes() {
    let block = config().block_bytes();
    let group = block * usize::from(config().interleave_depth);
    let data = payload(11, 5 * group + 3 * block + 123);
    let whole = wire(&data, || usize::MAX);
    let patterns: Vec<Cuts> = vec![
        ("every piece a block", Box::new(move || block)),
        ("a byte, then blocks", {
            let mut first = true;
            Box::new(move || if std::mem::take(&mut first) { 1 } else { block })
        }),
        ("blocks with a byte between every third", {
            let mut i = 0u32;
            Box::new(move || {
                i += 1;
                if i.is_multiple_of(4) {
                    1
                } else {
                    block
                }
            })
        }),
        ("three blocks and a half-block", {
            let mut i = 0u32;
            Box::new(move || {
                i += 1;
                if i.is_multiple_of(4) {
                    block / 2
                } else {
                    block
                }
            })
        }),
    ];
    for (name, cuts) in patterns {
        let got = wire_with(&data, cuts, true, Duration::ZERO);
        assert_eq!(got.len(), whole.len(), "{name}: datagram count");
        for (i, (a, b)) in got.iter().zip(&whole).enumerate() {
            assert!(a == b, "{name}: datagram {i} differs");
        }
    }
}

#[test]
fn a_flush_timer_cuts_blocks_waiting_for_their_group_like_written_bytes() {
    let block = config().block_bytes();
    let data = payload(13, 7 * block + 99);
    // 30 ms after each piece: the 10 ms flush delay cuts every block (and
    // the half group it waits in) on its own.
    let gap = Duration::from_millis(30);
    let by_bytes = wire_with(&data, move || block, false, gap);
    let by_blocks = wire_with(&data, move || block, true, gap);
    assert_eq!(by_blocks.len(), by_bytes.len(), "datagram count");
    for (i, (a, b)) in by_blocks.iter().zip(&by_bytes).enumerate() {
        assert!(a == b, "datagram {i} differs");
    }
    // The timer really cut: groups of one block, not the two-block groups
    // of one write.
    let whole = wire(&data, || usize::MAX);
    assert!(by_bytes != whole, "the flush timer cut groups of its own");
}

#[test]
fn blocks_encoded_by_their_reader_give_the_same_wire_as_their_bytes() {
    let block = config().block_bytes();
    let group = block * usize::from(config().interleave_depth);
    let data = payload(17, 5 * group + 3 * block + 123);
    let whole = wire(&data, || usize::MAX);
    let ours = config().block_coding(None);
    // A coding of other blocks (more repair): the sender encodes them
    // again, with its own code.
    let other = SenderConfig {
        repair: RepairRatio::percent(30).unwrap(),
        ..config()
    }
    .block_coding(None);
    let cases = [
        ("every piece a block", Duration::ZERO, false),
        (
            "every piece a block, each cut by the flush timer",
            Duration::from_millis(30),
            false,
        ),
        ("a coding of other blocks", Duration::ZERO, true),
    ];
    for (name, gap, foreign) in cases {
        let coding = if foreign { &other } else { &ours };
        let expected = if gap.is_zero() {
            whole.clone()
        } else {
            wire_with(&data, move || block, false, gap)
        };
        let (got, encoded_by_source) =
            wire_by(&data, move || block, &Hand::Encoded(coding.clone()), gap);
        assert_eq!(got.len(), expected.len(), "{name}: datagram count");
        for (i, (a, b)) in got.iter().zip(&expected).enumerate() {
            assert!(a == b, "{name}: datagram {i} differs");
        }
        // The last whole block waits for its group; the tail's write
        // takes it back into the bytes (encoded again), unless the flush
        // timer cut it first.
        let whole_groups = (data.len() / group * group / block) as u64;
        let expected = match (foreign, gap.is_zero()) {
            (true, _) => 0,
            (false, true) => whole_groups,
            (false, false) => (data.len() / block) as u64,
        };
        assert_eq!(
            encoded_by_source, expected,
            "{name}: blocks sent with the repair they came with"
        );
    }
}

#[test]
fn an_encoded_block_without_room_comes_back_whole_and_goes_in_later() {
    let block = config().block_bytes();
    let small = SenderConfig {
        buffer_limit: 2 * block * usize::from(config().interleave_depth),
        ..config()
    };
    let coding = small.block_coding(None);
    let data = payload(19, 9 * block);
    let start = Timestamp::ZERO;
    let mut tx = Sender::new(small, SessionId(42), start).unwrap();
    let ch = tx.open_channel(ChannelMeta::stream("cuts")).unwrap();
    let mut out = Vec::new();
    let mut now = start;
    let mut refused = 0;
    for piece in data.chunks(block) {
        let mut next = coding.encode(piece.to_vec(), Vec::new()).unwrap();
        loop {
            let repair = next.repair().to_vec();
            match tx.write_encoded_block(now, ch, next).unwrap() {
                None => break,
                Some(back) => {
                    // Given back as it was handed over; room comes with sending.
                    refused += 1;
                    assert_eq!(back.data(), piece);
                    assert_eq!(back.repair(), &repair[..]);
                    next = back;
                    now = run(&mut tx, now, Some(now + Duration::from_millis(1)), &mut out);
                }
            }
        }
    }
    tx.finish(now, ch).unwrap();
    run(&mut tx, now, None, &mut out);
    assert!(refused > 0, "the small buffer pushed back");
    // Every block went out with the repair it came with (the ninth, alone
    // in its group at `finish`, too).
    assert_eq!(tx.stats().blocks_encoded_by_source, 9);
    // The same datagrams as one write of the bytes, but for their
    // timestamps (time moved on here).
    let expected = wire(&data, || usize::MAX);
    assert_eq!(out.len(), expected.len(), "datagram count");
}

#[test]
fn a_transmit_buffer_full_of_old_bytes_gives_the_same_datagrams() {
    // The sender does not zero the caller's buffer: every byte of every
    // datagram (beacons, opens, symbols, the short tail, trailers) must be
    // written by the sender itself.
    let wire_using = |integrity: &Integrity, dirty: bool| {
        let start = Timestamp::ZERO;
        let config = SenderConfig {
            integrity: integrity.clone(),
            ..config()
        };
        let mut tx = Sender::new(config, SessionId(42), start).unwrap();
        for (i, len) in [0usize, 1, 777, 3 * tx.config().block_bytes() + 5]
            .iter()
            .enumerate()
        {
            let ch = tx
                .open_channel(ChannelMeta::stream(format!("c{i}")))
                .unwrap();
            let data = payload(i as u64, *len);
            assert_eq!(tx.write(start, ch, &data).unwrap(), *len);
            tx.finish(start, ch).unwrap();
        }
        let mut out = Vec::new();
        let mut now = start;
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            loop {
                if dirty {
                    buf.clear();
                    buf.resize(70_000, 0xEE);
                } else {
                    buf = Vec::new();
                }
                let Some(t) = tx.poll_transmit(now, 16, &mut buf) else {
                    break;
                };
                assert_eq!(buf.len(), t.size, "the buffer holds exactly the batch");
                out.extend(buf.chunks(t.segment_len()).map(<[u8]>::to_vec));
            }
            if tx.is_idle() {
                return out;
            }
            now = tx
                .poll_timeout()
                .unwrap_or(now + Duration::from_millis(1))
                .max(now + Duration::from_micros(1));
            tx.handle_timeout(now);
        }
        panic!("the sender never became idle");
    };
    for integrity in [
        Integrity::Crc32c,
        Integrity::Keyed(KeyRing::single([7; 32])),
        Integrity::Encrypted(KeyRing::single([9; 32])),
    ] {
        let clean = wire_using(&integrity, false);
        let dirty = wire_using(&integrity, true);
        assert_eq!(clean.len(), dirty.len(), "{integrity:?}: datagram count");
        for (i, (a, b)) in clean.iter().zip(&dirty).enumerate() {
            assert!(
                a == b,
                "{integrity:?}: datagram {i} differs: old bytes leaked into it"
            );
        }
    }
}

/// Every datagram of a session whose writer hashes `data` itself
/// (`open_channel_digested`), hands it over block by block with a byte
/// write at the end, and finishes with `digest` (its true digest when
/// `None`).
fn wire_digested(data: &[u8], digest: Option<[u8; 32]>) -> Vec<Vec<u8>> {
    let start = Timestamp::ZERO;
    let mut tx = Sender::new(config(), SessionId(42), start).unwrap();
    let ch = tx
        .open_channel_digested(ChannelMeta::stream("cuts"))
        .unwrap();
    let block = tx.config().block_bytes();
    let mut hasher = blake3::Hasher::new();
    for piece in data.chunks(block) {
        hasher.update(piece);
        if piece.len() == block {
            assert!(tx.write_block(start, ch, piece.to_vec()).unwrap().is_none());
        } else {
            assert_eq!(tx.write(start, ch, piece).unwrap(), piece.len());
        }
    }
    assert!(
        matches!(
            tx.finish(start, ch),
            Err(diodon_proto::SendError::DigestMissing(_))
        ),
        "a channel whose writer hashes cannot finish without the digest"
    );
    let digest = digest.unwrap_or(*hasher.finalize().as_bytes());
    tx.finish_digested(start, ch, digest).unwrap();
    let mut out = Vec::new();
    run(&mut tx, start, None, &mut out);
    out
}

#[test]
fn a_digest_given_by_the_writer_gives_the_same_wire_as_the_cores_own() {
    let block = config().block_bytes();
    let group = block * usize::from(config().interleave_depth);
    let data = payload(17, 3 * group + 2 * block + 77);
    let whole = wire(&data, || usize::MAX);
    let given = wire_digested(&data, None);
    assert_eq!(given.len(), whole.len(), "datagram count");
    for (i, (a, b)) in given.iter().zip(&whole).enumerate() {
        assert!(a == b, "datagram {i} differs");
    }
    // The core that hashes its own bytes takes no digest at finish.
    let mut tx = Sender::new(config(), SessionId(42), Timestamp::ZERO).unwrap();
    let ch = tx.open_channel(ChannelMeta::stream("own")).unwrap();
    assert!(matches!(
        tx.finish_digested(Timestamp::ZERO, ch, [0; 32]),
        Err(diodon_proto::SendError::DigestNotTaken(_))
    ));
    // Records are framed by the core: their writer cannot hash them.
    let given = tx
        .open_channel_digested(ChannelMeta::stream("records"))
        .unwrap();
    assert!(matches!(
        tx.write_record(Timestamp::ZERO, given, b"a record"),
        Err(diodon_proto::SendError::RecordsNeedOwnDigest(_))
    ));
}

#[test]
fn a_wrong_digest_from_the_writer_fails_the_channel_at_the_receiver() {
    let block = config().block_bytes();
    let data = payload(19, 5 * block + 5);
    let mut wrong = *blake3::hash(&data).as_bytes();
    wrong[0] ^= 1;
    let mut rx =
        diodon_proto::Receiver::new(diodon_proto::ReceiverConfig::default(), Timestamp::ZERO);
    for d in wire_digested(&data, Some(wrong)) {
        rx.handle_datagram(Timestamp::ZERO, &d);
    }
    let mut verdicts = Vec::new();
    while let Some(ev) = rx.poll_event() {
        match ev {
            diodon_proto::Event::ChannelComplete { .. } => verdicts.push("complete".to_owned()),
            diodon_proto::Event::ChannelFailed { reason, .. } => verdicts.push(reason.to_string()),
            _ => {}
        }
    }
    assert_eq!(verdicts, ["digest mismatch"]);
}

#[test]
fn blocks_that_went_out_come_back_as_spare_buffers_for_the_next_reads() {
    let block = config().block_bytes();
    let data = payload(23, 4 * block);
    let mut tx = Sender::new(config(), SessionId(42), Timestamp::ZERO).unwrap();
    let ch = tx.open_channel(ChannelMeta::stream("spare")).unwrap();
    assert!(tx.spare_block().is_none(), "nothing went out yet");
    let mut handed = Vec::new();
    for piece in data.chunks(block) {
        let buf = piece.to_vec();
        handed.push(buf.as_ptr());
        assert!(tx.write_block(Timestamp::ZERO, ch, buf).unwrap().is_none());
    }
    tx.finish(Timestamp::ZERO, ch).unwrap();
    let mut out = Vec::new();
    run(&mut tx, Timestamp::ZERO, None, &mut out);
    let mut spare = Vec::new();
    while let Some(b) = tx.spare_block() {
        assert!(b.is_empty(), "handed out empty");
        assert!(b.capacity() >= block, "room for a whole block");
        spare.push(b.as_ptr());
    }
    assert!(
        handed.iter().all(|p| spare.contains(p)),
        "every block handed over came back: {} of {}",
        handed.iter().filter(|p| spare.contains(p)).count(),
        handed.len()
    );
}
