//! `diodon tap`: mirrored traffic captured from an interface, filtered by
//! ACL rules, spread over N agents by flow (both directions of a
//! conversation to the same agent), and sent on — encapsulated to the
//! agents on a local segment, and/or across the diode as one datagram
//! channel per agent.
//!
//! ```text
//!  SPAN/TAP port ─► kernel ─► TPACKET_V3 rings (PACKET_FANOUT hash, one per worker)
//!                                  │ ring full: counted (ring_drops)
//!          worker × N: parse ─► classify (rules in force) ─► flow key ─► agent
//!                 │                                   deny: counted by rule line
//!                 ├─► encap: RawSender on --encap-if: [agent MAC|tap MAC|0xF1F0|frame]
//!                 └─► diode: DiodeStreams ─► SourceHandle ─► one-way sender core ══UDP══► recv
//!  main thread: every 5 ms stream tick (flush, segment age); SIGHUP ─► RuleBook::reload
//!  stop (SIGINT/SIGTERM): workers drain their rings, streams end with marks,
//!  the sender drains and lingers ─► TapSummary
//! ```
//!
//! **Privilege.** Everything that needs it is opened while the process has
//! one thread: the rule file read, every worker's ring (`AF_PACKET`,
//! promiscuous, in its fanout group), every worker's raw sender on
//! `--encap-if`, the UDP socket across the diode. Then `restrict` runs
//! (the caller's sandbox, `crate::sandbox::tap_policy`), then the threads
//! start. Nothing opens an interface again after that: a capture or encap
//! interface that goes away ends the run with an error, so the process
//! keeps no capability. What stays: reading the rule file's folder (a
//! SIGHUP reload; an editor replaces the file by a rename), polling and
//! reading the rings' statistics, `sendmmsg` on the open sockets.
//!
//! Modules: [`error`] (why a run fails), [`stats`] (counters), [`rulebook`] (rules in force, reload),
//! [`stream`] (per-agent segments across the diode), `worker` (the
//! capture loop).

pub mod error;
pub mod rulebook;
pub mod stats;
pub mod stream;
mod worker;

pub use error::TapError;

use crate::report::{kernel_delta, Exit, SendSummary};
use crate::send::{run_sender_on, SendOptions, SendProgress};
use diodon_filter::{FlowMode, Mac, Rendezvous};
use diodon_io::counters::process_cpu_seconds;
use diodon_io::packet::{interface_mac, CaptureRing, Fanout, FanoutMode, RawSender, RingConfig};
use diodon_io::{BatchSender, MonotonicClock, UdpSnmp};
use rulebook::RuleBook;
use stats::{RuleHit, TapAgentCounters, TapCounters, TapStats};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;
use stream::{DiodeStreams, SegmentPolicy};
use worker::{EncapOut, Worker};

/// One agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// Its name: rendezvous hashing keys on it, so flows stay with an
    /// agent when others are added or removed.
    pub name: String,
    /// Its MAC on the local segment (needed for the encapsulated output).
    pub mac: Option<Mac>,
}

/// The local-segment output.
#[derive(Debug, Clone)]
pub struct EncapOptions {
    /// The interface facing the agents.
    pub interface: String,
    /// The marker EtherType (0xF1F0 by default).
    pub ethertype: u16,
}

/// Everything one `diodon tap` run needs.
#[derive(Debug)]
pub struct TapJob {
    /// The capture interface.
    pub interface: String,
    /// Capture workers (fanout group members).
    pub workers: usize,
    /// Ring bytes per block and blocks per worker.
    pub ring_block: usize,
    /// Blocks per worker ring.
    pub ring_blocks: usize,
    /// The rule file (none: allow everything).
    pub rules: Option<PathBuf>,
    /// How flows are keyed.
    pub flow: FlowMode,
    /// The agents, in order.
    pub agents: Vec<AgentSpec>,
    /// Encapsulated output to the agents' segment.
    pub encap: Option<EncapOptions>,
    /// Across the diode: the sender's settings and the segment policy.
    pub diode: Option<(SendOptions, SegmentPolicy)>,
    /// Reload the rules when SIGHUP arrives (the caller installed
    /// `diodon_io::signal::count_hangups`).
    pub reload_on_hangup: bool,
    /// Set on SIGINT/SIGTERM: capture stops, everything drains.
    pub stop: Arc<AtomicBool>,
    /// Shared counters (the metrics exporter reads them too).
    pub stats: Arc<TapStats>,
    /// The sender's progress (metrics), when going across the diode.
    pub progress: Arc<SendProgress>,
    /// Only count captured frames (the benchmark's ceiling of the capture path).
    pub capture_only: bool,
}

