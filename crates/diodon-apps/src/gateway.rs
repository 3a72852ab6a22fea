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
//!
//! Each run has two halves so that a process can restrict itself in
//! between (`crate::sandbox`): `open_send` / `open_recv` do what may need
//! privilege and start no thread (sockets bound and sized, outputs opened,
//! the metrics listener bound); `OpenedSend::run` / `OpenedRecv::run`
//! start the threads and run to the end. `run_send` / `run_recv` do both.

use crate::files::{
    send_files, send_files_over_links, FileSink, FileSinkOptions, FileSinkStats, SourceFile,
};
use crate::kafka::source::sent_channel;
use crate::kafka::{
    KafkaSink, KafkaSinkOptions, KafkaSinkStats, KafkaSource, KafkaSourceOptions, KafkaSourceStats,
};
use crate::metrics::{self, MetricsError, MetricsListener};
use crate::multilink::LinkHealth;
use crate::packet_sink::{PacketOutput, PacketSink, PacketSinkStats};
use crate::recv::{run_receiver_on, RecvOptions, RecvProgress, RecvReport, Sink};
use crate::report::{kernel_delta, Exit, RecvSummary, SendSummary};
pub use crate::send::LinkTarget;
use crate::send::SentNotice;
use crate::send::{run_links, SendOptions, SendProgress};
use crate::stream::{send_reader, serve_tcp, StdoutSink, TcpSink};
use crate::sync::{SyncError, SyncOptions, SyncStats, SyncSummary};
use crate::tunnel::{
    open_tunnel, serve_opened_tunnel, serve_tunnel, OpenedTun, TunSink, TunnelSinkStats,
    TunnelSourceOptions, TunnelSourceStats,
};
use crate::udp_flow::{
    open_udp_source, serve_udp, serve_udp_on, UdpForwardSink, UdpForwardStats, UdpSourceOptions,
    UdpSourceStats,
};
use crate::PipelineError;
use diodon_counters::CounterSet;
use diodon_io::counters::process_cpu_seconds;
use diodon_io::{BatchReceiver, BatchSender, UdpSnmp};
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
    /// The Kafka source or sink could not start (brokers, topic).
    #[error("{0}")]
    Kafka(String),
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
/// `once`, until done. The privileged half first, while the process has
/// one thread: the UDP socket and the metrics listener are opened, then
/// `restrict` runs (the caller applies its sandbox and installs its signal
/// handler); then the metrics endpoint over the sender's and the sync's
/// counters and [`crate::sync::run_sync`] start their threads, which
/// inherit the restrictions.
pub fn run_sync(
    opts: SyncOptions,
    metrics: Option<MetricsOptions>,
    stop: &Arc<AtomicBool>,
    restrict: impl FnOnce() -> Result<(), GatewayError>,
    watch: impl FnMut(&SendProgress, &SyncStats),
) -> Result<SyncSummary, GatewayError> {
    let udp = BatchSender::open(&opts.send.udp).map_err(PipelineError::from)?;
    let mut more = Vec::new();
    for t in &opts.more_links {
        more.push(BatchSender::open(&t.udp).map_err(PipelineError::from)?);
    }
    let listener = metrics
        .map(|m| metrics::bind(m.addr, m.peer, m.device))
        .transpose()?;
    restrict()?;
    let stats = Arc::new(SyncStats::default());
    let progress = Arc::new(SendProgress::default());
    let health: Vec<Arc<LinkHealth>> = std::iter::once(opts.send.dest)
        .chain(opts.more_links.iter().map(|t| t.dest))
        .map(LinkHealth::new)
        .collect();
    if let Some(l) = listener {
        let source = metrics::Source::Send {
            progress: Arc::clone(&progress),
            udp: None,
            tunnel: None,
            kafka: None,
            sync: Some(Arc::clone(&stats)),
            links: if health.len() > 1 {
                health.clone()
            } else {
                Vec::new()
            },
        };
        l.serve(source)?;
    }
    let links = crate::sync::SyncLinks {
        first: udp,
        more,
        health,
    };
    Ok(crate::sync::run_sync(
        opts, links, &stats, &progress, stop, watch,
    )?)
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
    /// A Kafka topic, consumed as a group: channels per topic-partition.
    Kafka(KafkaSourceOptions),
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
    /// Further links (`--to` more than once): channels spread over
    /// `opts.dest` and these by a stable hash (`crate::multilink`), each
    /// link its own session, pacing and counters.
    pub more_links: Vec<LinkTarget>,
}

