//! `diodon tap`: flags and the TOML file become a [`TapJob`]; the library
//! runs it until SIGINT/SIGTERM (or `--duration`); SIGHUP reloads the rule
//! file; the summary is printed and mapped to the exit code.
//!
//! ```text
//!  TapArgs + TapFile (tap keys; the rest is a FileConfig) ─► TapJob
//!     (agents NAME[=MAC], --encap-if, --to + link settings) + metrics listener bound
//!  ─► tap::run_tap: rings, raw senders, UDP socket opened ─► restrict: sandbox::apply
//!     (tap_policy), SIGINT/SIGTERM handler, SIGHUP counted again (the stop handler claims
//!     it), metrics served, --duration timer ─► workers ─► TapSummary
//! ```

use crate::args::{FlowArg, TapArgs};
use crate::config::{pick, FileConfig, Link};
use crate::fatal::Fatal;
use crate::stop::{on_signal, stop_after};
use anyhow::{anyhow, Context, Result};
use diodon_apps::metrics::{self, Source};
use diodon_apps::sandbox::{self, tap_policy, SandboxOptions};
use diodon_apps::tap::stats::TapStats;
use diodon_apps::tap::stream::SegmentPolicy;
use diodon_apps::tap::{run_tap, AgentSpec, EncapOptions, TapError, TapJob};
use diodon_apps::{report::Exit, SendOptions};
use diodon_filter::{FlowMode, Mac};
use diodon_io::UdpConfig;
use serde::Deserialize;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The tap's keys in the TOML file; everything else is a link setting.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct TapFile {
    #[serde(rename = "if")]
    interface: Option<String>,
    workers: Option<usize>,
    rules: Option<PathBuf>,
    flow: Option<FlowArg>,
    #[serde(default)]
    agent: Vec<String>,
    encap_if: Option<String>,
    ethertype: Option<String>,
    segment_mb: Option<u64>,
    segment_ms: Option<u64>,
    ring_mb: Option<usize>,
    duration: Option<f64>,
    #[serde(flatten)]
    rest: toml::Table,
}

/// `NAME` or `NAME=MAC`.
fn agent(spec: &str) -> Result<AgentSpec> {
    let (name, mac) = match spec.split_once('=') {
        Some((n, m)) => {
            let mac: Mac = m
                .parse()
                .map_err(|()| anyhow!("agent {n}: '{m}' is not a MAC address"))?;
            (n, Some(mac))
        }
        None => (spec, None),
    };
    if name.is_empty() {
        return Err(anyhow!("an agent needs a name (NAME or NAME=MAC)"));
    }
    Ok(AgentSpec {
        name: name.to_owned(),
        mac,
    })
}

fn hex16(s: &str) -> Result<u16> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u16::from_str_radix(t, 16).with_context(|| format!("EtherType '{s}' (hex, e.g. 0xF1F0)"))
}

/// A tap run as configured: the job, `--json`, `--duration`, the sandbox.
struct Built {
    job: TapJob,
    json: bool,
    duration: Option<f64>,
    sandbox: SandboxOptions,
}

fn build(args: &TapArgs) -> Result<Built> {
    let tf: TapFile = match &args.link.config {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| format!("parsing {}", p.display()))?
        }
        None => TapFile::default(),
    };
    let file = FileConfig::from_table(tf.rest.clone(), args.link.config.as_deref())?;
    let link = Link::merge(&args.link, &file)?;
    let interface = pick(args.interface.as_ref(), tf.interface.as_ref())
        .ok_or_else(|| anyhow!("--if IF (the capture interface) is required"))?;
    let specs = if args.agents.is_empty() {
        &tf.agent
    } else {
        &args.agents
    };
    let agents = specs.iter().map(|s| agent(s)).collect::<Result<Vec<_>>>()?;
    let agents_len = agents.len();
    let ethertype = match pick(args.ethertype.as_ref(), tf.ethertype.as_ref()) {
        Some(t) => hex16(&t)?,
        None => diodon_filter::frame::ethertype::TAP_ENCAP,
    };
    let encap = pick(args.encap_if.as_ref(), tf.encap_if.as_ref()).map(|interface| EncapOptions {
        interface,
        ethertype,
    });
    let diode = match args.to.or(file.to) {
        Some(to) => {
            // The same core settings as `send` (incl. --expected-loss and
            // the loss model's repair for short blocks).
            let config = crate::send::sender_config(&link, to).map_err(|f| f.1)?;
            config.validate()?;
            let any = if to.is_ipv6() {
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
            } else {
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
            };
            let mut udp =
                UdpConfig::new(pick(args.bind.as_ref(), file.bind.as_ref()).unwrap_or(any));
            udp.device.clone_from(&link.device);
            udp.sndbuf = Some(4 << 20);
            let opts = SendOptions {
                config,
                dest: to,
                udp,
                queue_chunks: 64,
                linger: Duration::from_millis(750),
                on_sent: None,
                keys: link.key_reload(),
            };
            let policy = SegmentPolicy {
                max_bytes: args.segment_mb.or(tf.segment_mb).unwrap_or(16) << 20,
                max_age: Duration::from_millis(args.segment_ms.or(tf.segment_ms).unwrap_or(1000)),
            };
            Some((opts, policy))
        }
        None => None,
    };
    let ring_mb = args.ring_mb.or(tf.ring_mb).unwrap_or(32).max(2);
    let sandbox = crate::sandbox::options(&args.sandbox, &file, &args.link, args.metrics.is_some())
        .map_err(|f| f.1)?;
    let workers = args.workers.or(tf.workers).unwrap_or(1).max(1);
    let job = TapJob {
        interface,
        workers,
        ring_block: 1 << 20,
        ring_blocks: ring_mb,
        rules: pick(args.rules.as_ref(), tf.rules.as_ref()),
        flow: match args.flow.or(tf.flow) {
            Some(FlowArg::Ippair) => FlowMode::IpPair,
            _ => FlowMode::FiveTuple,
        },
        agents,
        encap,
        diode,
        reload_on_hangup: true,
        // The handler is installed once the process is restricted.
        stop: Arc::new(AtomicBool::new(false)),
        stats: Arc::new(TapStats::new(workers, agents_len)),
        progress: Arc::default(),
        capture_only: args.capture_only,
    };
    Ok(Built {
        job,
        json: link.json,
        duration: args.duration.or(tf.duration),
        sandbox,
    })
}

