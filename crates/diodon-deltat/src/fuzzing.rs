//! Fuzzing entry point for the Delta-t crate: [`deltat_segment`] takes
//! arbitrary bytes, runs them through the segment parser and an
//! [`Endpoint`], and asserts invariants. The `fuzz/` cargo-fuzz target and
//! the property tests (`tests/fuzz_props.rs`) both call it.
//!
//! ```text
//!   fuzz bytes ─► SegmentRepr::parse_bytes ─► to_vec == bytes
//!              ─► length + checksum fixed ─► parse ─► to_vec == bytes
//!              ─► chunks, deadlines made current ─► Endpoint (listening)
//!                 ─► poll_transmit / poll_event / accept / read / timers
//! ```
//!
//! Not a stable API: hidden from the docs, for fuzzing and tests only, and
//! compiled only with the `fuzzing` feature (enabled by `fuzz/Cargo.toml`
//! and by this crate's dev-dependency on itself).

use crate::config::{Config, WallClock};
use crate::endpoint::{Endpoint, Event};
use crate::wire::{Lifetime, Segment, SegmentRepr, HEADER_LEN, MAX_SEGMENT_LEN, MS_PER_DAY};
use diodon_sansio::Timestamp;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// The port the fuzzed endpoint listens on.
pub const LISTEN_PORT: u16 = 7000;

/// Parses `data` as one segment (as given and with its length and checksum
/// fixed): whatever parses must re-emit to the very same bytes. Then cuts
/// `data` into length-prefixed chunks, makes each a well-formed segment
/// (length, checksum, optionally a current deadline and the listened port)
/// and feeds them to an endpoint with advancing virtual time, draining its
/// outputs and reading accepted connections; every datagram must be counted.
pub fn deltat_segment(data: &[u8]) {
    check_segment(data);
    if let Some(fixed) = fix_up(data) {
        check_segment(&fixed);
    }
    endpoint(data);
}

/// One segment's round trip and view accessors.
fn check_segment(bytes: &[u8]) {
    if let Ok(seg) = Segment::new_checked(bytes) {
        let _ = (
            seg.src_port(),
            seg.dst_port(),
            seg.sn(),
            seg.deadline_raw(),
            seg.version(),
        );
        let _ = (
            seg.segment_type(),
            seg.flags_raw(),
            seg.lifetime_raw(),
            seg.window(),
        );
        let _ = (seg.payload().len(), seg.verify_checksum());
    }
    let Ok(repr) = SegmentRepr::parse_bytes(bytes) else {
        return;
    };
    assert_eq!(
        repr.buffer_len(),
        bytes.len(),
        "buffer_len disagrees with the parsed segment"
    );
    let out = repr.to_vec().expect("a parsed segment always re-emits");
    assert_eq!(
        out, bytes,
        "re-emitting a parsed segment changed its bytes: non-canonical encoding accepted"
    );
    assert_eq!(
        SegmentRepr::parse_bytes(&out),
        Ok(repr),
        "re-emitted segment parses differently"
    );
    let _ = repr.to_string();
}

/// `bytes` with a correct length field and checksum (None if it cannot be a segment).
fn fix_up(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < HEADER_LEN || bytes.len() > MAX_SEGMENT_LEN {
        return None;
    }
    let mut out = bytes.to_vec();
    let len = u16::try_from(out.len()).ok()?;
    out[4..6].copy_from_slice(&len.to_be_bytes());
    Segment::new_unchecked(&mut out[..]).fill_checksum();
    Some(out)
}

/// Feeds chunks of `data` to a listening endpoint.
fn endpoint(data: &[u8]) {
    let config = Config {
        max_packet_lifetime: Duration::from_secs(1),
        max_retransmit_time: Duration::from_secs(2),
        max_ack_delay: Duration::from_millis(500),
        recv_buffer: 4096,
        send_buffer: 4096,
        backlog: 2,
        ..Config::default()
    };
    let wall = WallClock::at_origin(MS_PER_DAY - 5_000);
    let mut ep = Endpoint::new(config, wall).expect("valid endpoint configuration");
    ep.listen(LISTEN_PORT).expect("listen on a fresh endpoint");
    let remote = SocketAddr::from((Ipv4Addr::LOCALHOST, 9000));
    let mut now = Timestamp::ZERO;
    let mut fed = 0u64;
    let mut rest = data;
    let mut buf = [0u8; 2048];
    let mut out = Vec::new();
    while let Some((&control, tail)) = rest.split_first() {
        let len = HEADER_LEN + usize::from(control >> 2);
        let (chunk, tail) = tail.split_at(len.min(tail.len()));
        rest = tail;
        now += Duration::from_millis(u64::from(control & 3) * 300);
        let mut segment = chunk.to_vec();
        segment.resize(len, 0);
        if control & 1 == 1 {
            // Listened port, version 0 (any flags, W included: SACK blocks
            // and scaled windows reach the scoreboard), lifetime >= 1 and a deadline that
            // has not passed, so the segment reaches the connection logic.
            segment[2..4].copy_from_slice(&LISTEN_PORT.to_be_bytes());
            segment[16] &= 0b0011_1111;
            segment[17] = segment[17].max(1);
            let deadline = wall.deadline(now, Lifetime::from_secs(1).expect("non-zero"));
            segment[12..16].copy_from_slice(&deadline.ms().to_be_bytes());
        }
        let Some(segment) = fix_up(&segment) else {
            continue;
        };
        ep.handle_datagram(now, remote, &segment);
        fed += 1;
        assert_eq!(ep.stats().datagrams_in, fed, "every datagram is counted");
        ep.handle_timeout(now);
        drain(&mut ep, now, 1 + usize::from(control >> 5), &mut out);
        ep.assert_consistent();
        while let Some(event) = ep.poll_event() {
            if let Event::Readable(h) = event {
                let _ = ep.read(h, &mut buf);
            }
        }
        while let Some(h) = ep.accept() {
            let _ = ep.read(h, &mut buf);
            let _ = ep.write(h, &chunk[..chunk.len().min(64)]);
        }
        let _ = ep.poll_timeout();
    }
    now += Duration::from_secs(60);
    ep.handle_timeout(now);
    drain(&mut ep, now, 64, &mut out);
}

/// Sends everything `ep` has, in transmits of at most `max` segments, and
/// checks the transmit contract: one peer, every segment but the last of
/// `segment_size` bytes, each one a valid segment, no more than asked for.
fn drain(ep: &mut Endpoint, now: Timestamp, max: usize, buf: &mut Vec<u8>) {
    while let Some(t) = ep.poll_transmit(now, max, buf) {
        assert_eq!(t.size, buf.len(), "the transmit covers the buffer");
        assert!(t.destination.is_some(), "a Delta-t segment has a peer");
        assert!(t.datagram_count() <= max, "at most {max} segments");
        let segments: Vec<&[u8]> = t.datagrams(buf).collect();
        for (i, segment) in segments.iter().enumerate() {
            if i + 1 < segments.len() {
                assert_eq!(
                    segment.len(),
                    t.segment_len(),
                    "equal segments before the last"
                );
            }
            SegmentRepr::parse_bytes(segment).expect("the endpoint emits valid segments");
        }
    }
}