/// Runs a sender to the end; `watch` sees the live progress meanwhile.
pub fn run_send(
    job: SendJob,
    watch: impl FnMut(&SendProgress),
) -> Result<SendSummary, GatewayError> {
    open_send(job)?.run(watch)
}

/// A sender whose privileged setup is done and that has started nothing:
/// its socket is bound and sized, the UDP flows' listening socket bound,
/// the tunnel's TUN opened and up, its metrics listener bound (see
/// [`OpenedRecv`]).
#[derive(Debug)]
pub struct OpenedSend {
    opts: SendOptions,
    udp: BatchSender,
    more: Vec<(LinkTarget, BatchSender)>,
    input: OpenedInput,
    metrics: Option<MetricsListener>,
    stop: Arc<AtomicBool>,
}

#[derive(Debug)]
enum OpenedInput {
    Ready(SendInput),
    Udp(Box<(BatchReceiver, UdpSourceOptions)>),
    Tunnel(Box<(OpenedTun, TunnelSourceOptions)>),
    Kafka(Box<(KafkaSourceOptions, mpsc::Receiver<SentNotice>)>),
}

/// Does everything of a sender's run that may need privilege (see
/// [`open_recv`]). Starts no thread.
pub fn open_send(job: SendJob) -> Result<OpenedSend, GatewayError> {
    let SendJob {
        mut opts,
        input,
        metrics,
        stop,
        more_links,
    } = job;
    let udp = BatchSender::open(&opts.udp).map_err(PipelineError::from)?;
    let metrics = metrics
        .map(|m| metrics::bind(m.addr, m.peer, m.device))
        .transpose()?;
    let input = match input {
        SendInput::Udp(o) => {
            let sock = open_udp_source(&o).map_err(PipelineError::from)?;
            OpenedInput::Udp(Box::new((sock, o)))
        }
        SendInput::Tunnel(o) => {
            let tun = open_tunnel(&o).map_err(|e| GatewayError::Io {
                what: "the tunnel's TUN".into(),
                source: std::io::Error::other(e),
            })?;
            OpenedInput::Tunnel(Box::new((tun, o)))
        }
        // The client starts threads: it connects in the source thread, once
        // the process restricted itself (see `crate::sandbox`).
        SendInput::Kafka(o) => {
            let (hook, notices) = sent_channel();
            opts.on_sent = Some(hook);
            OpenedInput::Kafka(Box::new((o, notices)))
        }
        other => OpenedInput::Ready(other),
    };
    let mut more = Vec::new();
    for link in more_links {
        let udp = BatchSender::open(&link.udp).map_err(PipelineError::from)?;
        more.push((link, udp));
    }
    Ok(OpenedSend {
        opts,
        udp,
        more,
        input,
        metrics,
        stop,
    })
}

