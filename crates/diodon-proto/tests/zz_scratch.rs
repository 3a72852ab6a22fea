use diodon_proto::wire::*;
use diodon_proto::*;
use std::time::Duration;

fn dg(seq: u64, body: Body<'_>) -> Vec<u8> {
    let repr = DatagramRepr { header: Header { session: SessionId(7), seq, channel: ChannelId(1), timestamp_ms: 0, lifetime_ms: 2000 }, body };
    let mut out = vec![0; repr.buffer_len(&Integrity::Crc32c)];
    repr.emit(&mut out, &Integrity::Crc32c);
    out
}

#[test]
fn unsupported_code_accounting() {
    let mut rx = Receiver::new(ReceiverConfig::default(), Timestamp::ZERO);
    let now = Timestamp::ZERO;
    rx.handle_datagram(now, &dg(0, Body::Open(ChannelMeta::stream("x"))));
    let p = [7u8; 8];
    let sym = |index: u16, payload: &'static [u8]| SymbolRepr { block: 0, index, k: 5, m: 65530, tail_len: 8, group_pos: 0, group_len: 1, payload };
    let p: &'static [u8] = Box::leak(Box::new(p));
    let mut seq = 1;
    for idx in [0u16, 5, 6, 7, 8, 1, 2, 3, 4] {
        let body = if idx < 5 { Body::Data(sym(idx, p)) } else { Body::Repair(sym(idx, p)) };
        rx.handle_datagram(now, &dg(seq, body));
        seq += 1;
        eprintln!("idx {idx} buffered {}", rx.buffered_bytes());
    }
    while let Some(e) = rx.poll_event() { eprintln!("{e:?}"); }
    let _ = Duration::ZERO;
}
