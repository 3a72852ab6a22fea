//! Fuzzing entry points (feature `fuzzing`): each takes arbitrary bytes and
//! checks invariants that must hold for every input. The cargo-fuzz
//! targets in `fuzz/` call them; `tests/props.rs` runs them on the
//! committed seeds.

use crate::classify::Classifier;
use crate::flow::{FlowKey, FlowMode};
use crate::frame::Headers;
use crate::rules::RuleSet;
use crate::wire::{decapsulate, PacketRecord, RecordRepr};

/// Frame parser: never panics; the flow key of a frame and of the same
/// frame with its addresses and ports swapped agree; decapsulation and
/// record parsing never panic and a parsed record re-emits byte for byte.
pub fn frame(data: &[u8]) {
    let Some(h) = Headers::parse(data) else {
        assert!(data.len() < 14);
        return;
    };
    let mut rev = h;
    rev.src_mac = h.dst_mac;
    rev.dst_mac = h.src_mac;
    rev.l3 = match h.l3 {
        crate::L3::V4 { src, dst } => crate::L3::V4 { src: dst, dst: src },
        crate::L3::V6 { src, dst } => crate::L3::V6 { src: dst, dst: src },
        other => other,
    };
    rev.ports = h.ports.map(|(s, d)| (d, s));
    for mode in [FlowMode::FiveTuple, FlowMode::IpPair] {
        assert_eq!(FlowKey::of(&h, mode), FlowKey::of(&rev, mode));
    }
    let _ = decapsulate(data, 0xf1f0);
    if let Ok(r) = PacketRecord::new_checked(data) {
        let mut out = Vec::new();
        RecordRepr::parse(&r).emit(r.frame(), &mut out);
        assert_eq!(out, data);
    }
}

/// Rule parser: never panics; what parses prints back to the same rules,
/// and the compiled classifier agrees with the reference on a few frames.
pub fn rules(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = RuleSet::parse(text) else {
        return;
    };
    let back = RuleSet::parse(&set.to_string()).expect("printed rules parse");
    let strip = |s: &RuleSet| s.rules.iter().map(|r| (r.action, r.m)).collect::<Vec<_>>();
    assert_eq!(strip(&set), strip(&back));
    assert_eq!(set.default, back.default);
    if set.rules.len() > 4096 {
        return;
    }
    let c = Classifier::compile(&set);
    for frame in crate::fuzzing::SAMPLE_FRAMES {
        if let Some(h) = Headers::parse(frame) {
            let (rule, action) = set.first_match(&h);
            let v = c.classify(&h);
            assert_eq!((v.rule.map(|r| r as usize), v.action), (rule, action));
        }
    }
}

/// A few frames every rule fuzzing run classifies.
const SAMPLE_FRAMES: &[&[u8]] = &[
    // IPv4 UDP 10.0.0.1:1234 → 10.0.1.1:53
    &[
        2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0,
        10, 0, 0, 1, 10, 0, 1, 1, 0x04, 0xd2, 0, 53, 0, 12, 0, 0, 1, 2, 3, 4,
    ],
    // ARP, VLAN 100
    &[
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0, 100, 0x08, 0x06, 0, 1,
        8, 0, 6, 4, 0, 1,
    ],
    // IPv4 cut short
    &[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0],
];
