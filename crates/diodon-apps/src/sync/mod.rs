//! `diodon sync`: keeps directory trees mirrored across the diode. A
//! long-running sender that remembers, in `SQLite`, every file it has seen
//! and how often it sent it; sends new and changed files first, then
//! repeats every file until it went out `passes` times (the carousel, a
//! one-way link's only way to repair what FEC could not); announces
//! deletions and renames in manifests; and, as an outbox, takes files away
//! once they went out often enough.
//!
//! ```text
//!  scanner thread ── scan::scan every --rescan ──► State (`SQLite`, WAL) ◄── scheduler (this thread)
//!   (one directory at a time, batched writes)           ▲                  │ Work       │ manifests
//!                                                       │ passes, digests  ▼            ▼
//!                                         inbox ◄── reader threads ──► SourceHandle ──► core thread
//!                                         (Started, Done, SentNotice ◄── SentHook ◄──── run_sender
//!                                          ScanDone)                                   UDP ══► diode
//! ```
//!
//! Modules: [`state`] (the database), [`scan`] (the streaming scan),
//! [`watch`] (the inotify watch between scans),
//! [`schedule`] (what goes next, what went out, the outbox), [`reader`]
//! (reading files into channels), [`manifest`] (deletions and renames on
//! the wire, shared with the receiver), and the leaves they share:
//! [`options`] (what a run is told), [`stats`] (its counters, declared
//! once), [`inbox`] (what the scheduler hears). This module wires the
//! threads together ([`run_sync`]); the metrics endpoint over its counters
//! is started by `gateway::run_sync`.

pub mod inbox;
pub mod manifest;
pub mod options;
pub mod reader;
pub mod scan;
pub mod schedule;
pub mod state;
pub mod stats;
pub mod watch;

pub use inbox::Inbox;
pub use options::{AfterSend, SyncOptions};
pub use stats::{SyncCounters, SyncStats};

