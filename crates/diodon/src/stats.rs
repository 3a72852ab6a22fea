//! `diodon stats`: every measuring point of one host in one view (kernel UDP
//! and IP MIB, link, guard and, with `--diodon ADDR`, a running Diodon's own
//! counters from its `/counters` endpoint), once or every `--watch SECS` as
//! deltas (see `diodon_apps::stats`).
//!
//! ```text
//!  snapshot ─► print (absolute) ─► sleep SECS ─► snapshot ─► print delta ─► ...
//! ```

use crate::fatal::Fatal;
use clap::Args;
use diodon_apps::guard;
use diodon_apps::report::Exit;
use diodon_apps::stats::{Snapshot, Target};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `diodon stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Network namespace (`ip netns` name); default: this one.
    #[arg(long)]
    pub ns: Option<String>,
    /// Interface whose link counters to show.
    #[arg(long = "if", value_name = "IF")]
    pub iface: Option<String>,
    /// Print deltas every SECS seconds (until interrupted, or --count times).
    #[arg(long, value_name = "SECS")]
    pub watch: Option<f64>,
    /// With --watch: stop after this many deltas.
    #[arg(long)]
    pub count: Option<u64>,
    /// Guard table whose counters to include.
    #[arg(long, default_value = guard::DEFAULT_TABLE)]
    pub table: String,
    /// Include a running Diodon's own counters (socket drops, missing,
    /// recovered, lost, ...) from its metrics endpoint: the ADDR given to
    /// `diodon send|recv --metrics ADDR`, reached from inside --ns.
    #[arg(long, value_name = "ADDR")]
    pub diodon: Option<std::net::SocketAddr>,
    /// One JSON object per snapshot / delta.
    #[arg(long)]
    pub json: bool,
}

fn show(s: &Snapshot, kind: &str, json: bool) {
    if json {
        let mut v = serde_json::to_value(s).unwrap_or_default();
        v["kind"] = serde_json::json!(kind);
        println!("{v}");
    } else {
        println!("== {kind}");
        print!("{}", s.text());
    }
}

/// Runs `diodon stats`. Exit 0, or 3 when a counter cannot be read.
pub fn run(a: &StatsArgs) -> Result<Exit, Fatal> {
    let t = Target {
        ns: a.ns.clone(),
        iface: a.iface.clone(),
        guard_table: a.table.clone(),
        diodon: a.diodon,
    };
    let read = || Snapshot::read(&t).map_err(|e| Fatal::io(e.into()));
    let mut last = read()?;
    show(&last, "snapshot", a.json);
    let Some(secs) = a.watch else {
        return Ok(Exit::Success);
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(Fatal::config(anyhow::anyhow!(
            "--watch needs a positive number of seconds"
        )));
    }
    let stop = crate::stop::stop_flag();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) && a.count.is_none_or(|c| n < c) {
        std::thread::sleep(Duration::from_secs_f64(secs));
        let now = read()?;
        show(&now.delta(&last), "delta", a.json);
        last = now;
        n += 1;
    }
    Ok(Exit::Success)
}