/// One agent in the summary.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AgentReport {
    /// Its index (the channel name's agent number).
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Its MAC, if any.
    pub mac: Option<String>,
    /// Its counters.
    pub counters: TapAgentCounters,
}

/// What a tap run did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TapSummary {
    /// Always `tap`.
    pub side: String,
    /// The capture interface.
    pub interface: String,
    /// Capture workers.
    pub workers: usize,
    /// Rules in force at the end.
    pub rules: u64,
    /// Default action at the end.
    pub default_action: String,
    /// The counters.
    pub counters: TapCounters,
    /// Per agent.
    pub agents: Vec<AgentReport>,
    /// Frames per rule line (0: the default action).
    pub rule_hits: Vec<RuleHit>,
    /// The pre-filter drop rate (ring drops, runts, oversize over the
    /// frames the kernel passed on).
    pub prefilter_drop_rate: f64,
    /// Seconds from start to stop.
    pub duration_s: f64,
    /// CPU seconds of the whole process.
    pub cpu_s: f64,
    /// The sender, when going across the diode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<SendSummary>,
    /// Why the run ended early, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl TapSummary {
    /// Human-readable text.
    pub fn text(&self) -> String {
        let c = &self.counters;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "diodon tap: {} ({} workers), {} rules, default {}",
            self.interface, self.workers, self.rules, self.default_action
        );
        let _ = writeln!(
            s,
            "  captured {} frames ({} bytes); ring drops {}; runts {}; already marked {}",
            c.captured, c.captured_bytes, c.ring_drops, c.runts, c.marked
        );
        let _ = writeln!(
            s,
            "  denied {}, allowed {}; encapsulated sent {} (oversize {}); records across the diode {} (truncated {})",
            c.denied, c.allowed, c.encap_sent, c.oversize, c.records, c.truncated
        );
        for a in &self.agents {
            let _ = writeln!(
                s,
                "  agent {} {}: {} frames, {} bytes, {} sent, {} records",
                a.index,
                a.name,
                a.counters.frames,
                a.counters.bytes,
                a.counters.encap_sent,
                a.counters.records
            );
        }
        let _ = writeln!(
            s,
            "  pre-filter drop rate {:.2} %; {:.3} s, {:.2} s CPU; rule reloads {} (refused {})",
            self.prefilter_drop_rate * 100.0,
            self.duration_s,
            self.cpu_s,
            c.reloads.saturating_sub(1),
            c.reload_errors
        );
        if let Some(e) = &self.error {
            let _ = writeln!(s, "  stopped by an error: {e}");
        }
        s
    }

    /// The exit status.
    pub fn exit(&self) -> Exit {
        if self.error.is_some() {
            Exit::Io
        } else if self
            .sender
            .as_ref()
            .is_some_and(|s| s.exit() != Exit::Success)
        {
            Exit::ChannelFailed
        } else {
            Exit::Success
        }
    }
}

/// The encapsulated output's settings, resolved.
struct Encap {
    interface: String,
    ethertype: u16,
    src: [u8; 6],
    macs: Vec<[u8; 6]>,
}

type CoreThread = thread::JoinHandle<Result<crate::send::SendReport, crate::PipelineError>>;