impl OpenedSend {
    /// Starts the metrics thread, the source and the core and runs to the
    /// end; `watch` sees the live progress meanwhile.
    pub fn run(self, mut watch: impl FnMut(&SendProgress)) -> Result<SendSummary, GatewayError> {
        let OpenedSend {
            mut opts,
            udp,
            more,
            input,
            metrics,
            stop,
        } = self;
        // Files over several links: what a link lost when it went down goes
        // again over another (the report still lists every attempt).
        let file_notices = (!more.is_empty()
            && matches!(input, OpenedInput::Ready(SendInput::Files(_))))
        .then(|| {
            let (hook, rx) = crate::send::notices(true);
            opts.on_sent = Some(hook);
            rx
        });
        let links = crate::send::link_options(&opts, udp, more);
        let health: Vec<Arc<LinkHealth>> =
            links.iter().map(|(o, _)| LinkHealth::new(o.dest)).collect();
        let (handle, queues) = crate::send::link_inputs(&links, &health);
        let progress = Arc::new(SendProgress::default());
        if let OpenedInput::Ready(SendInput::Files(files)) = &input {
            let total: u64 = files
                .iter()
                .filter_map(|f| std::fs::metadata(&f.path).ok())
                .map(|m| m.len())
                .sum();
            progress.total_hint.store(total, Ordering::Relaxed);
        }
        let udp_stats =
            matches!(input, OpenedInput::Udp(..)).then(|| Arc::new(UdpSourceStats::default()));
        let tunnel_stats = matches!(input, OpenedInput::Tunnel(..))
            .then(|| Arc::new(TunnelSourceStats::default()));
        let kafka_stats =
            matches!(input, OpenedInput::Kafka(..)).then(|| Arc::new(KafkaSourceStats::default()));
        if let Some(m) = metrics {
            m.serve(metrics::Source::Send {
                progress: Arc::clone(&progress),
                udp: udp_stats.clone(),
                tunnel: tunnel_stats.clone(),
                kafka: kafka_stats.clone(),
                sync: None,
                links: if health.len() > 1 {
                    health.clone()
                } else {
                    Vec::new()
                },
            })?;
        }
        // A Kafka source ends gracefully too: its last segments go out
        // before it commits their offsets.
        let graceful = matches!(input, OpenedInput::Kafka(..));
        let source_stop = Arc::clone(&stop);
        let source_stats = SourceStats {
            udp: udp_stats.clone(),
            tunnel: tunnel_stats.clone(),
            kafka: kafka_stats.clone(),
        };
        let source = thread::Builder::new()
            .name("diodon-source".into())
            .spawn(move || run_source(input, &handle, &source_stop, source_stats, file_notices))
            .map_err(GatewayError::io("starting the source thread"))?;

        let before = UdpSnmp::read().ok();
        let cpu0 = process_cpu_seconds();
        // UDP flows end gracefully on a signal: the source finishes every flow
        // and the core drains (instead of aborting the open channels).
        let core_stop = if udp_stats.is_some() || tunnel_stats.is_some() || graceful {
            Arc::new(AtomicBool::new(false))
        } else {
            Arc::clone(&stop)
        };
        let core_progress = Arc::clone(&progress);
        let core_health = health.clone();
        let reports = run_watched(
            "sender",
            move || run_links(links, queues, core_health, &core_progress, &core_stop),
            || watch(&progress),
        )??;
        stop.store(true, Ordering::Relaxed);
        let source_errors = source.join().unwrap_or(1);
        let kernel = kernel_delta(before, UdpSnmp::read().ok());
        let cpu = process_cpu_seconds() - cpu0;
        let mut summary = match reports.as_slice() {
            [one] => SendSummary::new(one, kernel, cpu, source_errors),
            many => SendSummary::of_links(many, &health, kernel, cpu, source_errors),
        };
        summary.udp_source = udp_stats.map(|s| s.snapshot());
        summary.tunnel = tunnel_stats.map(|s| s.snapshot());
        summary.kafka = kafka_stats.map(|s| s.snapshot());
        Ok(summary)
    }
}

/// The counters of the source that has them (the summary and the metrics
/// read the same ones).
struct SourceStats {
    udp: Option<Arc<UdpSourceStats>>,
    tunnel: Option<Arc<TunnelSourceStats>>,
    kafka: Option<Arc<KafkaSourceStats>>,
}

