//! `diodon agent`: flags and the TOML file become an [`AgentJob`]; the
//! library runs it until SIGINT/SIGTERM (or `--duration`); the summary is
//! printed and mapped to the exit code (3 when the interface or the output
//! went away).
//!
//! ```text
//!  AgentArgs + AgentFile ─► AgentJob (interface, marker, TAP | pcap | socket) + metrics bound
//!  ─► agent::run_agent: ring and output opened ─► restrict: sandbox::apply (agent_policy),
//!     SIGINT/SIGTERM handler, metrics served, --duration timer ─► the capture loop
//! ```

use crate::args::AgentArgs;
use crate::config::pick;
use crate::fatal::Fatal;
use crate::stop::{on_signal, stop_after};
use anyhow::{anyhow, Context, Result};
use diodon_apps::agent::{run_agent, AgentError, AgentJob, AgentStats};
use diodon_apps::frames_out::{pcap_target, FrameTarget};
use diodon_apps::metrics::{self, Source};
use diodon_apps::report::Exit;
use diodon_apps::sandbox::{self, agent_policy, SandboxOptions};
use serde::Deserialize;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
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
    user: Option<String>,
    no_sandbox: Option<bool>,
}

/// An agent run as configured.
struct Built {
    job: AgentJob,
    metrics: Option<SocketAddr>,
    json: bool,
    duration: Option<f64>,
    sandbox: SandboxOptions,
}

fn build(a: &AgentArgs) -> Result<Built> {
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
    let metrics = a.metrics.or(f.metrics);
    let sandbox = crate::sandbox::resolve(
        pick(a.sandbox.user.as_ref(), f.user.as_ref()),
        a.sandbox.no_sandbox || f.no_sandbox.unwrap_or(false),
        a.config.iter().cloned().collect(),
        metrics.is_some(),
    )
    .map_err(|e| e.1)?;
    let job = AgentJob {
        interface,
        ethertype,
        marked_only: a.marked_only || f.marked_only.unwrap_or(false),
        target,
        ring_block: 1 << 20,
        ring_blocks: a.ring_mb.or(f.ring_mb).unwrap_or(32).max(2),
        // The handler is installed once the process is restricted.
        stop: Arc::new(AtomicBool::new(false)),
        stats: Arc::new(AgentStats::default()),
    };
    Ok(Built {
        job,
        metrics,
        json: a.json || f.json.unwrap_or(false),
        duration: a.duration.or(f.duration),
        sandbox,
    })
}

/// Runs `diodon agent`.
pub fn run(args: &AgentArgs) -> Result<Exit, Fatal> {
    let Built {
        job,
        metrics: metrics_addr,
        json,
        duration,
        sandbox: options,
    } = build(args).map_err(Fatal::config)?;
    let listener = metrics_addr
        .map(|addr| {
            metrics::bind(
                addr,
                Ipv4Addr::LOCALHOST.into(),
                Some(job.interface.clone()),
            )
        })
        .transpose()
        .map_err(|e| Fatal::io(e.into()))?;
    let policy = agent_policy(&job.target, &options);
    let restrict = || {
        sandbox::apply(&policy).map_err(|e| AgentError::Sandbox(e.to_string()))?;
        on_signal(&job.stop, false);
        if let Some(l) = listener {
            l.serve(Source::Agent {
                stats: Arc::clone(&job.stats),
            })
            .map_err(|e| AgentError::Metrics(e.to_string()))?;
        }
        stop_after(duration, &job.stop);
        Ok(())
    };
    let summary = run_agent(&job, restrict, |_| {}).map_err(|e| Fatal::io(e.into()))?;
    eprint!("{}", summary.text());
    if json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(summary.exit())
}
