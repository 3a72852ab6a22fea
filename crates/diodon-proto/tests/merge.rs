//! Merging a sync file's blocks across carousel passes (PROTOCOL.md
//! § 5.3.2, § 7.7): a block-stable channel cuts the same blocks in every
//! pass; a lost block is a gap, the blocks after it are delivered at their
//! offsets and listed in `ChannelPartial`; a later pass told which blocks
//! are held (`hold_blocks`) needs only the rest and ends `ChannelAssembled`.
//!
//! ```text
//!  pass 1: Sender ─► drop every symbol of block 3 ─► Receiver ─► blocks 0-2, 4-9 at n·B
//!                                                      └► ChannelPartial {0-2,4-9}, Failed
//!  pass 2: Sender ─► everything ─► new Receiver + hold_blocks {0-2,4-9} ─► block 3 only
//!                                                      └► ChannelAssembled
//! ```
#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use diodon_proto::wire::{parse_datagram, Body};
use diodon_proto::{
    BlockSet, ChannelId, ChannelMeta, Event, FailReason, HoldError, Integrity, Rate, Receiver,
    ReceiverConfig, RepairRatio, Sender, SenderConfig, SessionId, SymbolSize, SyncInfo, Timestamp,
};
use std::time::Duration;

const S: usize = 128;

fn sender(session: u64, block_symbols: u16, now: Timestamp) -> Sender {
    let cfg = SenderConfig {
        symbol_size: SymbolSize::new(S).unwrap(),
        block_symbols,
        repair: RepairRatio::percent(25).unwrap(),
        interleave_depth: 2,
        rate: Rate::UNLIMITED,
        buffer_limit: 1 << 20,
        flush_delay: Duration::from_millis(5),
        ..SenderConfig::default()
    };
    Sender::new(cfg, SessionId(session), now).unwrap()
}

fn file(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn sync_meta(len: usize, pass: u16) -> ChannelMeta {
    ChannelMeta {
        sync: Some(SyncInfo {
            first_seen_unix_ms: 1,
            pass,
            digest: (pass > 1).then(|| *blake3::hash(&file(len)).as_bytes()),
            block_bytes: 0,
        }),
        ..ChannelMeta::file("big.bin", len as u64)
    }
}

/// What one pass delivered: the file as written at the events' offsets,
/// which blocks' offsets were written, and every event in order.
struct Pass {
    image: Vec<u8>,
    offsets: Vec<u64>,
    events: Vec<Event>,
}

/// Sends `data` as one channel in slow pieces (the reader stalls longer
/// than the flush delay mid-file), drops every symbol of a block
/// `lost(block)` says, and calls `on_open` when the receiver opens it.
fn pass(
    tx: &mut Sender,
    rx: &mut Receiver,
    meta: ChannelMeta,
    data: &[u8],
    lost: impl Fn(u64) -> bool,
    mut on_open: impl FnMut(&mut Receiver, ChannelId),
    mut now: Timestamp,
) -> Pass {
    let ch = tx.open_channel(meta).unwrap();
    let mut out = Pass {
        image: vec![0; data.len()],
        offsets: Vec::new(),
        events: Vec::new(),
    };
    let mut written = 0;
    let mut buf = Vec::new();
    let end = now + Duration::from_secs(20);
    let mut done = false;
    while !done && now < end {
        if written < data.len() {
            let piece = (written + 100).min(data.len());
            written += tx.write(now, ch, &data[written..piece]).unwrap();
            if written == data.len() {
                tx.finish(now, ch).unwrap();
            }
        }
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now, 32, &mut buf) {
            let seg = t.segment_size.unwrap_or(t.size);
            for d in buf[..t.size].chunks(seg) {
                let block = match parse_datagram(d, &Integrity::Crc32c).unwrap().body {
                    Body::Data(s) | Body::Repair(s) => Some(s.block),
                    _ => None,
                };
                if !block.is_some_and(&lost) {
                    rx.handle_datagram(now, d);
                }
            }
        }
        rx.handle_timeout(now);
        while let Some(ev) = rx.poll_event() {
            match &ev {
                Event::ChannelOpened { channel, .. } => on_open(rx, *channel),
                Event::ChannelData { offset, data, .. } => {
                    let at = *offset as usize;
                    out.image[at..at + data.len()].copy_from_slice(data);
                    out.offsets.push(*offset);
                }
                Event::ChannelComplete { .. }
                | Event::ChannelFailed { .. }
                | Event::ChannelAssembled { .. } => done = true,
                _ => {}
            }
            out.events.push(ev);
        }
        // A stall of twice the flush delay between pieces.
        now += Duration::from_millis(10);
    }
    out
}

