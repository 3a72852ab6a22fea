//! `diodon recv`: flags and the TOML file become a [`RecvJob`]; the library
//! runs it; the summary is printed and mapped to the exit code.
//!
//! ```text
//!  RecvArgs + FileConfig ─► Link ─► ReceiverConfig, UdpConfig, RecvOutput ─► gateway::run_recv
//!                                   ─► RecvSummary ─► stderr text, --json stdout|stderr, exit code
//! ```

use crate::args::RecvArgs;
use crate::config::{pick, FileConfig, Link};
use crate::fatal::Fatal;
use crate::progress;
use crate::stop::stop_flag;
use anyhow::anyhow;
use diodon_apps::files::FileSinkOptions;
use diodon_apps::gateway::{run_recv, MetricsOptions, RecvJob, RecvOutput};
use diodon_apps::link::rcvbuf_for;
use diodon_apps::mirror::MirrorOptions;
use diodon_apps::report::Exit;
use diodon_apps::RecvOptions;
use diodon_io::UdpConfig;
use diodon_proto::ReceiverConfig;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;

/// Runs `diodon recv`.
pub fn run(args: &RecvArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(Fatal::config)?;
    let link = Link::merge(&args.link, &file).map_err(Fatal::config)?;
    let s = args.resolve(&file).map_err(Fatal::config)?;
    let udp_forward = pick(args.udp_forward.as_ref(), file.udp_forward.as_ref());
    let tun = pick(args.tun.as_ref(), file.tun.as_ref());
    let output = match (&s.out, s.stdout, s.tcp_connect, udp_forward) {
        _ if tun.is_some() && s.out.is_none() && !s.stdout && s.tcp_connect.is_none() && udp_forward.is_none() => RecvOutput::Tun {
            name: tun.unwrap_or_default(),
            mtu: args.tun_mtu.or(file.tun_mtu),
        },
        _ if tun.is_some() => {
            return Err(Fatal::config(anyhow!(
                "--tun cannot be combined with --out, --stdout, --tcp-connect or --udp-forward"
            )))
        }
        (Some(path), false, None, None) => RecvOutput::Dir {
            path: path.clone(),
            files: FileSinkOptions {
                fsync: s.fsync,
                quarantine: s.quarantine,
                mirror: MirrorOptions {
                    delete_after: s.delete_after,
                    audit: s.audit.clone(),
                },
            },
        },
        (None, true, None, None) => RecvOutput::Stdout,
        (None, false, Some(a), None) => RecvOutput::Tcp(a),
        (None, false, None, Some(a)) => RecvOutput::UdpForward(a),
        _ => {
            return Err(Fatal::config(anyhow!(
                "choose exactly one of --out DIR, --stdout, --tcp-connect ADDR, --udp-forward ADDR, --tun NAME"
            )))
        }
    };
    let mut udp = UdpConfig::new(s.listen);
    udp.device.clone_from(&link.device);
    udp.rcvbuf = Some(s.rcvbuf.unwrap_or_else(|| rcvbuf_for(link.rate, s.stall)));
    let show_bar = match output {
        RecvOutput::Stdout => false,
        RecvOutput::Dir { .. }
        | RecvOutput::Tcp(_)
        | RecvOutput::UdpForward(_)
        | RecvOutput::Tun { .. } => !link.json,
    };
    let job = RecvJob {
        opts: RecvOptions {
            config: ReceiverConfig {
                integrity: link.integrity.clone(),
                delta_t: link.delta_t,
                ..ReceiverConfig::default()
            },
            udp,
            queue_batches: 256,
            event_queue: 256,
            once: s.once,
            expect_channels: s.channels,
        },
        output,
        metrics: pick(args.metrics.as_ref(), file.metrics.as_ref()).map(|addr| MetricsOptions {
            addr,
            peer: s.listen.ip(),
            device: link.device.clone(),
        }),
        stop: stop_flag(),
    };
    let bar = (show_bar && std::io::stderr().is_terminal()).then(|| progress::bar(0));
    let summary = run_recv(job, |p| {
        if let Some(bar) = bar {
            bar.set_position(p.bytes.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{} datagrams, {} verified, {} failed, {} packets dropped by the kernel",
                p.datagrams.load(Ordering::Relaxed),
                p.complete.load(Ordering::Relaxed),
                p.failed.load(Ordering::Relaxed),
                p.socket_drops.load(Ordering::Relaxed)
            ));
        }
    })
    .map_err(Fatal::gateway)?;
    progress::clear();
    eprint!("{}", summary.text());
    if link.json {
        let text = serde_json::to_string(&summary).unwrap_or_default();
        // With --stdout the data owns standard output.
        if s.stdout {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
    Ok(summary.exit(s.once))
}
