//! `AF_PACKET` on a real veth pair in a throwaway namespace (root): frames
//! sent with `RawSender` on one end come out of a `TPACKET_V3` ring on the
//! other byte for byte (VLAN tags as metadata), the kernel's counters
//! agree, a fanout group splits the frames without losing one, frames a
//! full ring cannot take are counted as ring drops, the interface going
//! away is an error, and a TAP device takes frames. Skips without root
//! (fails under `CI=true`).
#![expect(
    clippy::disallowed_methods,
    reason = "the tests bound their waits with the wall clock"
)]

use diodon_io::netns;
use diodon_io::packet::{CaptureRing, Fanout, FanoutMode, RawSender, RingConfig};
use diodon_testkit::{require_netns, run, Namespace};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn frame(i: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01];
    if let Some(v) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f.extend_from_slice(&i.to_be_bytes());
    while f.len() < len {
        f.push((f.len() as u32 ^ i) as u8);
    }
    f
}

/// The frame as it was sent, from what the ring saw.
fn restore(data: &[u8], vlan: Option<(u16, u16)>) -> Vec<u8> {
    match vlan {
        Some((tpid, tci)) => {
            let mut f = data[..12].to_vec();
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
            f.extend_from_slice(&data[12..]);
            f
        }
        None => data.to_vec(),
    }
}

fn veth(ns: &Namespace) {
    let n = ns.name();
    run(&[
        "ip", "-n", n, "link", "add", "va", "type", "veth", "peer", "name", "vb",
    ]);
    for i in ["va", "vb"] {
        run(&["ip", "-n", n, "link", "set", i, "up"]);
        run(&[
            "ip",
            "netns",
            "exec",
            n,
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.{i}.disable_ipv6=1"),
        ]);
    }
}

fn capture(ring: &mut CaptureRing, want: usize, deadline: Duration) -> Vec<(Vec<u8>, u64)> {
    let mut got = Vec::new();
    let end = Instant::now() + deadline;
    while got.len() < want && Instant::now() < end {
        if let Some(block) = ring.next_block(Duration::from_millis(50)).expect("ring") {
            for f in block.frames() {
                got.push((restore(f.data, f.vlan), f.timestamp_ns));
            }
        }
    }
    got
}

#[test]
fn frames_cross_a_veth_pair_byte_for_byte() {
    if !require_netns("frames_cross_a_veth_pair_byte_for_byte") {
        return;
    }
    let ns = Namespace::new(&format!("dd-pkt-{}", std::process::id()));
    veth(&ns);
    let name = ns.name().to_owned();
    let h = netns::spawn_in(&name, move || {
        let mut ring = CaptureRing::open(&RingConfig::new("vb")).expect("ring");
        let mut tx = RawSender::open("va").expect("sender");
        let sent: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| {
                frame(
                    i,
                    60 + (i as usize * 37) % 1450,
                    (i % 3 == 0).then_some((i % 4000) as u16 + 1),
                )
            })
            .collect();
        let refs: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        tx.send_all(&refs).expect("send");
        let got = capture(&mut ring, sent.len(), Duration::from_secs(10));
        let stats = ring.stats().expect("stats");
        (sent, got, stats)
    })
    .expect("namespace");
    let (sent, got, stats) = h.join().expect("thread").expect("netns");
    assert_eq!(got.len(), sent.len(), "every frame captured");
    for (i, (s, (g, ts))) in sent.iter().zip(&got).enumerate() {
        assert_eq!(s, g, "frame {i} differs");
        assert!(*ts > 1_600_000_000_000_000_000, "a wall-clock timestamp");
    }
    assert_eq!(stats.packets, sent.len() as u64, "{stats:?}");
    assert_eq!(stats.drops, 0);
}

