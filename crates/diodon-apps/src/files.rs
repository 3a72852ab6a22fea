//! Files: the sending side walks paths into channels (relative name, size,
//! mtime, mode); the receiving side writes each channel to a staging file,
//! fsyncs, waits for the core's verdict, and only then renames it into place.
//!
//! ```text
//!  Opened ─► path fits PATH_MAX? announced size fits the free space? (else refused, nothing written)
//!  OUT/.diodon-staging/<random>.part   (≥ 1 MiB announced: that size reserved on disk, fallocate)
//!        │                          ── Complete (digest verified) ──► fsync, chmod, mtime
//!        │                                                             rename ─► OUT/<name>
//!        │                                                             fsync(dir)
//!        ├── disk full (ENOSPC, EDQUOT) ──► partial removed at once, the failure logged
//!        └── Failed / Refused / IO error ──► quarantine (bounded, see quarantine.rs):
//!                                            OUT/.diodon-quarantine/<name>.<ts>  (bytes, within quota)
//!                                            OUT/.diodon-quarantine/<name>.<ts>.reason
//! ```
//!
//! A sync file (its channel is block-stable) is staged in the held area
//! instead (`held.rs`): its blocks are written at their offsets, a pass that
//! loses blocks leaves it there (`Partial`, then `Failed`: a record in the
//! quarantine, the bytes kept), and the next pass of the same version
//! resumes it — the decoder is told which blocks are held, and the merged
//! file (`Assembled`) is hashed here before its rename; a mismatch sends it
//! to the quarantine and forgets it.
//!
//! A crash leaves at most a staging file (removed at the next start; one a
//! live receiver sharing the folder holds is locked and left alone), never
//! a partial file under its final name; a failure removes or quarantines its
//! staging file when it happens. Parent directories are created one
//! component at a time and an existing symlink is never followed. A file
//! that fails for lack of room frees its space (its bytes are never kept),
//! so the next file that fits is delivered.

mod bundle;
mod room;

use crate::held::{Held, HeldEvicted, HeldFile, HeldLimits};
use crate::mirror::{keep_digest, AuditRecord, Mirror, MirrorOptions, MirrorStats};
use crate::names::{escape, fits_under, sanitize, SafePath};
use crate::outdir::ensure_parent;
use crate::quarantine::{Evicted, Item, Placed, Quarantine, Record};
pub use crate::quarantine::{QuarantineBytes, QuarantineLimits, QUARANTINE};
use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::send::{Closed, SourceHandle};
use crate::sink_error::{FileOp, Refusal, SinkFailure};
use diodon_proto::{BlockSet, ChannelKind, ChannelMeta};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Staging directory under the output directory.
pub const STAGING: &str = ".diodon-staging";
/// Files announcing at least this many bytes have their size reserved on
/// disk when they open (`fallocate`): a disk that cannot hold one refuses
/// it before its first byte even when other writers fill it meanwhile, and
/// its writes cost the filesystem less (BENCHMARKS.md). Smaller files keep
/// the room check alone: one call more per file would cost a tree of
/// small files more than it saves.
pub const RESERVE_FROM: u64 = 1 << 20;
pub use room::SPACE_RESERVE;

/// A file to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its channel name (relative, `/`-separated).
    pub name: String,
}

/// Errors while collecting files to send.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    /// A path could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A name is not valid UTF-8 or is otherwise unsendable.
    #[error("{0}: name is not valid UTF-8")]
    Name(PathBuf),
}

/// Why one file could not be sent (logged; its channel is aborted).
#[derive(Debug, thiserror::Error)]
pub enum SourceFileError {
    /// The file could not be opened.
    #[error("open: {0}")]
    Open(io::Error),
    /// Its metadata could not be read.
    #[error("stat: {0}")]
    Stat(io::Error),
    /// Reading it failed.
    #[error("read: {0}")]
    Read(io::Error),
    /// The sender pipeline stopped.
    #[error(transparent)]
    Closed(#[from] Closed),
}

/// Expands `paths` into files: a file is sent under its file name, a
/// directory recursively under `dirname/…`. Symlinks and special files are
/// skipped (and logged), never followed.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<SourceFile>, WalkError> {
    let mut out = Vec::new();
    for path in paths {
        let io_err = |source| WalkError::Io {
            path: path.clone(),
            source,
        };
        let meta = fs::metadata(path).map_err(io_err)?;
        let base = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .or_else(|| {
                // "." or "/": name the entries relative to it.
                if meta.is_dir() {
                    Some(String::new())
                } else {
                    None
                }
            })
            .ok_or_else(|| WalkError::Name(path.clone()))?;
        if meta.is_dir() {
            walk(path, &base, &mut out)?;
        } else {
            out.push(SourceFile {
                path: path.clone(),
                name: base,
            });
        }
    }
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<SourceFile>) -> Result<(), WalkError> {
    let io_err = |source| WalkError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut entries: Vec<_> = fs::read_dir(dir)
        .map_err(io_err)?
        .collect::<Result<_, _>>()
        .map_err(io_err)?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            return Err(WalkError::Name(path));
        };
        let name = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let ft = entry.file_type().map_err(|source| WalkError::Io {
            path: path.clone(),
            source,
        })?;
        if ft.is_dir() {
            walk(&path, &name, out)?;
        } else if ft.is_file() {
            out.push(SourceFile { path, name });
        } else {
            tracing::warn!(path = %path.display(), "skipping symlink or special file");
        }
    }
    Ok(())
}

/// Reads `files` one after the other into channels (runs on a source
/// thread). Returns how many could not be read (each was aborted).
pub fn send_files(files: &[SourceFile], handle: &SourceHandle) -> usize {
    let mut failed = 0;
    for f in files {
        if let Err(e) = send_one(f, handle) {
            tracing::error!(path = %f.path.display(), "{e}");
            failed += 1;
        }
    }
    failed
}

/// Times a file goes again after the link that carried it went down.
pub const LINK_RETRIES: u32 = 3;

/// [`send_files`] over several links: a file whose channel failed because
/// its link went down (`notices` tells every channel's end, and whether
/// its link was lost) is read and sent again, over the links that are up, up to [`LINK_RETRIES`] times;
/// returns once every file was sent or gave up. Returns how many could not
/// be read.
pub fn send_files_over_links(
    files: &[SourceFile],
    handle: &SourceHandle,
    notices: &std::sync::mpsc::Receiver<crate::send::SentNotice>,
) -> usize {
    use std::collections::{HashMap, VecDeque};
    let mut failed = 0;
    // token → (file, attempt) of the channels in flight and of the last
    // ones sent (a link seen down just after may still take one back);
    // files to send again, in order.
    let mut out: HashMap<u64, (usize, u32)> = HashMap::new();
    let mut sent: VecDeque<(u64, (usize, u32))> = VecDeque::new();
    let mut again: VecDeque<(usize, u32)> = VecDeque::new();
    let mut next = 0;
    let ended = |n: crate::send::SentNotice,
                 out: &mut HashMap<u64, (usize, u32)>,
                 sent: &mut VecDeque<(u64, (usize, u32))>,
                 again: &mut VecDeque<(usize, u32)>| {
        let taken_back = || sent.iter().position(|(t, _)| *t == n.token);
        let found = match out.remove(&n.token) {
            Some(f) => Some(f),
            None if n.link_lost => taken_back().and_then(|at| sent.remove(at)).map(|(_, f)| f),
            None => None,
        };
        let Some((i, attempt)) = found else {
            return;
        };
        if n.status == crate::send::SentStatus::Sent {
            if sent.len() >= 256 {
                sent.pop_front();
            }
            sent.push_back((n.token, (i, attempt)));
            return;
        }
        if n.link_lost && attempt <= LINK_RETRIES {
            tracing::warn!(
                path = %files[i].path.display(),
                "{}: its link went down, sending it again over another",
                files[i].name
            );
            again.push_back((i, attempt + 1));
        }
    };
    loop {
        while let Ok(n) = notices.try_recv() {
            ended(n, &mut out, &mut sent, &mut again);
        }
        let job = again.pop_front().or_else(|| {
            (next < files.len()).then(|| {
                next += 1;
                (next - 1, 1)
            })
        });
        match job {
            Some((i, attempt)) => match send_one(&files[i], handle) {
                Ok(token) => {
                    out.insert(token, (i, attempt));
                }
                Err(e) => {
                    tracing::error!(path = %files[i].path.display(), "{e}");
                    failed += 1;
                    if matches!(e, SourceFileError::Closed(_)) {
                        return failed;
                    }
                }
            },
            None if out.is_empty() => return failed,
            None => match notices.recv_timeout(std::time::Duration::from_millis(200)) {
                Ok(n) => ended(n, &mut out, &mut sent, &mut again),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return failed,
            },
        }
    }
}

