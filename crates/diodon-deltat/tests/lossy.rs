//! Seeded transfers over a lossy simulated link (diodon-sim): every byte
//! arrives in order or the connection fails with an error. Every failure
//! prints its seed; `SIM_SEED=<n>` runs seed `n` alone.

#[allow(
    dead_code,
    reason = "shared fixture: this binary uses part of it (expect would fail in the others)"
)]
mod common;

use std::time::Duration;

use common::{one_way_transfer, pattern, replaying, report, seeds, sim, LinkConfig, ADDR_B};
use diodon_deltat::{Config, ConnHandle, Endpoint, Error, Event, WallClock};
use diodon_sansio::Timestamp;
use diodon_sim::Seed;
use rand::Rng;

const PORT_A: u16 = 7000;
const PORT_B: u16 = 8000;

fn config() -> Config {
    Config {
        max_packet_lifetime: Duration::from_secs(5),
        max_retransmit_time: Duration::from_secs(120),
        max_ack_delay: Duration::from_secs(1),
        min_rto: Duration::from_millis(100),
        initial_rto: Duration::from_millis(500),
        max_rto: Duration::from_secs(4),
        ..Config::default()
    }
}

fn endpoint(cfg: &Config, wall_ms: u32) -> Endpoint {
    Endpoint::new(cfg.clone(), WallClock::at_origin(wall_ms)).expect("valid config")
}

/// One direction of application traffic.
struct Flow {
    total: usize,
    stream: u64,
    written: usize,
    read: usize,
    tx: Option<ConnHandle>,
    rx: Option<ConnHandle>,
    failed: bool,
}

impl Flow {
    fn new(total: usize, stream: u64) -> Flow {
        Flow {
            total,
            stream,
            written: 0,
            read: 0,
            tx: None,
            rx: None,
            failed: false,
        }
    }

    fn write(&mut self, ep: &mut Endpoint, seed: u64) {
        let Some(h) = self.tx else { return };
        while self.written < self.total {
            let end = (self.written + 4096).min(self.total);
            let chunk: Vec<u8> = (self.written..end)
                .map(|i| pattern(self.stream, i))
                .collect();
            match ep.write(h, &chunk) {
                Ok(n) => self.written += n,
                Err(Error::WouldBlock) => break,
                Err(Error::Failed(_)) => {
                    self.failed = true;
                    break;
                }
                Err(e) => panic!("seed {seed}: write error {e}"),
            }
        }
    }

    fn read(&mut self, ep: &mut Endpoint, seed: u64, max: usize) {
        let Some(h) = self.rx else { return };
        let mut buf = vec![0u8; max.clamp(1, 65_536)];
        loop {
            match ep.read(h, &mut buf) {
                Ok(n) => {
                    for (k, b) in buf[..n].iter().enumerate() {
                        assert_eq!(
                            *b,
                            pattern(self.stream, self.read + k),
                            "seed {seed}: byte {} corrupted or out of order",
                            self.read + k
                        );
                    }
                    self.read += n;
                    assert!(
                        self.read <= self.total,
                        "seed {seed}: more bytes than written"
                    );
                    if max < usize::MAX {
                        break;
                    }
                }
                Err(Error::WouldBlock) => break,
                Err(Error::Failed(_)) => {
                    self.failed = true;
                    break;
                }
                Err(e) => panic!("seed {seed}: read error {e}"),
            }
        }
    }

    fn done(&self) -> bool {
        self.read == self.total
    }
}

fn note_failures(ep: &mut Endpoint, flows: &mut [&mut Flow]) {
    while let Some(ev) = ep.poll_event() {
        if let Event::Failed { handle, error } = ev {
            eprintln!("connection {handle:?} failed: {error}");
            for f in flows.iter_mut() {
                if f.tx == Some(handle) || f.rx == Some(handle) {
                    f.failed = true;
                }
            }
        }
    }
}

struct Outcome {
    fwd: Flow,
    rev: Flow,
    now: Timestamp,
    /// Retransmissions and rendezvous sent by A, datagrams the link dropped.
    retransmissions: u64,
    rendezvous: u64,
    dropped: u64,
    /// Datagrams the link corrupted, datagrams both endpoints rejected as malformed.
    corrupted: u64,
    malformed: u64,
}

