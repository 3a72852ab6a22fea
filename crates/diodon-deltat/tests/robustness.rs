//! Hostile input: arbitrary sequences of well-formed (checksummed) segments,
//! timer firings and application calls never panic the core, and it never
//! emits a segment it could not parse itself.

use std::net::SocketAddr;
use std::time::Duration;

use diodon_deltat::{
    Config, Deadline, Endpoint, Flags, Lifetime, SegmentRepr, SegmentType, Seq, WallClock,
};
use diodon_sansio::Timestamp;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Segment {
        kind: u8,
        flags: u8,
        sn: u32,
        len: usize,
        window: u16,
        lifetime: u8,
        deadline_off: i32,
    },
    Advance(u32),
    Write(usize),
    Read(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..16, 0u32..140_000, 0usize..1500, any::<u16>(), 1u8..=255, -2000i32..40_000).prop_map(
            |(kind, flags, sn, len, window, lifetime, deadline_off)| Op::Segment { kind, flags, sn, len, window, lifetime, deadline_off }
        ),
        2 => (0u32..100_000).prop_map(Op::Advance),
        1 => (0usize..5000).prop_map(Op::Write),
        1 => (0usize..5000).prop_map(Op::Read),
    ]
}

proptest! {
    #[test]
    fn arbitrary_segments_and_calls_never_panic(ops in proptest::collection::vec(op(), 1..200)) {
        let cfg = Config {
            max_packet_lifetime: Duration::from_secs(1),
            max_retransmit_time: Duration::from_secs(3),
            max_ack_delay: Duration::from_secs(1),
            recv_buffer: 3000,
            max_payload: 500,
            initial_rto: Duration::from_millis(300),
            min_rto: Duration::from_millis(100),
            ..Config::default()
        };
        let wall = WallClock::at_origin(86_399_000);
        let mut ep = Endpoint::new(cfg, wall).expect("config");
        let peer: SocketAddr = "192.0.2.7:1000".parse().expect("addr");
        ep.listen(8080).expect("listen");
        let h = ep.connect(peer, 9090, 8081).expect("connect");
        let mut now = Timestamp::ZERO;
        for op in ops {
            match op {
                Op::Segment { kind, flags, sn, len, window, lifetime, deadline_off } => {
                    let kind = match kind {
                        0 => SegmentType::Data,
                        1 => SegmentType::Ack,
                        2 => SegmentType::Rendezvous,
                        _ => SegmentType::Nak,
                    };
                    let allowed = match kind {
                        SegmentType::Data | SegmentType::Rendezvous => Flags::D.bits(),
                        SegmentType::Ack => Flags::O.bits() | Flags::R.bits(),
                        SegmentType::Nak => 0,
                    };
                    let mut f = Flags::NONE;
                    for flag in [Flags::D, Flags::O, Flags::R] {
                        if flags & flag.bits() & allowed != 0 {
                            f = f.with(flag);
                        }
                    }
                    let payload = vec![0x11; if kind == SegmentType::Data { len.max(1) } else { 0 }];
                    let today = wall.time_of_day(now);
                    let deadline = Deadline::wrapping((i64::from(today.ms()) + 86_400_000 + i64::from(deadline_off)) as u64);
                    let repr = SegmentRepr {
                        src_port: 9090,
                        dst_port: if sn % 2 == 0 { 8080 } else { 8081 },
                        kind,
                        flags: f,
                        sn: Seq(sn),
                        deadline,
                        lifetime: Lifetime::from_secs(lifetime).expect("non-zero"),
                        window,
                        payload: &payload,
                    };
                    ep.handle_datagram(now, peer, &repr.to_vec().expect("emit"));
                }
                Op::Advance(ms) => {
                    now += Duration::from_millis(u64::from(ms));
                    ep.handle_timeout(now);
                }
                Op::Write(n) => {
                    let _ = ep.write(h, &vec![0x22; n]);
                }
                Op::Read(n) => {
                    let _ = ep.read(h, &mut vec![0; n]);
                    if let Some(a) = ep.accept() {
                        let _ = ep.read(a, &mut vec![0; n]);
                    }
                }
            }
            let mut sent = 0;
            let mut buf = Vec::new();
            while let Some(t) = ep.poll_transmit(now, 8, &mut buf) {
                for d in t.datagrams(&buf) {
                    prop_assert!(SegmentRepr::parse_bytes(d).is_ok(), "core emitted an unparsable segment");
                }
                sent += 1;
                prop_assert!(sent < 10_000, "poll_transmit never drains");
            }
            while ep.poll_event().is_some() {}
            if let Some(t) = ep.poll_timeout() {
                prop_assert!(t >= Timestamp::ZERO);
            }
        }
    }
}