/// Runs `diodon tap`.
pub fn run(args: &TapArgs) -> Result<Exit, Fatal> {
    let Built {
        job,
        json,
        duration,
        sandbox: options,
    } = build(args).map_err(Fatal::config)?;
    // SIGHUP means "reload", not "stop", from the start.
    diodon_io::signal::count_hangups()
        .context("installing the SIGHUP handler")
        .map_err(Fatal::io)?;
    let peer = job
        .diode
        .as_ref()
        .map_or(std::net::IpAddr::from(Ipv4Addr::LOCALHOST), |(o, _)| {
            o.dest.ip()
        });
    let listener = args
        .metrics
        .map(|addr| metrics::bind(addr, peer, Some(job.interface.clone())))
        .transpose()
        .map_err(|e| Fatal::io(e.into()))?;
    let policy = tap_policy(&job, &options);
    let restrict = || {
        sandbox::apply(&policy).map_err(|e| TapError::Sandbox(e.to_string()))?;
        // SIGHUP stays "reload" (the rules, and the key file if any).
        on_signal(&job.stop, true);
        if let Some(l) = listener {
            l.serve(Source::Tap {
                stats: Arc::clone(&job.stats),
                progress: job.diode.as_ref().map(|_| Arc::clone(&job.progress)),
            })
            .map_err(|_| TapError::Thread("metrics"))?;
        }
        stop_after(duration, &job.stop);
        Ok(())
    };
    let summary = run_tap(&job, restrict, |_| {}).map_err(|e| Fatal(e.exit(), e.into()))?;
    eprint!("{}", summary.text());
    if json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(summary.exit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::LinkArgs;

    #[test]
    fn agents_and_ethertypes_parse() {
        let a = agent("ids1=02:00:00:00:00:09").unwrap();
        assert_eq!(a.name, "ids1");
        assert_eq!(
            a.mac.map(|m| m.to_string()).as_deref(),
            Some("02:00:00:00:00:09")
        );
        assert!(agent("ids1=zz").is_err());
        assert!(agent("=02:00:00:00:00:09").is_err());
        assert_eq!(agent("x").unwrap().mac, None);
        assert_eq!(hex16("0xF1F0").unwrap(), 0xf1f0);
        assert!(hex16("0xnope").is_err());
    }

    #[test]
    fn the_toml_file_has_the_tap_keys_and_the_link_keys() {
        let tf: TapFile = toml::from_str(
            "if = \"eth1\"\nworkers = 2\nagent = [\"a=02:00:00:00:00:01\", \"b=02:00:00:00:00:02\"]\nflow = \"ippair\"\nrate = \"100mbit\"\n",
        )
        .unwrap();
        assert_eq!(tf.interface.as_deref(), Some("eth1"));
        assert_eq!(tf.agent.len(), 2);
        assert_eq!(tf.flow, Some(FlowArg::Ippair));
        let f = FileConfig::from_table(tf.rest, None).unwrap();
        assert!(Link::merge(&LinkArgs::default(), &f).is_ok());
        let bad: TapFile = toml::from_str("if = \"eth1\"\nbogus = 1\n").unwrap();
        assert!(
            FileConfig::from_table(bad.rest, None).is_err(),
            "unknown keys are refused"
        );
    }
}