/// Runs a transfer of `fwd` bytes A→B and `rev` bytes B→A.
fn transfer(
    seed: u64,
    link: LinkConfig,
    cfg: &Config,
    fwd: usize,
    rev: usize,
    slow_reader: bool,
    cut_at: Option<Timestamp>,
) -> Outcome {
    let _report = report("lossy transfer", seed);
    let mut a = endpoint(cfg, 86_400_000 - 1000 - (seed as u32 % 60_000));
    let mut b = endpoint(cfg, 86_400_000 - 1000 - (seed as u32 % 60_000) + 3);
    b.listen(PORT_B).expect("listen");
    let h = a.connect(ADDR_B, PORT_B, PORT_A).expect("connect");
    let mut sim = sim(a, b, seed, link, cut_at);
    // The slow reader's pauses: their own stream of the seed.
    let mut pauses = Seed(seed).derive(99).rng();
    let mut fwd = Flow::new(fwd, seed);
    let mut rev = Flow::new(rev, !seed);
    fwd.tx = Some(h);
    rev.rx = Some(h);
    if fwd.total == 0 {
        // B can only learn about A after A's first segment: open with one byte.
        fwd.total = 1;
    }
    let deadline = Timestamp::from_millis(3_600_000);
    let mut next_slow_read = Timestamp::ZERO;
    loop {
        if let Some(acc) = sim.b.accept() {
            fwd.rx = Some(acc);
            rev.tx = Some(acc);
        }
        fwd.write(&mut sim.a, seed);
        rev.write(&mut sim.b, seed);
        if slow_reader {
            if sim.now() >= next_slow_read {
                fwd.read(&mut sim.b, seed, 1500);
                next_slow_read = sim.now() + Duration::from_millis(pauses.random_range(50..400));
            }
        } else {
            fwd.read(&mut sim.b, seed, usize::MAX);
        }
        rev.read(&mut sim.a, seed, usize::MAX);
        note_failures(&mut sim.a, &mut [&mut fwd, &mut rev]);
        note_failures(&mut sim.b, &mut [&mut fwd, &mut rev]);
        let fwd_over = fwd.done() || fwd.failed;
        let rev_over = rev.done() || rev.failed || rev.total == 0;
        if fwd_over && rev_over {
            break;
        }
        assert!(
            sim.now() < deadline,
            "seed {seed}: no progress after an hour of virtual time (fwd {}/{}, rev {}/{})",
            fwd.read,
            fwd.total,
            rev.read,
            rev.total
        );
        let max = if slow_reader {
            Duration::from_millis(50)
        } else {
            Duration::from_secs(600)
        };
        sim.step(max);
    }
    // Let datagrams still on the wire arrive, so the counters below are complete.
    for _ in 0..10_000 {
        if sim.link.in_flight() == 0 {
            break;
        }
        sim.step(Duration::from_millis(100));
    }
    let link = sim.link.totals();
    Outcome {
        fwd,
        rev,
        now: sim.now(),
        retransmissions: sim.a.stats().retransmissions,
        rendezvous: sim.a.stats().rendezvous_sent,
        dropped: link.dropped,
        corrupted: link.corrupted,
        malformed: sim.a.stats().malformed + sim.b.stats().malformed,
    }
}

fn size_for(seed: u64) -> usize {
    20_000 + (seed as usize * 7919) % 30_000
}

#[test]
fn thousand_seeded_transfers_at_20_percent_loss_all_complete() {
    let cfg = config();
    let (mut retransmissions, mut dropped, mut corrupted) = (0, 0, 0);
    for seed in seeds(0..1000) {
        let out = transfer(
            seed,
            LinkConfig::lossy(0.2),
            &cfg,
            size_for(seed),
            0,
            false,
            None,
        );
        assert!(
            !out.fwd.failed,
            "seed {seed}: transfer failed after {:?}",
            out.now
        );
        assert!(out.fwd.done(), "seed {seed}: incomplete");
        retransmissions += out.retransmissions;
        dropped += out.dropped;
        assert!(
            out.malformed >= out.corrupted,
            "seed {seed}: a corrupted datagram was accepted"
        );
        corrupted += out.corrupted;
    }
    if replaying() {
        return;
    }
    eprintln!(
        "thousand: dropped {dropped} corrupted {corrupted} retransmissions {retransmissions}"
    );
    assert!(corrupted > 100, "link corrupted only {corrupted} datagrams");
    // The loss really happened and was really repaired.
    assert!(dropped > 10_000, "link dropped only {dropped} datagrams");
    assert!(
        retransmissions > 5_000,
        "only {retransmissions} retransmissions"
    );
}

