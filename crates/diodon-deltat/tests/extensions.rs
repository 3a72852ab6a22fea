//! The extensions beyond the thesis header, measured in virtual time over the
//! seeded simulated link (diodon-sim): window scaling (`W`), SACK and CUBIC against the thesis's
//! connection (16-bit window, cumulative acks, `NewReno`). Virtual time makes
//! the comparison exact and repeatable; these are not wall-clock timings.

#[allow(
    dead_code,
    reason = "shared fixture: this binary uses part of it (expect would fail in the others)"
)]
mod common;

use std::time::Duration;

use common::{connected_sim, one_way_transfer, pattern, write_pattern, LinkConfig, Outcome};
use diodon_deltat::{Config, CongestionAlgorithm, Endpoint, Error, WallClock};

/// The thesis's connection: what the kernel module of 2022 could do.
fn thesis_config() -> Config {
    Config {
        recv_buffer: 65_535,
        send_buffer: 256 * 1024,
        initial_window_segments: 4,
        congestion: CongestionAlgorithm::NewReno,
        sack: false,
        max_payload: 1452,
        ..Config::default()
    }
}

fn default_config() -> Config {
    Config {
        max_payload: 1452,
        ..Config::default()
    }
}

/// A transfer over a link with `delay` each way and `loss` in both directions
/// (no jitter, reordering or corruption: the comparisons stay clean).
fn transfer(cfg: &Config, seed: u64, total: usize, delay: Duration, loss: f64) -> Outcome {
    let link = LinkConfig {
        loss,
        delay,
        jitter: Duration::ZERO,
        reorder: 0.0,
        duplicate: 0.0,
        corrupt: 0.0,
    };
    one_way_transfer(cfg, seed, total, link).unwrap_or_else(|e| panic!("{e}"))
}

/// Without loss on a 100 ms round trip, the scaled window lets slow start run
/// past 64 KiB: 5 MB take a dozen round trips instead of the ~80 the 16-bit
/// window needs (5 MB / 64 KiB).
#[test]
fn scaled_window_removes_the_64_kib_cap() {
    let delay = Duration::from_millis(50);
    let total = 5_000_000;
    let thesis = transfer(&thesis_config(), 1, total, delay, 0.0);
    let ours = transfer(&default_config(), 1, total, delay, 0.0);
    let rtts = |d: Duration| d.as_secs_f64() / 0.1;
    eprintln!(
        "scaled: thesis {:?} ours {:?}",
        thesis.elapsed, ours.elapsed
    );
    assert!(rtts(thesis.elapsed) > 70.0, "thesis: {:?}", thesis.elapsed);
    assert!(rtts(ours.elapsed) < 15.0, "ours: {:?}", ours.elapsed);
    assert_eq!(ours.a.retransmissions, 0);
}

/// At 3 % loss (data and acks), SACK finds the holes and lost
/// retransmissions from the scoreboard; with cumulative acks alone most of
/// them wait for the retransmission timer. Same seeds, same link, the only
/// difference is whether the receiver sends SACK blocks.
#[test]
fn sack_repairs_losses_without_waiting_for_timeouts() {
    let delay = Duration::from_millis(25);
    let (mut with_rto, mut without_rto) = (0, 0);
    for seed in 0..4 {
        let with = transfer(&default_config(), seed, 1_000_000, delay, 0.03);
        let without = transfer(
            &Config {
                sack: false,
                ..default_config()
            },
            seed,
            1_000_000,
            delay,
            0.03,
        );
        assert!(with.a.sacked_segments > 0, "seed {seed}: no SACK used");
        assert_eq!(without.a.sacked_segments, 0);
        with_rto += with.a.rto_expirations;
        without_rto += without.a.rto_expirations;
    }
    eprintln!("sack: RTOs with {with_rto} without {without_rto}");
    assert!(
        with_rto * 2 < without_rto,
        "RTOs: with SACK {with_rto}, without {without_rto}"
    );
}

/// At 20 % loss in both directions every transfer with large windows and
/// SACK completes (the thesis's failed at 20 %), bytes checked one by one.
#[test]
fn twenty_percent_loss_with_large_windows_completes() {
    // R = 120 s as in lossy.rs: with acks lost too, a segment may need many
    // attempts; the default R = 24 s is for links that lose data only.
    let cfg = Config {
        max_retransmit_time: Duration::from_secs(120),
        ..default_config()
    };
    for seed in 0..5 {
        let o = transfer(&cfg, seed, 500_000, Duration::from_millis(25), 0.2);
        assert!(o.a.sacked_segments > 0);
    }
}

