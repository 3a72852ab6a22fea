//! The datagrams on the wire do not depend on how the application cuts its
//! writes: one write of the whole stream, byte by byte, just below, at and
//! above a group, several groups at once, or sizes drawn at random, all give
//! the same datagrams. (Whole groups of one write are encoded straight from
//! the caller's bytes, the rest goes through the channel's pending buffer;
//! this holds both paths to one result.)

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

mod common;

use common::payload;
use diodon_proto::{ChannelMeta, Rate, Sender, SenderConfig, SessionId, Timestamp};
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
fn wire(data: &[u8], mut cuts: impl FnMut() -> usize) -> Vec<Vec<u8>> {
    let start = Timestamp::ZERO;
    let mut tx = Sender::new(config(), SessionId(42), start).unwrap();
    let ch = tx.open_channel(ChannelMeta::stream("cuts")).unwrap();
    let mut at = 0;
    while at < data.len() {
        let n = cuts().clamp(1, data.len() - at);
        let took = tx.write(start, ch, &data[at..at + n]).unwrap();
        assert_eq!(took, n, "the buffer holds the whole test stream");
        at += n;
    }
    tx.finish(start, ch).unwrap();
    let mut out = Vec::new();
    let mut now = start;
    let mut buf = Vec::new();
    for _ in 0..100_000 {
        while let Some(t) = tx.poll_transmit(now, 16, &mut buf) {
            out.extend(buf[..t.size].chunks(t.segment_len()).map(<[u8]>::to_vec));
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