/// Runs the tap until `stop` (or a capture error); `watch` is called about
/// every 100 ms meanwhile. `restrict` is called once, after everything
/// privileged is open and before any thread of the run starts (the caller
/// applies its sandbox there and may start its own threads after it).
pub fn run_tap(
    job: &TapJob,
    restrict: impl FnOnce() -> Result<(), TapError>,
    mut watch: impl FnMut(&TapStats),
) -> Result<TapSummary, TapError> {
    if job.agents.is_empty() {
        return Err(TapError::Config("at least one agent is needed".into()));
    }
    if job.encap.is_none() && job.diode.is_none() {
        return Err(TapError::Config(
            "no output: give the agents' interface (encapsulated) and/or a receiver (across the diode)"
                .into(),
        ));
    }
    let book = Arc::new(RuleBook::open(job.rules.as_deref())?);
    let stats = Arc::clone(&job.stats);
    stats.reloads.store(1, Ordering::Relaxed);
    stats
        .rules
        .store(book.current().classifier.len() as u64, Ordering::Relaxed);
    let names: Vec<&str> = job.agents.iter().map(|a| a.name.as_str()).collect();
    let rendezvous = Rendezvous::new(&names);
    let clock = MonotonicClock::new();
    let start = clock.now();
    let cpu0 = process_cpu_seconds();
    let workers = job.workers.max(1);
    let rings = open_rings(job, workers)?;
    let encap = encap_setup(job)?;
    let rings = with_senders(rings, encap.as_ref())?;
    let udp = match &job.diode {
        Some((opts, _)) => Some(BatchSender::open(&opts.udp).map_err(crate::PipelineError::from)?),
        None => None,
    };
    restrict()?;
    let marker = encap
        .as_ref()
        .map_or(diodon_filter::frame::ethertype::TAP_ENCAP, |e| e.ethertype);
    let (streams, core) = match (&job.diode, udp) {
        (Some((opts, policy)), Some(udp)) => {
            let (s, c) = start_sender(udp, opts.clone(), *policy, job.agents.len(), &job.progress)?;
            (Some(s), Some(c))
        }
        _ => (None, None),
    };
    let kernel_before = UdpSnmp::read().ok();
    let worker_stop = Arc::new(AtomicBool::new(false));
    let parts = WorkerParts {
        book: &book,
        rendezvous: &rendezvous,
        marker,
        streams: streams.as_ref(),
        stats: &stats,
    };
    let threads = spawn_workers(job, rings, &parts, &worker_stop)?;
    tracing::info!(
        interface = %job.interface,
        workers,
        rules = book.current().classifier.len(),
        agents = job.agents.len(),
        "tap capturing"
    );
    let mut error = supervise(job, &book, streams.as_deref(), &threads, &mut watch);
    worker_stop.store(true, Ordering::Relaxed);
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!("{e}");
                error.get_or_insert(e.to_string());
            }
            Err(_) => {
                error.get_or_insert_with(|| "a capture thread panicked".into());
            }
        }
    }
    let duration_s = clock.now().saturating_duration_since(start).as_secs_f64();
    let sender = match (streams, core) {
        (Some(s), Some(t)) => {
            if let Err(e) = s.finish() {
                error.get_or_insert(format!("ending the agents' channels: {e}"));
            }
            // The last handle goes: the core sends what it has, lingers, returns.
            drop(s);
            let report = t.join().map_err(|_| TapError::Thread("sender"))??;
            let kernel = kernel_delta(kernel_before, UdpSnmp::read().ok());
            Some(SendSummary::new(&report, kernel, 0.0, 0))
        }
        _ => None,
    };
    let counters = stats.snapshot();
    let cur = book.current();
    Ok(TapSummary {
        side: "tap".into(),
        interface: job.interface.clone(),
        workers,
        rules: cur.classifier.len() as u64,
        default_action: cur.classifier.default_action().to_string(),
        prefilter_drop_rate: counters.prefilter_drop_rate(),
        counters,
        agents: agent_reports(job, &stats),
        rule_hits: stats.rule_hits(),
        duration_s,
        cpu_s: process_cpu_seconds() - cpu0,
        sender,
        error,
    })
}

/// What every worker shares.
struct WorkerParts<'a> {
    book: &'a Arc<RuleBook>,
    rendezvous: &'a Rendezvous,
    marker: u16,
    streams: Option<&'a Arc<DiodeStreams>>,
    stats: &'a Arc<TapStats>,
}

type WorkerThread = thread::JoinHandle<Result<(), TapError>>;

/// Each worker's ring with its own raw sender on the agents' interface
/// (opened now: it needs `CAP_NET_RAW`).
fn with_senders(
    rings: Vec<CaptureRing>,
    encap: Option<&Encap>,
) -> Result<Vec<(CaptureRing, Option<EncapOut>)>, TapError> {
    rings
        .into_iter()
        .map(|ring| {
            let out = match encap {
                Some(e) => Some(EncapOut::new(
                    RawSender::open(&e.interface).map_err(|source| TapError::Send {
                        interface: e.interface.clone(),
                        source,
                    })?,
                    e.src,
                    e.macs.clone(),
                    e.ethertype,
                )),
                None => None,
            };
            Ok((ring, out))
        })
        .collect()
}

fn spawn_workers(
    job: &TapJob,
    rings: Vec<(CaptureRing, Option<EncapOut>)>,
    p: &WorkerParts<'_>,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<WorkerThread>, TapError> {
    let mut threads = Vec::with_capacity(rings.len());
    for (index, (ring, encap)) in rings.into_iter().enumerate() {
        let w = Worker {
            index,
            ring,
            book: Arc::clone(p.book),
            rendezvous: p.rendezvous.clone(),
            mode: job.flow,
            marker: p.marker,
            encap,
            diode: p.streams.cloned(),
            stats: Arc::clone(p.stats),
            capture_only: job.capture_only,
        };
        let ws = Arc::clone(stop);
        let t = thread::Builder::new()
            .name(format!("diodon-tap-{index}"))
            .spawn(move || w.run(&ws))
            .map_err(|_| TapError::Thread("capture"))?;
        threads.push(t);
    }
    Ok(threads)
}