#[test]
fn duplex_transfers_complete_under_loss() {
    let cfg = config();
    for seed in seeds(0..150) {
        let loss = (seed % 4) as f64 * 0.1;
        let out = transfer(
            seed,
            LinkConfig::lossy(loss),
            &cfg,
            size_for(seed),
            size_for(seed + 1),
            false,
            None,
        );
        assert!(
            out.fwd.done() && out.rev.done() && !out.fwd.failed && !out.rev.failed,
            "seed {seed}: duplex transfer incomplete"
        );
    }
}

#[test]
fn slow_reader_with_small_window_uses_rendezvous_and_completes() {
    let cfg = Config {
        recv_buffer: 3000,
        ..config()
    };
    for seed in seeds(0..150) {
        let loss = (seed % 3) as f64 * 0.1;
        let out = transfer(seed, LinkConfig::lossy(loss), &cfg, 30_000, 0, true, None);
        assert!(
            out.fwd.done() && !out.fwd.failed,
            "seed {seed}: slow-reader transfer incomplete ({} of 30000)",
            out.fwd.read
        );
        assert!(
            out.rendezvous > 0,
            "seed {seed}: the zero window never needed a rendezvous"
        );
    }
}

#[test]
fn cut_link_gives_in_order_prefix_then_an_error() {
    let cfg = Config {
        max_packet_lifetime: Duration::from_secs(1),
        max_retransmit_time: Duration::from_secs(5),
        max_ack_delay: Duration::from_secs(1),
        min_rto: Duration::from_millis(100),
        initial_rto: Duration::from_millis(500),
        max_rto: Duration::from_secs(2),
        ..Config::default()
    };
    for seed in seeds(0..200) {
        let loss = (seed % 4) as f64 * 0.1;
        let cut = Timestamp::from_millis(20 + seed % 300);
        let out = transfer(
            seed,
            LinkConfig::lossy(loss),
            &cfg,
            200_000,
            0,
            false,
            Some(cut),
        );
        // Reads were checked byte by byte against the pattern; the sender must
        // know it failed unless everything got through before the cut.
        assert!(
            out.fwd.done() || out.fwd.failed,
            "seed {seed}: neither delivered nor failed"
        );
        assert!(
            out.fwd.read < out.fwd.total,
            "seed {seed}: 200 KB cannot cross before the cut"
        );
    }
}

#[test]
fn random_impairments_deliver_in_order_or_fail() {
    use rand::SeedableRng;
    let cfg = config();
    for seed in seeds(0..300) {
        let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        let link = LinkConfig {
            loss: r.random_range(0.0..=0.3),
            delay: Duration::from_millis(r.random_range(1..200)),
            jitter: Duration::from_millis(r.random_range(0..100)),
            reorder: r.random_range(0.0..0.2),
            duplicate: r.random_range(0.0..0.1),
            corrupt: r.random_range(0.0..0.05),
        };
        let (fwd, rev) = (r.random_range(1..40_000), r.random_range(0..20_000));
        let out = transfer(seed, link, &cfg, fwd, rev, false, None);
        // Bytes were compared one by one while reading; with R = 120 s every
        // transfer must also finish.
        assert!(
            out.fwd.done() && (out.rev.done() || rev == 0),
            "seed {seed}: {link:?} did not complete"
        );
    }
}

/// The default configuration (R = 24 s, RTO 0.2–8 s) over a link losing 20 %
/// in both directions. Regression test for a stall found with the UDP driver:
/// a late cumulative ack for a segment sent before an RTO gave an RTT sample
/// of seconds and pinned the RTO at 8 s, so most seeds failed at R7. Now a
/// transfer completes, or (rarely: a segment and its acks lost for all of R)
/// fails with an error; it never stalls silently.
#[test]
fn default_config_survives_twenty_percent_loss() {
    let mut completed = 0;
    let mut failures = Vec::new();
    for seed in seeds(0..20) {
        let link = LinkConfig {
            loss: 0.2,
            delay: Duration::from_millis(10),
            jitter: Duration::ZERO,
            reorder: 0.0,
            duplicate: 0.0,
            corrupt: 0.0,
        };
        match one_way_transfer(&Config::default(), seed, 300_000, link) {
            Ok(_) => completed += 1,
            Err(e) => failures.push(e),
        }
    }
    assert!(
        completed >= 18 || (replaying() && failures.is_empty()),
        "completed {completed}/20; failures {failures:?}"
    );
}