fn send_one(f: &SourceFile, handle: &SourceHandle) -> Result<u64, SourceFileError> {
    let mut file = File::open(&f.path).map_err(SourceFileError::Open)?;
    let meta = file.metadata().map_err(SourceFileError::Stat)?;
    let cm = ChannelMeta {
        kind: ChannelKind::File,
        size: Some(meta.len()),
        mode: meta.mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
        name: f.name.clone(),
        aligned: false,
        sync: None,
    };
    // The file is hashed here, block by block as it is read (in this
    // thread's cache), not on the core thread.
    let token = handle.open_digested(cm)?;
    let mut hasher = blake3::Hasher::new();
    loop {
        let buf = match read_chunk(&mut file, handle.block_buffer(), handle.chunk()) {
            Ok(buf) => buf,
            Err(e) => {
                let e = SourceFileError::Read(e);
                let _ = handle.abort(token, e.to_string());
                return Err(e);
            }
        };
        let n = buf.len();
        if n == 0 {
            break;
        }
        hasher.update(&buf);
        handle.data(token, buf)?;
        if n < handle.chunk() {
            break;
        }
    }
    handle.finish_digested(token, *hasher.finalize().as_bytes())?;
    Ok(token)
}

/// Reads up to `max` bytes (fewer only at EOF) into `buf`, emptied first
/// (a spare block buffer, `SourceHandle::block_buffer`, or a new one). The
/// buffer is not zeroed: the kernel writes straight into its capacity
/// (zeroing a chunk per read cost as much as the copy itself).
pub fn read_chunk(r: &mut impl Read, mut buf: Vec<u8>, max: usize) -> io::Result<Vec<u8>> {
    buf.clear();
    buf.reserve_exact(max);
    r.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Errors preparing the output directory.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// IO on the output directory.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A receiver directory is a symlink or not a directory.
    #[error("{0} must be a directory, not a symlink or file")]
    NotDir(PathBuf),
}

/// How the file sink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkOptions {
    /// fsync each file before the rename (and its directory after).
    pub fsync: bool,
    /// Bounds of the quarantine folder.
    pub quarantine: QuarantineLimits,
    /// Sync mirror: deletions, audit log.
    pub mirror: MirrorOptions,
    /// Bounds of the held area (partly received sync files).
    pub held: HeldLimits,
}

impl Default for FileSinkOptions {
    fn default() -> Self {
        FileSinkOptions {
            fsync: true,
            quarantine: QuarantineLimits::default(),
            mirror: MirrorOptions::default(),
            held: HeldLimits::default(),
        }
    }
}

diodon_counters::counters! {
    /// What the file sink counted (a snapshot of [`FileSinkStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct FileSinkCounters in Diodon "file_sink" {
        no_space: counter Count "no_space" "Files refused before their first byte, or failed while written, because the output filesystem had no room for them (each also logged).",
        freed: counter Bytes "freed" "Partial bytes of failed files removed instead of kept in the quarantine (no room on the output filesystem, or over the quarantine's byte limit).",
        quarantine_evictions: counter Count "quarantine_evictions" "Quarantine entries (a record and any partial bytes) removed, oldest first, to keep the quarantine within its byte and entry limits.",
        quarantine_evicted: counter Bytes "quarantine_evicted" "Bytes removed from the quarantine by those evictions.",
        reason_errors: counter Count "reason_write_errors" "Quarantine records (.reason files) that could not be written (each logged).",
        quarantine_entries: gauge Count "quarantine_entries" "Entries in the quarantine now.",
        quarantine_bytes: gauge Bytes "quarantine" "Bytes in the quarantine now (partial data and records).",
        held_evictions: counter Count "held_evictions" "Partly received sync files removed from the held area, oldest first, to keep it within its bounds.",
        merged: counter Count "merged" "Sync files completed from blocks of several passes (or runs), verified by their digest.",
        merge_mismatches: counter Count "merge_mismatches" "Sync files merged from several passes whose digest did not match (quarantined, their kept blocks forgotten).",
        held_files: gauge Count "held_files" "Partly received sync files in the held area now.",
    }
}

/// Live counters of the file sink, shared with the summary and metrics
/// threads; [`FileSinkStats::snapshot`] reads them as declared counters.
#[derive(Debug, Default)]
pub struct FileSinkStats {
    /// See [`FileSinkCounters::no_space`].
    pub no_space: AtomicU64,
    /// See [`FileSinkCounters::freed`].
    pub freed: AtomicU64,
    /// See [`FileSinkCounters::quarantine_evictions`].
    pub quarantine_evictions: AtomicU64,
    /// See [`FileSinkCounters::quarantine_evicted`].
    pub quarantine_evicted: AtomicU64,
    /// See [`FileSinkCounters::reason_errors`].
    pub reason_errors: AtomicU64,
    /// See [`FileSinkCounters::quarantine_entries`].
    pub quarantine_entries: AtomicU64,
    /// See [`FileSinkCounters::quarantine_bytes`].
    pub quarantine_bytes: AtomicU64,
    /// See [`FileSinkCounters::held_evictions`].
    pub held_evictions: AtomicU64,
    /// See [`FileSinkCounters::merged`].
    pub merged: AtomicU64,
    /// See [`FileSinkCounters::merge_mismatches`].
    pub merge_mismatches: AtomicU64,
    /// See [`FileSinkCounters::held_files`].
    pub held_files: AtomicU64,
    /// The mirror's counters (files present, deleted, availability).
    pub mirror: MirrorStats,
}

impl FileSinkStats {
    /// The counters now.
    pub fn snapshot(&self) -> FileSinkCounters {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FileSinkCounters {
            no_space: get(&self.no_space),
            freed: get(&self.freed),
            quarantine_evictions: get(&self.quarantine_evictions),
            quarantine_evicted: get(&self.quarantine_evicted),
            reason_errors: get(&self.reason_errors),
            quarantine_entries: get(&self.quarantine_entries),
            quarantine_bytes: get(&self.quarantine_bytes),
            held_evictions: get(&self.held_evictions),
            merged: get(&self.merged),
            merge_mismatches: get(&self.merge_mismatches),
            held_files: get(&self.held_files),
        }
    }