fn agent_reports(job: &TapJob, stats: &TapStats) -> Vec<AgentReport> {
    job.agents
        .iter()
        .zip(&stats.agents)
        .enumerate()
        .map(|(index, (a, s))| AgentReport {
            index,
            name: a.name.clone(),
            mac: a.mac.map(|m| m.to_string()),
            counters: s.snapshot(),
        })
        .collect()
}

/// Every worker's ring, opened before any worker runs: the fanout group
/// is whole from the first frame.
fn open_rings(job: &TapJob, workers: usize) -> Result<Vec<CaptureRing>, TapError> {
    let group = (std::process::id() & 0xffff) as u16;
    (0..workers)
        .map(|_| {
            let mut cfg = RingConfig::new(job.interface.clone());
            cfg.block_size = job.ring_block;
            cfg.blocks = job.ring_blocks;
            if workers > 1 {
                cfg.fanout = Some(Fanout {
                    group,
                    mode: FanoutMode::Hash,
                });
            }
            CaptureRing::open(&cfg).map_err(|source| TapError::Capture {
                interface: job.interface.clone(),
                source,
            })
        })
        .collect()
}

fn encap_setup(job: &TapJob) -> Result<Option<Encap>, TapError> {
    let Some(e) = &job.encap else {
        return Ok(None);
    };
    let src = interface_mac(&e.interface).map_err(|source| TapError::Send {
        interface: e.interface.clone(),
        source,
    })?;
    let macs = job
        .agents
        .iter()
        .map(|a| {
            a.mac.map(|m| m.0).ok_or_else(|| {
                TapError::Config(format!(
                    "agent {} needs a MAC address for the encapsulated output (NAME=MAC)",
                    a.name
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Encap {
        interface: e.interface.clone(),
        ethertype: e.ethertype,
        src,
        macs,
    }))
}

/// The one-way sender core on its own thread (on `udp`, opened before),
/// and the agents' streams into it.
fn start_sender(
    udp: BatchSender,
    opts: SendOptions,
    policy: SegmentPolicy,
    agents: usize,
    progress: &Arc<SendProgress>,
) -> Result<(Arc<DiodeStreams>, CoreThread), TapError> {
    let (handle, queue) = crate::send::queue(opts.queue_chunks);
    let progress = Arc::clone(progress);
    let t = thread::Builder::new()
        .name("diodon-core".into())
        .spawn(move || {
            // The core drains on its own once every handle is gone.
            let never = AtomicBool::new(false);
            run_sender_on(udp, &opts, &queue, progress, &never)
        })
        .map_err(|_| TapError::Thread("sender"))?;
    Ok((Arc::new(DiodeStreams::new(handle, agents, policy)), t))
}

/// The main thread's loop: stream ticks, reloads, progress; until a stop
/// or a worker ends. Returns why it ended, if not by a stop.
fn supervise(
    job: &TapJob,
    book: &RuleBook,
    streams: Option<&DiodeStreams>,
    threads: &[WorkerThread],
    watch: &mut impl FnMut(&TapStats),
) -> Option<String> {
    let clock = MonotonicClock::new();
    let mut hangups = diodon_io::signal::hangups();
    let mut last_watch = clock.now();
    loop {
        thread::sleep(Duration::from_millis(5));
        if let Some(s) = streams {
            if s.tick().is_err() {
                return Some(TapError::SenderStopped.to_string());
            }
        }
        if job.reload_on_hangup && diodon_io::signal::hangups() != hangups {
            hangups = diodon_io::signal::hangups();
            reload(book, &job.stats);
        }
        let now = clock.now();
        if now.saturating_duration_since(last_watch) >= Duration::from_millis(100) {
            last_watch = now;
            watch(&job.stats);
        }
        if job.stop.load(Ordering::Relaxed) || threads.iter().any(thread::JoinHandle::is_finished) {
            return None;
        }
    }
}

/// Reloads the rules; a file that does not parse keeps the rules in force.
fn reload(book: &RuleBook, stats: &TapStats) {
    match book.reload() {
        Ok(n) => {
            stats.reloads.fetch_add(1, Ordering::Relaxed);
            stats.rules.store(n as u64, Ordering::Relaxed);
            tracing::info!(rules = n, file = ?book.path(), "rules reloaded");
        }
        Err(e) => {
            stats.reload_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!("rules not reloaded, the rules in force stay: {e}");
        }
    }
}
