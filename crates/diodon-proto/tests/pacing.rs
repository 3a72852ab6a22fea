//! The paced rate in virtual time, driven the way the IO driver drives it:
//! sleep until `poll_timeout` plus the time a batch of tokens takes to come
//! in, then send batches while the pacer allows. A real driver wakes late —
//! the kernel's timer slack, a core busy with another thread — and the rate
//! over a second must stay within 1 % of the configured one as long as it
//! wakes less than the pacer's slack (4 ms) late (PROTOCOL.md § 6, "Pacing
//! and batching").
#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_proto::wire::ChannelMeta;
use diodon_proto::{Rate, Sender, SenderConfig, SessionId, Timestamp};
use std::time::Duration;

/// Bits per second on the wire (datagrams plus their IP/UDP header) over
/// the second after a 100 ms start, when every wake-up comes `late(i)` after
/// the batch is due.
fn paced_rate(rate_bps: u64, late: impl Fn(u64) -> Duration) -> f64 {
    paced(rate_bps, late).0
}

/// [`paced_rate`], and the bits of rate the sender counted as lost
/// (`pacer_credit_lost_bytes`) over the same second.
fn paced(rate_bps: u64, late: impl Fn(u64) -> Duration) -> (f64, f64) {
    let config = SenderConfig {
        rate: Rate::bits_per_sec(rate_bps),
        ..SenderConfig::default()
    };
    let wire = config.datagram_len() + config.per_datagram_overhead;
    let batch_gap =
        Duration::from_nanos(((config.max_batch - 1) * wire) as u64 * 8 * 1_000_000_000 / rate_bps);
    let overhead = config.per_datagram_overhead;
    let mut s = Sender::new(config, SessionId(7), Timestamp::ZERO).unwrap();
    let ch = s.open_channel(ChannelMeta::stream("paced")).unwrap();
    let chunk = vec![0x5a_u8; 1 << 20];
    let mut buf = Vec::new();
    let (start, end) = (Timestamp::from_millis(100), Timestamp::from_millis(1100));
    let mut now = Timestamp::ZERO;
    let mut bits = 0u64;
    let mut wake = 0u64;
    let mut lost_at_start = None;
    while now < end {
        if now >= start && lost_at_start.is_none() {
            lost_at_start = Some(s.stats().pacer_credit_lost_bytes);
        }
        while s.writable() >= chunk.len() {
            s.write(now, ch, &chunk).unwrap();
        }
        while let Some(t) = s.poll_transmit(now, 64, &mut buf) {
            let datagrams = t.segment_size.map_or(1, |seg| t.size.div_ceil(seg));
            if now >= start {
                bits += ((t.size + datagrams * overhead) * 8) as u64;
            }
        }
        let due = s.poll_timeout().unwrap();
        // Symbols wait for the pacer: the driver lets a batch build up.
        now = due.max(now) + batch_gap + late(wake);
        wake += 1;
    }
    let lost = s.stats().pacer_credit_lost_bytes - lost_at_start.unwrap();
    (bits as f64, (lost * 8) as f64)
}

#[test]
fn the_rate_holds_when_the_driver_wakes_late() {
    for rate in [100_000_000u64, 600_000_000, 2_000_000_000] {
        let batch = Duration::from_nanos(32 * 1446 * 8 * 1_000_000_000 / rate);
        let on_time = paced_rate(rate, |_| Duration::ZERO);
        // Late by 0 … 90 % of a batch, spread over the wake-ups.
        let late = paced_rate(rate, |i| batch * ((i * 37 % 91) as u32) / 100);
        // Every fifth wake-up 3 ms late: a core thread that waited for a CPU.
        let preempted = paced_rate(rate, |i| {
            if i % 5 == 0 {
                Duration::from_millis(3)
            } else {
                Duration::ZERO
            }
        });
        for (what, got) in [
            ("on time", on_time),
            ("late", late),
            ("preempted", preempted),
        ] {
            let error = (got - rate as f64).abs() / rate as f64;
            assert!(
                error <= 0.01,
                "{rate} bit/s, woken {what}: {got:.0} bit/s ({:.1} % off)",
                error * 100.0
            );
        }
    }
}

#[test]
fn what_a_later_wake_up_loses_is_counted() {
    let rate = 600_000_000u64;
    let (on_time, lost_on_time) = paced(rate, |_| Duration::ZERO);
    assert!(on_time >= rate as f64 * 0.99, "{on_time:.0} bit/s");
    assert!(lost_on_time == 0.0, "nothing lost on time: {lost_on_time}");
    // Every fifth wake-up 10 ms late: 6 ms past the slack each time.
    let (got, lost) = paced(rate, |i| {
        if i % 5 == 0 {
            Duration::from_millis(10)
        } else {
            Duration::ZERO
        }
    });
    assert!(
        got < rate as f64 * 0.9,
        "the late wake-ups cost rate: {got:.0}"
    );
    // What was sent and what the counter says was lost make the rate.
    let accounted = (got + lost - rate as f64).abs() / rate as f64;
    assert!(
        accounted <= 0.01,
        "sent {got:.0} + lost {lost:.0} bit/s against {rate} ({:.1} % off)",
        accounted * 100.0
    );
}
