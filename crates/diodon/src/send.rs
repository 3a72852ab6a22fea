//! `diodon send`: flags and the TOML file become a [`SendJob`]; the library
//! runs it; the summary is printed and mapped to the exit code.
//!
//! ```text
//!  SendArgs + FileConfig ─► Link ─► SenderConfig, UdpConfig, SendInput ─► gateway::open_send
//!    (socket bound and sized, listeners bound) ─► sandbox::apply(send_policy: read the
//!    sources only) ─► SIGINT handler ─► OpenedSend::run
//!  ─► SendSummary ─► stderr text, --json stdout, exit code
//! ```

use crate::args::SendArgs;
use crate::config::{pick, FileConfig, Link, LinkTable};
use crate::fatal::Fatal;
use crate::progress;
use crate::stop::on_signal;
use anyhow::{anyhow, Context};
use diodon_apps::files::collect;
use diodon_apps::gateway::{open_send, LinkTarget, MetricsOptions, SendInput, SendJob};
use diodon_apps::kafka::KafkaSourceOptions;
use diodon_apps::link::udp_source_options;
use diodon_apps::report::Exit;
use diodon_apps::sandbox::{self, send_policy, SendSources};
use diodon_apps::SendOptions;
use diodon_io::sandbox::Restrictions;
use diodon_io::UdpConfig;
use diodon_proto::SenderConfig;
use std::io::IsTerminal;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs `diodon send`.
pub fn run(args: &SendArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(Fatal::config)?;
    let link = Link::merge(&args.link, &file).map_err(Fatal::config)?;
    let (tcp_listen, linger, no_gso) = args.resolve(&file);
    let links = args.links(&file).map_err(Fatal::config)?;
    let Some(first) = links.first().cloned() else {
        return Err(Fatal::config(anyhow!("--to ADDR is required")));
    };
    let to = first.to;
    let udp_listen = pick(args.udp_listen.as_ref(), file.udp_listen.as_ref());
    let stdin = args.paths.iter().any(|p| p.as_os_str() == "-");
    let kafka = pick(args.kafka.as_ref(), file.kafka.as_ref());
    if args.paths.is_empty() && tcp_listen.is_none() && udp_listen.is_none() && kafka.is_none() {
        return Err(Fatal::config(anyhow!(
            "nothing to send: give paths, `-` for stdin, --tcp-listen ADDR, --udp-listen ADDR \
             or --kafka BROKERS --topic T"
        )));
    }
    if stdin && args.paths.len() > 1 {
        return Err(Fatal::config(anyhow!(
            "`-` (stdin) cannot be combined with other paths"
        )));
    }
    let (config, udp, more_links) = link_cores(&link, &links, udp_listen.is_some(), no_gso)?;
    let metrics = pick(args.metrics.as_ref(), file.metrics.as_ref());
    let sandbox = crate::sandbox::options(&args.sandbox, &file, &args.link, metrics.is_some())?;
    let input = if let Some(brokers) = kafka {
        SendInput::Kafka(kafka_source(args, &file, brokers)?)
    } else if let Some(a) = udp_listen {
        let idle = args.udp_idle.or(file.udp_idle).unwrap_or(5000);
        SendInput::Udp(udp_source_options(
            a,
            link.rate,
            Duration::from_millis(idle),
        ))
    } else if let Some(a) = tcp_listen {
        let l = std::net::TcpListener::bind(a)
            .with_context(|| format!("listening on {a}"))
            .map_err(Fatal::io)?;
        SendInput::Tcp(l)
    } else if stdin {
        SendInput::Stdin
    } else {
        let files = collect(&args.paths).map_err(|e| Fatal::io(e.into()))?;
        if files.is_empty() {
            return Err(Fatal::io(anyhow!(
                "no regular files found in the given paths"
            )));
        }
        SendInput::Files(files)
    };
    let sources = match &input {
        SendInput::Files(_) => SendSources::Paths(args.paths.clone()),
        SendInput::Stdin => SendSources::Stdin,
        SendInput::Tcp(_) => SendSources::Tcp,
        SendInput::Udp(_) => SendSources::Udp,
        SendInput::Tunnel(_) => SendSources::Tun,
        SendInput::Kafka(k) => SendSources::Kafka(k.brokers.clone()),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let job = SendJob {
        opts: SendOptions {
            config,
            dest: to,
            udp,
            queue_chunks: 32,
            linger,
            on_sent: None,
            keys: link.key_reload(),
        },
        input,
        metrics: metrics.map(|addr| MetricsOptions {
            addr,
            peer: to.ip(),
            device: link.device.clone(),
        }),
        stop: Arc::clone(&stop),
        more_links,
    };
    execute(job, &link, Some((send_policy(&sources, &sandbox), stop)))
}

/// The core and socket of the first of `links`, and the others as further
/// links (`datagram_flows`: `--udp-listen`).
pub(crate) fn link_cores(
    link: &Link,
    links: &[LinkTable],
    datagram_flows: bool,
    no_gso: bool,
) -> Result<(SenderConfig, UdpConfig, Vec<LinkTarget>), Fatal> {
    let Some(first) = links.first() else {
        return Err(Fatal::config(anyhow!("--to ADDR is required")));
    };
    let (config, udp) = link_core(link, first, datagram_flows, no_gso)?;
    let more = links[1..]
        .iter()
        .map(|l| {
            link_core(link, l, datagram_flows, no_gso).map(|(config, udp)| LinkTarget {
                dest: l.to,
                udp,
                config,
            })
        })
        .collect::<Result<Vec<_>, Fatal>>()?;
    Ok((config, udp, more))
}

/// The core and socket of one link (`datagram_flows`: `--udp-listen`).
fn link_core(
    link: &Link,
    l: &LinkTable,
    datagram_flows: bool,
    no_gso: bool,
) -> Result<(SenderConfig, UdpConfig), Fatal> {
    let mut config = sender_config(link, l.to)?;
    if datagram_flows {
        // Datagram flows wait in their source socket (sized for the rate),
        // not in the core: the core holds the two interleave groups it
        // needs, so a source faster than the link shows as counted socket
        // drops at once instead of as seconds of queued latency.
        config.buffer_limit = 2 * config.block_bytes() * usize::from(config.interleave_depth);
    }
    config.validate().map_err(|e| Fatal::config(e.into()))?;
    let mut udp = socket(link, l.bind, l.to, no_gso);
    if l.device.is_some() {
        udp.device.clone_from(&l.device);
    }
    Ok((config, udp))
}

/// The Kafka source's settings: `--topic` is required.
pub(crate) fn kafka_source(
    args: &SendArgs,
    file: &FileConfig,
    brokers: String,
) -> Result<KafkaSourceOptions, Fatal> {
    let topic = pick(args.topic.as_ref(), file.topic.as_ref())
        .ok_or_else(|| Fatal::config(anyhow!("--kafka needs --topic TOPIC")))?;
    Ok(KafkaSourceOptions {
        brokers,
        topic,
        group: pick(args.group.as_ref(), file.group.as_ref()).unwrap_or_else(|| "diodon".into()),
        segment_bytes: 4 << 20,
        segment_age: Duration::from_secs(1),
        passes: pick(args.passes.as_ref(), file.passes.as_ref()).unwrap_or(1),
        timeout: Duration::from_secs(30),
    })
}

/// The core's settings from the link settings, for datagrams to `to`.
pub fn sender_config(link: &Link, to: SocketAddr) -> Result<SenderConfig, Fatal> {
    let symbol_size = link.symbol_size(to).map_err(Fatal::config)?;
    let (repair, design_loss_ppm, note) = link.repair_plan(symbol_size).map_err(Fatal::config)?;
    if let Some(note) = note {
        tracing::info!("{note}");
    }
    Ok(SenderConfig {
        symbol_size,
        block_symbols: link.block_for(repair),
        repair,
        design_loss_ppm,
        interleave_depth: link.interleave,
        rate: link.rate,
        per_datagram_overhead: diodon_proto::IpVersion::of(to).overhead(),
        integrity: link.integrity.clone(),
        next_key_after: link.next_key_after,
        delta_t: link.delta_t,
        beacon_interval: link.beacon,
        ..SenderConfig::default()
    })
}

/// The sending socket's settings.
pub fn socket(link: &Link, bind: Option<SocketAddr>, to: SocketAddr, no_gso: bool) -> UdpConfig {
    let mut udp = UdpConfig::new(bind.unwrap_or_else(|| any_addr(to)));
    udp.device.clone_from(&link.device);
    udp.sndbuf = Some(4 << 20);
    udp.gso = !no_gso;
    udp
}

/// Runs a send job with a progress bar, prints its summary, maps the exit
/// code. With a policy, the job's privileged part is opened first, then the
/// process restricts itself and installs its SIGINT handler on `stop`.
pub fn execute(
    job: SendJob,
    link: &Link,
    sandboxed: Option<(Restrictions, Arc<AtomicBool>)>,
) -> Result<Exit, Fatal> {
    let show_bar = std::io::stderr().is_terminal() && !link.json;
    let opened = open_send(job).map_err(Fatal::gateway)?;
    if let Some((policy, stop)) = sandboxed {
        sandbox::apply(&policy).map_err(|e| Fatal::io(anyhow!("restricting the process: {e}")))?;
        on_signal(&stop, true);
    }
    let summary = opened
        .run(|p| {
            if show_bar {
                // The first call knows the total of the files (0: a spinner).
                let bar = progress::bar(p.total_hint.load(Ordering::Relaxed));
                bar.set_position(p.bytes.load(Ordering::Relaxed));
                bar.set_message(format!("{} datagrams", p.datagrams.load(Ordering::Relaxed)));
            }
        })
        .map_err(Fatal::gateway)?;
    progress::clear();
    eprint!("{}", summary.text());
    if link.json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(summary.exit())
}

/// The unspecified address of `like`'s family.
fn any_addr(like: SocketAddr) -> SocketAddr {
    if like.is_ipv6() {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    }
}
