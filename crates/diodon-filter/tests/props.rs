//! Property tests of the pre-filter: the compiled classifier against the
//! linear reference on random rule sets and random frames (IPv4, IPv6 with
//! extension headers, VLAN/QinQ, fragments, non-IP, truncated), rule files
//! that print and parse back, symmetric flow keys, rendezvous stability
//! when an agent is added, packet records, and the committed fuzz seeds.

use diodon_filter::frame::{proto, Headers, Mac};
use diodon_filter::rules::{Action, RuleSet};
use diodon_filter::synth::{Synth, SynthL3};
use diodon_filter::wire::{PacketRecord, RecordRepr, RECORD_PACKET};
use diodon_filter::{Classifier, FlowKey, FlowMode, Rendezvous};
use proptest::prelude::*;

/// Small pools, so random rules and random frames meet often.
const V4: [[u8; 4]; 7] = [
    [0, 0, 0, 0],
    [10, 0, 0, 1],
    [10, 0, 0, 2],
    [10, 0, 0, 9],
    [10, 0, 1, 1],
    [192, 168, 3, 4],
    [172, 16, 5, 6],
];
const PORTS: [u16; 5] = [0, 53, 80, 443, 5353];
const VLANS: [u16; 3] = [0, 100, 4095];
const MACS: [[u8; 6]; 3] = [[2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2], [0xff; 6]];

/// IPv6 addresses; the last two are numerically IPv4 addresses (`::a00:1`,
/// `::`), so a classifier that confused the families would be caught.
fn v6(i: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    if i >= 4 {
        if i == 4 {
            a[12..].copy_from_slice(&[10, 0, 0, 1]);
        }
        return a;
    }
    a[0] = 0x20;
    a[1] = 0x01;
    a[2] = 0x0d;
    a[3] = 0xb8;
    a[15] = i as u8;
    a[7] = (i % 3) as u8;
    a
}

fn rule_field() -> impl Strategy<Value = String> {
    let v4cidr = (
        0..V4.len(),
        prop::sample::select(vec![8u8, 16, 24, 28, 29, 32]),
    )
        .prop_map(|(i, l)| {
            let a = u32::from_be_bytes(V4[i]);
            let m = u32::MAX.checked_shl(32 - u32::from(l)).unwrap_or(0);
            format!("{}/{l}", std::net::Ipv4Addr::from(a & m))
        });
    let v6cidr = (0..6usize, prop::sample::select(vec![32u8, 64, 120, 128])).prop_map(|(i, l)| {
        let a = u128::from_be_bytes(v6(i));
        let m = u128::MAX.checked_shl(128 - u32::from(l)).unwrap_or(0);
        format!("{}/{l}", std::net::Ipv6Addr::from(a & m))
    });
    let port = (0..PORTS.len(), 0u16..600).prop_map(|(i, w)| {
        let lo = PORTS[i];
        if w > 300 {
            lo.to_string()
        } else {
            format!("{lo}-{}", lo.saturating_add(w))
        }
    });
    prop_oneof![
        v4cidr.clone().prop_map(|c| format!("src {c}")),
        v4cidr.prop_map(|c| format!("dst {c}")),
        v6cidr.clone().prop_map(|c| format!("src {c}")),
        v6cidr.prop_map(|c| format!("dst {c}")),
        port.clone().prop_map(|p| format!("sport {p}")),
        port.prop_map(|p| format!("dport {p}")),
        prop::sample::select(vec!["tcp", "udp", "icmp", "sctp", "47"])
            .prop_map(|p| format!("proto {p}")),
        prop::sample::select(vec!["ip", "ip4", "ip6", "nonip", "malformed"])
            .prop_map(str::to_owned),
        prop::sample::select(vec!["none", "any", "100", "0-99", "100-4095"])
            .prop_map(|v| format!("vlan {v}")),
        prop::sample::select(vec!["ipv4", "ipv6", "arp", "0x88cc"])
            .prop_map(|t| format!("ethertype {t}")),
        (0..MACS.len(), prop::sample::select(vec![24u8, 40, 48])).prop_map(|(i, l)| {
            let m = Mac(MACS[i]).to_u64()
                & (((1u64 << 48) - 1) >> (48 - u32::from(l)) << (48 - u32::from(l)));
            format!("smac {}/{l}", Mac::from_u64(m))
        }),
        (0..MACS.len()).prop_map(|i| format!("dmac {}", Mac(MACS[i]))),
    ]
}

