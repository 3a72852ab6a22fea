//! Statistical and deterministic checks of each built-in node, driven
//! directly (without a `Link`).

use std::time::Duration;

use super::*;
use crate::seed::SeedReport;

type Out = Vec<(Timestamp, Vec<u8>)>;

/// Offers `n` datagrams (`[i as u32 big-endian]`, sent 1 µs apart) to `node`.
fn offer_many(node: &mut impl LinkNode, n: u32) -> Out {
    let mut out = Vec::new();
    for i in 0..n {
        node.offer(
            Timestamp::from_micros(u64::from(i)),
            i.to_be_bytes().to_vec(),
            &mut out,
        );
    }
    out
}

/// Standard deviation of a Binomial(n, p) count.
fn binomial_sd(n: f64, p: f64) -> f64 {
    (n * p * (1.0 - p)).sqrt()
}

#[test]
fn bernoulli_loss_rate_within_tolerance() {
    let seed = Seed::from_env_or(0xB0B);
    let _report = SeedReport::new("bernoulli_loss_rate_within_tolerance", &seed);
    for (i, p) in [0.0, 0.01, 0.1, 0.5].into_iter().enumerate() {
        let n = 100_000u32;
        let mut node = Bernoulli::new(p, seed.derive(i as u64));
        let out = offer_many(&mut node, n);
        let s = node.stats();
        assert_eq!(s.offered, u64::from(n));
        assert_eq!(s.passed, out.len() as u64);
        assert!(s.is_consistent(), "{s:?}");
        let expected = f64::from(n) * p;
        let tolerance = 5.0 * binomial_sd(f64::from(n), p);
        assert!(
            (s.dropped as f64 - expected).abs() <= tolerance,
            "p={p}: dropped {} of {n}, expected {expected} ± {tolerance}",
            s.dropped
        );
        // Survivors keep their order and timing.
        assert!(out.windows(2).all(|w| w[0] < w[1]));
    }
    let mut all = Bernoulli::new(1.0, seed);
    assert!(offer_many(&mut all, 100).is_empty());
}

/// Returns (loss rate, mean burst length, burst count) of a loss pattern.
fn burst_profile(lost: &[bool]) -> (f64, f64, usize) {
    let losses = lost.iter().filter(|&&l| l).count();
    let bursts = lost
        .iter()
        .enumerate()
        .filter(|&(i, &l)| l && (i == 0 || !lost[i - 1]))
        .count();
    (
        losses as f64 / lost.len() as f64,
        losses as f64 / bursts.max(1) as f64,
        bursts,
    )
}

fn loss_pattern(node: &mut impl LinkNode, n: u32) -> Vec<bool> {
    let out = offer_many(node, n);
    let mut lost = vec![true; n as usize];
    for (_, d) in &out {
        let i = u32::from_be_bytes(d[..4].try_into().expect("4-byte payload"));
        lost[i as usize] = false;
    }
    lost
}

#[test]
fn bursts_are_exact_runs_spaced_by_at_least_the_gap() {
    let seed = Seed::from_env_or(0xB125);
    let _report = SeedReport::new("bursts_are_exact_runs_spaced_by_at_least_the_gap", &seed);
    let n = 2_000_000u32;
    let mut node = Bursts::at_loss(64, 0.01, 2048, seed);
    let out = offer_many(&mut node, n);
    let passed: std::collections::HashSet<u32> = out
        .iter()
        .map(|(_, d)| u32::from_be_bytes(d[..4].try_into().expect("4 bytes")))
        .collect();
    let lost: Vec<bool> = (0..n).map(|i| !passed.contains(&i)).collect();
    // Every run of losses is exactly 64 long (the last may be cut by the
    // end of the offer), every gap between runs at least 2048.
    let mut runs = Vec::new();
    let mut i = 0usize;
    while i < lost.len() {
        let start = i;
        while i < lost.len() && lost[i] == lost[start] {
            i += 1;
        }
        runs.push((lost[start], i - start, i == lost.len()));
    }
    for (is_loss, len, at_end) in &runs[1..] {
        if *is_loss && !at_end {
            assert_eq!(*len, 64, "a burst is exactly 64 datagrams");
        } else if !is_loss && !at_end {
            assert!(*len >= 2048, "bursts at least 2048 apart, got {len}");
        }
    }
    let (rate, mean, count) = burst_profile(&lost);
    assert!((rate - 0.01).abs() < 0.001, "loss {rate}");
    assert!((mean - 64.0).abs() < 1.0, "mean burst {mean}");
    assert_eq!(count as u64, node.bursts());
}

