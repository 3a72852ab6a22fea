//! `diodon agent`: flags and the TOML file become an [`AgentJob`]; the
//! library runs it until SIGINT/SIGTERM (or `--duration`); the summary is
//! printed and mapped to the exit code (3 when the interface or the output
//! went away).
//!
//! ```text
//!  AgentArgs + AgentFile ─► AgentJob (interface, marker, TAP | pcap | socket) ─► agent::run_agent
//! ```

use crate::args::AgentArgs;
use crate::config::pick;
use crate::fatal::Fatal;
use crate::stop::stop_flag;
use anyhow::{anyhow, Context, Result};
use diodon_apps::agent::{run_agent, AgentJob, AgentStats};
use diodon_apps::frames_out::{pcap_target, FrameTarget};
use diodon_apps::metrics::{self, Source};
use diodon_apps::report::Exit;
use serde::Deserialize;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The agent's TOML keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct AgentFile {
    #[serde(rename = "if")]
    interface: Option<String>,
    ethertype: Option<String>,
    marked_only: Option<bool>,
    tap_out: Option<String>,
    pcap_out: Option<PathBuf>,
    socket: Option<PathBuf>,
    rotate_mb: Option<u64>,
    rotate_secs: Option<u64>,
    ring_mb: Option<usize>,
    duration: Option<f64>,
    metrics: Option<SocketAddr>,
    json: Option<bool>,
}

fn build(a: &AgentArgs) -> Result<(AgentJob, Option<SocketAddr>, bool)> {
    let f: AgentFile = match &a.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("in {}", p.display()))?
        }
        None => AgentFile::default(),
    };
    let interface = pick(a.interface.as_ref(), f.interface.as_ref())
        .ok_or_else(|| anyhow!("--if IF (the interface facing the tap) is required"))?;
    let ethertype = match pick(a.ethertype.as_ref(), f.ethertype.as_ref()) {
        Some(t) => {
            let h = t.trim_start_matches("0x").trim_start_matches("0X");
            u16::from_str_radix(h, 16).with_context(|| format!("EtherType '{t}'"))?
        }
        None => diodon_filter::frame::ethertype::TAP_ENCAP,
    };
    let tap = pick(a.tap_out.as_ref(), f.tap_out.as_ref());
    let pcap = pick(a.pcap_out.as_ref(), f.pcap_out.as_ref());
    let socket = pick(a.socket.as_ref(), f.socket.as_ref());
    let target = match (tap, pcap, socket) {
        (Some(t), None, None) => FrameTarget::Tap(t),
        (None, Some(d), None) => pcap_target(
            &d,
            "frames",
            a.rotate_mb.or(f.rotate_mb).unwrap_or(100) << 20,
            Duration::from_secs(a.rotate_secs.or(f.rotate_secs).unwrap_or(0)),
        ),
        (None, None, Some(p)) => FrameTarget::Socket(p),
        _ => {
            return Err(anyhow!(
                "choose exactly one of --tap-out NAME, --pcap-out DIR, --socket PATH"
            ))
        }
    };
    let stop = stop_flag();
    if let Some(d) = a.duration.or(f.duration) {
        let s = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d.max(0.0)));
            s.store(true, Ordering::Relaxed);
        });
    }
    let job = AgentJob {
        interface,
        ethertype,
        marked_only: a.marked_only || f.marked_only.unwrap_or(false),
        target,
        ring_block: 1 << 20,
        ring_blocks: a.ring_mb.or(f.ring_mb).unwrap_or(32).max(2),
        stop,
        stats: Arc::new(AgentStats::default()),
    };
    Ok((
        job,
        a.metrics.or(f.metrics),
        a.json || f.json.unwrap_or(false),
    ))
}

/// Runs `diodon agent`.
pub fn run(args: &AgentArgs) -> Result<Exit, Fatal> {
    let (job, metrics_addr, json) = build(args).map_err(Fatal::config)?;
    if let Some(addr) = metrics_addr {
        let source = Source::Agent {
            stats: Arc::clone(&job.stats),
        };
        metrics::serve(
            addr,
            source,
            Ipv4Addr::LOCALHOST.into(),
            Some(job.interface.clone()),
        )
        .map_err(|e| Fatal::io(e.into()))?;
    }
    let summary = run_agent(&job, |_| {}).map_err(|e| Fatal::io(e.into()))?;
    eprint!("{}", summary.text());
    if json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(summary.exit())
}