    fn add(a: &AtomicU64, n: u64) {
        a.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts held-area evictions and sets its level.
    fn held(&self, h: &Held, evicted: HeldEvicted) {
        Self::add(&self.held_evictions, evicted.files);
        self.held_files.store(h.files() as u64, Ordering::Relaxed);
    }

    /// Counts evictions and sets the quarantine's levels.
    fn quarantine(&self, q: &Quarantine, evicted: Evicted) {
        Self::add(&self.quarantine_evictions, evicted.entries);
        Self::add(&self.quarantine_evicted, evicted.bytes);
        self.quarantine_entries
            .store(q.entries(), Ordering::Relaxed);
        self.quarantine_bytes.store(q.bytes(), Ordering::Relaxed);
    }
}

struct Staged {
    name: String,
    rel: Option<SafePath>,
    meta: ChannelMeta,
    tmp: PathBuf,
    file: Option<File>,
    written: u64,
    error: Option<SinkFailure>,
    /// Failed for lack of room: its bytes were removed and are never kept.
    no_space: bool,
    /// When its channel-open reached the sink, Unix ms.
    opened_ms: u64,
    /// A sync file staged in the held area: its key and place.
    held: Option<(String, HeldFile)>,
    /// Its announced size is reserved on disk ([`RESERVE_FROM`]): the room
    /// check no longer counts what it still needs.
    reserved: bool,
}

/// Writes channels as files under an output directory (see module doc).
#[derive(Debug)]
pub struct FileSink {
    out: PathBuf,
    staging: PathBuf,
    quarantine: Quarantine,
    open: HashMap<ChannelKey, Staged>,
    known: HashMap<ChannelKey, String>,
    fsync: bool,
    stats: Arc<FileSinkStats>,
    mirror: Mirror,
    /// Channels skipped because the file is here already, for the decoder.
    skips: Vec<ChannelKey>,
    /// Recently skipped channels: their stray verdicts are ignored.
    skipped: HashSet<ChannelKey>,
    skipped_order: VecDeque<ChannelKey>,
    /// The held area (partly received sync files).
    held: Held,
    /// Channels resumed from held blocks, for the decoder.
    resumes: Vec<(ChannelKey, BlockSet)>,
    /// Whether the next file fits on the output filesystem.
    room: room::Room,
}

/// Skipped channels remembered (a verdict may cross the skip).
const SKIPPED_KEPT: usize = 4096;

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged")
            .field("name", &self.name)
            .field("tmp", &self.tmp)
            .finish_non_exhaustive()
    }
}

