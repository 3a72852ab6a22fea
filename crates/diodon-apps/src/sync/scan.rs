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
use super::stats::SyncStats;
use super::watch::Watch;
use globset::GlobSet;
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    /// The file-system watch: every directory is added to it before it is
    /// read (set by the sync's scanner thread).
    pub watch: Option<Arc<Watch>>,
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
    /// Transactions the differences were written in.
    pub transactions: u64,
}

impl std::ops::AddAssign for ScanSummary {
    fn add_assign(&mut self, o: ScanSummary) {
        self.dirs += o.dirs;
        self.files += o.files;
        self.changed += o.changed;
        self.deleted += o.deleted;
        self.skipped += o.skipped;
        self.transactions += o.transactions;
    }
}

/// A difference found by the scan, written later in a short transaction:
/// the directories are read outside any transaction, so the scheduler's
/// writes never wait behind a directory being read.
enum Write {
    Dir {
        path: String,
        parent: String,
    },
    Touch {
        parent: String,
        name: String,
        touched_ms: i64,
    },
    Upsert(FileRow),
    Deleted {
        parent: String,
        name: String,
        now: i64,
    },
    Tree {
        path: String,
        now: i64,
    },
}

/// Writes collected differences in one transaction; counts tree removals.
fn apply(state: &State, writes: &mut Vec<Write>, sum: &mut ScanSummary) -> Result<(), StateError> {
    if writes.is_empty() {
        return Ok(());
    }
    sum.transactions += 1;
    state.begin()?;
    for w in writes.drain(..) {
        match w {
            Write::Dir { path, parent } => state.add_dir(&path, &parent)?,
            Write::Touch {
                parent,
                name,
                touched_ms,
            } => state.touch(&parent, &name, touched_ms)?,
            Write::Upsert(row) => state.upsert(&row)?,
            Write::Deleted { parent, name, now } => state.mark_deleted(&parent, &name, now)?,
            Write::Tree { path, now } => sum.deleted += state.remove_tree(&path, now)?,
        }
    }
    state.commit()
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
    let mut writes = Vec::new();
    let mut applied = diodon_io::unix_time_ms();
    for root in &opts.roots {
        let mut stack = vec![(root.path.clone(), root.base.clone())];
        while let Some((dir, name)) = stack.pop() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            scan_dir(
                state,
                opts,
                &dir,
                &name,
                &mut stack,
                true,
                &mut writes,
                &mut sum,
            )?;
            // Soon and in batches: the scheduler sees new files quickly.
            let now = diodon_io::unix_time_ms();
            if writes.len() >= opts.batch.max(1) || now.saturating_sub(applied) > 250 {
                apply(state, &mut writes, &mut sum)?;
                applied = now;
            }
        }
    }
    apply(state, &mut writes, &mut sum)?;
    count(stats, &sum);
    Ok(sum)
}

/// Rescans only the directories `dirs` (paths on disk below a root, as a
/// file-system watch reported them) and the subdirectories that are new
/// below them; the periodic full scan stays the safety net.
pub fn scan_dirs(
    state: &State,
    opts: &ScanOptions,
    dirs: &[PathBuf],
) -> Result<ScanSummary, StateError> {
    let mut sum = ScanSummary::default();
    let mut writes = Vec::new();
    for dir in dirs {
        let Some(name) = channel_dir(opts, dir) else {
            continue;
        };
        let mut stack = vec![(dir.clone(), name)];
        let mut first = true;
        while let Some((d, n)) = stack.pop() {
            // Below the reported directory only new subdirectories are walked.
            scan_dir(
                state,
                opts,
                &d,
                &n,
                &mut stack,
                !first,
                &mut writes,
                &mut sum,
            )?;
            first = false;
        }
    }
    apply(state, &mut writes, &mut sum)?;
    Ok(sum)
}