/// Random rule files; lines that can never match are dropped (the parser
/// refuses them, which `rule_errors_keep_their_line` covers).
fn rule_set() -> impl Strategy<Value = RuleSet> {
    let line = (any::<bool>(), prop::collection::vec(rule_field(), 0..4));
    (prop::collection::vec(line, 0..200), any::<bool>()).prop_map(|(lines, default_allow)| {
        let mut text = format!("default {}\n", if default_allow { "allow" } else { "deny" });
        for (allow, fields) in lines {
            let mut seen = std::collections::HashSet::new();
            let fields: Vec<String> = fields
                .into_iter()
                .filter(|f| {
                    let key = match f.split_whitespace().next().unwrap_or_default() {
                        "ip" | "ip4" | "ip6" | "nonip" | "malformed" => "l3",
                        k => k,
                    };
                    seen.insert(key.to_owned())
                })
                .collect();
            let l = format!(
                "{} {}",
                if allow { "allow" } else { "deny" },
                fields.join(" ")
            );
            if RuleSet::parse(&l).is_ok() {
                text.push_str(&l);
                text.push('\n');
            }
        }
        RuleSet::parse(&text).expect("filtered lines parse")
    })
}

fn frame() -> impl Strategy<Value = Vec<u8>> {
    let l3 = prop_oneof![
        (0..V4.len(), 0..V4.len()).prop_map(|(s, d)| SynthL3::V4 {
            src: V4[s],
            dst: V4[d]
        }),
        (0..6usize, 0..6usize, 0u8..3).prop_map(|(s, d, ext)| SynthL3::V6 {
            src: v6(s),
            dst: v6(d),
            ext
        }),
        prop::sample::select(vec![0x0806u16, 0x88cc, 0x0800, 0x86dd, 0x1234])
            .prop_map(SynthL3::Raw),
    ];
    (
        (0..MACS.len(), 0..MACS.len()),
        prop::collection::vec(prop::sample::select(VLANS.to_vec()), 0..3),
        l3,
        prop::sample::select(vec![
            proto::TCP,
            proto::UDP,
            proto::ICMP,
            proto::SCTP,
            47,
            58,
        ]),
        (0..PORTS.len(), 0..PORTS.len()),
        prop::option::of((prop::sample::select(vec![0u16, 0, 185]), any::<bool>())),
        0usize..64,
        prop::option::of(0usize..80),
    )
        .prop_map(
            |((sm, dm), vlans, l3, proto, (sp, dp), frag, payload, cut)| {
                let mut f = Synth {
                    dst_mac: Mac(MACS[dm]),
                    src_mac: Mac(MACS[sm]),
                    vlans,
                    l3,
                    proto,
                    ports: (PORTS[sp].wrapping_add(sp as u16), PORTS[dp]),
                    frag,
                    payload,
                    tag: 0,
                }
                .emit();
                if let Some(c) = cut {
                    f.truncate(c);
                }
                f
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The compiled classifier decides exactly what the linear reference does.
    #[test]
    fn classifier_agrees_with_the_reference(set in rule_set(), frames in prop::collection::vec(frame(), 64)) {
        let c = Classifier::compile(&set);
        for f in &frames {
            let Some(h) = Headers::parse(f) else { continue };
            let (rule, action) = set.first_match(&h);
            let v = c.classify(&h);
            prop_assert_eq!((v.rule.map(|r| r as usize), v.action), (rule, action), "frame {:02x?}\nheaders {:?}\nrules:\n{}", f, h, set);
        }
    }

    /// A rule file prints back to the same rules.
    #[test]
    fn rules_print_and_parse_back(set in rule_set()) {
        let back = RuleSet::parse(&set.to_string()).expect("printed rules parse");
        let strip = |s: &RuleSet| s.rules.iter().map(|r| (r.action, r.m)).collect::<Vec<_>>();
        prop_assert_eq!(strip(&set), strip(&back));
        prop_assert_eq!(set.default_action(), back.default_action());
    }

    /// Both directions of any flow go to the same agent, for any number of agents.
    #[test]
    fn both_directions_reach_the_same_agent(f in frame(), agents in 1usize..20) {
        let Some(h) = Headers::parse(&f) else { return Ok(()) };
        let mut r = h;
        std::mem::swap(&mut r.src_mac, &mut r.dst_mac);
        r.l3 = match h.l3 {
            diodon_filter::L3::V4 { src, dst } => diodon_filter::L3::V4 { src: dst, dst: src },
            diodon_filter::L3::V6 { src, dst } => diodon_filter::L3::V6 { src: dst, dst: src },
            other => other,
        };
        r.ports = h.ports.map(|(a, b)| (b, a));
        let names: Vec<String> = (0..agents).map(|i| format!("agent-{i}")).collect();
        let rv = Rendezvous::new(&names);
        for mode in [FlowMode::FiveTuple, FlowMode::IpPair] {
            prop_assert_eq!(rv.pick(FlowKey::of(&h, mode).hash()), rv.pick(FlowKey::of(&r, mode).hash()));
        }
    }

    /// Records round-trip through emit and parse.
    #[test]
    fn records_round_trip(seq in any::<u64>(), ts in any::<u64>(), frame in prop::collection::vec(any::<u8>(), 0..200), extra in 0u32..100) {
        let repr = RecordRepr { kind: RECORD_PACKET, seq, timestamp_ns: ts, original_len: frame.len() as u32 + extra };
        let mut out = Vec::new();
        repr.emit(&frame, &mut out);
        prop_assert_eq!(out.len(), RecordRepr::buffer_len(frame.len()));
        let r = PacketRecord::new_checked(&out[..]).expect("valid");
        prop_assert_eq!(RecordRepr::parse(&r), repr);
        prop_assert_eq!(r.frame(), &frame[..]);
    }
}

/// Random 5-tuples spread evenly, and adding an agent moves about 1/(N+1)
/// of the flows — each of them to the new agent, none between old ones.
#[test]
fn adding_an_agent_moves_only_its_share() {
    let flows: Vec<u64> = (0..20_000u32)
        .map(|i| {
            let mut s = Synth::udp4(
                (0x0a00_0000u32 + i.wrapping_mul(2_654_435_761) % 65_536).to_be_bytes(),
                [10, 1, (i % 7) as u8, 1],
                1024 + (i % 50_000) as u16,
                53,
                0,
            );
            s.proto = if i % 2 == 0 { proto::TCP } else { proto::UDP };
            let h = Headers::parse(&s.emit()).expect("frame");
            FlowKey::of(&h, FlowMode::FiveTuple).hash()
        })
        .collect();
    for n in [1usize, 2, 3, 4, 8, 15] {
        let before: Vec<String> = (0..n).map(|i| format!("ids-{i}")).collect();
        let mut after = before.clone();
        after.push(format!("ids-{n}"));
        let (a, b) = (Rendezvous::new(&before), Rendezvous::new(&after));
        let mut per_agent = vec![0usize; n + 1];
        let mut moved = 0usize;
        for &f in &flows {
            let (x, y) = (a.pick(f), b.pick(f));
            per_agent[y] += 1;
            if x != y {
                assert_eq!(y, n, "a flow moved between old agents");
                moved += 1;
            }
        }
        let share = moved as f64 / flows.len() as f64;
        let ideal = 1.0 / (n + 1) as f64;
        assert!(
            (share - ideal).abs() < 0.2 * ideal + 0.005,
            "{n} → {}: moved {share:.4}, ideal {ideal:.4}",
            n + 1
        );
        for (i, &c) in per_agent.iter().enumerate() {
            let e = flows.len() as f64 / (n + 1) as f64;
            assert!(
                (c as f64 - e).abs() < 0.15 * e,
                "agent {i} of {}: {c} flows, expected ~{e:.0}",
                n + 1
            );
        }
    }
}

/// Rule-file errors carry their line, whatever comes before them.
#[test]
fn rule_errors_keep_their_line() {
    let good = "deny src 10.0.0.1\n# comment\n\nallow dport 80\n";
    for (bad, what) in [
        ("deny src 10.0.0.300", "not a valid IP"),
        ("deny dport", "needs a value"),
        ("deny frob 1", "unknown field"),
        ("allow src 10.1.0.0/8", "host bits"),
    ] {
        let text = format!("{good}{bad}\nallow ip\n");
        let e = RuleSet::parse(&text).expect_err(bad);
        assert_eq!(e.line, 5, "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    assert_eq!(
        RuleSet::parse(good).map(|s| s.default_action()),
        Ok(Action::Allow)
    );
}

/// The committed fuzz seeds stay valid inputs and pass every check.
#[test]
fn fuzz_seeds_pass() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds");
    for (target, run) in [
        ("frame", diodon_filter::fuzzing::frame as fn(&[u8])),
        ("rules", diodon_filter::fuzzing::rules),
    ] {
        let dir = std::path::Path::new(root).join(target);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut n = 0;
        for entry in entries {
            let bytes = std::fs::read(entry.expect("entry").path()).expect("readable seed");
            run(&bytes);
            n += 1;
        }
        assert!(n > 0, "no seeds for {target}");
    }
}
