//! `diodon`: the command-line tool. Parses flags and the TOML config, starts
//! the pipelines from `diodon-apps`, shows progress, prints the summary and
//! maps the outcome to an exit code.
//!
//! ```text
//!  diodon send PATHS|- [--tcp-listen]  ─► source threads ─► sender core thread ─► UDP
//!  diodon recv --out|--stdout|--tcp-connect ─► net / decoder / writer threads
//! ```
//!
//! Exit codes: 0 every channel verified; 1 a channel failed or was refused;
//! 2 usage or configuration error; 3 IO error (socket, output directory).

mod config;
mod deltat;
mod flows;
mod guard;
mod metrics;
mod stats;
mod summary;
mod trial;

use anyhow::Context;
use clap::Parser;
use config::{Cli, Command, FileConfig, Link, LogFormat, RecvArgs, SendArgs};
use diodon_apps::files::{collect, send_files, FileSink};
use diodon_apps::stream::{send_reader, serve_tcp, StdoutSink, TcpSink};
use diodon_apps::udp_flow::{UdpForwardSink, UdpForwardStats};
use diodon_apps::{
    run_receiver, run_sender, PipelineError, RecvOptions, RecvProgress, RecvReport, SendOptions,
    SendProgress, Sink,
};
use diodon_io::{UdpConfig, UdpSnmp};
use diodon_proto::{ReceiverConfig, SenderConfig};
use std::io::IsTerminal;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use summary::{cpu_seconds, make_bar, KernelDelta, RecvSummary, SendSummary};

/// Exit code: a channel failed or was refused.
const EXIT_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
const EXIT_CONFIG: u8 = 2;
/// Exit code: IO error.
const EXIT_IO: u8 = 3;

/// An error with the exit code it maps to.
struct Fatal(u8, anyhow::Error);

fn config_err(e: anyhow::Error) -> Fatal {
    Fatal(EXIT_CONFIG, e)
}