/// Random loss is not congestion: the model-based controller keeps its
/// window where loss-based CUBIC shrinks it at every loss, so at 5 % loss
/// (data and acks) it finishes several times sooner, every byte checked.
#[test]
fn bbr_is_not_slowed_by_random_loss() {
    let delay = Duration::from_millis(25);
    let bbr = Config {
        congestion: CongestionAlgorithm::Bbr,
        ..default_config()
    };
    let (mut cubic_time, mut bbr_time) = (Duration::ZERO, Duration::ZERO);
    for seed in 0..3 {
        cubic_time += transfer(&default_config(), seed, 1_000_000, delay, 0.05).elapsed;
        bbr_time += transfer(&bbr, seed, 1_000_000, delay, 0.05).elapsed;
    }
    eprintln!("bbr: {bbr_time:?} cubic {cubic_time:?}");
    assert!(
        bbr_time * 4 < cubic_time,
        "BBR {bbr_time:?} vs CUBIC {cubic_time:?}"
    );
}

/// The `deltat send/recv` exchange end to end: A writes the data, B reads it
/// (slowly: at most `read_per_step` octets per 1 ms step, so windows close
/// and reopen), answers one verdict octet, waits until it is acknowledged and
/// goes away; A must get the verdict. Returns the virtual time A needed.
fn verdict_exchange(
    cfg: &Config,
    seed: u64,
    total: usize,
    link: LinkConfig,
    read_per_step: usize,
) -> Duration {
    let _report = common::report("verdict_exchange", seed);
    let (mut sim, h) = connected_sim(cfg, seed, link);
    let (mut written, mut read) = (0, 0);
    let mut rx = None;
    let mut verdict_sent = false;
    let mut b_gone = false;
    let mut buf = vec![0u8; read_per_step.clamp(1, 1 << 20)];
    let mut one = [0u8; 1];
    loop {
        assert!(
            sim.now().as_millis() < 600_000,
            "seed {seed}: no verdict: read {read}/{total} written {written} b_gone {b_gone}\na {:?}\nb {:?}",
            sim.a.stats(),
            sim.b.stats()
        );
        if let Ok(Some(e)) = sim.a.error(h) {
            panic!(
                "seed {seed}: sender failed: {e}\na {:?}\nb {:?}",
                sim.a.stats(),
                sim.b.stats()
            );
        }
        write_pattern(&mut sim.a, h, &mut written, total);
        if written == total {
            match sim.a.read(h, &mut one) {
                Ok(1) => {
                    return sim
                        .now()
                        .saturating_duration_since(diodon_sansio::Timestamp::ZERO)
                }
                Ok(_) | Err(Error::WouldBlock) => {}
                Err(e) => panic!("seed {seed}: read verdict: {e}"),
            }
        }
        if !b_gone {
            if rx.is_none() {
                rx = sim.b.accept();
            }
            if let Some(r) = rx {
                if read < total {
                    let want = buf.len().min(total - read);
                    match sim.b.read(r, &mut buf[..want]) {
                        Ok(n) => {
                            for (k, byte) in buf[..n].iter().enumerate() {
                                assert_eq!(*byte, pattern(1, read + k), "seed {seed}");
                            }
                            read += n;
                        }
                        Err(Error::WouldBlock) => {}
                        Err(e) => panic!("seed {seed}: read: {e}"),
                    }
                } else if !verdict_sent {
                    assert_eq!(sim.b.write(r, &[1]).expect("verdict"), 1);
                    verdict_sent = true;
                } else if sim.b.unacked(r).expect("handle") == 0 {
                    // The receiver process exits: its endpoint is gone.
                    b_gone = true;
                    sim.b = Endpoint::new(cfg.clone(), WallClock::at_origin(1000)).expect("cfg");
                }
            }
        }
        sim.step(Duration::from_millis(1));
    }
}

/// The CLI's exchange survives slow readers (zero windows, rendezvous,
/// window updates), jitter and loss with every controller; the receiver
/// leaving once its verdict is acknowledged never strands the sender.
#[test]
fn verdict_exchange_completes_with_slow_readers_and_loss() {
    // DELTAT_SWEEP=N runs N seeds instead of 24 (a longer local search).
    let seeds: u64 = std::env::var("DELTAT_SWEEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24);
    for seed in 0..seeds {
        let congestion = [
            CongestionAlgorithm::Cubic,
            CongestionAlgorithm::Bbr,
            CongestionAlgorithm::NewReno,
        ][(seed % 3) as usize];
        let cfg = Config {
            congestion,
            recv_buffer: [4 << 20, 200_000, 65_535][(seed / 3 % 3) as usize],
            ..default_config()
        };
        let link = LinkConfig {
            loss: [0.0, 0.005, 0.02][(seed / 9 % 3) as usize],
            delay: Duration::from_millis(10 + seed * 7 % 250),
            jitter: Duration::from_millis(seed % 4),
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
        };
        let read_per_step = [usize::MAX / 2, 2_000, 50_000][(seed % 3) as usize];
        verdict_exchange(&cfg, seed, 1_000_000, link, read_per_step);
    }
}