#[test]
fn gilbert_elliott_matches_loss_and_burst_length() {
    let seed = Seed::from_env_or(0x6E);
    let _report = SeedReport::new("gilbert_elliott_matches_loss_and_burst_length", &seed);
    let n = 400_000u32;
    for (i, (avg_loss, mean_burst)) in [(0.05, 4.0), (0.02, 6.0), (0.2, 2.0)]
        .into_iter()
        .enumerate()
    {
        let mut node = GilbertElliott::with_mean_burst(avg_loss, mean_burst, seed.derive(i as u64));
        assert!((node.stationary_loss() - avg_loss).abs() < 1e-12);
        let lost = loss_pattern(&mut node, n);
        let (loss, burst, bursts) = burst_profile(&lost);
        assert!(node.stats().is_consistent());
        // Tolerances: 5 standard deviations, from the chain's theory.
        // Fraction of time in Bad: var = π_b·π_g·(2/(p+r) − 1) / n.
        let r = 1.0 / mean_burst;
        let p = avg_loss * r / (1.0 - avg_loss);
        let loss_sd = (avg_loss * (1.0 - avg_loss) * (2.0 / (p + r) - 1.0) / f64::from(n)).sqrt();
        assert!(
            (loss - avg_loss).abs() <= 5.0 * loss_sd,
            "loss {loss} vs configured {avg_loss} ± {}",
            5.0 * loss_sd
        );
        // Burst lengths are geometric: sd = sqrt(1 − r) / r.
        let burst_sd = (1.0 - r).sqrt() / r / (bursts as f64).sqrt();
        assert!(
            (burst - mean_burst).abs() <= 5.0 * burst_sd,
            "mean burst {burst} ({bursts} bursts) vs configured {mean_burst} ± {}",
            5.0 * burst_sd
        );
        assert!(
            5.0 * burst_sd < 0.15 * mean_burst,
            "test too weak to notice a bug"
        );
    }
}

#[test]
fn gilbert_elliott_general_parameters() {
    let seed = Seed::from_env_or(0x6E2);
    let _report = SeedReport::new("gilbert_elliott_general_parameters", &seed);
    // π_bad = 0.02 / (0.02 + 0.08) = 0.2; loss = 0.8·0.01 + 0.2·0.5 = 0.108.
    let mut node = GilbertElliott::new(0.02, 0.08, 0.01, 0.5, seed);
    assert!((node.stationary_loss() - 0.108).abs() < 1e-12);
    let (loss, _, _) = burst_profile(&loss_pattern(&mut node, 200_000));
    assert!((loss - 0.108).abs() < 0.01, "loss {loss}");
    // Bursty, unlike Bernoulli at the same rate: bursts are longer than 1/(1-p).
    let mut ge = GilbertElliott::with_mean_burst(0.1, 5.0, seed.derive(1));
    let mut be = Bernoulli::new(0.1, seed.derive(2));
    let (_, ge_burst, _) = burst_profile(&loss_pattern(&mut ge, 50_000));
    let (_, be_burst, _) = burst_profile(&loss_pattern(&mut be, 50_000));
    assert!(ge_burst > 2.0 * be_burst, "{ge_burst} vs {be_burst}");
}

#[test]
#[should_panic(expected = "p_good_to_bad")]
fn gilbert_elliott_rejects_unreachable_parameters() {
    let _ = GilbertElliott::with_mean_burst(0.9, 1.0, Seed(0));
}