impl FileSink {
    /// Prepares `out` (created if missing), its staging and quarantine
    /// directories, removes staging files a crash left behind and brings
    /// the quarantine within its bounds. `stats` is where it counts.
    pub fn new(
        out: &Path,
        opts: &FileSinkOptions,
        stats: Arc<FileSinkStats>,
    ) -> Result<Self, OutDirError> {
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| OutDirError::Io { path, source }
        };
        fs::create_dir_all(out).map_err(io_err(out))?;
        let staging = out.join(STAGING);
        let quarantine = out.join(QUARANTINE);
        for dir in [&staging, &quarantine] {
            match fs::symlink_metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(OutDirError::NotDir(dir.clone())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(dir) {
                    // Another receiver sharing the folder made it meanwhile.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
                    other => other.map_err(io_err(dir))?,
                },
                Err(e) => {
                    return Err(OutDirError::Io {
                        path: dir.clone(),
                        source: e,
                    })
                }
            }
        }
        let mut stale = 0;
        for entry in fs::read_dir(&staging).map_err(io_err(&staging))? {
            let entry = entry.map_err(io_err(&staging))?;
            if entry.file_type().is_ok_and(|t| t.is_file())
                && !in_use(&entry.path())
                && fs::remove_file(entry.path()).is_ok()
            {
                stale += 1;
            }
        }
        if stale > 0 {
            tracing::warn!(
                count = stale,
                "removed unverified staging files left by an earlier run"
            );
        }
        let fs_total = diodon_io::fs::space(out).ok().map(|s| s.total);
        let max_bytes = opts.quarantine.max_bytes.resolve(fs_total);
        let (quarantine, evicted) =
            Quarantine::open(quarantine, max_bytes, opts.quarantine.max_entries)
                .map_err(io_err(&out.join(QUARANTINE)))?;
        stats.quarantine(&quarantine, evicted);
        let (held, held_evicted) = Held::open(&staging, opts.held).map_err(io_err(&staging))?;
        stats.held(&held, held_evicted);
        if held.files() > 0 {
            tracing::info!(
                files = held.files(),
                bytes = held.bytes(),
                "partly received sync files kept from an earlier run"
            );
        }
        let mirror_stats = Arc::new(MirrorStats::default());
        let mirror = Mirror::new(out, &opts.mirror, mirror_stats).map_err(io_err(out))?;
        tracing::info!(
            max_bytes,
            max_entries = opts.quarantine.max_entries,
            entries = quarantine.entries(),
            bytes = quarantine.bytes(),
            evicted = evicted.entries,
            "quarantine bounds"
        );
        Ok(FileSink {
            out: out.to_owned(),
            room: room::Room::of(&staging),
            staging,
            quarantine,
            open: HashMap::new(),
            known: HashMap::new(),
            fsync: opts.fsync,
            stats,
            mirror,
            skips: Vec::new(),
            skipped: HashSet::new(),
            skipped_order: VecDeque::new(),
            held,
            resumes: Vec::new(),
        })
    }

    /// A sync file announced with a size, mtime and digest this folder
    /// already holds: not written again, the core drops its channel.
    fn already_present(&mut self, key: ChannelKey, meta: &ChannelMeta) -> Option<ChannelOutcome> {
        if meta.kind != ChannelKind::File {
            return None;
        }
        let sync = meta.sync?;
        let digest = sync.digest?;
        let rel = sanitize(&meta.name).ok()?;
        if !self.mirror.present(&rel, meta) {
            return None;
        }
        let location = self.out.join(rel.as_path());
        let blake3 = hex::encode(digest);
        let now = diodon_io::unix_time_ms();
        self.mirror.skipped(&AuditRecord {
            at_ms: now,
            path: meta.name.clone(),
            size: meta.size.unwrap_or(0),
            blake3: blake3.clone(),
            session: key.session.to_string(),
            channel: key.channel.0,
            opened_ms: now,
            first_seen_ms: sync.first_seen_unix_ms,
            pass: sync.pass,
            verdict: "present",
            ..AuditRecord::default()
        });
        self.mirror_stats_sync();
        self.skips.push(key);
        if self.skipped_order.len() == SKIPPED_KEPT {
            if let Some(old) = self.skipped_order.pop_front() {
                self.skipped.remove(&old);
            }
        }
        self.skipped.insert(key);
        self.skipped_order.push_back(key);
        Some(ChannelOutcome {
            session: key.session.to_string(),
            channel: key.channel.0,
            name: meta.name.clone(),
            bytes: meta.size.unwrap_or(0),
            location: format!("already present: {}", location.display()),
            verdict: Verdict::Verified { blake3 },
        })
    }

    /// Copies the mirror's counters into the shared stats.
    fn mirror_stats_sync(&self) {
        let from = self.mirror.stats();
        let to = &self.stats.mirror;
        for (a, b) in [
            (&from.verified, &to.verified),
            (&from.failed, &to.failed),
            (&from.present, &to.present),
            (&from.deleted, &to.deleted),
            (&from.renamed, &to.renamed),
            (&from.not_applied, &to.not_applied),
            (&from.purged, &to.purged),
            (&from.avail_1s, &to.avail_1s),
            (&from.avail_10s, &to.avail_10s),
            (&from.avail_60s, &to.avail_60s),
            (&from.avail_600s, &to.avail_600s),
            (&from.avail_count, &to.avail_count),
            (&from.avail_ms_sum, &to.avail_ms_sum),
            (&from.avail_ms_max, &to.avail_ms_max),
            (&from.audit_errors, &to.audit_errors),
        ] {
            b.store(a.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The audit record of a staged file.
    fn audit_record(key: ChannelKey, st: &Staged, verdict: &'static str) -> AuditRecord {
        let sync = st.meta.sync;
        AuditRecord {
            at_ms: diodon_io::unix_time_ms(),
            path: st.name.clone(),
            size: st.meta.size.unwrap_or(st.written),
            session: key.session.to_string(),
            channel: key.channel.0,
            opened_ms: st.opened_ms,
            first_seen_ms: sync.map_or(0, |s| s.first_seen_unix_ms),
            pass: sync.map_or(0, |s| s.pass),
            verdict,
            ..AuditRecord::default()
        }
    }

    /// Whether `size` more bytes fit on the output filesystem beside what
    /// the files being written still announce and [`SPACE_RESERVE`]. An
    /// unreadable filesystem size lets the writes decide.
    fn check_room(&self, size: u64) -> Result<(), SinkFailure> {
        self.room.check(size, || {
            self.open
                .values()
                .filter(|s| s.error.is_none() && !s.reserved)
                .filter_map(|s| s.meta.size.map(|n| n.saturating_sub(s.written)))
                .sum()
        })
    }

    fn start(
        &mut self,
        key: ChannelKey,
        meta: ChannelMeta,
        refused: Option<SinkFailure>,
    ) -> Result<(), SinkError> {
        let rel = sanitize(&meta.name).ok();
        let tmp = self
            .staging
            .join(format!("{:016x}.part", rand::random::<u64>()));
        let mut staged = Staged {
            name: meta.name.clone(),
            rel,
            meta,
            tmp,
            file: None,
            written: 0,
            error: refused,
            no_space: false,
            opened_ms: diodon_io::unix_time_ms(),
            held: None,
            reserved: false,
        };
        let result = if staged.error.is_none() {
            self.prepare(key, &mut staged)
        } else {
            Ok(())
        };
        self.known.insert(key, staged.name.clone());
        if let Err(why) = result {
            if why.is_no_space() {
                out_of_room(&self.stats, key, &mut staged, &why);
            }
            staged.error = Some(why.clone());
            self.open.insert(key, staged);
            return Err(SinkError { key, why });
        }
        self.open.insert(key, staged);
        Ok(())
    }

    /// Decides before the first byte whether the file can be placed (its
    /// path fits `PATH_MAX`, its announced size fits the free space), then
    /// creates its staging file.
    fn prepare(&mut self, key: ChannelKey, st: &mut Staged) -> Result<(), SinkFailure> {
        if let Some(rel) = &st.rel {
            fits_under(&self.out, rel).map_err(SinkFailure::Name)?;
        }
        if st.meta.kind == ChannelKind::Manifest {
            let size = st.meta.size.unwrap_or(u64::MAX);
            if size > crate::sync::manifest::MAX_MANIFEST_BYTES {
                return Err(SinkFailure::ManifestTooLarge(size));
            }
        }
        if st.meta.kind == ChannelKind::Bundle {
            let size = st.meta.size.unwrap_or(u64::MAX);
            if size > diodon_proto::bundle::MAX_BUNDLE_BYTES {
                return Err(SinkFailure::BundleTooLarge(size));
            }
        }
        if let Some(size) = st.meta.size {
            self.check_room(size)?;
        }
        if self.place_held(key, st)? {
            return Ok(());
        }
        let file = create_staging(&st.tmp)?;
        if let Some(size) = st.meta.size.filter(|&n| n >= RESERVE_FROM) {
            st.reserved = reserve(&file, size)?;
        }
        st.file = Some(file);
        Ok(())
    }

    /// Stages a sync file in the held area (resuming the blocks kept of the
    /// same version, if any, and telling the decoder); `false` for other
    /// files.
    fn place_held(&mut self, key: ChannelKey, st: &mut Staged) -> Result<bool, SinkFailure> {
        let (Some(sync), Some(size)) = (st.meta.sync, st.meta.size) else {
            return Ok(false);
        };
        if st.meta.kind != ChannelKind::File || sync.block_bytes == 0 {
            return Ok(false);
        }
        // A file of one block arrives whole or not at all: nothing to
        // merge, and small files stay as cheap as before.
        let total = size.div_ceil(u64::from(sync.block_bytes));
        if total < 2 {
            return Ok(false);
        }
        let hkey = Held::key(&st.meta);
        let (hf, evicted) = self
            .held
            .place(&hkey, sync.block_bytes, total)
            .map_err(SinkFailure::file(FileOp::CreateStaging))?;
        self.stats.held(&self.held, evicted);
        if hf.resumed > 0 {
            tracing::info!(%key, name = %st.name.escape_debug(), held = hf.resumed, blocks = total, pass = sync.pass, "resuming a sync file from blocks kept by an earlier pass");
            self.resumes.push((key, hf.map.clone()));
        }
        st.tmp.clone_from(&hf.data_path);
        st.file = Some(
            hf.file
                .try_clone()
                .map_err(SinkFailure::file(FileOp::CreateStaging))?,
        );
        st.held = Some((hkey, hf));
        Ok(true)
    }

    /// A sync file whose pass ended incomplete: its bytes and block map
    /// stay in the held area for the next pass; the quarantine gets only
    /// the record (and the audit log the failure).
    fn keep_held(&mut self, key: ChannelKey, mut st: Staged, why: &str) -> ChannelOutcome {
        let Some((hkey, hf)) = st.held.take() else {
            return self.quarantine(key, st, why);
        };
        st.file = None;
        let (kept, total) = (hf.map.len(), hf.map.total());
        let place = hf.data_path.clone();
        drop(hf);
        if kept == 0 || st.error.is_some() {
            self.held.forget(&hkey);
            self.stats.held(&self.held, HeldEvicted::default());
            st.tmp = self.staging.join("-");
            return self.quarantine(key, st, why);
        }
        let evicted = self.held.kept(&hkey);
        self.stats.held(&self.held, evicted);
        st.tmp = self.staging.join("-");
        let why = format!("{why}; {kept} of {total} blocks kept for a later pass");
        let mut outcome = self.quarantine(key, st, &why);
        outcome.location = format!("(kept for a later pass: {})", place.display());
        outcome
    }

    /// Every block of a resumed sync file is here: hashed before anything
    /// else trusts it, then committed like a verified file (or quarantined
    /// and forgotten).
    fn assembled(
        &mut self,
        key: ChannelKey,
        bytes: u64,
        digest: [u8; 32],
    ) -> Option<ChannelOutcome> {
        let st = self.open.get_mut(&key)?;
        if st.error.is_none() {
            match verify_file(&st.tmp, bytes, &digest) {
                Ok(()) => {
                    st.written = bytes;
                    FileSinkStats::add(&self.stats.merged, 1);
                }
                Err(why) => {
                    FileSinkStats::add(&self.stats.merge_mismatches, 1);
                    st.error = Some(why);
                }
            }
        }
        self.complete(key, bytes, digest)
    }

    fn data(&mut self, key: ChannelKey, offset: u64, data: &[u8]) -> Result<(), SinkError> {
        let Some(st) = self.open.get_mut(&key) else {
            return Ok(());
        };
        if st.error.is_some() {
            return Ok(());
        }
        let r = if let Some((_, hf)) = st.held.as_mut() {
            hf.write_block(offset, data)
                .map_err(SinkFailure::file(FileOp::Write))
        } else if st.meta.sync.is_some() {
            // A sync channel is block-stable: a block after a lost one
            // comes at its own offset (the staging file is sparse).
            match st.file.as_ref() {
                Some(f) => f
                    .write_all_at(data, offset)
                    .map_err(SinkFailure::file(FileOp::Write)),
                None => Err(SinkFailure::NoStagingFile),
            }
        } else if offset == st.written {
            match st.file.as_mut() {
                Some(f) => f.write_all(data).map_err(SinkFailure::file(FileOp::Write)),
                None => Err(SinkFailure::NoStagingFile),
            }
        } else {
            Err(SinkFailure::OutOfOrder {
                offset,
                expected: st.written,
            })
        };
        match r {
            Ok(()) => {
                st.written += data.len() as u64;
                if !st.reserved {
                    self.room.wrote(data.len() as u64);
                }
                Ok(())
            }
            Err(why) => {
                if why.is_no_space() {
                    out_of_room(&self.stats, key, st, &why);
                }
                st.error = Some(why.clone());
                Err(SinkError { key, why })
            }
        }
    }

    fn complete(
        &mut self,
        key: ChannelKey,
        bytes: u64,
        digest: [u8; 32],
    ) -> Option<ChannelOutcome> {
        let mut st = self.open.remove(&key)?;
        self.known.remove(&key);
        let rel = st.rel.clone();
        let held = st.held.take().map(|(k, hf)| (k, hf.resumed));
        let result = match (&st.error, &rel) {
            (Some(e), _) => Err(e.clone()),
            (None, _) if st.written != bytes => Err(SinkFailure::Length {
                written: st.written,
                bytes,
            }),
            // A manifest's name is a label: nothing is placed under it.
            (None, _) if st.meta.kind == ChannelKind::Manifest => self.apply_manifest(key, &mut st),
            // So is a bundle's: its files are placed under their own names.
            (None, _) if st.meta.kind == ChannelKind::Bundle => self.apply_bundle(key, &mut st),
            (None, None) => Err(SinkFailure::UnsafeName),
            (None, Some(rel)) => self
                .commit(&mut st, rel, &digest)
                .map(|p| p.display().to_string()),
        };
        let blake3 = hex::encode(digest);
        let outcome = match result {
            Ok(location) => {
                let mut rec = Self::audit_record(key, &st, "verified");
                rec.held_blocks = held.as_ref().map_or(0, |(_, n)| *n);
                if let Some((k, _)) = &held {
                    self.held.release(k);
                    self.stats.held(&self.held, HeldEvicted::default());
                }
                rec.blake3.clone_from(&blake3);
                rec.verified_ms = diodon_io::unix_time_ms();
                rec.reason.clone_from(&location);
                // A bundle's files have their own records.
                if !matches!(st.meta.kind, ChannelKind::Manifest | ChannelKind::Bundle) {
                    self.mirror.verified(rec);
                }
                ChannelOutcome {
                    session: key.session.to_string(),
                    channel: key.channel.0,
                    name: st.name,
                    bytes,
                    location,
                    verdict: Verdict::Verified { blake3 },
                }
            }
            // Its files were decided one by one (audit log, quarantine).
            Err(SinkFailure::BundleFiles(why)) => ChannelOutcome {
                session: key.session.to_string(),
                channel: key.channel.0,
                name: st.name,
                bytes,
                location: "(each file in the audit log)".into(),
                verdict: Verdict::Failed { reason: why },
            },
            Err(why) => {
                if why.is_no_space() && !st.no_space {
                    out_of_room(&self.stats, key, &mut st, &why);
                }
                let outcome = self.quarantine(key, st, &why.to_string());
                if let Some((k, _)) = &held {
                    self.held.forget(k);
                    self.stats.held(&self.held, HeldEvicted::default());
                }
                outcome
            }
        };
        self.mirror_stats_sync();
        Some(outcome)
    }

    /// A verified manifest: its records are applied; nothing is placed.
    fn apply_manifest(&mut self, key: ChannelKey, st: &mut Staged) -> Result<String, SinkFailure> {
        drop(st.file.take());
        let bytes = fs::read(&st.tmp).map_err(SinkFailure::file(FileOp::Write))?;
        let _ = fs::remove_file(&st.tmp);
        let base = Self::audit_record(key, st, "manifest");
        let done = self
            .mirror
            .apply(&bytes, &base)
            .map_err(|e| SinkFailure::Manifest(e.to_string()))?;
        tracing::info!(%key, "{done}");
        Ok(done)
    }

    /// fsync, permissions, mtime, rename into place, fsync the directory.
    /// A sync file keeps its digest as an extended attribute, so a later
    /// pass recognises it without reading it.
    fn commit(
        &self,
        st: &mut Staged,
        rel: &SafePath,
        digest: &[u8; 32],
    ) -> Result<PathBuf, SinkFailure> {
        let file = st.file.take().ok_or(SinkFailure::NoStagingFile)?;
        give_back_reserve(st, &file);
        if st.meta.sync.is_some() {
            keep_digest(&file, digest);
        }
        if self.fsync {
            file.sync_all().map_err(SinkFailure::file(FileOp::Fsync))?;
        }
        let mode = st.meta.mode & 0o777;
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(SinkFailure::file(FileOp::Chmod))?;
        if let Some(t) = mtime(&st.meta) {
            file.set_modified(t)
                .map_err(SinkFailure::file(FileOp::SetMtime))?;
        }
        drop(file);
        let dest = self.out.join(rel.as_path());
        let parent = dest.parent().ok_or(SinkFailure::NoParent)?;
        ensure_parent(&self.out, rel)?;
        match fs::symlink_metadata(&dest) {
            Ok(m) if m.is_dir() => return Err(SinkFailure::IsADirectory(dest)),
            _ => {}
        }
        // rename(2) replaces the final component itself (a symlink there is
        // replaced, not followed).
        fs::rename(&st.tmp, &dest).map_err(SinkFailure::file(FileOp::Rename))?;
        if self.fsync {
            if let Ok(d) = File::open(parent) {
                let _ = d.sync_all();
            }
        }
        Ok(dest)
    }

    /// Hands a failed file to the quarantine (its record, and its bytes
    /// within the quota unless it failed for lack of room) and counts what
    /// that did.
    fn quarantine(&mut self, key: ChannelKey, st: Staged, why: &str) -> ChannelOutcome {
        let mut rec = Self::audit_record(key, &st, "failed");
        why.clone_into(&mut rec.reason);
        self.mirror.failed(&rec);
        self.mirror_stats_sync();
        if let Some(file) = &st.file {
            give_back_reserve(&st, file);
        }
        drop(st.file);
        let stem = st
            .rel
            .as_ref()
            .map_or_else(|| escape(&st.name), SafePath::flat);
        let Placed {
            fate,
            freed,
            reason,
            evicted,
        } = self.quarantine.put(&Item {
            record: Record {
                name: &st.name,
                stem: &stem,
                session: key.session.to_string(),
                channel: key.channel.to_string(),
                received: st.written,
                announced: st.meta.size,
                why,
                at_ms: diodon_io::unix_time_ms(),
            },
            partial: Some(&st.tmp),
            no_space: st.no_space,
        });
        FileSinkStats::add(&self.stats.freed, freed);
        if reason.is_none() {
            FileSinkStats::add(&self.stats.reason_errors, 1);
        }
        self.stats.quarantine(&self.quarantine, evicted);
        ChannelOutcome {
            session: key.session.to_string(),
            channel: key.channel.0,
            name: st.name,
            bytes: st.written,
            location: fate.location(),
            verdict: Verdict::Failed {
                reason: why.to_owned(),
            },
        }
    }
}

impl Sink for FileSink {
    fn skipped(&mut self) -> Vec<ChannelKey> {
        std::mem::take(&mut self.skips)
    }

    fn resumed(&mut self) -> Vec<(ChannelKey, BlockSet)> {
        std::mem::take(&mut self.resumes)
    }

    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        crate::stream::refuse_datagrams(meta)?;
        if matches!(meta.kind, ChannelKind::Manifest | ChannelKind::Bundle) {
            return Ok(());
        }
        sanitize(&meta.name)
            .map(|_| ())
            .map_err(Refusal::UnsafeName)
    }

    fn handle_data(
        &mut self,
        key: ChannelKey,
        offset: u64,
        data: Vec<u8>,
    ) -> (Result<Option<ChannelOutcome>, SinkError>, Option<Vec<u8>>) {
        (self.data(key, offset, &data).map(|()| None), Some(data))
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        match event {
            SinkEvent::Opened { key, meta } => {
                if let Some(outcome) = self.already_present(key, &meta) {
                    return Ok(Some(outcome));
                }
                self.start(key, meta, None).map(|()| None)
            }
            SinkEvent::Refused { key, meta, why } => {
                let _ = self.start(key, meta, Some(why.into()));
                Ok(None)
            }
            // Files are never aligned record channels: they fail instead.
            // A sync file's block map is on disk already when its partial
            // verdict comes (the failure follows).
            SinkEvent::Gap { .. } | SinkEvent::Partial { .. } => Ok(None),
            SinkEvent::Data { key, offset, data } => self.data(key, offset, &data).map(|()| None),
            SinkEvent::Failed { key, .. }
            | SinkEvent::Complete { key, .. }
            | SinkEvent::Assembled { key, .. }
                if self.skipped.contains(&key) =>
            {
                Ok(None)
            }
            SinkEvent::Assembled { key, bytes, digest } => Ok(self.assembled(key, bytes, digest)),
            SinkEvent::Complete { key, bytes, digest } => Ok(self.complete(key, bytes, digest)),
            SinkEvent::Failed { key, reason } => {
                let why = reason.to_string();
                if let Some(st) = self.open.remove(&key) {
                    self.known.remove(&key);
                    // A refusal's own reason is more precise than "rejected: …".
                    let why = st.error.clone().map_or(why, |e| e.to_string());
                    let why = match self.salvage_bundle(key, &st) {
                        Some(landed) => format!("{why}; {landed}"),
                        None => why,
                    };
                    Ok(Some(self.keep_held(key, st, &why)))
                } else {
                    let name = format!("channel-{}-{}", key.session, key.channel);
                    let st = Staged {
                        name: name.clone(),
                        rel: sanitize(&name).ok(),
                        meta: ChannelMeta::file(name, 0),
                        tmp: self.staging.join("-"),
                        file: None,
                        written: 0,
                        error: None,
                        no_space: false,
                        opened_ms: 0,
                        held: None,
                        reserved: false,
                    };
                    Ok(Some(self.quarantine(key, st, &why)))
                }
            }
        }
    }
}

/// A new staging file, owner-only, never through a symlink, locked while
/// it is open: a second receiver sharing the folder (one per link) that
/// starts meanwhile leaves it alone ([`in_use`]).
fn create_staging(path: &Path) -> Result<File, SinkFailure> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(SinkFailure::file(FileOp::CreateStaging))?;
    // A filesystem without locks only loses that protection.
    let _ = diodon_io::fs::try_lock(&file);
    Ok(file)
}

