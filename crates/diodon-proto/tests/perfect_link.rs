//! Transfers over a lossless link: the baseline every other test builds on.
mod common;

use common::{payload, Transfer};
use diodon_proto::{Event, ReceiverConfig, SenderConfig};
use diodon_sim::Link;
use std::time::Duration;

#[test]
fn files_of_every_shape_arrive_intact() {
    let sizes = [
        0usize,
        1,
        2,
        3,
        1417,
        1418,
        1419,
        64 * 1418,
        64 * 1418 + 1,
        1_000_000,
        3_000_001,
    ];
    let payloads: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| payload(i as u64, *n))
        .collect();
    let mut t = Transfer::new(
        SenderConfig::default(),
        ReceiverConfig::default(),
        7,
        &payloads,
    );
    t.run(&mut Link::new(), Duration::from_secs(30));
    assert!(t.out.failed.is_empty(), "failed: {:?}", t.out.failed);
    for ((id, _, _), p) in t.channels.iter().zip(&payloads) {
        assert_eq!(
            t.out.complete.get(id).map(Vec::len),
            Some(p.len()),
            "channel {id}"
        );
        assert!(t.out.complete[id] == *p, "channel {id} differs");
    }
    let stats = t.receiver.stats();
    assert_eq!(stats.missing, 0);
    assert_eq!(stats.channels_complete, sizes.len() as u64);
    assert!(matches!(t.out.events[0], Event::SessionStarted { .. }));
}
