//! Aligned record channels (the IP tunnel's packets): records never cross a
//! block, so a lost block takes only its own records; the receiver steps
//! over it with a `ChannelGap` and delivers everything after it.
//!
//! ```text
//!  write_record × N ─► Sender (k = 4, S = 64: 256-byte blocks) ─► seeded loss ─► Receiver
//!                                                                  ─► BlockRecords per ChannelData
//! ```
#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use diodon_proto::records::{BlockRecords, RECORD_HEADER};
use diodon_proto::{
    ChannelMeta, Event, FailReason, Rate, Receiver, ReceiverConfig, RepairRatio, SendError, Sender,
    SenderConfig, SessionId, SymbolSize, Timestamp,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

const BLOCK: usize = 4 * 64;

struct Run {
    delivered: Vec<Vec<u8>>,
    gaps: u64,
    gap_events: u64,
    verdict: Option<Result<u64, FailReason>>,
    blocks_lost: u64,
    padding: u64,
}

/// A record whose bytes say which record it is.
fn record(i: u32, len: usize) -> Vec<u8> {
    let mut r = i.to_be_bytes().to_vec();
    r.extend((0..len.saturating_sub(4)).map(|j| (i as usize * 31 + j) as u8));
    r.truncate(len.max(4));
    r
}

fn transfer(seed: u64, records: &[Vec<u8>], loss: f64, repair: u32, aligned: bool) -> Run {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let scfg = SenderConfig {
        symbol_size: SymbolSize::new(64).unwrap(),
        block_symbols: 4,
        repair: RepairRatio::percent(repair).unwrap(),
        interleave_depth: 2,
        rate: Rate::UNLIMITED,
        buffer_limit: 8 * BLOCK,
        flush_delay: Duration::from_millis(5),
        ..SenderConfig::default()
    };
    let mut now = Timestamp::from_millis(1);
    let mut tx = Sender::new(scfg, SessionId(seed | 1), now).unwrap();
    let mut rx = Receiver::new(ReceiverConfig::default(), now);
    let meta = if aligned {
        ChannelMeta::packets("tun")
    } else {
        ChannelMeta {
            kind: diodon_proto::ChannelKind::Datagrams,
            ..ChannelMeta::stream("udp")
        }
    };
    let ch = tx.open_channel(meta).unwrap();
    let mut next = 0;
    let mut finished = false;
    let mut buf = Vec::new();
    let mut run = Run {
        delivered: Vec::new(),
        gaps: 0,
        gap_events: 0,
        verdict: None,
        blocks_lost: 0,
        padding: 0,
    };
    let mut stream = Vec::new();
    let end = now + Duration::from_secs(30);
    while run.verdict.is_none() && now < end {
        // A trickle: a few records per millisecond, so both full blocks and
        // flushed short blocks occur.
        for _ in 0..rng.random_range(0..6) {
            if next < records.len() && tx.write_record(now, ch, &records[next]).unwrap() {
                next += 1;
            }
        }
        if next == records.len() && !finished {
            tx.finish(now, ch).unwrap();
            finished = true;
        }
        tx.handle_timeout(now);
        while let Some(t) = tx.poll_transmit(now, 32, &mut buf) {
            let seg = t.segment_size.unwrap_or(t.size);
            for d in buf[..t.size].chunks(seg) {
                if !rng.random_bool(loss) {
                    rx.handle_datagram(now, d);
                }
            }
        }
        rx.handle_timeout(now);
        while let Some(ev) = rx.poll_event() {
            match ev {
                Event::ChannelData { data, .. } => {
                    if aligned {
                        assert!(data.len() <= BLOCK, "seed {seed}: a delivery is one block");
                        for r in BlockRecords::new(&data) {
                            run.delivered.push(r.unwrap().to_vec());
                        }
                    } else {
                        stream.extend_from_slice(&data);
                    }
                }
                Event::ChannelGap { count, .. } => {
                    run.gaps += count;
                    run.gap_events += 1;
                }
                Event::ChannelComplete { bytes, .. } => run.verdict = Some(Ok(bytes)),
                Event::ChannelFailed { reason, .. } => run.verdict = Some(Err(reason)),
                _ => {}
            }
        }
        now += Duration::from_millis(1);
    }
    if !aligned {
        diodon_proto::records::split_stream::<()>(&stream, |r| {
            run.delivered.push(r.to_vec());
            Ok(())
        })
        .unwrap();
    }
    run.blocks_lost = rx.stats().blocks_lost;
    run.padding = tx.stats().padding_bytes;
    run
}

fn mixed(rng: &mut ChaCha8Rng, n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let len = match rng.random_range(0..4) {
                0 => rng.random_range(4..16),
                1 => rng.random_range(16..120),
                2 => BLOCK - RECORD_HEADER,
                _ => rng.random_range(120..BLOCK - RECORD_HEADER),
            };
            record(i, len)
        })
        .collect()
}