fn pipeline_err(e: PipelineError) -> Fatal {
    match e {
        PipelineError::Config(_) => Fatal(EXIT_CONFIG, e.into()),
        _ => Fatal(EXIT_IO, e.into()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.cmd {
        Command::Send(args) => cmd_send(&args),
        Command::Recv(args) => cmd_recv(&args),
        Command::Deltat(args) => deltat::run(&args).map_err(|e| Fatal(EXIT_IO, e)),
        Command::Relay(args) => {
            deltat::run_relay(&args, &stop_flag()).map_err(|e| Fatal(EXIT_IO, e))
        }
        Command::Guard(args) => guard::run(&args),
        Command::Stats(args) => stats::run(&args),
        Command::Trial(args) => trial::run(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(Fatal(code, e)) => {
            if let Some(bar) = summary::BAR.get() {
                bar.finish_and_clear();
            }
            tracing::error!("{e:#}");
            eprintln!("diodon: {e:#}");
            ExitCode::from(code)
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DIODON_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| summary::LogWriter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder
            .with_target(false)
            .with_ansi(std::io::stderr().is_terminal())
            .init(),
    }
}

/// Sets the returned flag on SIGINT/SIGTERM.
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let first = Arc::new(AtomicBool::new(true));
    let _ = ctrlc::set_handler(move || {
        if first.swap(false, Ordering::SeqCst) {
            eprintln!("diodon: stopping (again to force)");
            s.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    });
    stop
}

fn any_addr(like: SocketAddr) -> SocketAddr {
    if like.is_ipv6() {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one linear setup sequence: config, sources, core, progress, summary"
)]
fn cmd_send(args: &SendArgs) -> Result<u8, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(config_err)?;
    let link = Link::merge(&args.link, &file).map_err(config_err)?;
    let (to, bind, tcp_listen, linger, no_gso) = args.resolve(&file);
    let to = to.context("--to ADDR is required").map_err(config_err)?;
    let udp_listen = config::pick(args.udp_listen.as_ref(), file.udp_listen.as_ref());
    let metrics_addr = config::pick(args.metrics.as_ref(), file.metrics.as_ref());
    if args.paths.is_empty() && tcp_listen.is_none() && udp_listen.is_none() {
        return Err(config_err(anyhow::anyhow!(
            "nothing to send: give paths, `-` for stdin, --tcp-listen ADDR or --udp-listen ADDR"
        )));
    }
    let stdin = args.paths.iter().any(|p| p.as_os_str() == "-");
    if stdin && args.paths.len() > 1 {
        return Err(config_err(anyhow::anyhow!(
            "`-` (stdin) cannot be combined with other paths"
        )));
    }
    let symbol_size = link.symbol_size(to).map_err(config_err)?;
    let config = SenderConfig {
        symbol_size,
        block_symbols: link.block,
        repair: link.repair,
        interleave_depth: link.interleave,
        rate: link.rate,
        per_datagram_overhead: if to.is_ipv6() { 48 } else { 28 },
        integrity: link.integrity.clone(),
        delta_t: link.delta_t,
        beacon_interval: link.beacon,
        ..SenderConfig::default()
    };
    config.validate().map_err(|e| config_err(e.into()))?;
    let mut udp = UdpConfig::new(bind.unwrap_or_else(|| any_addr(to)));
    udp.device.clone_from(&link.device);
    udp.sndbuf = Some(4 << 20);
    udp.gso = !no_gso;
    let opts = SendOptions {
        config,
        dest: to,
        udp,
        queue_chunks: 32,
        linger,
    };

    let files = if stdin || args.paths.is_empty() {
        Vec::new()
    } else {
        collect(&args.paths).map_err(|e| Fatal(EXIT_IO, e.into()))?
    };
    if !stdin && tcp_listen.is_none() && udp_listen.is_none() && files.is_empty() {
        return Err(Fatal(
            EXIT_IO,
            anyhow::anyhow!("no regular files found in the given paths"),
        ));
    }
    let listener = match tcp_listen {
        Some(a) => Some(
            std::net::TcpListener::bind(a)
                .with_context(|| format!("listening on {a}"))
                .map_err(|e| Fatal(EXIT_IO, e))?,
        ),
        None => None,
    };
    let stop = stop_flag();
    let progress = Arc::new(SendProgress::default());
    let total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(&f.path).ok())
        .map(|m| m.len())
        .sum();
    progress.total_hint.store(total, Ordering::Relaxed);
    let (handle, input) = diodon_apps::send::queue(opts.queue_chunks);
    let udp_source = udp_listen.map(|a| {
        let idle = args.udp_idle.or(file.udp_idle).unwrap_or(5000);
        (flows::source_options(a, &link, idle), Arc::default())
    });
    let udp_stats = udp_source.as_ref().map(|(_, st)| Arc::clone(st));
    if let Some(a) = metrics_addr {
        let src = metrics::Source::Send {
            progress: Arc::clone(&progress),
            udp: udp_stats.clone(),
        };
        metrics::serve(a, src, to.ip(), link.device.clone())
            .with_context(|| format!("--metrics {a}"))
            .map_err(|e| Fatal(EXIT_IO, e))?;
    }
    let source_stop = Arc::clone(&stop);
    let source = thread::Builder::new()
        .name("diodon-source".into())
        .spawn(move || -> usize {
            if let Some((o, st)) = udp_source {
                if let Err(e) = diodon_apps::udp_flow::serve_udp(&o, &handle, &source_stop, &st) {
                    tracing::error!("UDP listener: {e}");
                    return 1;
                }
                0
            } else if let Some(l) = listener {
                if let Err(e) = serve_tcp(&l, &handle, &source_stop) {
                    tracing::error!("TCP listener: {e}");
                    return 1;
                }
                0
            } else if stdin {
                match send_reader(std::io::stdin().lock(), "stdin", &handle) {
                    Ok(_) => 0,
                    Err(e) => {
                        tracing::error!("stdin: {e}");
                        1
                    }
                }
            } else {
                send_files(&files, &handle)
            }
        })
        .map_err(|e| Fatal(EXIT_IO, e.into()))?;

    let before = UdpSnmp::read().ok();
    let cpu0 = cpu_seconds();
    let core_progress = Arc::clone(&progress);
    // UDP flows end gracefully on a signal: the source finishes every flow
    // and the core drains (instead of aborting the open channels).
    let core_stop = if udp_stats.is_some() {
        Arc::new(AtomicBool::new(false))
    } else {
        Arc::clone(&stop)
    };
    // As on the receiving side: exit when the core is done, not on the next
    // tick of the progress display.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let core = thread::Builder::new()
        .name("diodon-core".into())
        .spawn(move || {
            let r = run_sender(&opts, &input, core_progress, &core_stop);
            let _ = done_tx.send(());
            r
        })
        .map_err(|e| Fatal(EXIT_IO, e.into()))?;
    let bar = (std::io::stderr().is_terminal() && !link.json).then(|| make_bar(total));
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        done_rx.recv_timeout(Duration::from_millis(100))
    {
        if let Some(bar) = bar {
            bar.set_position(progress.bytes.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{} datagrams",
                progress.datagrams.load(Ordering::Relaxed)
            ));
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let report = core
        .join()
        .map_err(|_| Fatal(EXIT_IO, anyhow::anyhow!("sender thread panicked")))?
        .map_err(pipeline_err)?;
    stop.store(true, Ordering::Relaxed);
    let source_errors = source.join().unwrap_or(1);
    let kernel = KernelDelta::between(before, UdpSnmp::read().ok());
    let mut summary = SendSummary::new(&report, kernel, cpu_seconds() - cpu0, source_errors);
    summary.udp_source = udp_stats
        .as_deref()
        .map(summary::UdpSourceSummary::from_stats);
    eprint!("{}", summary.text());
    if link.json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(if summary.channels_failed + source_errors > 0 {
        EXIT_FAILED
    } else {
        0
    })
}

fn cmd_recv(args: &RecvArgs) -> Result<u8, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(config_err)?;
    let link = Link::merge(&args.link, &file).map_err(config_err)?;
    let s = args.resolve(&file).map_err(config_err)?;
    let udp_forward = config::pick(args.udp_forward.as_ref(), file.udp_forward.as_ref());
    let metrics_addr = config::pick(args.metrics.as_ref(), file.metrics.as_ref());
    let modes = usize::from(s.out.is_some())
        + usize::from(s.stdout)
        + usize::from(s.tcp_connect.is_some())
        + usize::from(udp_forward.is_some());
    if modes != 1 {
        return Err(config_err(anyhow::anyhow!(
            "choose exactly one of --out DIR, --stdout, --tcp-connect ADDR, --udp-forward ADDR"
        )));
    }
    let mut udp = UdpConfig::new(s.listen);
    udp.device.clone_from(&link.device);
    udp.rcvbuf = Some(
        s.rcvbuf
            .unwrap_or_else(|| config::rcvbuf_for(link.rate, s.stall)),
    );
    let config = ReceiverConfig {
        integrity: link.integrity.clone(),
        delta_t: link.delta_t,
        ..ReceiverConfig::default()
    };
    let opts = RecvOptions {
        config,
        udp,
        queue_batches: 256,
        event_queue: 256,
        once: s.once,
        expect_channels: s.channels,
    };
    let json_to_stderr = s.stdout;
    let stop = stop_flag();
    let progress = Arc::new(RecvProgress::default());
    let forward_stats = udp_forward.map(|_| Arc::new(UdpForwardStats::default()));
    if let Some(a) = metrics_addr {
        let src = metrics::Source::Recv {
            progress: Arc::clone(&progress),
            udp: forward_stats.clone(),
        };
        metrics::serve(a, src, s.listen.ip(), link.device.clone())
            .with_context(|| format!("--metrics {a}"))
            .map_err(|e| Fatal(EXIT_IO, e))?;
    }
    let before = UdpSnmp::read().ok();
    let cpu0 = cpu_seconds();
    let report = if let Some(out) = &s.out {
        let sink = FileSink::new(out, s.fsync).map_err(|e| Fatal(EXIT_IO, e.into()))?;
        run_with_progress(&opts, sink, &progress, &stop, !link.json && !s.stdout)?
    } else if let (Some(dest), Some(st)) = (udp_forward, &forward_stats) {
        let sink = UdpForwardSink::new(dest, Arc::clone(st));
        run_with_progress(&opts, sink, &progress, &stop, !link.json)?
    } else if let Some(dest) = s.tcp_connect {
        run_with_progress(&opts, TcpSink::new(dest), &progress, &stop, !link.json)?
    } else {
        run_with_progress(&opts, StdoutSink::default(), &progress, &stop, false)?
    };
    let kernel = KernelDelta::between(before, UdpSnmp::read().ok());
    let mut summary = RecvSummary::new(&report, kernel, cpu_seconds() - cpu0);
    summary.udp_forwarded = forward_stats
        .as_ref()
        .map(|st| st.datagrams.load(Ordering::Relaxed));
    eprint!("{}", summary.text());
    if link.json {
        let text = serde_json::to_string(&summary).unwrap_or_default();
        if json_to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
    // With --once, a run that saw no channel at all did not deliver anything.
    if report.failed() > 0 || (report.channels.is_empty() && s.once) {
        Ok(EXIT_FAILED)
    } else {
        Ok(0)
    }
}

fn run_with_progress<S: Sink>(
    opts: &RecvOptions,
    sink: S,
    progress: &Arc<RecvProgress>,
    stop: &Arc<AtomicBool>,
    show: bool,
) -> Result<RecvReport, Fatal> {
    let o = opts.clone();
    let p = Arc::clone(progress);
    let st = Arc::clone(stop);
    // The worker says when it is done, so the process exits at once rather
    // than on the next tick of the progress display.
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = thread::Builder::new()
        .name("diodon-decoder".into())
        .spawn(move || {
            let r = run_receiver(&o, sink, &p, &st);
            let _ = done_tx.send(());
            r
        })
        .map_err(|e| Fatal(EXIT_IO, e.into()))?;
    let bar = (show && std::io::stderr().is_terminal()).then(|| make_bar(0));
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        done_rx.recv_timeout(Duration::from_millis(100))
    {
        if let Some(bar) = bar {
            bar.set_position(progress.bytes.load(Ordering::Relaxed));
            bar.set_message(format!(
                "{} datagrams, {} verified, {} failed, {} socket drops",
                progress.datagrams.load(Ordering::Relaxed),
                progress.complete.load(Ordering::Relaxed),
                progress.failed.load(Ordering::Relaxed),
                progress.socket_drops.load(Ordering::Relaxed)
            ));
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    worker
        .join()
        .map_err(|_| Fatal(EXIT_IO, anyhow::anyhow!("receiver thread panicked")))?
        .map_err(pipeline_err)
}