/// Reserves a staging file's announced size on disk (see [`RESERVE_FROM`]):
/// `Ok(true)` when reserved, `Ok(false)` on a filesystem that cannot (its
/// writes decide, as before), a no-space failure when the room is not there.
fn reserve(file: &File, size: u64) -> Result<bool, SinkFailure> {
    match diodon_io::fs::reserve(file, size) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
            Err(SinkFailure::file(FileOp::Reserve)(e))
        }
        Err(_) => Ok(false),
    }
}

/// Gives back the blocks reserved beyond what a staging file holds (a
/// file that ended short, before the quarantine keeps its bytes). Best
/// effort: the reservation goes with the file at the latest.
fn give_back_reserve(st: &Staged, file: &File) {
    if st.reserved && st.meta.size.is_some_and(|n| n > st.written) {
        let _ = file.set_len(st.written);
    }
}

/// Whether a live receiver holds the staging file at `path` (its lock).
fn in_use(path: &Path) -> bool {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .is_ok_and(|f| matches!(diodon_io::fs::try_lock(&f), Ok(false)))
}

/// Whether the file at `path` is `bytes` long and hashes to `digest`.
fn verify_file(path: &Path, bytes: u64, digest: &[u8; 32]) -> Result<(), SinkFailure> {
    let unreadable = |_| SinkFailure::MergedDigest { what: "unreadable" };
    let mut f = File::open(path).map_err(unreadable)?;
    if f.metadata().map_err(unreadable)?.len() != bytes {
        return Err(SinkFailure::MergedDigest { what: "length" });
    }
    let mut h = blake3::Hasher::new();
    io::copy(&mut f, &mut h).map_err(unreadable)?;
    if h.finalize().as_bytes() != digest {
        return Err(SinkFailure::MergedDigest { what: "digest" });
    }
    Ok(())
}