/// Pass 1 loses block 3 of a 10-block file: blocks 4.. are still
/// delivered at `n·B` and the partial verdict lists every block but 3.
fn first_pass(len: usize) -> (Pass, BlockSet) {
    let now = Timestamp::from_millis(1);
    let mut tx = sender(11, 4, now);
    let mut rx = Receiver::new(ReceiverConfig::default(), now);
    let data = file(len);
    let p = pass(
        &mut tx,
        &mut rx,
        sync_meta(len, 1),
        &data,
        |b| b == 3,
        |_, _| {},
        now,
    );
    let partial = p
        .events
        .iter()
        .position(|e| matches!(e, Event::ChannelPartial { .. }));
    let partial = partial.expect("a ChannelPartial before the failure");
    let Event::ChannelPartial {
        held,
        digest,
        len: l,
        ..
    } = p.events[partial].clone()
    else {
        unreachable!()
    };
    assert_eq!(
        p.events.get(partial + 1),
        Some(&Event::ChannelFailed {
            channel: ChannelId(1),
            reason: FailReason::BlockLost { block: 3, count: 1 }
        }),
        "the failure follows the partial verdict"
    );
    assert_eq!(digest, *blake3::hash(&data).as_bytes());
    assert_eq!(l, len as u64);
    (p, held)
}

#[test]
fn a_lost_block_of_a_sync_file_is_a_gap_and_the_rest_is_listed() {
    let len = 10 * 4 * S - 17;
    let block = (4 * S) as u64;
    let data = file(len);
    let (p, held) = first_pass(len);
    assert_eq!(held.block_bytes() as u64, block);
    assert_eq!(held.total(), 10);
    assert_eq!(held.missing().collect::<Vec<_>>(), vec![3]);
    // Every block but 3, each at block × B, each (but the last) a full
    // block although the reader stalled past the flush delay mid-file.
    let expected: Vec<u64> = (0..10).filter(|b| *b != 3).map(|b| b * block).collect();
    assert_eq!(p.offsets, expected);
    for b in held.iter() {
        let r = (b * block) as usize..(((b + 1) * block) as usize).min(len);
        assert_eq!(p.image[r.clone()], data[r], "block {b}");
    }
}

#[test]
fn a_second_pass_told_the_held_blocks_needs_only_the_missing_one() {
    let len = 10 * 4 * S - 17;
    let data = file(len);
    let (p1, held) = first_pass(len);
    // A receiver restarted between the passes: only the held set and the
    // bytes (kept by the application) survive.
    let now = Timestamp::from_millis(50_000);
    let mut tx = sender(22, 4, now);
    let mut rx = Receiver::new(ReceiverConfig::default(), now);
    let mut marked = None;
    let p2 = pass(
        &mut tx,
        &mut rx,
        sync_meta(len, 2),
        &data,
        |_| false,
        |rx, ch| marked = Some(rx.hold_blocks(ch, &held)),
        now,
    );
    assert_eq!(marked, Some(Ok(9)));
    assert_eq!(p2.offsets, vec![3 * 4 * S as u64], "only block 3 delivered");
    assert_eq!(
        p2.events.last(),
        Some(&Event::ChannelAssembled {
            channel: ChannelId(1),
            bytes: len as u64,
            digest: *blake3::hash(&data).as_bytes(),
        })
    );
    let mut image = p1.image;
    let r = 3 * 4 * S..4 * 4 * S;
    image[r.clone()].copy_from_slice(&p2.image[r]);
    assert_eq!(image, data, "the two passes together are the file");
    let s = rx.stats();
    assert_eq!(s.blocks_held, 9);
    assert_eq!(s.blocks_delivered, 1);
    assert_eq!(s.channels_assembled, 1);
    assert_eq!(s.channels_complete, 0);
    assert!(s.late > 0, "the held blocks' symbols count as late");
}

#[test]
fn another_block_size_refuses_the_merge() {
    let len = 10 * 4 * S - 17;
    let data = file(len);
    let (_, held) = first_pass(len);
    let now = Timestamp::from_millis(50_000);
    // Pass 2 cuts blocks of 8 symbols: no merge, an ordinary transfer.
    let mut tx = sender(33, 8, now);
    let mut rx = Receiver::new(ReceiverConfig::default(), now);
    let mut answer = None;
    let p2 = pass(
        &mut tx,
        &mut rx,
        sync_meta(len, 2),
        &data,
        |_| false,
        |rx, ch| answer = Some(rx.hold_blocks(ch, &held)),
        now,
    );
    assert_eq!(
        answer,
        Some(Err(HoldError::Geometry {
            held: (4 * S) as u32,
            announced: (8 * S) as u32,
        }))
    );
    assert_eq!(p2.image, data);
    assert!(matches!(
        p2.events.last(),
        Some(Event::ChannelComplete { bytes, .. }) if *bytes == len as u64
    ));
    assert_eq!(rx.stats().blocks_held, 0);
}

#[test]
fn only_sync_channels_take_held_blocks() {
    let now = Timestamp::from_millis(1);
    let mut tx = sender(44, 4, now);
    let mut rx = Receiver::new(ReceiverConfig::default(), now);
    let data = file(1000);
    let held = BlockSet::new((4 * S) as u32, 4).unwrap();
    let mut answer = None;
    let p = pass(
        &mut tx,
        &mut rx,
        ChannelMeta::file("plain.bin", 1000),
        &data,
        |_| false,
        |rx, ch| answer = Some(rx.hold_blocks(ch, &held)),
        now,
    );
    assert_eq!(answer, Some(Err(HoldError::NotBlockStable(ChannelId(1)))));
    assert!(matches!(
        p.events.last(),
        Some(Event::ChannelComplete { .. })
    ));
    assert_eq!(
        rx.hold_blocks(ChannelId(1), &held),
        Err(HoldError::NotOpen(ChannelId(1)))
    );
}
