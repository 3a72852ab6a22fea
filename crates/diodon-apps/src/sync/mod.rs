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
//!   (one directory at a time, batched writes)           ▲                  │ Job        │ manifests
//!                                                       │ passes, digests  ▼            ▼
//!                                         inbox ◄── reader threads ──► SourceHandle ──► core thread
//!                                         (Started, Done, SentNotice ◄── SentHook ◄──── run_sender
//!                                          ScanDone)                                   UDP ══► diode
//! ```
//!
//! Modules: [`state`] (the database), [`scan`] (the streaming scan),
//! [`schedule`] (what goes next, what went out, the outbox), [`reader`]
//! (reading files into channels), [`manifest`] (deletions and renames on
//! the wire, shared with the receiver).

pub mod manifest;
pub mod reader;
pub mod scan;
pub mod schedule;
pub mod state;

use crate::metrics::{self, MetricsError};
use crate::report::{kernel_delta, SendSummary};
use crate::send::{run_sender, SendOptions, SendProgress, SentHook, SentNotice};
use crate::PipelineError;
use diodon_io::counters::process_cpu_seconds;
use diodon_io::UdpSnmp;
use reader::{Job, ReaderConfig};
use scan::ScanOptions;
use state::{State, StateError};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What the outbox does with a file once it went out `passes` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterSend {
    /// Delete it.
    Delete,
    /// Move it under this directory (same relative path).
    Move(PathBuf),
}

impl std::str::FromStr for AfterSend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delete" => Ok(AfterSend::Delete),
            _ => match s.strip_prefix("move:") {
                Some(dir) if !dir.is_empty() => Ok(AfterSend::Move(PathBuf::from(dir))),
                _ => Err(format!("{s:?}: expected `delete` or `move:DIR`")),
            },
        }
    }
}

/// Everything a sync run needs.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The sender core, socket and queue (`on_sent` is set by [`run_sync`]).
    pub send: SendOptions,
    /// The state database.
    pub state: PathBuf,
    /// Roots, ignore globs, symlinks.
    pub scan: ScanOptions,
    /// Times every file (and deletion) is sent (the reference system's redundancy factor).
    pub passes: u32,
    /// Share of the bytes repeats may take while new files wait (0 … 1).
    pub repeat_share: f64,
    /// A file is sent once untouched (mtime and ctime) this long.
    pub settle: Duration,
    /// A full rescan this often.
    pub rescan: Duration,
    /// Watch the roots (inotify) and rescan a changed directory at once.
    pub watch: bool,
    /// Files being sent at once.
    pub in_flight: usize,
    /// Reader threads.
    pub readers: usize,
    /// Outbox mode.
    pub after_send: Option<AfterSend>,
    /// Exit once everything went out `passes` times (after a full scan).
    pub once: bool,
    /// `--metrics`: where, and the peer whose route names the interface.
    pub metrics: Option<(std::net::SocketAddr, IpAddr, Option<String>)>,
}

impl SyncOptions {
    /// Where the file with channel name `key` is on disk.
    pub fn disk_path(&self, key: &str) -> Option<PathBuf> {
        let (base, rest) = key.split_once('/').unwrap_or((key, ""));
        let root = self.scan.roots.iter().find(|r| r.base == base)?;
        Some(if rest.is_empty() {
            root.path.clone()
        } else {
            root.path.join(rest)
        })
    }
}