/// A file failed for lack of room: its partial bytes go now (not when
/// the verdict comes back), it is counted, and the operator is told.
fn out_of_room(stats: &FileSinkStats, key: ChannelKey, st: &mut Staged, why: &SinkFailure) {
    st.no_space = true;
    st.file = None;
    let freed = match fs::remove_file(&st.tmp) {
        Ok(()) => st.written,
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => {
            tracing::error!(path = %st.tmp.display(), "cannot remove the partial bytes of a file that found the disk full: {e}");
            0
        }
    };
    FileSinkStats::add(&stats.no_space, 1);
    FileSinkStats::add(&stats.freed, freed);
    let name = escape(&st.name);
    let written = st.written;
    match why {
        SinkFailure::WontFit {
            size, available, ..
        } => tracing::error!(
            %key, %name, size, available,
            "output disk full: refused {name} before its first byte, its announced {size} bytes do not fit in the {available} available"
        ),
        SinkFailure::NoSpace { op, source } => tracing::error!(
            %key, %name, written,
            "output disk full: {name} failed after {written} bytes ({op}: {source}) and its partial bytes were removed to free the space"
        ),
        other => tracing::error!(
            %key, %name, written,
            "output disk full: {name} failed after {written} bytes ({other}) and its partial bytes were removed to free the space"
        ),
    }
}