/// The source thread's work: reads `input` into the core until it ends or
/// `stop`; returns the number of sources that failed (0 or 1).
fn run_source(
    input: OpenedInput,
    handle: &crate::send::SourceHandle,
    stop: &Arc<AtomicBool>,
    stats: SourceStats,
    file_notices: Option<mpsc::Receiver<SentNotice>>,
) -> usize {
    let SourceStats {
        udp: udp_stats,
        tunnel: tunnel_stats,
        kafka: kafka_stats,
    } = stats;
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        tracing::error!("{what}: {e}");
        1
    };
    match input {
        OpenedInput::Udp(udp) => {
            let (sock, o) = *udp;
            let st = udp_stats.unwrap_or_default();
            serve_udp_on(sock, &o, handle, stop, &st)
                .map_or_else(|e| failed("UDP listener", &e), |()| 0)
        }
        OpenedInput::Ready(SendInput::Udp(o)) => {
            let st = udp_stats.unwrap_or_default();
            serve_udp(&o, handle, stop, &st).map_or_else(|e| failed("UDP listener", &e), |()| 0)
        }
        OpenedInput::Tunnel(tunnel) => {
            let (tun, o) = *tunnel;
            let st = tunnel_stats.unwrap_or_default();
            serve_opened_tunnel(tun, &o, handle, stop, &st)
                .map_or_else(|e| failed("tunnel", &e), |()| 0)
        }
        // `open_send` opens every tunnel; kept for a source given as ready.
        OpenedInput::Ready(SendInput::Tunnel(o)) => {
            let st = tunnel_stats.unwrap_or_default();
            serve_tunnel(&o, handle, stop, &st).map_or_else(|e| failed("tunnel", &e), |()| 0)
        }
        OpenedInput::Ready(SendInput::Tcp(l)) => {
            serve_tcp(&l, handle, stop).map_or_else(|e| failed("TCP listener", &e), |()| 0)
        }
        OpenedInput::Ready(SendInput::Stdin) => {
            send_reader(std::io::stdin().lock(), "stdin", handle)
                .map_or_else(|e| failed("stdin", &e), |_| 0)
        }
        OpenedInput::Ready(SendInput::Files(files)) => match file_notices {
            Some(n) => send_files_over_links(&files, handle, &n),
            None => send_files(&files, handle),
        },
        OpenedInput::Kafka(kafka) => {
            let (o, notices) = *kafka;
            let st = kafka_stats.unwrap_or_default();
            let r = KafkaSource::connect(o, notices).and_then(|s| s.serve(handle, stop, &st));
            tracing::info!(counters = ?st.snapshot(), "Kafka source ended");
            r.map_or_else(|e| failed("Kafka source", &e), |()| 0)
        }
        // `open_send` turns every Kafka input into `OpenedInput::Kafka`.
        OpenedInput::Ready(SendInput::Kafka(_)) => failed("Kafka source", &"not opened"),
    }
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
    /// Every Kafka channel's records produced into the far cluster.
    Kafka(KafkaSinkOptions),
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
    watch: impl FnMut(&RecvProgress),
) -> Result<RecvSummary, GatewayError> {
    open_recv(job)?.run(watch)
}

/// A receiver whose privileged setup is done and that has started nothing:
/// its socket is bound and sized, its output open, its metrics listener
/// bound. What is left ([`OpenedRecv::run`]) needs no privilege, so the
/// process can restrict itself in between ([`crate::sandbox`]).
#[derive(Debug)]
pub struct OpenedRecv {
    opts: RecvOptions,
    udp: BatchReceiver,
    sink: OpenedSink,
    metrics: Option<MetricsListener>,
    stop: Arc<AtomicBool>,
    forward: Option<Arc<UdpForwardStats>>,
    files: Option<Arc<FileSinkStats>>,
    tunnel: Option<Arc<TunnelSinkStats>>,
    kafka: Option<Arc<KafkaSinkStats>>,
    packets: Option<Arc<PacketSinkStats>>,
}

/// An output, opened as far as it can be before the first channel.
#[derive(Debug)]
enum OpenedSink {
    Dir(Box<FileSink>),
    Stdout,
    Tcp(SocketAddr),
    UdpForward(SocketAddr),
    Tun(TunSink),
    Packets(PacketOutput),
    Kafka(KafkaSinkOptions),
}