diodon_counters::counters! {
    /// What a sync did (a snapshot of [`SyncStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct SyncCounters in Diodon "sync" {
        scans: counter Count "scans" "Full scans of the source roots completed.",
        scanned: counter Count "scanned_files" "Files looked at by the scans.",
        found_changed: counter Count "found_changed" "New files and new versions found by the scans.",
        found_deleted: counter Count "found_deleted" "Files the scans found gone.",
        skipped: counter Count "scan_skipped" "Entries the scans skipped: ignore globs, symlinks, special files, names that are not UTF-8.",
        files_new: counter Count "files_sent_first" "Files sent for the first time (new or changed versions).",
        files_repeat: counter Count "files_sent_repeat" "Files sent again by the carousel.",
        bytes_new: counter Bytes "sent_first" "Bytes of files sent for the first time.",
        bytes_repeat: counter Bytes "sent_repeat" "Bytes of files sent again by the carousel.",
        aborted: counter Count "aborted" "File channels aborted (changed or unreadable while sent, or the sync stopped).",
        vanished: counter Count "vanished" "Files gone between scan and send.",
        changed_while_sent: counter Count "changed_while_sent" "Files found changed when their turn came or while they were read.",
        unsettled: counter Count "unsettled" "Files not sent yet because they were touched within the settle time.",
        unreadable: counter Count "unreadable" "Files that cannot be sent (permissions, refused names), each logged.",
        manifests: counter Count "manifests" "Manifest channels (deletions and renames) sent.",
        deletions: counter Count "deletions_announced" "Deletion records sent (each repeated passes times).",
        renames: counter Count "renames_announced" "Rename records sent (each repeated passes times).",
        outbox_done: counter Count "outbox_done" "Files the outbox deleted or moved after their last pass.",
        outbox_errors: counter Count "outbox_errors" "Files the outbox could not delete or move (each logged).",
        pending: gauge Count "pending" "Files still to be sent at least once more.",
    }
}

/// Live counters of a sync, shared with the metrics thread.
#[derive(Debug, Default)]
#[expect(
    missing_docs,
    reason = "each field is the SyncCounters field of the same name"
)]
pub struct SyncStats {
    pub scans: AtomicU64,
    pub scanned: AtomicU64,
    pub found_changed: AtomicU64,
    pub found_deleted: AtomicU64,
    pub skipped: AtomicU64,
    pub files_new: AtomicU64,
    pub files_repeat: AtomicU64,
    pub bytes_new: AtomicU64,
    pub bytes_repeat: AtomicU64,
    pub aborted: AtomicU64,
    pub vanished: AtomicU64,
    pub changed_while_sent: AtomicU64,
    pub unsettled: AtomicU64,
    pub unreadable: AtomicU64,
    pub manifests: AtomicU64,
    pub deletions: AtomicU64,
    pub renames: AtomicU64,
    pub outbox_done: AtomicU64,
    pub outbox_errors: AtomicU64,
    pub pending: AtomicU64,
}

impl SyncStats {
    /// The counters now.
    pub fn snapshot(&self) -> SyncCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SyncCounters {
            scans: g(&self.scans),
            scanned: g(&self.scanned),
            found_changed: g(&self.found_changed),
            found_deleted: g(&self.found_deleted),
            skipped: g(&self.skipped),
            files_new: g(&self.files_new),
            files_repeat: g(&self.files_repeat),
            bytes_new: g(&self.bytes_new),
            bytes_repeat: g(&self.bytes_repeat),
            aborted: g(&self.aborted),
            vanished: g(&self.vanished),
            changed_while_sent: g(&self.changed_while_sent),
            unsettled: g(&self.unsettled),
            unreadable: g(&self.unreadable),
            manifests: g(&self.manifests),
            deletions: g(&self.deletions),
            renames: g(&self.renames),
            outbox_done: g(&self.outbox_done),
            outbox_errors: g(&self.outbox_errors),
            pending: g(&self.pending),
        }
    }

    fn add_scan(&self, s: &scan::ScanSummary) {
        self.scans.fetch_add(1, Ordering::Relaxed);
        self.scanned.fetch_add(s.files, Ordering::Relaxed);
        self.found_changed.fetch_add(s.changed, Ordering::Relaxed);
        self.found_deleted.fetch_add(s.deleted, Ordering::Relaxed);
        self.skipped.fetch_add(s.skipped, Ordering::Relaxed);
    }
}

/// What the scheduler hears.
#[derive(Debug)]
pub enum Inbox {
    /// A reader announced a file under this token.
    Started {
        /// The core's token.
        token: u64,
        /// The file's channel name.
        key: String,
    },
    /// A reader is done with a file.
    Done {
        /// The file's channel name.
        key: String,
        /// What happened.
        result: reader::ReadResult,
    },
    /// The core ended a channel.
    Sent(SentNotice),
    /// The scanner finished a full scan.
    ScanDone,
    /// The scanner stopped with an error: the sync ends.
    ScanFailed(String),
}