use crate::report::{kernel_delta, SendSummary};
use crate::send::{run_links, SendProgress, SentHook};
use crate::PipelineError;
use diodon_io::counters::process_cpu_seconds;
use diodon_io::{BatchSender, UdpSnmp};
use reader::{ReaderConfig, Work};
use scan::ScanOptions;
use state::{State, StateError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use watch::{Watch, Watched};

/// Errors that end a sync.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The state database.
    #[error(transparent)]
    State(#[from] StateError),
    /// The sender pipeline.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// A thread could not start or panicked.
    #[error("the {0} thread failed")]
    Thread(&'static str),
}

/// What a sync run did: the sender's summary and the sync's counters.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SyncSummary {
    /// The sender core, socket and kernel, as `diodon send` reports them.
    pub send: SendSummary,
    /// The sync's own counters.
    pub sync: SyncCounters,
    /// The state database at the end.
    pub status: state::StatusCounts,
}

/// The open sockets of a sync's links (`opts.send`'s, then one per
/// `opts.more_links`) and each link's health, in that order.
#[derive(Debug)]
pub struct SyncLinks {
    /// The socket for `opts.send`.
    pub first: BatchSender,
    /// One per `opts.more_links`.
    pub more: Vec<BatchSender>,
    /// One per link.
    pub health: Vec<Arc<crate::multilink::LinkHealth>>,
}

/// Runs a sync on the open sockets of `links` until `stop` (or, with `once`,
/// until done), counting into
/// `stats` and `progress` (which a metrics endpoint may already be
/// reading: `gateway::run_sync`); `watch` sees both every 100 ms.
pub fn run_sync(
    mut opts: SyncOptions,
    links: SyncLinks,
    stats: &Arc<SyncStats>,
    progress: &Arc<SendProgress>,
    stop: &Arc<AtomicBool>,
    mut watch: impl FnMut(&SendProgress, &SyncStats),
) -> Result<SyncSummary, SyncError> {
    let (inbox_tx, inbox) = mpsc::channel::<Inbox>();
    let hook_tx = Mutex::new(inbox_tx.clone());
    opts.send.on_sent = Some(SentHook::new(move |n| {
        if let Ok(tx) = hook_tx.lock() {
            let _ = tx.send(Inbox::Sent(n));
        }
    }));
    let SyncLinks {
        first,
        more,
        health,
    } = links;
    let more = opts.more_links.iter().cloned().zip(more).collect();
    let links = crate::send::link_options(&opts.send, first, more);
    let (handle, queues) = crate::send::link_inputs(&links, &health);
    let before = UdpSnmp::read().ok();
    let cpu0 = process_cpu_seconds();

    // The cores: abort their open channels when the sync is stopped.
    let core_stop = Arc::clone(stop);
    let core_progress = Arc::clone(progress);
    let core_health = health.clone();
    let core = thread::Builder::new()
        .name("diodon-sender".into())
        .spawn(move || run_links(links, queues, core_health, &core_progress, &core_stop))
        .map_err(|_| SyncError::Thread("sender"))?;

    // Readers.
    let (job_tx, job_rx) = mpsc::sync_channel::<Work>(opts.readers.max(1));
    let job_rx = Arc::new(Mutex::new(job_rx));
    let cfg = ReaderConfig {
        follow_symlinks: opts.scan.follow_symlinks,
        settle: opts.settle,
    };
    let mut readers = Vec::new();
    for i in 0..opts.readers.max(1) {
        let (jobs, h, tx) = (Arc::clone(&job_rx), handle.clone(), inbox_tx.clone());
        readers.push(
            thread::Builder::new()
                .name(format!("diodon-reader-{i}"))
                .spawn(move || reader::run(&jobs, &h, &tx, cfg))
                .map_err(|_| SyncError::Thread("reader"))?,
        );
    }

    // The database is created (schema, WAL) once, before the scanner opens
    // its own connection: two first opens at once can find it locked.
    let state = State::open(&opts.state)?;

    // The scanner: its own connection; a full scan, then every --rescan.
    let scanner_stop = Arc::new(AtomicBool::new(false));
    let scanner = {
        let (path, scan_opts, st, tx) = (
            opts.state.clone(),
            opts.scan.clone(),
            Arc::clone(stats),
            inbox_tx.clone(),
        );
        let (every, stop2, watch) = (opts.rescan, Arc::clone(&scanner_stop), opts.watch);
        thread::Builder::new()
            .name("diodon-scanner".into())
            .spawn(move || {
                let r = scanner_loop(&path, &scan_opts, &st, &tx, every, watch, &stop2);
                if let Err(e) = &r {
                    // The scheduler must not wait for scans that never come.
                    tracing::error!("scanner stopped: {e}");
                    let _ = tx.send(Inbox::ScanFailed(e.to_string()));
                }
                r
            })
            .map_err(|_| SyncError::Thread("scanner"))?
    };
    drop(inbox_tx);

    let (opts_ref, stats_ref) = (&opts, &**stats);
    let result = thread::scope(|s| {
        let sched = s.spawn(move || {
            let mut sched = schedule::Scheduler::new(state, opts_ref, stats_ref, handle, job_tx);
            let r = sched.run(&inbox, stop);
            (r, sched.state.status(opts_ref.passes))
        });
        while !sched.is_finished() {
            watch(progress, stats);
            thread::sleep(Duration::from_millis(100));
        }
        sched.join().map_err(|_| SyncError::Thread("scheduler"))
    })?;
    scanner_stop.store(true, Ordering::Relaxed);
    let (run, status) = result;
    let scan_result = scanner.join().map_err(|_| SyncError::Thread("scanner"))?;
    for r in readers {
        r.join().map_err(|_| SyncError::Thread("reader"))?;
    }
    let reports = core.join().map_err(|_| SyncError::Thread("sender"))??;
    run?;
    scan_result?;
    let status = status?;
    let kernel = kernel_delta(before, UdpSnmp::read().ok());
    let cpu = process_cpu_seconds() - cpu0;
    let send = match reports.as_slice() {
        [one] => SendSummary::new(one, kernel, cpu, 0),
        many => SendSummary::of_links(many, &health, kernel, cpu, 0),
    };
    Ok(SyncSummary {
        send,
        sync: stats.snapshot(),
        status,
    })
}

fn scanner_loop(
    path: &Path,
    opts: &ScanOptions,
    stats: &SyncStats,
    inbox: &mpsc::Sender<Inbox>,
    every: Duration,
    watch: bool,
    stop: &AtomicBool,
) -> Result<(), StateError> {
    let state = State::open(path)?;
    let (changed_tx, changed) = mpsc::channel::<Watched>();
    let watched;
    let opts = if watch {
        watched = ScanOptions {
            watch: Watch::start(changed_tx).map(Arc::new),
            ..opts.clone()
        };
        &watched
    } else {
        opts
    };
    while !stop.load(Ordering::Relaxed) {
        let t0 = diodon_io::unix_time_ms();
        let sum = scan::scan(&state, opts, stats, stop)?;
        let now = diodon_io::unix_time_ms().cast_signed();
        state.set_meta("scans", state.meta("scans")? + 1)?;
        state.set_meta("last_scan_ms", now)?;
        tracing::info!(
            dirs = sum.dirs,
            files = sum.files,
            changed = sum.changed,
            deleted = sum.deleted,
            skipped = sum.skipped,
            ms = diodon_io::unix_time_ms().saturating_sub(t0),
            "scan done"
        );
        if inbox.send(Inbox::ScanDone).is_err() {
            break;
        }
        let until = diodon_io::unix_time_ms() + every.as_millis() as u64;
        while diodon_io::unix_time_ms() < until && !stop.load(Ordering::Relaxed) {
            match changed.recv_timeout(Duration::from_millis(50)) {
                Ok(first) => {
                    // Coalesce a burst of events (a file being written).
                    thread::sleep(Duration::from_millis(200));
                    let mut paths = std::collections::BTreeSet::new();
                    let mut overflow = false;
                    for w in std::iter::once(first).chain(changed.try_iter()) {
                        match w {
                            Watched::Path(p) => {
                                paths.insert(p);
                            }
                            Watched::Overflow => overflow = true,
                        }
                    }
                    if overflow {
                        tracing::info!("the file-system watch lost events (its queue overflowed): scanning everything now");
                        break;
                    }
                    let paths: Vec<PathBuf> = paths.into_iter().collect();
                    let sum = scan::scan_paths(&state, opts, &paths)?;
                    stats
                        .watch_checked
                        .fetch_add(paths.len() as u64, Ordering::Relaxed);
                    stats.watch_dirs.fetch_add(sum.dirs, Ordering::Relaxed);
                    stats
                        .found_changed
                        .fetch_add(sum.changed, Ordering::Relaxed);
                    stats
                        .found_deleted
                        .fetch_add(sum.deleted, Ordering::Relaxed);
                    tracing::debug!(
                        paths = paths.len(),
                        dirs = sum.dirs,
                        changed = sum.changed,
                        deleted = sum.deleted,
                        "watched paths checked"
                    );
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    Ok(())
}

/// `diodon sync --status`: the state database's counts.
pub fn status(path: &Path, passes: u32) -> Result<state::StatusCounts, StateError> {
    State::open_read_only(path)?.status(passes)
}
