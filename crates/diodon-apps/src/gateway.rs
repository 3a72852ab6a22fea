//! One run of a gateway side, front to back: what `diodon send` and
//! `diodon recv` do once their settings are known. A front end (the CLI, a
//! daemon, a test) builds a [`SendJob`] or [`RecvJob`], passes a closure
//! that watches progress, and gets a typed summary back.
//!
//! ```text
//!  SendJob ─► source thread (files | stdin | TCP | UDP flows | TUN) ─► bounded queue
//!          ─► core thread (run_sender) ─► UDP ─► SendSummary
//!  sync    ─► sync::run_sync (scanner, scheduler, readers, core) ─► SyncSummary
//!  RecvJob ─► run_receiver (net / decoder / writer threads) ─► Sink
//!          (files | stdout | TCP | UDP forward | TUN | tap packets) ─► RecvSummary
//!          (files: the sink's counters, quarantine and full disk, in both)
//!  both:   --metrics thread (metrics::serve), kernel UDP MIB before/after,
//!          process CPU seconds; watch(&progress) every 100 ms meanwhile
//! ```

use crate::files::{send_files, FileSink, FileSinkOptions, FileSinkStats, SourceFile};
use crate::metrics::{self, MetricsError};
use crate::packet_sink::{PacketOutput, PacketSink, PacketSinkStats};
use crate::recv::{run_receiver, RecvOptions, RecvProgress, RecvReport, Sink};
use crate::report::{kernel_delta, Exit, RecvSummary, SendSummary};
use crate::send::{run_sender, SendOptions, SendProgress};
use crate::stream::{send_reader, serve_tcp, StdoutSink, TcpSink};
use crate::sync::{SyncError, SyncOptions, SyncStats, SyncSummary};
use crate::tunnel::{
    serve_tunnel, TunSink, TunnelSinkStats, TunnelSourceOptions, TunnelSourceStats,
};
use crate::udp_flow::{
    serve_udp, UdpForwardSink, UdpForwardStats, UdpSourceOptions, UdpSourceStats,
};
use crate::PipelineError;
use diodon_counters::CounterSet;
use diodon_io::counters::process_cpu_seconds;
use diodon_io::UdpSnmp;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// How often the watch closure is called.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Errors that end a run before it has a summary.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A pipeline could not start or broke.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    /// Local IO (output folder, TCP listener, a thread).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A pipeline thread panicked.
    #[error("the {0} thread panicked")]
    Panicked(&'static str),
    /// A directory-tree sync ended with an error.
    #[error(transparent)]
    Sync(#[from] SyncError),
}

impl GatewayError {
    /// The exit status this error ends the process with.
    pub fn exit(&self) -> Exit {
        match self {
            GatewayError::Pipeline(e) | GatewayError::Sync(SyncError::Pipeline(e)) => e.exit(),
            _ => Exit::Io,
        }
    }

    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> GatewayError {
        let what = what.into();
        move |source| GatewayError::Io { what, source }
    }
}

/// Runs a directory-tree sync (`diodon sync`) until `stop` or, with
/// `once`, until done: the metrics endpoint first (when asked), over the
/// sender's and the sync's counters, then [`crate::sync::run_sync`].
pub fn run_sync(
    opts: SyncOptions,
    metrics: Option<MetricsOptions>,
    stop: &Arc<AtomicBool>,
    watch: impl FnMut(&SendProgress, &SyncStats),
) -> Result<SyncSummary, GatewayError> {
    let stats = Arc::new(SyncStats::default());
    let progress = Arc::new(SendProgress::default());
    if let Some(m) = metrics {
        let source = metrics::Source::Send {
            progress: Arc::clone(&progress),
            udp: None,
            tunnel: None,
            sync: Some(Arc::clone(&stats)),
        };
        metrics::serve(m.addr, source, m.peer, m.device)?;
    }
    Ok(crate::sync::run_sync(opts, &stats, &progress, stop, watch)?)
}

/// Where the sender's data comes from.
#[derive(Debug)]
pub enum SendInput {
    /// Regular files (already walked).
    Files(Vec<SourceFile>),
    /// Standard input as one stream channel.
    Stdin,
    /// Every accepted TCP connection becomes a stream channel.
    Tcp(TcpListener),
    /// UDP flows: one datagram channel per source address.
    Udp(UdpSourceOptions),
    /// IP packets read from a TUN: one packet channel.
    Tunnel(TunnelSourceOptions),
}

/// Where the metrics endpoint listens and which interface it names.
#[derive(Debug, Clone)]
pub struct MetricsOptions {
    /// Listening address.
    pub addr: SocketAddr,
    /// The address whose route names the link's interface.
    pub peer: std::net::IpAddr,
    /// The interface, when given (wins over the route).
    pub device: Option<String>,
}

/// Everything one `diodon send` run needs.
#[derive(Debug)]
pub struct SendJob {
    /// Core, socket and queue settings.
    pub opts: SendOptions,
    /// The data.
    pub input: SendInput,
    /// `--metrics`.
    pub metrics: Option<MetricsOptions>,
    /// Set on SIGINT/SIGTERM: sources stop; the core aborts open channels,
    /// except for UDP flows, which finish every flow and drain.
    pub stop: Arc<AtomicBool>,
}

/// Runs a sender to the end; `watch` sees the live progress meanwhile.
pub fn run_send(
    job: SendJob,
    mut watch: impl FnMut(&SendProgress),
) -> Result<SendSummary, GatewayError> {
    let SendJob {
        opts,
        input,
        metrics,
        stop,
    } = job;
    let progress = Arc::new(SendProgress::default());
    if let SendInput::Files(files) = &input {
        let total: u64 = files
            .iter()
            .filter_map(|f| std::fs::metadata(&f.path).ok())
            .map(|m| m.len())
            .sum();
        progress.total_hint.store(total, Ordering::Relaxed);
    }
    let udp_stats = matches!(input, SendInput::Udp(_)).then(|| Arc::new(UdpSourceStats::default()));
    let tunnel_stats =
        matches!(input, SendInput::Tunnel(_)).then(|| Arc::new(TunnelSourceStats::default()));
    if let Some(m) = metrics {
        let source = metrics::Source::Send {
            progress: Arc::clone(&progress),
            udp: udp_stats.clone(),
            tunnel: tunnel_stats.clone(),
            sync: None,
        };
        metrics::serve(m.addr, source, m.peer, m.device)?;
    }
    let (handle, queue) = crate::send::queue(opts.queue_chunks);
    let source_stop = Arc::clone(&stop);
    let source_stats = udp_stats.clone();
    let source_tunnel = tunnel_stats.clone();
    let source = thread::Builder::new()
        .name("diodon-source".into())
        .spawn(move || -> usize {
            let failed = |what: &str, e: &dyn std::fmt::Display| {
                tracing::error!("{what}: {e}");
                1
            };
            match input {
                SendInput::Udp(o) => {
                    let st = source_stats.unwrap_or_default();
                    serve_udp(&o, &handle, &source_stop, &st)
                        .map_or_else(|e| failed("UDP listener", &e), |()| 0)
                }
                SendInput::Tunnel(o) => {
                    let st = source_tunnel.unwrap_or_default();
                    serve_tunnel(&o, &handle, &source_stop, &st)
                        .map_or_else(|e| failed("tunnel", &e), |()| 0)
                }
                SendInput::Tcp(l) => serve_tcp(&l, &handle, &source_stop)
                    .map_or_else(|e| failed("TCP listener", &e), |()| 0),
                SendInput::Stdin => send_reader(std::io::stdin().lock(), "stdin", &handle)
                    .map_or_else(|e| failed("stdin", &e), |_| 0),
                SendInput::Files(files) => send_files(&files, &handle),
            }
        })
        .map_err(GatewayError::io("starting the source thread"))?;

    let before = UdpSnmp::read().ok();
    let cpu0 = process_cpu_seconds();
    // UDP flows end gracefully on a signal: the source finishes every flow
    // and the core drains (instead of aborting the open channels).
    let core_stop = if udp_stats.is_some() || tunnel_stats.is_some() {
        Arc::new(AtomicBool::new(false))
    } else {
        Arc::clone(&stop)
    };
    let core_progress = Arc::clone(&progress);
    let report = run_watched(
        "sender",
        move || run_sender(&opts, &queue, core_progress, &core_stop),
        || watch(&progress),
    )??;
    stop.store(true, Ordering::Relaxed);
    let source_errors = source.join().unwrap_or(1);
    let kernel = kernel_delta(before, UdpSnmp::read().ok());
    let mut summary =
        SendSummary::new(&report, kernel, process_cpu_seconds() - cpu0, source_errors);
    summary.udp_source = udp_stats.map(|s| s.snapshot());
    summary.tunnel = tunnel_stats.map(|s| s.snapshot());
    Ok(summary)
}

/// Where the receiver's channels go.
#[derive(Debug, Clone)]
pub enum RecvOutput {
    /// Files under a folder (staging, fsync, verify, rename, quarantine).
    Dir {
        /// The output folder.
        path: PathBuf,
        /// fsync, quarantine bounds.
        files: FileSinkOptions,
    },
    /// Every stream channel to standard output, in order.
    Stdout,
    /// Every stream channel to a new TCP connection to this address.
    Tcp(SocketAddr),
    /// Every datagram channel's records as UDP datagrams to this address.
    UdpForward(SocketAddr),
    /// Every packet channel's packets into this TUN.
    Tun {
        /// The interface (created if missing).
        name: String,
        /// MTU to set (none: leave it).
        mtu: Option<u32>,
    },
    /// The tap's packet channels, per agent to a TAP interface or pcap files.
    Packets(PacketOutput),
}

/// Everything one `diodon recv` run needs.
#[derive(Debug)]
pub struct RecvJob {
    /// Core, socket and queue settings.
    pub opts: RecvOptions,
    /// The sink.
    pub output: RecvOutput,
    /// `--metrics`.
    pub metrics: Option<MetricsOptions>,
    /// Set on SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
}

/// Runs a receiver to the end; `watch` sees the live progress meanwhile.
pub fn run_recv(
    job: RecvJob,
    mut watch: impl FnMut(&RecvProgress),
) -> Result<RecvSummary, GatewayError> {
    let RecvJob {
        opts,
        output,
        metrics,
        stop,
    } = job;
    let progress = Arc::new(RecvProgress::default());
    let forward =
        matches!(output, RecvOutput::UdpForward(_)).then(|| Arc::new(UdpForwardStats::default()));
    let file_stats =
        matches!(output, RecvOutput::Dir { .. }).then(|| Arc::new(FileSinkStats::default()));
    let tun_stats =
        matches!(output, RecvOutput::Tun { .. }).then(|| Arc::new(TunnelSinkStats::default()));
    let packet_stats =
        matches!(output, RecvOutput::Packets(_)).then(|| Arc::new(PacketSinkStats::default()));
    if let Some(m) = metrics {
        let source = metrics::Source::Recv {
            progress: Arc::clone(&progress),
            udp: forward.clone(),
            files: file_stats.clone(),
            tunnel: tun_stats.clone(),
            packets: packet_stats.clone(),
        };
        metrics::serve(m.addr, source, m.peer, m.device)?;
    }
    let before = UdpSnmp::read().ok();
    let cpu0 = process_cpu_seconds();
    let mut watch = || watch(&progress);
    let report = match output {
        RecvOutput::Dir { path, files } => {
            let stats = file_stats.clone().unwrap_or_default();
            let sink = FileSink::new(&path, &files, stats).map_err(|e| GatewayError::Io {
                what: format!("output folder {}", path.display()),
                source: std::io::Error::other(e),
            })?;
            receive(&opts, sink, &progress, &stop, &mut watch)?
        }
        RecvOutput::Stdout => receive(&opts, StdoutSink::default(), &progress, &stop, &mut watch)?,
        RecvOutput::Tcp(dest) => receive(&opts, TcpSink::new(dest), &progress, &stop, &mut watch)?,
        RecvOutput::Tun { name, mtu } => {
            let stats = tun_stats.clone().unwrap_or_default();
            let sink = TunSink::open(&name, mtu, stats).map_err(|e| GatewayError::Io {
                what: format!("TUN {name}"),
                source: std::io::Error::other(e),
            })?;
            receive(&opts, sink, &progress, &stop, &mut watch)?
        }
        RecvOutput::UdpForward(dest) => {
            let stats = forward.clone().unwrap_or_default();
            receive(
                &opts,
                UdpForwardSink::new(dest, stats),
                &progress,
                &stop,
                &mut watch,
            )?
        }
        RecvOutput::Packets(out) => {
            let stats = packet_stats.clone().unwrap_or_default();
            receive(
                &opts,
                PacketSink::new(out, stats),
                &progress,
                &stop,
                &mut watch,
            )?
        }
    };
    let kernel = kernel_delta(before, UdpSnmp::read().ok());
    let mut summary = RecvSummary::new(&report, kernel, process_cpu_seconds() - cpu0);
    summary.link = progress
        .health
        .counters(diodon_io::clock::unix_time_ms())
        .snapshot();
    summary.alarms = progress.health.status().recent_alarms;
    summary.udp_forward = forward.map(|f| f.snapshot());
    summary.mirror = file_stats.as_ref().map(|f| f.mirror.snapshot());
    summary.file_sink = file_stats.map(|f| f.snapshot());
    summary.tunnel = tun_stats.map(|t| t.snapshot());
    if let Some(p) = packet_stats {
        summary.packet_sink = Some(p.snapshot());
        summary.packet_agents = p
            .agents
            .lock()
            .map(|m| {
                m.iter()
                    .map(|(&agent, &(delivered, lost))| crate::report::PacketAgent {
                        agent,
                        delivered,
                        lost,
                    })
                    .collect()
            })
            .unwrap_or_default();
    }
    Ok(summary)
}

fn receive<S: Sink>(
    opts: &RecvOptions,
    sink: S,
    progress: &Arc<RecvProgress>,
    stop: &Arc<AtomicBool>,
    watch: &mut dyn FnMut(),
) -> Result<RecvReport, GatewayError> {
    let (o, p, st) = (opts.clone(), Arc::clone(progress), Arc::clone(stop));
    Ok(run_watched(
        "receiver",
        move || run_receiver(&o, sink, &p, &st),
        watch,
    )??)
}

/// Runs `work` on its own thread and calls `watch` every [`WATCH_EVERY`]
/// until it ends; returns as soon as it ends (not on the next tick).
fn run_watched<T: Send + 'static>(
    name: &'static str,
    work: impl FnOnce() -> T + Send + 'static,
    mut watch: impl FnMut(),
) -> Result<T, GatewayError> {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let worker = thread::Builder::new()
        .name(format!("diodon-{name}"))
        .spawn(move || {
            let r = work();
            let _ = done_tx.send(());
            r
        })
        .map_err(GatewayError::io(format!("starting the {name} thread")))?;
    while let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(WATCH_EVERY) {
        watch();
    }
    worker.join().map_err(|_| GatewayError::Panicked(name))
}