/// Errors that end a sync.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The state database.
    #[error(transparent)]
    State(#[from] StateError),
    /// The sender pipeline.
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    /// The metrics endpoint.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
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

/// Runs a sync until `stop` (or, with `once`, until done); `watch` sees the
/// sender's progress and the sync's counters every 100 ms.
pub fn run_sync(
    mut opts: SyncOptions,
    stop: &Arc<AtomicBool>,
    mut watch: impl FnMut(&SendProgress, &SyncStats),
) -> Result<SyncSummary, SyncError> {
    let stats = Arc::new(SyncStats::default());
    let progress = Arc::new(SendProgress::default());
    if let Some((addr, peer, device)) = opts.metrics.clone() {
        let source = metrics::Source::Send {
            progress: Arc::clone(&progress),
            udp: None,
            tunnel: None,
            sync: Some(Arc::clone(&stats)),
        };
        metrics::serve(addr, source, peer, device)?;
    }
    let (inbox_tx, inbox) = mpsc::channel::<Inbox>();
    let hook_tx = Mutex::new(inbox_tx.clone());
    opts.send.on_sent = Some(SentHook(Arc::new(move |n| {
        if let Ok(tx) = hook_tx.lock() {
            let _ = tx.send(Inbox::Sent(n));
        }
    })));
    let (handle, queue) = crate::send::queue(opts.send.queue_chunks);
    let before = UdpSnmp::read().ok();
    let cpu0 = process_cpu_seconds();

    // The core: aborts its open channels when the sync is stopped.
    let core_stop = Arc::clone(stop);
    let core_progress = Arc::clone(&progress);
    let send_opts = opts.send.clone();
    let core = thread::Builder::new()
        .name("diodon-sender".into())
        .spawn(move || run_sender(&send_opts, &queue, core_progress, &core_stop))
        .map_err(|_| SyncError::Thread("sender"))?;

    // Readers.
    let (job_tx, job_rx) = mpsc::sync_channel::<Job>(opts.readers.max(1));
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
            Arc::clone(&stats),
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

    let (opts_ref, stats_ref) = (&opts, &*stats);
    let result = thread::scope(|s| {
        let sched = s.spawn(move || {
            let mut sched = schedule::Scheduler::new(state, opts_ref, stats_ref, handle, job_tx);
            let r = sched.run(&inbox, stop);
            (r, sched.state.status(opts_ref.passes))
        });
        while !sched.is_finished() {
            watch(&progress, &stats);
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
    let report = core.join().map_err(|_| SyncError::Thread("sender"))??;
    run?;
    scan_result?;
    let status = status?;
    let kernel = kernel_delta(before, UdpSnmp::read().ok());
    let send = SendSummary::new(&report, kernel, process_cpu_seconds() - cpu0, 0);
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
    let (changed_tx, changed) = mpsc::channel::<PathBuf>();
    let _watcher = if watch {
        watch_roots(&opts.roots, changed_tx)
    } else {
        None
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
                    let mut dirs = std::collections::BTreeSet::from([first]);
                    dirs.extend(changed.try_iter());
                    let dirs: Vec<PathBuf> = dirs.into_iter().collect();
                    let sum = scan::scan_dirs(&state, opts, &dirs)?;
                    tracing::debug!(
                        dirs = dirs.len(),
                        changed = sum.changed,
                        deleted = sum.deleted,
                        "watched directories rescanned"
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

/// Watches the roots recursively (inotify through the `notify` crate) and
/// sends the directory of every change; `None` (logged) where the system
/// refuses, and then the periodic rescan alone finds changes.
fn watch_roots(
    roots: &[scan::Root],
    tx: mpsc::Sender<PathBuf>,
) -> Option<notify::RecommendedWatcher> {
    use notify::Watcher as _;
    let handler = move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            for p in ev.paths {
                // The parent: it lists the entry (a new directory is then
                // walked as new, a removed one is noticed gone).
                if let Some(dir) = p.parent() {
                    let _ = tx.send(dir.to_path_buf());
                }
            }
        }
    };
    let mut w = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("no file-system watch ({e}); changes are found by --rescan");
            return None;
        }
    };
    for r in roots {
        if let Err(e) = w.watch(&r.path, notify::RecursiveMode::Recursive) {
            tracing::warn!(root = %r.path.display(), "cannot watch ({e}); changes are found by --rescan");
        }
    }
    Some(w)
}

/// `diodon sync --status`: the state database's counts.
pub fn status(path: &Path, passes: u32) -> Result<state::StatusCounts, StateError> {
    State::open_read_only(path)?.status(passes)
}