#[test]
#[should_panic(expected = "probability")]
fn probabilities_are_checked() {
    let _ = Bernoulli::new(1.5, Seed(0));
}

#[test]
fn tail_drop_burst_drops_exactly_the_overflow() {
    // 10 000-byte buffer drained at 8 Mbit/s = 1 byte/µs: a 1000-byte
    // datagram takes exactly 1 ms to drain.
    let mut buf = TailDropBuffer::new(10_000, 8_000_000);
    let mut out = Vec::new();
    for i in 0..25u8 {
        buf.offer(Timestamp::ZERO, vec![i; 1000], &mut out);
    }
    assert_eq!(buf.drops(), 15);
    assert_eq!(out.len(), 10);
    assert_eq!(buf.queued_bytes(), 10_000);
    assert_eq!(buf.high_water_bytes(), 10_000);
    for (k, (at, d)) in out.iter().enumerate() {
        assert_eq!(*at, Timestamp::from_millis(k as u64 + 1));
        assert_eq!(d[0], k as u8, "FIFO order, the first ten survive");
    }
    // Spacing equals len·8/rate.
    for w in out.windows(2) {
        assert_eq!(w[1].0 - w[0].0, Duration::from_millis(1));
    }

    // At t = 1 ms the first datagram has drained: exactly one more fits,
    // queued behind the other nine.
    out.clear();
    buf.offer(Timestamp::from_millis(1), vec![0; 1000], &mut out);
    buf.offer(Timestamp::from_millis(1), vec![0; 1], &mut out);
    assert_eq!(out, vec![(Timestamp::from_millis(11), vec![0; 1000])]);
    assert_eq!(buf.drops(), 16);

    // Once idle, a datagram only pays its own serialisation time.
    out.clear();
    buf.offer(Timestamp::from_millis(100), vec![0; 500], &mut out);
    assert_eq!(out[0].0, Timestamp::from_micros(100_500));
    assert_eq!(buf.queued_bytes(), 500);
    // A datagram larger than the whole buffer never fits.
    buf.offer(Timestamp::from_millis(10_000), vec![0; 10_001], &mut out);
    assert_eq!(buf.drops(), 17);
    let s = buf.stats();
    assert_eq!((s.offered, s.passed, s.dropped), (29, 12, 17));
    assert!(s.is_consistent());
}

#[test]
fn tail_drop_steady_state_below_and_above_drain_rate() {
    // 1250-byte datagrams = 10 000 bits; drain at 10 Mbit/s = 1 ms each.
    let run = |interval_us: u64| {
        let mut buf = TailDropBuffer::new(5 * 1250, 10_000_000);
        let mut out = Vec::new();
        for i in 0..1000 {
            buf.offer(
                Timestamp::from_micros(i * interval_us),
                vec![0; 1250],
                &mut out,
            );
        }
        (buf.drops(), out)
    };
    // Slower than the drain: nothing dropped, each delayed by exactly 1 ms.
    let (drops, out) = run(1000);
    assert_eq!(drops, 0);
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, (at, _))| *at == Timestamp::from_micros(i as u64 * 1000 + 1000)));
    // Twice the drain rate: after the buffer fills, half are dropped.
    let (drops, out) = run(500);
    assert!((495..=505).contains(&drops), "drops {drops}");
    for w in out.windows(2) {
        assert!(w[1].0 - w[0].0 >= Duration::from_millis(1));
    }
}

#[test]
fn rate_limit_serialises_without_drift_or_drops() {
    // 3 bytes at 7 bit/s do not divide evenly into nanoseconds; the finish
    // times must still be exact multiples (rounded up), with no drift.
    let mut rl = RateLimit::new(7);
    let mut out = Vec::new();
    for _ in 0..1000 {
        rl.offer(Timestamp::ZERO, vec![0; 3], &mut out);
    }
    for (k, (at, _)) in out.iter().enumerate() {
        let bits = 24 * (k as u128 + 1);
        let exact = (bits * 1_000_000_000).div_ceil(7);
        assert_eq!(u128::from(at.as_nanos()), exact);
    }
    let s = rl.stats();
    assert_eq!((s.offered, s.passed, s.dropped), (1000, 1000, 0));
    // Idle link: pure serialisation delay from the send time.
    let mut rl = RateLimit::new(1_000_000_000);
    rl.offer(Timestamp::from_millis(5), vec![0; 125], &mut out);
    assert_eq!(
        out.last().map(|o| o.0),
        Some(Timestamp::from_nanos(5_001_000))
    );
}

