//! `diodon-lab relay …`: the impairment relay (delay, random loss, reordering;
//! seeded), a test instrument for transports with a return path.
//!
//! ```text
//!  relay --listen A --to B          UDP: client ─▶ A ─[delay/loss/reorder]─▶ B, replies back
//!  relay --tun NAME --ns-a X --ns-b Y   IP: TUN NAME in namespace X ◀──▶ TUN NAME in namespace Y
//! ```

use crate::values::parse_duration;
use anyhow::{bail, Context, Result};
use clap::Args;
use diodon_apps::report::Exit;
use diodon_lab::relay::{self, Direction, Impairment, RelayStats, Seed};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `diodon-lab relay`: impairment relay (delay, random loss, reordering; seeded).
#[derive(Debug, Args)]
pub struct RelayArgs {
    /// UDP mode: listen here (the client's side).
    #[arg(long, requires = "to", conflicts_with = "tun")]
    pub listen: Option<SocketAddr>,
    /// UDP mode: forward to this server; replies go back to the client.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// TUN mode: name of the TUN device created in each namespace (IP-level relay).
    #[arg(long, requires_all = ["ns_a", "ns_b"])]
    pub tun: Option<String>,
    /// TUN mode: first network namespace.
    #[arg(long)]
    pub ns_a: Option<String>,
    /// TUN mode: second network namespace.
    #[arg(long)]
    pub ns_b: Option<String>,
    /// One-way delay per direction (`50ms`, `0.2s`, `0`): RTT = 2 × delay.
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    pub delay: Duration,
    /// Random loss, percent, forward direction (client → server, ns-a → ns-b).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Random loss, percent, backward direction. Default: same as `--loss`.
    #[arg(long)]
    pub reverse_loss: Option<f64>,
    /// Percent of packets held back by `--reorder-gap` (overtaken by later ones).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Extra hold of a reordered packet.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub reorder_gap: Duration,
    /// Seed of the random draws (backward direction uses seed + 1).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `diodon-lab relay …` until SIGINT/SIGTERM (`stop`); prints the counters.
pub fn run(a: &RelayArgs, stop: &Arc<AtomicBool>) -> Result<Exit> {
    let reverse_loss = a.reverse_loss.unwrap_or(a.loss);
    for (name, v) in [
        ("--loss", a.loss),
        ("--reverse-loss", reverse_loss),
        ("--reorder", a.reorder),
    ] {
        if !(0.0..=100.0).contains(&v) {
            bail!("{name} {v}: expected a percentage 0..100");
        }
    }
    let forward = Direction {
        impairment: Impairment {
            delay: a.delay,
            loss: a.loss / 100.0,
            reorder: a.reorder / 100.0,
            reorder_gap: a.reorder_gap,
            ..Impairment::default()
        },
        seed: Seed(a.seed),
    };
    let imp = (
        forward,
        Direction {
            impairment: Impairment {
                loss: reverse_loss / 100.0,
                ..forward.impairment
            },
            seed: Seed(a.seed.wrapping_add(1)),
        },
    );
    let stats = Arc::new(RelayStats::default());
    let r = if let (Some(listen), Some(to)) = (a.listen, a.to) {
        eprintln!("diodon-lab: relay {listen} -> {to}: {imp:?}");
        relay::run_udp(listen, to, imp, &stats, stop)
    } else if let Some(tun) = &a.tun {
        let (ta, tb) = relay::open_tun_pair(tun, a.ns_a.as_deref(), a.ns_b.as_deref())
            .with_context(|| format!("open TUN {tun}"))?;
        eprintln!(
            "diodon-lab: relay tun {tun} {} <-> {}: {imp:?}",
            a.ns_a.as_deref().unwrap_or("-"),
            a.ns_b.as_deref().unwrap_or("-")
        );
        relay::run_tun_pair(ta, tb, imp, &stats, stop)
    } else {
        bail!("give --listen ADDR --to ADDR (UDP) or --tun NAME --ns-a NS --ns-b NS (IP)");
    };
    let stopped = stop.load(Ordering::SeqCst);
    eprintln!("diodon-lab: relay forward: {}", stats.forward.summary());
    eprintln!("diodon-lab: relay backward: {}", stats.backward.summary());
    r.context("relay")?;
    Ok(if stopped { Exit::Success } else { Exit::Io })
}