/// Does everything of a receiver's run that may need privilege: binds and
/// sizes the socket (`SO_RCVBUFFORCE`, `SO_BINDTODEVICE`), opens the output
/// (folder, TUN; the pcap folder is created), binds the metrics listener.
/// Starts no thread.
pub fn open_recv(job: RecvJob) -> Result<OpenedRecv, GatewayError> {
    let RecvJob {
        opts,
        output,
        metrics,
        stop,
    } = job;
    let udp = BatchReceiver::open(&opts.udp).map_err(PipelineError::from)?;
    let metrics = metrics
        .map(|m| metrics::bind(m.addr, m.peer, m.device))
        .transpose()?;
    let mut opened = OpenedRecv {
        opts,
        udp,
        sink: OpenedSink::Stdout,
        metrics,
        stop,
        forward: None,
        files: None,
        tunnel: None,
        kafka: None,
        packets: None,
    };
    opened.sink = match output {
        RecvOutput::Dir { path, files } => {
            let stats = Arc::new(FileSinkStats::default());
            let sink =
                FileSink::new(&path, &files, Arc::clone(&stats)).map_err(|e| GatewayError::Io {
                    what: format!("output folder {}", path.display()),
                    source: std::io::Error::other(e),
                })?;
            opened.files = Some(stats);
            OpenedSink::Dir(Box::new(sink))
        }
        RecvOutput::Stdout => OpenedSink::Stdout,
        RecvOutput::Tcp(dest) => OpenedSink::Tcp(dest),
        RecvOutput::UdpForward(dest) => {
            opened.forward = Some(Arc::default());
            OpenedSink::UdpForward(dest)
        }
        RecvOutput::Tun { name, mtu } => {
            let stats = Arc::new(TunnelSinkStats::default());
            let sink =
                TunSink::open(&name, mtu, Arc::clone(&stats)).map_err(|e| GatewayError::Io {
                    what: format!("TUN {name}"),
                    source: std::io::Error::other(e),
                })?;
            opened.tunnel = Some(stats);
            OpenedSink::Tun(sink)
        }
        RecvOutput::Packets(out) => {
            if let PacketOutput::Pcap { dir, .. } = &out {
                std::fs::create_dir_all(dir)
                    .map_err(GatewayError::io(format!("pcap folder {}", dir.display())))?;
            }
            opened.packets = Some(Arc::default());
            OpenedSink::Packets(out)
        }
        // The client starts threads: it connects in `run`, once the
        // process restricted itself (see `crate::sandbox`).
        RecvOutput::Kafka(o) => {
            opened.kafka = Some(Arc::default());
            OpenedSink::Kafka(o)
        }
    };
    Ok(opened)
}

impl OpenedRecv {
    /// Starts the metrics thread and the pipeline and runs to the end;
    /// `watch` sees the live progress meanwhile.
    pub fn run(self, mut watch: impl FnMut(&RecvProgress)) -> Result<RecvSummary, GatewayError> {
        let OpenedRecv {
            opts,
            udp,
            sink,
            metrics,
            stop,
            forward,
            files: file_stats,
            tunnel: tun_stats,
            kafka: kafka_stats,
            packets: packet_stats,
        } = self;
        let progress = Arc::new(RecvProgress::default());
        if let Some(m) = metrics {
            m.serve(metrics::Source::Recv {
                progress: Arc::clone(&progress),
                udp: forward.clone(),
                files: file_stats.clone(),
                tunnel: tun_stats.clone(),
                kafka: kafka_stats.clone(),
                packets: packet_stats.clone(),
            })?;
        }
        let before = UdpSnmp::read().ok();
        let cpu0 = process_cpu_seconds();
        let mut watch = || watch(&progress);
        let report = match sink {
            OpenedSink::Dir(sink) => receive(udp, &opts, *sink, &progress, &stop, &mut watch)?,
            OpenedSink::Stdout => receive(
                udp,
                &opts,
                StdoutSink::default(),
                &progress,
                &stop,
                &mut watch,
            )?,
            OpenedSink::Tcp(dest) => {
                receive(udp, &opts, TcpSink::new(dest), &progress, &stop, &mut watch)?
            }
            OpenedSink::Tun(sink) => receive(udp, &opts, sink, &progress, &stop, &mut watch)?,
            OpenedSink::Kafka(o) => {
                let sink = KafkaSink::connect(o, kafka_stats.clone().unwrap_or_default())
                    .map_err(GatewayError::Kafka)?;
                receive(udp, &opts, sink, &progress, &stop, &mut watch)?
            }
            OpenedSink::UdpForward(dest) => {
                let stats = forward.clone().unwrap_or_default();
                receive(
                    udp,
                    &opts,
                    UdpForwardSink::new(dest, stats),
                    &progress,
                    &stop,
                    &mut watch,
                )?
            }
            OpenedSink::Packets(out) => {
                let stats = packet_stats.clone().unwrap_or_default();
                receive(
                    udp,
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
        summary.kafka = kafka_stats.map(|k| k.snapshot());
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
}

fn receive<S: Sink>(
    udp: BatchReceiver,
    opts: &RecvOptions,
    sink: S,
    progress: &Arc<RecvProgress>,
    stop: &Arc<AtomicBool>,
    watch: &mut dyn FnMut(),
) -> Result<RecvReport, GatewayError> {
    let (o, p, st) = (opts.clone(), Arc::clone(progress), Arc::clone(stop));
    Ok(run_watched(
        "receiver",
        move || run_receiver_on(udp, &o, sink, &p, &st),
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
