//! `diodon recv`: flags and the TOML file become a [`RecvJob`]; the library
//! runs it; the summary is printed and mapped to the exit code.
//!
//! ```text
//!  RecvArgs + FileConfig ─► Link ─► ReceiverConfig, UdpConfig, RecvOutput ─► gateway::open_recv
//!    (socket bound and sized, output and metrics listener open: the privileged part)
//!  ─► sandbox::apply(recv_policy) ─► SIGINT handler ─► OpenedRecv::run
//!  ─► RecvSummary ─► stderr text, --json stdout|stderr, exit code
//! ```

use crate::args::RecvArgs;
use crate::config::{pick, FileConfig, Link, RecvSettings};
use crate::fatal::Fatal;
use crate::progress;
use crate::stop::on_signal;
use anyhow::anyhow;
use diodon_apps::files::FileSinkOptions;
use diodon_apps::gateway::{open_recv, MetricsOptions, RecvJob, RecvOutput};
use diodon_apps::kafka::{KafkaSinkOptions, DEFAULT_HOLD_BYTES};
use diodon_apps::link::rcvbuf_for;
use diodon_apps::mirror::MirrorOptions;
use diodon_apps::packet_sink::PacketOutput;
use diodon_apps::report::Exit;
use diodon_apps::sandbox::{self, recv_policy};
use diodon_apps::RecvOptions;
use diodon_io::UdpConfig;
use diodon_proto::ReceiverConfig;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The one sink the flags and the file name (exactly one of them).
pub(crate) fn output(
    args: &RecvArgs,
    file: &FileConfig,
    s: &RecvSettings,
) -> Result<RecvOutput, Fatal> {
    let udp_forward = pick(args.udp_forward.as_ref(), file.udp_forward.as_ref());
    let tun = pick(args.tun.as_ref(), file.tun.as_ref());
    let tap_out = pick(args.tap_out.as_ref(), file.tap_out.as_ref());
    let pcap_out = pick(args.pcap_out.as_ref(), file.pcap_out.as_ref());
    let mut outputs: Vec<RecvOutput> = Vec::new();
    if let Some(path) = &s.out {
        outputs.push(RecvOutput::Dir {
            path: path.clone(),
            files: FileSinkOptions {
                fsync: s.fsync,
                quarantine: s.quarantine,
                mirror: MirrorOptions {
                    delete_after: s.delete_after,
                    audit: s.audit.clone(),
                },
                held: s.held,
            },
        });
    }
    if s.stdout {
        outputs.push(RecvOutput::Stdout);
    }
    if let Some(a) = s.tcp_connect {
        outputs.push(RecvOutput::Tcp(a));
    }
    if let Some(a) = udp_forward {
        outputs.push(RecvOutput::UdpForward(a));
    }
    if let Some(brokers) = pick(args.kafka.as_ref(), file.kafka.as_ref()) {
        outputs.push(RecvOutput::Kafka(KafkaSinkOptions {
            brokers,
            topic_prefix: pick(args.topic_prefix.as_ref(), file.topic_prefix.as_ref())
                .unwrap_or_default(),
            hold_bytes: pick(args.kafka_hold.as_ref(), file.kafka_hold.as_ref())
                .map_or(DEFAULT_HOLD_BYTES, |mib| {
                    usize::try_from(mib << 20).unwrap_or(usize::MAX)
                }),
            timeout: Duration::from_secs(30),
        }));
    }
    if let Some(name) = tun {
        outputs.push(RecvOutput::Tun {
            name,
            mtu: args.tun_mtu.or(file.tun_mtu),
        });
    }
    if let Some(prefix) = tap_out {
        outputs.push(RecvOutput::Packets(PacketOutput::Tap(prefix)));
    }
    if let Some(dir) = pcap_out {
        outputs.push(RecvOutput::Packets(PacketOutput::Pcap {
            dir,
            max_bytes: args.rotate_mb.or(file.rotate_mb).unwrap_or(100) << 20,
            max_age: Duration::from_secs(args.rotate_secs.or(file.rotate_secs).unwrap_or(0)),
        }));
    }
    if outputs.len() != 1 {
        return Err(Fatal::config(anyhow!(
            "choose exactly one of --out DIR, --stdout, --tcp-connect ADDR, --udp-forward ADDR, \
             --kafka BROKERS, --tun NAME, --tap-out PREFIX, --pcap-out DIR"
        )));
    }
    Ok(outputs.remove(0))
}

/// Runs `diodon recv`: opens what needs privilege, restricts itself, runs.
pub fn run(args: &RecvArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(Fatal::config)?;
    let link = Link::merge(&args.link, &file).map_err(Fatal::config)?;
    let s = args.resolve(&file).map_err(Fatal::config)?;
    let output = output(args, &file, &s)?;
    let metrics = pick(args.metrics.as_ref(), file.metrics.as_ref());
    let sandbox = crate::sandbox::options(&args.sandbox, &file, &args.link, metrics.is_some())?;
    if sandbox.user.is_some() && matches!(output, RecvOutput::Packets(PacketOutput::Tap(_))) {
        return Err(Fatal::config(anyhow!(
            "--user cannot be combined with --tap-out: a TAP interface is created for each \
             agent as its first channel arrives, which needs CAP_NET_ADMIN"
        )));
    }
    let policy = recv_policy(&output, &sandbox);
    let kept = output.clone();
    let mut udp = UdpConfig::new(s.listen);
    udp.device.clone_from(&link.device);
    udp.rcvbuf = Some(s.rcvbuf.unwrap_or_else(|| rcvbuf_for(link.rate, s.stall)));
    let show_bar = match output {
        RecvOutput::Stdout => false,
        RecvOutput::Dir { .. }
        | RecvOutput::Tcp(_)
        | RecvOutput::UdpForward(_)
        | RecvOutput::Tun { .. }
        | RecvOutput::Packets(_)
        | RecvOutput::Kafka(_) => !link.json,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let job = RecvJob {
        opts: RecvOptions {
            config: ReceiverConfig {
                integrity: link.integrity.clone(),
                delta_t: link.delta_t,
                ..ReceiverConfig::default()
            },
            udp,
            queue_batches: diodon_apps::recv::NET_QUEUE_BATCHES,
            event_queue: 256,
            once: s.once,
            expect_channels: s.channels,
            silence_alarm: s.alarm_silence,
            give_up_after: s.timeout,
            list_channels: s.list_channels,
            keys: link.key_reload(),
        },
        output,
        metrics: metrics.map(|addr| MetricsOptions {
            addr,
            peer: s.listen.ip(),
            device: link.device.clone(),
        }),
        stop: Arc::clone(&stop),
    };
    let opened = open_recv(job).map_err(Fatal::gateway)?;
    sandbox::apply_recv(&kept, &policy)
        .map_err(|e| Fatal::io(anyhow!("restricting the process: {e}")))?;
    on_signal(&stop, true);
    let bar = (show_bar && std::io::stderr().is_terminal()).then(|| progress::bar(0));
    let summary = opened
        .run(|p| {
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
