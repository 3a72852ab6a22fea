//! `diodon tunnel send`: the sending side of the one-way IP tunnel. Flags
//! and the TOML file become a [`SendJob`] with a TUN source; the far side
//! is `diodon recv --tun NAME`.
//!
//! ```text
//!  TunnelSendArgs + FileConfig ─► Link ─► SenderConfig (interleave 1, buffer = 2 groups,
//!                                         short flush) + TunnelSourceOptions (queue sized
//!                                         in time at the link rate) ─► send::execute:
//!    gateway::open_send (socket; probe, TUN queues, txqueuelen, MTU, up) ─► sandbox::apply
//!    (send_policy(Tun): nothing written, no capability) ─► SIGINT handler ─► the TUN readers
//! ```

use crate::args::{TunnelArgs, TunnelCommand, TunnelSendArgs};
use crate::config::{pick, FileConfig, Link};
use crate::fatal::Fatal;
use crate::send::{execute, sender_config, socket};
use anyhow::{anyhow, Context};
use diodon_apps::gateway::{MetricsOptions, SendInput, SendJob};
use diodon_apps::report::Exit;
use diodon_apps::sandbox::{send_policy, SendSources};
use diodon_apps::tunnel::{shaper_for, DropPolicy, TunnelSourceOptions};
use diodon_apps::SendOptions;
use diodon_io::qdisc::Shaper;
use diodon_io::tun::{Offload, TunConfig};
use diodon_proto::records::{MAX_RECORD, RECORD_HEADER};
use diodon_proto::{Rate, SenderConfig};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Runs `diodon tunnel …`.
pub fn run(args: &TunnelArgs) -> Result<Exit, Fatal> {
    match &args.cmd {
        TunnelCommand::Send(a) => send(a),
    }
}

fn send(a: &TunnelSendArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(a.link.config.as_deref()).map_err(Fatal::config)?;
    let mut link = Link::merge(&a.link, &file).map_err(Fatal::config)?;
    if !link.interleave_given {
        // Latency: a group of one block is cut (and can leave) soonest.
        link.interleave = 1;
    }
    let to = pick(a.to.as_ref(), file.to.as_ref())
        .context("--to ADDR is required")
        .map_err(Fatal::config)?;
    let tun = pick(a.tun.as_ref(), file.tun.as_ref())
        .context("--tun NAME is required")
        .map_err(Fatal::config)?;
    let policy: DropPolicy = a
        .drop
        .clone()
        .or_else(|| file.drop.clone())
        .unwrap_or_else(|| "tail".into())
        .parse()
        .map_err(|e: String| Fatal::config(anyhow!(e)))?;
    let mut config = sender_config(&link, to)?;
    // The core's buffer holds the minimum, two groups: under overload the
    // queue in front of it, not the core, decides what waits.
    config.buffer_limit = 2 * config.block_bytes() * usize::from(config.interleave_depth);
    config.flush_delay = Duration::from_millis(a.flush.or(file.flush).unwrap_or(5));
    config.validate().map_err(|e| Fatal::config(e.into()))?;
    let queue_ms = a.queue_ms.or(file.queue_ms).unwrap_or(30);
    let queue_bytes = if link.rate.is_unlimited() {
        4 << 20
    } else {
        usize::try_from(link.rate.bps() / 8 * queue_ms / 1000).unwrap_or(usize::MAX)
    }
    .max(64 * 1024);
    let offload = a.offload || file.offload.unwrap_or(false);
    let txqueuelen = a.txqueuelen.or(file.txqueuelen);
    let shaper = shaper(
        pick(a.shape.as_ref(), file.shape.as_ref()).as_deref(),
        &link,
        &config,
        txqueuelen,
        a.tun_mtu.or(file.tun_mtu),
    )?;
    let source = TunnelSourceOptions {
        tun: TunConfig {
            name: tun,
            queues: a.tun_queues.or(file.tun_queues).unwrap_or(1).max(1),
            vnet_hdr: offload,
            offload: if offload { Offload::ALL } else { Offload::NONE },
        },
        mtu: a.tun_mtu.or(file.tun_mtu),
        txqueuelen,
        queue_bytes,
        policy,
        max_packet: (config.block_bytes() - RECORD_HEADER).min(MAX_RECORD),
        probe: !(a.no_probe || file.no_probe.unwrap_or(false)),
        shaper,
    };
    let bind = pick(a.bind.as_ref(), file.bind.as_ref());
    let metrics = pick(a.metrics.as_ref(), file.metrics.as_ref());
    let sandbox = crate::sandbox::options(&a.sandbox, &file, &a.link, metrics.is_some())?;
    let stop = Arc::new(AtomicBool::new(false));
    let job = SendJob {
        opts: SendOptions {
            config,
            dest: to,
            udp: socket(&link, bind, to, a.no_gso),
            queue_chunks: 2,
            linger: Duration::from_millis(750),
            on_sent: None,
            keys: link.key_reload(),
        },
        input: SendInput::Tunnel(source),
        metrics: metrics.map(|addr| MetricsOptions {
            addr,
            peer: to.ip(),
            device: link.device.clone(),
        }),
        stop: Arc::clone(&stop),
        more_links: Vec::new(),
    };
    let policy = send_policy(&SendSources::Tun, &sandbox);
    execute(job, &link, Some((policy, stop)))
}

/// `--shape`: `off` (or absent), `auto` (the tunnel's capacity at the link
/// rate: [`shaper_for`]), or a rate in IP packet bits per second; the burst
/// and limit follow [`shaper_for`]'s rules either way.
fn shaper(
    shape: Option<&str>,
    link: &Link,
    config: &SenderConfig,
    txqueuelen: Option<u32>,
    tun_mtu: Option<u32>,
) -> Result<Option<Shaper>, Fatal> {
    // The kernel's default ring is 500 packets; its default TUN MTU 1500.
    let (ring, mtu) = (txqueuelen.unwrap_or(500), tun_mtu.unwrap_or(1500));
    let rate = match shape.map(str::trim) {
        None | Some("off") => return Ok(None),
        Some("auto") => link.rate,
        Some(r) => {
            let rate: Rate = r.parse().map_err(|_| {
                Fatal::config(anyhow!(
                    "--shape {r}: expected `auto`, `off` or a rate such as `80mbit`"
                ))
            })?;
            // A given rate is the shaper's own, not a link rate to take the
            // repair share off.
            return shaper_for(rate, config, ring, mtu)
                .map(|s| {
                    Some(Shaper {
                        rate_bytes_per_sec: rate.bps() / 8,
                        ..s
                    })
                })
                .ok_or_else(|| unpaced(r));
        }
    };
    shaper_for(rate, config, ring, mtu)
        .map(Some)
        .ok_or_else(|| unpaced("auto"))
}

fn unpaced(what: &str) -> Fatal {
    Fatal::config(anyhow!(
        "--shape {what} needs a paced link: give --rate (the shaper lets packets in no faster than the link carries them)"
    ))
}