/// The channel's mtime, if representable.
fn mtime(meta: &ChannelMeta) -> Option<SystemTime> {
    let secs = u64::try_from(meta.mtime_sec).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, meta.mtime_nsec.min(999_999_999)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_proto::{ChannelId, FailReason, SessionId};
    use diodon_testkit::entries;

    /// A reader that hands out at most 3 bytes a call and is interrupted
    /// every other call, like a slow pipe.
    struct Trickle<'a>(&'a [u8], bool);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = !self.1;
            if self.1 {
                return Err(io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(3).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn read_chunk_fills_the_chunk_and_is_short_only_at_the_end() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let mut pipe = Trickle(&data, false);
        // A spare buffer comes back with its old bytes: none of them stays.
        let chunks: Vec<Vec<u8>> = (0..4)
            .map(|_| read_chunk(&mut pipe, vec![0xEE; 450], 400).unwrap())
            .collect();
        let lens: Vec<usize> = chunks.iter().map(Vec::len).collect();
        assert_eq!(lens, [400, 400, 200, 0]);
        assert_eq!(chunks.concat(), data);
    }

    fn key(c: u32) -> ChannelKey {
        ChannelKey {
            session: SessionId(7),
            channel: ChannelId(c),
        }
    }

    fn meta(name: &str, size: u64) -> ChannelMeta {
        let mut m = ChannelMeta::file(name, size);
        m.mode = 0o4755;
        m.mtime_sec = 1_600_000_000;
        m
    }

    fn sink(out: &Path, fsync: bool) -> FileSink {
        let opts = FileSinkOptions {
            fsync,
            ..FileSinkOptions::default()
        };
        FileSink::new(out, &opts, Arc::default()).unwrap()
    }

    fn staging_is_empty(out: &Path) -> bool {
        fs::read_dir(out.join(STAGING)).unwrap().next().is_none()
    }

    const B: u32 = 4096;

    fn synced(pass: u16, data: &[u8]) -> ChannelMeta {
        let mut m = meta("big.bin", data.len() as u64);
        m.sync = Some(diodon_proto::SyncInfo {
            first_seen_unix_ms: 1,
            pass,
            digest: None,
            block_bytes: B,
        });
        m
    }

    fn block(data: &[u8], b: usize) -> Vec<u8> {
        data[b * B as usize..((b + 1) * B as usize).min(data.len())].to_vec()
    }

    /// Pass 1 of a 3-block sync file loses block 1: blocks 0 and 2 are kept.
    fn lose_block_one(out: &Path, data: &[u8]) {
        let mut s = sink(out, false);
        s.handle(SinkEvent::Opened {
            key: key(1),
            meta: synced(1, data),
        })
        .unwrap();
        for b in [0, 2] {
            s.handle(SinkEvent::Data {
                key: key(1),
                offset: u64::from(B) * b as u64,
                data: block(data, b),
            })
            .unwrap();
        }
        let failed = s
            .handle(SinkEvent::Failed {
                key: key(1),
                reason: FailReason::BlockLost { block: 1, count: 1 },
            })
            .unwrap()
            .unwrap();
        assert!(
            failed.location.contains("kept for a later pass"),
            "{}",
            failed.location
        );
        assert!(!out.join("big.bin").exists());
    }

    #[test]
    fn a_held_sync_file_survives_a_restart_and_the_next_pass_fills_it() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * B as usize - 100).map(|i| (i * 13) as u8).collect();
        lose_block_one(dir.path(), &data);
        // The receiver restarts; pass 2 of the same version arrives.
        let stats = Arc::new(FileSinkStats::default());
        let opts = FileSinkOptions {
            fsync: false,
            ..FileSinkOptions::default()
        };
        let mut s = FileSink::new(dir.path(), &opts, stats.clone()).unwrap();
        s.handle(SinkEvent::Opened {
            key: key(2),
            meta: synced(2, &data),
        })
        .unwrap();
        let resumed = s.resumed();
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].1.iter().collect::<Vec<_>>(), vec![0, 2]);
        s.handle(SinkEvent::Data {
            key: key(2),
            offset: u64::from(B),
            data: block(&data, 1),
        })
        .unwrap();
        let done = s
            .handle(SinkEvent::Assembled {
                key: key(2),
                bytes: data.len() as u64,
                digest: *blake3::hash(&data).as_bytes(),
            })
            .unwrap()
            .unwrap();
        assert!(matches!(done.verdict, Verdict::Verified { .. }), "{done:?}");
        assert_eq!(fs::read(dir.path().join("big.bin")).unwrap(), data);
        assert_eq!(stats.snapshot().merged, 1);
        assert_eq!(stats.snapshot().held_files, 0);
        assert!(entries(&dir.path().join(STAGING).join(crate::held::HELD)).is_empty());
    }

    #[test]
    fn a_merged_file_with_the_wrong_digest_is_quarantined_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * B as usize).map(|i| (i * 7) as u8).collect();
        lose_block_one(dir.path(), &data);
        let stats = Arc::new(FileSinkStats::default());
        let opts = FileSinkOptions {
            fsync: false,
            ..FileSinkOptions::default()
        };
        let mut s = FileSink::new(dir.path(), &opts, stats.clone()).unwrap();
        s.handle(SinkEvent::Opened {
            key: key(2),
            meta: synced(2, &data),
        })
        .unwrap();
        assert_eq!(s.resumed().len(), 1);
        // Block 1 of another content: the merge cannot match the digest.
        s.handle(SinkEvent::Data {
            key: key(2),
            offset: u64::from(B),
            data: vec![0xee; B as usize],
        })
        .unwrap();
        let done = s
            .handle(SinkEvent::Assembled {
                key: key(2),
                bytes: data.len() as u64,
                digest: *blake3::hash(&data).as_bytes(),
            })
            .unwrap()
            .unwrap();
        let Verdict::Failed { reason } = &done.verdict else {
            panic!("{done:?}")
        };
        assert!(reason.contains("does not match its digest"), "{reason}");
        assert!(!dir.path().join("big.bin").exists());
        assert_eq!(stats.snapshot().merge_mismatches, 1);
        // Forgotten: the next pass starts from nothing.
        s.handle(SinkEvent::Opened {
            key: key(3),
            meta: synced(3, &data),
        })
        .unwrap();
        assert!(s.resumed().is_empty());
    }

    #[test]
    fn complete_file_is_renamed_with_sanitized_mode_and_mtime() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path(), true);
        sink.handle(SinkEvent::Opened {
            key: key(1),
            meta: meta("a/b/c.txt", 5),
        })
        .unwrap();
        assert!(!dir.path().join("a/b/c.txt").exists());
        sink.handle(SinkEvent::Data {
            key: key(1),
            offset: 0,
            data: b"hel".to_vec(),
        })
        .unwrap();
        sink.handle(SinkEvent::Data {
            key: key(1),
            offset: 3,
            data: b"lo".to_vec(),
        })
        .unwrap();
        // Not yet verified: nothing under the final name.
        assert!(!dir.path().join("a/b/c.txt").exists());
        let out = sink
            .handle(SinkEvent::Complete {
                key: key(1),
                bytes: 5,
                digest: [1; 32],
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Verified { .. }), "{out:?}");
        let p = dir.path().join("a/b/c.txt");
        assert_eq!(fs::read(&p).unwrap(), b"hello");
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o755, "setuid stripped");
        assert_eq!(m.mtime(), 1_600_000_000);
        assert!(staging_is_empty(dir.path()));
    }

    #[test]
    fn failed_channel_goes_to_quarantine_with_reason() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path(), false);
        sink.handle(SinkEvent::Opened {
            key: key(2),
            meta: meta("x.bin", 10),
        })
        .unwrap();
        sink.handle(SinkEvent::Data {
            key: key(2),
            offset: 0,
            data: vec![1; 4],
        })
        .unwrap();
        let out = sink
            .handle(SinkEvent::Failed {
                key: key(2),
                reason: FailReason::BlockLost { block: 1, count: 1 },
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Failed { .. }));
        assert!(!dir.path().join("x.bin").exists());
        let q: Vec<_> = fs::read_dir(dir.path().join(QUARANTINE))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(q.len(), 2, "{q:?}");
        let reason = q
            .iter()
            .find(|n| n.to_string_lossy().ends_with(".reason"))
            .unwrap();
        let text = fs::read_to_string(dir.path().join(QUARANTINE).join(reason)).unwrap();
        assert!(text.contains("block 1 lost"), "{text}");
        assert!(staging_is_empty(dir.path()));
    }

    #[test]
    fn symlinked_directory_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("link")).unwrap();
        let mut sink = sink(dir.path(), false);
        sink.handle(SinkEvent::Opened {
            key: key(3),
            meta: meta("link/evil", 1),
        })
        .unwrap();
        sink.handle(SinkEvent::Data {
            key: key(3),
            offset: 0,
            data: vec![0],
        })
        .unwrap();
        let out = sink
            .handle(SinkEvent::Complete {
                key: key(3),
                bytes: 1,
                digest: [0; 32],
            })
            .unwrap()
            .unwrap();
        assert!(
            matches!(&out.verdict, Verdict::Failed { reason } if reason.contains("symlink")),
            "{out:?}"
        );
        assert!(!outside.path().join("evil").exists());
    }

    #[test]
    fn refused_name_is_quarantined_without_touching_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path(), false);
        let m = meta("../escape", 1);
        let why = FileSink::admit(&m).unwrap_err();
        assert!(matches!(why, Refusal::UnsafeName(_)), "{why}");
        sink.handle(SinkEvent::Refused {
            key: key(4),
            meta: m,
            why: why.clone(),
        })
        .unwrap();
        let out = sink
            .handle(SinkEvent::Failed {
                key: key(4),
                reason: FailReason::Rejected(why.into()),
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Failed { .. }));
        assert!(!dir.path().parent().unwrap().join("escape").exists());
    }

    #[test]
    fn stale_staging_files_are_removed_on_start() {
        let dir = tempfile::tempdir().unwrap();
        drop(sink(dir.path(), false));
        fs::write(dir.path().join(STAGING).join("dead.part"), b"partial").unwrap();
        drop(sink(dir.path(), false));
        assert!(staging_is_empty(dir.path()));
    }

    #[test]
    fn a_second_receiver_leaves_the_first_ones_staging_files_alone() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = sink(dir.path(), false);
        first
            .handle(SinkEvent::Opened {
                key: key(1),
                meta: meta("a.bin", 4),
            })
            .unwrap();
        first
            .handle(SinkEvent::Data {
                key: key(1),
                offset: 0,
                data: vec![1, 2],
            })
            .unwrap();
        assert!(
            !staging_is_empty(dir.path()),
            "the first receiver stages a.bin"
        );
        // One receiver per link, sharing the folder: the second starts now.
        drop(sink(dir.path(), false));
        assert!(
            !staging_is_empty(dir.path()),
            "a live staging file was removed"
        );
        let out = first
            .handle(SinkEvent::Data {
                key: key(1),
                offset: 2,
                data: vec![3, 4],
            })
            .and_then(|_| {
                first.handle(SinkEvent::Complete {
                    key: key(1),
                    bytes: 4,
                    digest: *blake3::hash(&[1, 2, 3, 4]).as_bytes(),
                })
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Verified { .. }), "{out:?}");
        assert_eq!(fs::read(dir.path().join("a.bin")).unwrap(), [1, 2, 3, 4]);
    }

    #[test]
    fn wrong_length_is_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path(), false);
        sink.handle(SinkEvent::Opened {
            key: key(5),
            meta: meta("short", 3),
        })
        .unwrap();
        sink.handle(SinkEvent::Data {
            key: key(5),
            offset: 0,
            data: vec![1, 2],
        })
        .unwrap();
        let out = sink
            .handle(SinkEvent::Complete {
                key: key(5),
                bytes: 3,
                digest: [0; 32],
            })
            .unwrap()
            .unwrap();
        assert!(matches!(out.verdict, Verdict::Failed { .. }));
        assert!(!dir.path().join("short").exists());
    }

    #[test]
    fn a_long_legal_name_in_a_subdirectory_keeps_its_failure_record() {
        for (c, base) in [(10, "n".repeat(250)), (11, "é".repeat(125))] {
            let dir = tempfile::tempdir().unwrap();
            let mut sink = sink(dir.path(), false);
            let name = format!("sub/{base}");
            let m = meta(&name, 10);
            assert_eq!(base.len(), 250);
            assert!(FileSink::admit(&m).is_ok(), "a legal name");
            sink.handle(SinkEvent::Opened {
                key: key(c),
                meta: m,
            })
            .unwrap();
            sink.handle(SinkEvent::Data {
                key: key(c),
                offset: 0,
                data: vec![9; 4],
            })
            .unwrap();
            let out = sink
                .handle(SinkEvent::Failed {
                    key: key(c),
                    reason: FailReason::BlockLost { block: 1, count: 1 },
                })
                .unwrap()
                .unwrap();
            assert!(matches!(out.verdict, Verdict::Failed { .. }), "{out:?}");
            let q = dir.path().join(QUARANTINE);
            assert!(
                Path::new(&out.location).starts_with(&q),
                "the partial is in the quarantine: {out:?}"
            );
            assert_eq!(fs::read(&out.location).unwrap(), [9; 4]);
            let names = entries(&q);
            assert_eq!(names.len(), 2, "{names:?}");
            assert!(names.iter().all(|n| n.len() <= 255), "{names:?}");
            let reason = names.iter().find(|n| n.ends_with(".reason")).unwrap();
            let text = fs::read_to_string(q.join(reason)).unwrap();
            assert!(text.contains("block 1 lost"), "{text}");
            assert!(staging_is_empty(dir.path()), "staging cleaned at once");
        }
    }

    #[test]
    fn a_path_too_long_for_the_system_is_refused_before_any_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = sink(dir.path(), false);
        let name = format!("{}ff", "d/".repeat(2044));
        assert_eq!(name.len(), 4090);
        let m = meta(&name, 3);
        assert!(FileSink::admit(&m).is_ok(), "every component is legal");
        let opened = sink.handle(SinkEvent::Opened {
            key: key(12),
            meta: m,
        });
        let out = if let Err(e) = &opened {
            sink.handle(SinkEvent::Failed {
                key: key(12),
                reason: FailReason::Rejected(e.why.clone().into()),
            })
            .unwrap()
            .unwrap()
        } else {
            sink.handle(SinkEvent::Data {
                key: key(12),
                offset: 0,
                data: vec![1, 2, 3],
            })
            .unwrap();
            sink.handle(SinkEvent::Complete {
                key: key(12),
                bytes: 3,
                digest: [0; 32],
            })
            .unwrap()
            .unwrap()
        };
        assert_eq!(
            entries(dir.path()),
            [QUARANTINE, STAGING],
            "no directory was made in the output folder"
        );
        let Verdict::Failed { reason } = &out.verdict else {
            panic!("{out:?}")
        };
        assert!(reason.contains("PATH_MAX"), "{reason}");
        assert!(opened.is_err(), "refused when it opened");
        let q = entries(&dir.path().join(QUARANTINE));
        assert_eq!(q.len(), 1, "a reason record only: {q:?}");
        assert!(
            fs::metadata(dir.path().join(QUARANTINE).join(&q[0]))
                .unwrap()
                .len()
                > 0
        );
        assert!(staging_is_empty(dir.path()));
    }

    #[test]
    fn collect_walks_directories_with_relative_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        fs::create_dir_all(root.join("sub")).unwrap();
        fs::write(root.join("a"), b"1").unwrap();
        fs::write(root.join("sub/b"), b"2").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("sub/link")).unwrap();
        let files = collect(&[root]).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["tree/a", "tree/sub/b"]);
    }
}