#[test]
fn a_fanout_group_splits_frames_without_losing_one() {
    if !require_netns("a_fanout_group_splits_frames_without_losing_one") {
        return;
    }
    let ns = Namespace::new(&format!("dd-fan-{}", std::process::id()));
    veth(&ns);
    let name = ns.name().to_owned();
    let h = netns::spawn_in(&name, move || {
        let fan = Some(Fanout {
            group: 4242,
            mode: FanoutMode::RoundRobin,
        });
        let mut cfg = RingConfig::new("vb");
        cfg.fanout = fan;
        let mut a = CaptureRing::open(&cfg).expect("ring a");
        let mut b = CaptureRing::open(&cfg).expect("ring b");
        let mut tx = RawSender::open("va").expect("sender");
        let sent: Vec<Vec<u8>> = (0..2000u32).map(|i| frame(i, 100, None)).collect();
        let refs: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        tx.send_all(&refs).expect("send");
        let mut seen = BTreeSet::new();
        let (mut na, mut nb) = (0, 0);
        let end = Instant::now() + Duration::from_secs(10);
        while seen.len() < sent.len() && Instant::now() < end {
            for (ring, n) in [(&mut a, &mut na), (&mut b, &mut nb)] {
                if let Some(block) = ring.next_block(Duration::from_millis(20)).expect("ring") {
                    for f in block.frames() {
                        seen.insert(f.data.to_vec());
                        *n += 1;
                    }
                }
            }
        }
        (seen.len(), na, nb)
    })
    .expect("namespace");
    let (distinct, na, nb) = h.join().expect("thread").expect("netns");
    assert_eq!(distinct, 2000);
    assert_eq!(na + nb, 2000, "no frame twice");
    assert!(na > 500 && nb > 500, "both members got frames: {na} {nb}");
}

#[test]
fn a_full_ring_counts_its_drops_and_a_vanished_interface_is_an_error() {
    if !require_netns("a_full_ring_counts_its_drops_and_a_vanished_interface_is_an_error") {
        return;
    }
    let ns = Namespace::new(&format!("dd-drop-{}", std::process::id()));
    veth(&ns);
    let name = ns.name().to_owned();
    let h = netns::spawn_in(&name, move || {
        let mut cfg = RingConfig::new("vb");
        cfg.block_size = 4096;
        cfg.blocks = 2;
        let mut ring = CaptureRing::open(&cfg).expect("ring");
        let mut tx = RawSender::open("va").expect("sender");
        // Nobody reads the ring: two 4 KiB blocks hold a handful of frames.
        let sent: Vec<Vec<u8>> = (0..500u32).map(|i| frame(i, 1000, None)).collect();
        let refs: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        tx.send_all(&refs).expect("send");
        std::thread::sleep(Duration::from_millis(200));
        let mut delivered = 0u64;
        while let Some(block) = ring.next_block(Duration::from_millis(50)).expect("ring") {
            delivered += block.frames().count() as u64;
        }
        let stats = ring.stats().expect("stats");
        let out = std::process::Command::new("ip")
            .args(["link", "del", "va"])
            .output()
            .expect("ip");
        assert!(out.status.success());
        let err = loop {
            if let Err(e) = ring.next_block(Duration::from_millis(100)) {
                break e;
            }
        };
        (delivered, stats, err)
    })
    .expect("namespace");
    let (delivered, stats, err) = h.join().expect("thread").expect("netns");
    assert_eq!(stats.packets, 500, "{stats:?}");
    assert!(stats.drops > 0, "{stats:?}");
    assert_eq!(
        delivered + stats.drops,
        500,
        "every frame delivered or counted: {stats:?}"
    );
    assert_eq!(err.raw_os_error(), Some(libc::ENETDOWN), "{err}");
}

#[test]
fn a_tap_device_takes_frames() {
    if !require_netns("a_tap_device_takes_frames") {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap-{}", std::process::id()));
    let name = ns.name().to_owned();
    let h = netns::spawn_in(&name, move || {
        let tap = diodon_io::tun::Tun::open_tap("dtap0").expect("tap");
        run(&["sysctl", "-qw", "net.ipv6.conf.dtap0.disable_ipv6=1"]);
        run(&["ip", "link", "set", "dtap0", "up"]);
        let mut ring = CaptureRing::open(&RingConfig::new("dtap0")).expect("ring");
        let sent: Vec<Vec<u8>> = (0..100u32)
            .map(|i| frame(i, 64 + i as usize, None))
            .collect();
        for f in &sent {
            tap.send(f).expect("write");
        }
        let got = capture(&mut ring, sent.len(), Duration::from_secs(5));
        run(&["ip", "link", "set", "dtap0", "down"]);
        let down = tap.send(&sent[0]).map_err(|e| e.raw_os_error());
        (sent, got, down)
    })
    .expect("namespace");
    let (sent, got, down) = h.join().expect("thread").expect("netns");
    let got: Vec<Vec<u8>> = got.into_iter().map(|(f, _)| f).collect();
    assert_eq!(got, sent);
    assert_eq!(
        down,
        Err(Some(libc::EIO)),
        "a TAP that is down refuses frames"
    );
}