#[test]
fn without_loss_every_record_arrives_whole_and_in_order() {
    for seed in 0..20u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let recs = mixed(&mut rng, 400);
        let run = transfer(seed, &recs, 0.0, 0, true);
        assert_eq!(run.delivered, recs, "seed {seed}");
        assert!(
            matches!(run.verdict, Some(Ok(_))),
            "seed {seed}: {:?}",
            run.verdict
        );
        assert_eq!(run.gaps, 0, "seed {seed}");
        assert!(run.padding > 0, "seed {seed}: large records force padding");
    }
}

#[test]
fn a_lost_block_loses_only_its_own_records() {
    let mut total_gaps = 0;
    for seed in 100..140u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let recs = mixed(&mut rng, 400);
        // No repair: every lost symbol loses its block.
        let run = transfer(seed, &recs, 0.03, 0, true);
        // What arrived is the sent sequence with whole records missing:
        // in order, each one intact.
        let mut it = recs.iter();
        for got in &run.delivered {
            assert!(
                it.any(|r| r == got),
                "seed {seed}: record {:?} out of order or damaged",
                &got[..4]
            );
        }
        assert_eq!(
            run.gaps, run.blocks_lost,
            "seed {seed}: every lost block is a counted gap"
        );
        if run.gaps > 0 {
            let Some(Err(FailReason::BlockLost { count, .. })) = run.verdict else {
                panic!(
                    "seed {seed}: gaps but verdict {:?}",
                    run.verdict.map(|_| ())
                );
            };
            assert_eq!(count, run.gaps, "seed {seed}");
            // The records after the first gap arrived: far more than one block's worth.
            assert!(run.delivered.len() > recs.len() / 2, "seed {seed}");
        }
        total_gaps += run.gaps;
    }
    assert!(
        total_gaps > 10,
        "the loss must have cost blocks ({total_gaps})"
    );
}

#[test]
fn unaligned_datagram_channels_still_fail_at_the_first_lost_block() {
    let mut failed = 0;
    for seed in 200..210u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let recs = mixed(&mut rng, 400);
        let run = transfer(seed, &recs, 0.03, 0, false);
        assert_eq!(run.gaps, 0, "seed {seed}");
        if matches!(run.verdict, Some(Err(FailReason::BlockLost { .. }))) {
            failed += 1;
        }
    }
    assert!(failed >= 8, "{failed} of 10 failed");
}

#[test]
fn records_longer_than_a_block_are_refused_on_aligned_channels() {
    let mut tx = Sender::new(
        SenderConfig {
            symbol_size: SymbolSize::new(64).unwrap(),
            block_symbols: 4,
            interleave_depth: 1,
            ..SenderConfig::default()
        },
        SessionId(9),
        Timestamp::ZERO,
    )
    .unwrap();
    let ch = tx.open_channel(ChannelMeta::packets("p")).unwrap();
    assert!(tx
        .write_record(Timestamp::ZERO, ch, &[1; BLOCK - 2])
        .unwrap());
    assert_eq!(
        tx.write_record(Timestamp::ZERO, ch, &[1; BLOCK - 1]),
        Err(SendError::RecordTooLarge {
            len: BLOCK - 1,
            max: BLOCK - 2
        })
    );
}
