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
use diodon_apps::packet_sink::PacketOutput;
use diodon_apps::report::Exit;
use diodon_apps::RecvOptions;
use diodon_io::UdpConfig;
use diodon_proto::ReceiverConfig;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `--tap-out PREFIX` or `--pcap-out DIR` (with its rotation), if given.
fn packet_output(args: &RecvArgs, file: &FileConfig) -> Option<PacketOutput> {
    if let Some(prefix) = pick(args.tap_out.as_ref(), file.tap_out.as_ref()) {
        return Some(PacketOutput::Tap(prefix));
    }
    pick(args.pcap_out.as_ref(), file.pcap_out.as_ref()).map(|dir| PacketOutput::Pcap {
        dir,
        max_bytes: args.rotate_mb.or(file.rotate_mb).unwrap_or(100) << 20,
        max_age: Duration::from_secs(args.rotate_secs.or(file.rotate_secs).unwrap_or(0)),
    })
}

/// Runs `diodon recv`.
pub fn run(args: &RecvArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(Fatal::config)?;
    let link = Link::merge(&args.link, &file).map_err(Fatal::config)?;
    let s = args.resolve(&file).map_err(Fatal::config)?;
    let udp_forward = pick(args.udp_forward.as_ref(), file.udp_forward.as_ref());
    let packets = packet_output(args, &file);
    let output = match (&s.out, s.stdout, s.tcp_connect, udp_forward, packets) {
        (Some(path), false, None, None, None) => RecvOutput::Dir {
            path: path.clone(),
            files: FileSinkOptions {
                fsync: s.fsync,
                quarantine: s.quarantine,
            },
        },
        (None, true, None, None, None) => RecvOutput::Stdout,
        (None, false, Some(a), None, None) => RecvOutput::Tcp(a),
        (None, false, None, Some(a), None) => RecvOutput::UdpForward(a),
        (None, false, None, None, Some(p)) => RecvOutput::Packets(p),
        _ => {
            return Err(Fatal::config(anyhow!(
                "choose exactly one of --out DIR, --stdout, --tcp-connect ADDR, --udp-forward ADDR, --tap-out PREFIX, --pcap-out DIR"
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
        | RecvOutput::Packets(_) => !link.json,
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
                "{} datagrams, {} verified, {} failed, {} socket drops",
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