/// Checks the paths a file-system watch reported, each on its own: a
/// regular file is compared with its own row (new, new version, only
/// touched), a path gone (or no longer a regular file) is marked deleted
/// or, a known directory, removed with its subtree; a directory itself is
/// rescanned (a new one walked whole). One new file in a folder of a
/// million costs one `stat` and one row lookup, not a million.
pub fn scan_paths(
    state: &State,
    opts: &ScanOptions,
    paths: &[PathBuf],
) -> Result<ScanSummary, StateError> {
    let mut sum = ScanSummary::default();
    let mut writes = Vec::new();
    let mut dirs = Vec::new();
    let now = diodon_io::unix_time_ms().cast_signed();
    for path in paths {
        if opts.roots.iter().any(|r| r.path == *path) {
            dirs.push(path.clone());
            continue;
        }
        let (Some(parent_dir), Some(file_name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let Some(parent) = channel_dir(opts, parent_dir) else {
            continue;
        };
        let Some(file_name) = file_name.to_str() else {
            // Skipped, and logged, by the scans.
            continue;
        };
        let rel = join(&parent, file_name);
        if ignored_below_root(opts, &rel) {
            continue;
        }
        let meta = if opts.follow_symlinks {
            fs::metadata(path)
        } else {
            fs::symlink_metadata(path)
        };
        match meta {
            Ok(m) if m.is_dir() => {
                if !state.has_dir(&rel)? {
                    writes.push(Write::Dir { path: rel, parent });
                }
                dirs.push(path.clone());
            }
            Ok(m) if m.is_file() => {
                sum.files += 1;
                let row = file_row(&parent, file_name, &m, now);
                match state.live(&parent, file_name)? {
                    Some(old) if same_file(&old, &row) => {
                        if old.touched_ms != row.touched_ms {
                            writes.push(Write::Touch {
                                parent,
                                name: file_name.to_owned(),
                                touched_ms: row.touched_ms,
                            });
                        }
                    }
                    _ => {
                        writes.push(Write::Upsert(row));
                        sum.changed += 1;
                    }
                }
            }
            // A symlink not followed or a special file: not part of the tree.
            Ok(_) => gone(state, &parent, file_name, now, &mut writes, &mut sum)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                gone(state, &parent, file_name, now, &mut writes, &mut sum)?;
            }
            Err(e) => {
                tracing::debug!(path = %path.display(), "cannot stat, left to the next scan: {e}");
            }
        }
    }
    // New directories' rows first, then their walks.
    apply(state, &mut writes, &mut sum)?;
    if !dirs.is_empty() {
        sum += scan_dirs(state, opts, &dirs)?;
    }
    Ok(sum)
}

/// Whether the scan would never reach `rel` (a channel path, its root's
/// base first): it, or a folder it is in, matches an ignore glob by its
/// name or by its path, as [`scan_dir`] tests every entry.
fn ignored_below_root(opts: &ScanOptions, rel: &str) -> bool {
    let mut ends: Vec<usize> = rel.match_indices('/').map(|(i, _)| i).skip(1).collect();
    ends.push(rel.len());
    ends.into_iter().any(|end| {
        let prefix = &rel[..end];
        let name = prefix.rsplit('/').next().unwrap_or(prefix);
        opts.ignore.is_match(name) || opts.ignore.is_match(prefix)
    })
}

/// `parent/name` is no longer a file of the tree: a live file is marked
/// deleted, a known directory removed with its subtree.
fn gone(
    state: &State,
    parent: &str,
    name: &str,
    now: i64,
    writes: &mut Vec<Write>,
    sum: &mut ScanSummary,
) -> Result<(), StateError> {
    if state.live(parent, name)?.is_some() {
        writes.push(Write::Deleted {
            parent: parent.to_owned(),
            name: name.to_owned(),
            now,
        });
        sum.deleted += 1;
    }
    let rel = join(parent, name);
    if state.has_dir(&rel)? {
        writes.push(Write::Tree { path: rel, now });
    }
    Ok(())
}

/// The channel-name directory of a path on disk below one of the roots.
fn channel_dir(opts: &ScanOptions, dir: &std::path::Path) -> Option<String> {
    opts.roots.iter().find_map(|r| {
        let rel = dir.strip_prefix(&r.path).ok()?;
        let rel = rel.to_str()?;
        Some(if rel.is_empty() {
            r.base.clone()
        } else {
            join(&r.base, rel)
        })
    })
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

/// Reads one directory and collects its differences in `writes`.
/// Subdirectories go on `stack`: all of them with `recurse`, otherwise only
/// those the database does not know yet.
#[expect(clippy::too_many_arguments, reason = "one walk's state, passed down")]
fn scan_dir(
    state: &State,
    opts: &ScanOptions,
    dir: &std::path::Path,
    name: &str,
    stack: &mut Vec<(PathBuf, String)>,
    recurse: bool,
    writes: &mut Vec<Write>,
    sum: &mut ScanSummary,
) -> Result<(), StateError> {
    // Watched before it is read: a change after the read is reported.
    if let Some(w) = &opts.watch {
        w.add(dir);
    }
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "cannot read directory, left as it was: {e}");
            return Ok(());
        }
    };
    sum.dirs += 1;
    let now = diodon_io::unix_time_ms().cast_signed();
    let mut known = state.children(name)?;
    let known_dirs: HashSet<String> = if recurse {
        HashSet::new()
    } else {
        state.subdirs(name)?.into_iter().collect()
    };
    let mut subdirs = HashSet::new();
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
        let Some(meta) = entry_meta(&entry, &path, opts, sum) else {
            continue;
        };
        if meta.is_dir() {
            if subdirs.insert(file_name.clone()) && (recurse || !known_dirs.contains(&rel)) {
                writes.push(Write::Dir {
                    path: rel.clone(),
                    parent: name.to_owned(),
                });
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
                    writes.push(Write::Touch {
                        parent: name.to_owned(),
                        name: file_name,
                        touched_ms: row.touched_ms,
                    });
                }
            }
            _ => {
                writes.push(Write::Upsert(row));
                sum.changed += 1;
            }
        }
        // A directory of 64,000 new files is not written in one go: the
        // scheduler sees the first of them after one batch (what is gone
        // is known only at the end of the directory, and written then).
        if writes.len() >= opts.batch.max(1) {
            apply(state, writes, sum)?;
        }
    }
    for (gone, _) in known {
        writes.push(Write::Deleted {
            parent: name.to_owned(),
            name: gone,
            now,
        });
        sum.deleted += 1;
    }
    for sub in state.subdirs(name)? {
        let leaf = sub.rsplit('/').next().unwrap_or_default();
        if !subdirs.contains(leaf) {
            writes.push(Write::Tree { path: sub, now });
        }
    }
    Ok(())
}

