//! The streaming scan: walks the source roots one directory at a time and
//! compares each directory's entries with that directory's rows in the
//! state database. Only differences are written (new or changed files,
//! vanished files and subtrees), in batched transactions, so a scan of a
//! large unchanged tree is reads only, and memory is bounded by the largest
//! directory, never by the tree.
//!
//! ```text
//!  stack of directories ─► read_dir ─► ignore globs, names that are not UTF-8 (skipped, counted)
//!        ▲                    │         symlinks (skipped unless --follow-symlinks), special files
//!        │ subdirectories     ▼
//!        └──────────── compare with State::children(dir) ─► upsert (new / changed: passes = 0)
//!                                                        ─► mark_deleted (gone)
//!                      compare with State::subdirs(dir)  ─► remove_tree (a subtree gone)
//! ```
//!
//! A directory that cannot be read is left as it is in the database: an
//! unreadable (or unmounted) source never looks like a mass deletion.

use super::state::{join, FileRow, State, StateError};
use super::SyncStats;
use globset::GlobSet;
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// One source root: a directory, announced under its base name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    /// Where it is.
    pub path: PathBuf,
    /// The first component of its files' channel names.
    pub base: String,
}

/// What the scan looks at.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// The roots.
    pub roots: Vec<Root>,
    /// File names (and relative paths) never sent: temporary files.
    pub ignore: GlobSet,
    /// Follow symbolic links (default: skip them).
    pub follow_symlinks: bool,
    /// Database writes per transaction.
    pub batch: usize,
}

/// What one full scan found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanSummary {
    /// Directories read.
    pub dirs: u64,
    /// Files looked at.
    pub files: u64,
    /// New files and new versions of files.
    pub changed: u64,
    /// Files found gone.
    pub deleted: u64,
    /// Entries skipped (ignored, symlinks, special files, bad names).
    pub skipped: u64,
}

/// Batches writes: commits every `batch` writes or 250 ms, so the
/// scheduler's connection sees new files soon.
struct Batch<'a> {
    state: &'a State,
    writes: usize,
    limit: usize,
    /// Unix ms of the last commit.
    since: u64,
}

impl Batch<'_> {
    fn wrote(&mut self, n: usize) -> Result<(), StateError> {
        self.writes += n;
        let now = diodon_io::unix_time_ms();
        if self.writes >= self.limit || now.saturating_sub(self.since) > 250 {
            self.state.commit()?;
            self.state.begin()?;
            self.writes = 0;
            self.since = now;
        }
        Ok(())
    }
}

/// Scans every root once (see the module doc). `stop` ends it early
/// (what was found so far is committed).
pub fn scan(
    state: &State,
    opts: &ScanOptions,
    stats: &SyncStats,
    stop: &AtomicBool,
) -> Result<ScanSummary, StateError> {
    let mut sum = ScanSummary::default();
    state.begin()?;
    let mut batch = Batch {
        state,
        writes: 0,
        limit: opts.batch.max(1),
        since: diodon_io::unix_time_ms(),
    };
    for root in &opts.roots {
        let mut stack = vec![(root.path.clone(), root.base.clone())];
        while let Some((dir, name)) = stack.pop() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let n = scan_dir(state, opts, &dir, &name, &mut stack, &mut sum)?;
            batch.wrote(n)?;
        }
    }
    state.commit()?;
    stats.add_scan(&sum);
    Ok(sum)
}

/// The row a file's metadata makes (first seen `now`, no pass yet).
pub fn file_row(parent: &str, name: &str, meta: &fs::Metadata, now: i64) -> FileRow {
    FileRow {
        parent: parent.to_owned(),
        name: name.to_owned(),
        size: meta.len(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        touched_ms: (meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000)
            .max(meta.ctime() * 1000 + meta.ctime_nsec() / 1_000_000),
        ino: meta.ino(),
        mode: meta.mode() & 0o7777,
        digest: None,
        first_seen_ms: now,
        passes: 0,
    }
}

/// Whether two rows are the same version of a file (a ctime change alone,
/// such as a new link count, is not a new version).
fn same_file(a: &FileRow, b: &FileRow) -> bool {
    a.size == b.size && a.mtime_ns == b.mtime_ns && a.ino == b.ino && a.mode == b.mode
}

/// Reads one directory, writes its differences; returns the writes.
fn scan_dir(
    state: &State,
    opts: &ScanOptions,
    dir: &std::path::Path,
    name: &str,
    stack: &mut Vec<(PathBuf, String)>,
    sum: &mut ScanSummary,
) -> Result<usize, StateError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot read directory, left as it was: {e}");
            return Ok(0);
        }
    };
    sum.dirs += 1;
    let now = diodon_io::unix_time_ms().cast_signed();
    let mut known = state.children(name)?;
    let mut subdirs = HashSet::new();
    let mut writes = 0;
    for entry in entries {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "cannot read directory entry: {e}");
                continue;
            }
        };
        let path = entry.path();
        let Some(file_name) = entry.file_name().to_str().map(str::to_owned) else {
            tracing::warn!(path = %path.display(), "skipping a name that is not UTF-8 (it cannot be announced)");
            sum.skipped += 1;
            continue;
        };
        let rel = join(name, &file_name);
        if opts.ignore.is_match(&file_name) || opts.ignore.is_match(&rel) {
            sum.skipped += 1;
            continue;
        }
        let meta = match entry.file_type() {
            Ok(t) if t.is_symlink() && !opts.follow_symlinks => {
                tracing::debug!(path = %path.display(), "skipping symlink");
                sum.skipped += 1;
                continue;
            }
            Ok(t) if t.is_symlink() => fs::metadata(&path),
            Ok(_) => fs::symlink_metadata(&path),
            Err(e) => Err(e),
        };
        let meta = match meta {
            Ok(m) => m,
            // Vanished between read_dir and stat: a known file stays in
            // `known` and is marked deleted below.
            Err(e) => {
                tracing::debug!(path = %path.display(), "cannot stat: {e}");
                continue;
            }
        };
        if meta.is_dir() {
            if subdirs.insert(file_name.clone()) {
                state.add_dir(&rel, name)?;
                stack.push((path, rel));
            }
            continue;
        }
        if !meta.is_file() {
            tracing::debug!(path = %path.display(), "skipping special file");
            sum.skipped += 1;
            continue;
        }
        sum.files += 1;
        let row = file_row(name, &file_name, &meta, now);
        match known.remove(&file_name) {
            Some(old) if same_file(&old, &row) => {
                if old.touched_ms != row.touched_ms {
                    state.touch(name, &file_name, row.touched_ms)?;
                    writes += 1;
                }
            }
            _ => {
                state.upsert(&row)?;
                sum.changed += 1;
                writes += 1;
            }
        }
    }
    for (gone, _) in known {
        state.mark_deleted(name, &gone, now)?;
        sum.deleted += 1;
        writes += 1;
    }
    for sub in state.subdirs(name)? {
        let leaf = sub.rsplit('/').next().unwrap_or_default();
        if !subdirs.contains(leaf) {
            let n = state.remove_tree(&sub, now)?;
            sum.deleted += n;
            writes += 1 + n as usize;
        }
    }
    Ok(writes)
}