#[test]
fn reorder_holds_back_some_and_loses_none() {
    let seed = Seed::from_env_or(0x2E0);
    let _report = SeedReport::new("reorder_holds_back_some_and_loses_none", &seed);
    let max = Duration::from_micros(50);
    let mut node = Reorder::new(0.1, max, seed);
    let out = offer_many(&mut node, 10_000);
    let s = node.stats();
    assert_eq!(out.len(), 10_000);
    assert!(s.is_consistent());
    assert!((800..=1200).contains(&s.reordered), "{s:?}");
    let held = out
        .iter()
        .filter(|(at, d)| {
            let sent = Timestamp::from_micros(u64::from(u32::from_be_bytes(
                d[..4].try_into().expect("4 bytes"),
            )));
            assert!(*at >= sent && *at - sent <= max);
            *at > sent
        })
        .count();
    assert_eq!(held as u64, s.reordered);
    let mut none = Reorder::new(0.5, Duration::ZERO, seed);
    let out = offer_many(&mut none, 100);
    assert_eq!(none.stats().reordered, 0);
    assert!(out.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn reorder_with_gap_holds_back_by_exactly_the_gap() {
    let seed = Seed::from_env_or(0x2E1);
    let _report = SeedReport::new("reorder_with_gap_holds_back_by_exactly_the_gap", &seed);
    let gap = Duration::from_millis(5);
    let mut node = Reorder::with_gap(0.2, gap, seed);
    let out = offer_many(&mut node, 10_000);
    let s = node.stats();
    assert_eq!(out.len(), 10_000);
    assert!(s.is_consistent());
    assert!((1_800..=2_200).contains(&s.reordered), "{s:?}");
    let mut held = 0;
    for (at, d) in &out {
        let sent = Timestamp::from_micros(u64::from(u32::from_be_bytes(
            d[..4].try_into().expect("4 bytes"),
        )));
        assert!(*at == sent || *at == sent + gap, "{at:?} for {sent:?}");
        held += u64::from(*at > sent);
    }
    assert_eq!(held, s.reordered);
}

#[test]
fn duplicate_counts_and_copies() {
    let seed = Seed::from_env_or(0xD0);
    let _report = SeedReport::new("duplicate_counts_and_copies", &seed);
    let mut node = Duplicate::new(0.25, seed);
    let out = offer_many(&mut node, 10_000);
    let s = node.stats();
    assert!(s.is_consistent(), "{s:?}");
    assert_eq!(out.len() as u64, 10_000 + s.duplicated);
    assert!((2300..=2700).contains(&s.duplicated), "{s:?}");
    let pairs = out.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(
        pairs as u64, s.duplicated,
        "copies are adjacent and identical"
    );
}

#[test]
fn corrupt_flips_one_to_three_bits_in_one_byte() {
    let seed = Seed::from_env_or(0xC0);
    let _report = SeedReport::new("corrupt_flips_one_to_three_bits_in_one_byte", &seed);
    let mut node = Corrupt::new(0.1, seed);
    let mut out = Vec::new();
    let original: Vec<u8> = (0..=255).collect();
    for i in 0..10_000u64 {
        node.offer(Timestamp::from_nanos(i), original.clone(), &mut out);
    }
    let mut flips_seen = [0u32; 4];
    let mut changed = 0;
    for (_, d) in &out {
        assert_eq!(d.len(), original.len());
        let diffs: Vec<u32> = d
            .iter()
            .zip(&original)
            .map(|(a, b)| (a ^ b).count_ones())
            .filter(|&bits| bits > 0)
            .collect();
        if !diffs.is_empty() {
            changed += 1;
            assert_eq!(diffs.len(), 1, "damage stays within one byte");
            assert!((1..=3).contains(&diffs[0]));
            flips_seen[diffs[0] as usize] += 1;
        }
    }
    let s = node.stats();
    assert!(s.is_consistent());
    assert_eq!(s.corrupted, changed);
    assert!((800..=1200).contains(&changed), "{s:?}");
    assert!(flips_seen[1..].iter().all(|&n| n > 0), "{flips_seen:?}");
    assert_eq!(node.truncated(), 0);
    // Empty datagrams cannot be damaged.
    let mut all = Corrupt::new(1.0, seed);
    all.offer(Timestamp::ZERO, Vec::new(), &mut out);
    assert_eq!(all.stats().corrupted, 0);
}

#[test]
fn corrupt_can_truncate_instead() {
    let seed = Seed::from_env_or(0xC1);
    let _report = SeedReport::new("corrupt_can_truncate_instead", &seed);
    let mut node = Corrupt::new(1.0, seed).truncate_probability(1.0);
    let mut out = Vec::new();
    for i in 0..1000 {
        node.offer(Timestamp::from_nanos(i), vec![7; 100], &mut out);
    }
    assert_eq!(node.truncated(), 1000);
    assert_eq!(node.stats().corrupted, 1000);
    assert!(out
        .iter()
        .all(|(_, d)| d.len() < 100 && d.iter().all(|&b| b == 7)));
    let mut half = Corrupt::new(1.0, seed).truncate_probability(0.5);
    offer_many(&mut half, 1000);
    assert!(
        (400..=600).contains(&half.truncated()),
        "{}",
        half.truncated()
    );
}

#[test]
fn mtu_drops_only_oversize() {
    let mut node = Mtu::new(1472);
    let mut out = Vec::new();
    for len in [0, 1, 1471, 1472, 1473, 9000] {
        node.offer(Timestamp::ZERO, vec![0; len], &mut out);
    }
    let lens: Vec<usize> = out.iter().map(|(_, d)| d.len()).collect();
    assert_eq!(lens, vec![0, 1, 1471, 1472]);
    let s = node.stats();
    assert_eq!((s.offered, s.passed, s.dropped), (6, 4, 2));
}

#[test]
fn delay_fixed_and_jittered() {
    let mut fixed = Delay::new(Duration::from_millis(3));
    let out = offer_many(&mut fixed, 10);
    assert!(out
        .iter()
        .enumerate()
        .all(|(i, (at, _))| *at == Timestamp::from_micros(i as u64 + 3000)));

    let seed = Seed::from_env_or(0xDE1);
    let _report = SeedReport::new("delay_fixed_and_jittered", &seed);
    let jitter = Duration::from_micros(20);
    let mut jit = Delay::with_jitter(Duration::from_millis(1), jitter, seed);
    let out = offer_many(&mut jit, 10_000);
    let mut min = Duration::MAX;
    let mut max = Duration::ZERO;
    for (at, d) in &out {
        let sent = u64::from(u32::from_be_bytes(d[..4].try_into().expect("4 bytes")));
        let delay = *at - Timestamp::from_micros(sent);
        min = min.min(delay);
        max = max.max(delay);
    }
    assert!(min >= Duration::from_millis(1) && min < Duration::from_micros(1001));
    assert!(max <= Duration::from_micros(1020) && max > Duration::from_micros(1019));
    assert!(
        out.windows(2).any(|w| w[1].0 < w[0].0),
        "jitter larger than the send spacing reorders"
    );
}

#[test]
fn outage_drops_inside_the_window() {
    let mut node = Outage::new(Timestamp::from_micros(10), Timestamp::from_micros(20));
    let out = offer_many(&mut node, 30);
    assert_eq!(out.len(), 20);
    assert_eq!(node.stats().dropped, 10);
    assert!(out
        .iter()
        .all(|(at, _)| *at < Timestamp::from_micros(10) || *at >= Timestamp::from_micros(20)));
}