/// An entry's metadata; `None` for a symlink not followed (counted
/// skipped) and for an entry gone since `read_dir` (a known file stays in
/// `known` and is marked deleted).
fn entry_meta(
    entry: &fs::DirEntry,
    path: &std::path::Path,
    opts: &ScanOptions,
    sum: &mut ScanSummary,
) -> Option<fs::Metadata> {
    let meta = match entry.file_type() {
        Ok(t) if t.is_symlink() && !opts.follow_symlinks => {
            tracing::debug!(path = %path.display(), "skipping symlink");
            sum.skipped += 1;
            return None;
        }
        Ok(t) if t.is_symlink() => fs::metadata(path),
        Ok(_) => fs::symlink_metadata(path),
        Err(e) => Err(e),
    };
    match meta {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::debug!(path = %path.display(), "cannot stat: {e}");
            None
        }
    }
}

/// Counts a finished scan.
fn count(stats: &SyncStats, s: &ScanSummary) {
    stats.scans.fetch_add(1, Ordering::Relaxed);
    stats.scanned.fetch_add(s.files, Ordering::Relaxed);
    stats.found_changed.fetch_add(s.changed, Ordering::Relaxed);
    stats.found_deleted.fetch_add(s.deleted, Ordering::Relaxed);
    stats.skipped.fetch_add(s.skipped, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_large_directory_is_written_in_batches_and_its_deletions_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        fs::create_dir(&root).unwrap();
        for i in 0..25 {
            fs::write(root.join(format!("f{i:02}")), [i as u8]).unwrap();
        }
        let state = State::open(&dir.path().join("s.sqlite")).unwrap();
        let opts = ScanOptions {
            roots: vec![Root {
                path: root.clone(),
                base: "tree".into(),
            }],
            ignore: GlobSet::empty(),
            follow_symlinks: false,
            batch: 10,
            watch: None,
        };
        let (stats, stop) = (SyncStats::default(), AtomicBool::new(false));
        let first = scan(&state, &opts, &stats, &stop).unwrap();
        assert_eq!((first.files, first.changed, first.deleted), (25, 25, 0));
        // 25 new files in batches of 10: the first 10 are visible to the
        // scheduler before the directory is read to its end.
        assert!(first.transactions >= 3, "{first:?}");
        assert_eq!(state.children("tree").unwrap().len(), 25);
        // Deletions are decided against the whole directory, batches or not.
        for i in 0..5 {
            fs::remove_file(root.join(format!("f{i:02}"))).unwrap();
        }
        for i in 25..40 {
            fs::write(root.join(format!("f{i:02}")), [i as u8]).unwrap();
        }
        let second = scan(&state, &opts, &stats, &stop).unwrap();
        assert_eq!(
            (second.files, second.changed, second.deleted),
            (35, 15, 5),
            "{second:?}"
        );
        let live = state.children("tree").unwrap();
        assert_eq!(live.len(), 35);
        assert!(!live.contains_key("f00") && live.contains_key("f39"));
    }

    #[test]
    fn reported_paths_are_checked_one_by_one_and_new_folders_walked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tree");
        fs::create_dir_all(root.join("old/gone")).unwrap();
        for i in 0..20 {
            fs::write(root.join(format!("f{i:02}")), [i as u8]).unwrap();
        }
        fs::write(root.join("old/gone/g"), b"g").unwrap();
        let state = State::open(&dir.path().join("s.sqlite")).unwrap();
        let opts = ScanOptions {
            roots: vec![Root {
                path: root.clone(),
                base: "tree".into(),
            }],
            ignore: globset::GlobSetBuilder::new()
                .add(globset::Glob::new("*.tmp").unwrap())
                .build()
                .unwrap(),
            follow_symlinks: false,
            batch: 10,
            watch: None,
        };
        let (stats, stop) = (SyncStats::default(), AtomicBool::new(false));
        scan(&state, &opts, &stats, &stop).unwrap();
        // A new file, a new version, a deletion, a symlink where a file was,
        // an ignored file, a new folder with a subfolder, a folder gone.
        fs::write(root.join("new"), b"n").unwrap();
        fs::write(root.join("f01"), b"longer now").unwrap();
        fs::remove_file(root.join("f02")).unwrap();
        fs::remove_file(root.join("f03")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("f03")).unwrap();
        fs::write(root.join("x.tmp"), b"t").unwrap();
        fs::create_dir_all(root.join("fresh/deeper")).unwrap();
        fs::write(root.join("fresh/a"), b"a").unwrap();
        fs::write(root.join("fresh/deeper/b"), b"b").unwrap();
        fs::remove_dir_all(root.join("old/gone")).unwrap();
        // A folder the scan skips: nothing below it counts either.
        fs::create_dir(root.join("junk.tmp")).unwrap();
        fs::write(root.join("junk.tmp/inner"), b"j").unwrap();
        let reported: Vec<PathBuf> = [
            "new",
            "f01",
            "f02",
            "f03",
            "f04",
            "x.tmp",
            "fresh",
            "old/gone",
            "junk.tmp",
            "junk.tmp/inner",
        ]
        .iter()
        .map(|p| root.join(p))
        .collect();
        let sum = scan_paths(&state, &opts, &reported).unwrap();
        // new, f01 (changed), f04 (same); fresh/a and fresh/deeper/b walked.
        assert_eq!(sum.changed, 4, "{sum:?}");
        // f02, f03 (now a symlink), old/gone/g (its folder).
        assert_eq!(sum.deleted, 3, "{sum:?}");
        // Only the new folder and its subfolder were read.
        assert_eq!(sum.dirs, 2, "{sum:?}");
        let live = state.children("tree").unwrap();
        assert!(live.contains_key("new") && live.contains_key("f04"));
        assert!(!live.contains_key("f02") && !live.contains_key("f03"));
        assert!(!live.contains_key("x.tmp"));
        assert!(state.children("tree/junk.tmp").unwrap().is_empty());
        assert!(!state.has_dir("tree/junk.tmp").unwrap());
        assert_eq!(live["f01"].size, 10);
        assert_eq!(live["f01"].passes, 0);
        assert_eq!(state.children("tree/fresh/deeper").unwrap().len(), 1);
        assert!(state.has_dir("tree/fresh/deeper").unwrap());
        assert!(!state.has_dir("tree/old/gone").unwrap());
        assert!(state.children("tree/old/gone").unwrap().is_empty());
        // Reported again with nothing changed: nothing written.
        let again = scan_paths(&state, &opts, &reported[..2]).unwrap();
        assert_eq!(
            (again.changed, again.deleted, again.transactions),
            (0, 0, 0)
        );
    }
}
