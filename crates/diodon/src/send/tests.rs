//! How much each feed lets its core buffer.

use super::*;
use crate::args::LinkArgs;
use crate::config::FileConfig;

fn buffer_for(feed: Feed) -> (usize, usize) {
    let link = Link::merge(&LinkArgs::default(), &FileConfig::default()).unwrap();
    let table = LinkTable {
        to: "127.0.0.1:9".parse().unwrap(),
        bind: None,
        device: None,
    };
    let Ok((config, _)) = link_core(&link, &table, feed, false) else {
        panic!("the default link has a core");
    };
    let group = config.block_bytes() * usize::from(config.interleave_depth);
    (config.buffer_limit, group)
}

#[test]
fn a_bulk_feed_buffers_three_groups_datagram_flows_two_others_the_default() {
    let (bulk, group) = buffer_for(Feed::Bulk);
    assert_eq!(bulk, 3 * group, "files, stdin, TCP");
    let (flows, group) = buffer_for(Feed::Datagrams);
    assert_eq!(flows, 2 * group, "--udp-listen");
    let (other, _) = buffer_for(Feed::Other);
    assert_eq!(other, SenderConfig::default().buffer_limit, "sync, Kafka");
    assert!(other > bulk);
}
