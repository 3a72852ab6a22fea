//! The sync sender's state in `SQLite` (WAL): one row per file ever seen under
//! the source roots, one per directory, and the queries the scanner and
//! the scheduler run against them. It survives restarts: a restarted sync
//! knows which files were sent how often and finishes an interrupted pass
//! instead of starting over.
//!
//! ```text
//!  files (parent, name) ── size, mtime_ns, touched_ms (max mtime/ctime), ino, mode,
//!                          digest (from the first pass), first_seen_ms,
//!                          passes, last_sent_ms, deleted_ms, del_passes, error
//!        index pending (passes, touched_ms) WHERE live · deleted (del_passes) WHERE deleted · ino
//!  dirs  (path) ── parent                         (to notice a vanished subtree)
//!  meta  (key) ── value                           (scans done, last scan time)
//! ```
//!
//! Memory stays bounded: the scanner reads one directory's rows at a time
//! ([`State::children`]), the scheduler a page of candidates
//! ([`State::candidates`]); nothing loads the whole table.

use rusqlite::{params, Connection, OptionalExtension};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

/// Errors of the state database.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// `SQLite` refused (open, schema, query).
    #[error("sync state database: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// What the database knows about one file version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRow {
    /// Directory part of the channel name (`root/sub`).
    pub parent: String,
    /// File name within it.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Latest of mtime and ctime, ms since the epoch (settle check).
    pub touched_ms: i64,
    /// Inode (rename detection).
    pub ino: u64,
    /// Mode bits.
    pub mode: u32,
    /// BLAKE3 of the content, once a pass sent it.
    pub digest: Option<[u8; 32]>,
    /// When this version was first seen, Unix ms.
    pub first_seen_ms: i64,
    /// Passes sent of this version.
    pub passes: u32,
}

/// Where a page of [`State::candidates`] ended: the last row's place in
/// their order (touched, then path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageKey {
    touched_ms: i64,
    parent: String,
    name: String,
}

impl PageKey {
    /// The place of `row`.
    pub fn of(row: &FileRow) -> Self {
        PageKey {
            touched_ms: row.touched_ms,
            parent: row.parent.clone(),
            name: row.name.clone(),
        }
    }
}

impl FileRow {
    /// The channel name (`parent/name`).
    pub fn path(&self) -> String {
        join(&self.parent, &self.name)
    }
}

/// `parent/name`.
pub fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}/{name}")
    }
}

/// A file that is gone (or renamed), still to be announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    /// Its old channel name.
    pub path: String,
    /// The version that was deleted.
    pub size: u64,
    /// Its mtime, ns.
    pub mtime_ns: i64,
    /// Inode, to find where it was renamed to.
    pub ino: u64,
    /// When the deletion was seen, Unix ms.
    pub deleted_ms: i64,
    /// Announcements sent so far.
    pub del_passes: u32,
}

/// Counts for `diodon sync --status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatusCounts {
    /// Files known (not deleted).
    pub files: u64,
    /// Bytes of those files.
    pub bytes: u64,
    /// Files sent fewer than `passes` times.
    pub pending: u64,
    /// Files by passes sent (index = passes, the last bucket is "≥").
    pub by_passes: Vec<u64>,
    /// Deletions or renames still to be announced.
    pub deletions_pending: u64,
    /// Files given up on (name refused by the protocol, …).
    pub errors: u64,
    /// Full scans completed.
    pub scans: u64,
    /// When the last full scan ended, Unix ms (0 = never).
    pub last_scan_ms: i64,
}

/// One connection to the state database.
#[derive(Debug)]
pub struct State {
    db: Connection,
}

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS files (
  parent TEXT NOT NULL,
  name TEXT NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  touched_ms INTEGER NOT NULL,
  ino INTEGER NOT NULL,
  mode INTEGER NOT NULL,
  digest BLOB,
  first_seen_ms INTEGER NOT NULL,
  passes INTEGER NOT NULL DEFAULT 0,
  last_sent_ms INTEGER,
  deleted_ms INTEGER,
  del_passes INTEGER NOT NULL DEFAULT 0,
  error TEXT,
  PRIMARY KEY (parent, name)
) WITHOUT ROWID;
-- The pending index carries the columns of its own WHERE, so that COUNT and
-- MIN over it never read the table (each read a seek by text key in this
-- WITHOUT ROWID table: the pending gauge took a second per count at a
-- million files). It replaces files_pending, which lacked them.
DROP INDEX IF EXISTS files_pending;
CREATE INDEX IF NOT EXISTS files_pending_covering ON files(passes, touched_ms, deleted_ms, error) WHERE deleted_ms IS NULL AND error IS NULL;
CREATE INDEX IF NOT EXISTS files_deleted ON files(del_passes, deleted_ms) WHERE deleted_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS files_ino ON files(ino);
CREATE TABLE IF NOT EXISTS dirs (path TEXT PRIMARY KEY, parent TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dirs_parent ON dirs(parent);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
";

/// Live files below `?1` passes (read from the pending index alone).
const PENDING_SQL: &str =
    "SELECT COUNT(*) FROM files WHERE deleted_ms IS NULL AND error IS NULL AND passes < ?1";
/// The lowest pass count below `?1` (read from the pending index alone).
const LOWEST_PASS_SQL: &str =
    "SELECT MIN(passes) FROM files WHERE deleted_ms IS NULL AND error IS NULL AND passes < ?1";

/// `SELECT` of the columns [`row`] reads, then the rest of the query: one
/// literal, so a statement looked up once per file is not formatted first.
macro_rules! select_rows {
    ($rest:literal) => {
        concat!(
            "SELECT parent, name, size, mtime_ns, touched_ms, ino, mode, digest, first_seen_ms, passes ",
            $rest
        )
    };
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    let digest: Option<Vec<u8>> = r.get(7)?;
    Ok(FileRow {
        parent: r.get(0)?,
        name: r.get(1)?,
        size: r.get::<_, i64>(2)?.cast_unsigned(),
        mtime_ns: r.get(3)?,
        touched_ms: r.get(4)?,
        ino: r.get::<_, i64>(5)?.cast_unsigned(),
        mode: r.get(6)?,
        digest: digest.and_then(|d| d.try_into().ok()),
        first_seen_ms: r.get(8)?,
        passes: r.get(9)?,
    })
}

impl State {
    /// Opens (or creates) the database at `path`: WAL, a busy timeout so the
    /// scanner's and the scheduler's connections wait for each other.
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let db = Connection::open(path)?;
        db.busy_timeout(Duration::from_secs(30))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "NORMAL")?;
        // Temporary tables and indexes in memory: a sandboxed sync may
        // write only beside its database, not in the system's temp folder.
        db.pragma_update(None, "temp_store", "MEMORY")?;
        // A bounded page cache (KiB when negative): 10 M rows stay on disk.
        db.pragma_update(None, "cache_size", -16_384)?;
        db.execute_batch(SCHEMA)?;
        Ok(State { db })
    }

    /// Opens an existing database read-only (for `--status`).
    pub fn open_read_only(path: &Path) -> Result<Self, StateError> {
        let db = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        db.busy_timeout(Duration::from_secs(5))?;
        Ok(State { db })
    }

    /// Starts a transaction (the scanner batches its writes).
    pub fn begin(&self) -> Result<(), StateError> {
        self.db.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(())
    }

    /// Commits the transaction [`State::begin`] started.
    pub fn commit(&self) -> Result<(), StateError> {
        self.db.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    }

    /// The live (not deleted) files directly in `parent`, by name.
    pub fn children(&self, parent: &str) -> Result<HashMap<String, FileRow>, StateError> {
        let mut st = self.db.prepare_cached(select_rows!(
            "FROM files WHERE parent = ?1 AND deleted_ms IS NULL"
        ))?;
        let rows = st.query_map([parent], row)?;
        let mut out = HashMap::new();
        for r in rows {
            let r = r?;
            out.insert(r.name.clone(), r);
        }
        Ok(out)
    }

    /// The live (not deleted) row of one file, sendable or not: what
    /// [`State::children`] holds for it.
    pub fn live(&self, parent: &str, name: &str) -> Result<Option<FileRow>, StateError> {
        let mut st = self.db.prepare_cached(select_rows!(
            "FROM files WHERE parent = ?1 AND name = ?2 AND deleted_ms IS NULL"
        ))?;
        Ok(st.query_row(params![parent, name], row).optional()?)
    }

    /// Whether the directory `path` is known.
    pub fn has_dir(&self, path: &str) -> Result<bool, StateError> {
        let mut st = self
            .db
            .prepare_cached("SELECT 1 FROM dirs WHERE path = ?1")?;
        Ok(st.query_row([path], |_| Ok(())).optional()?.is_some())
    }

    /// Subdirectories known under `parent`.
    pub fn subdirs(&self, parent: &str) -> Result<Vec<String>, StateError> {
        let mut st = self
            .db
            .prepare_cached("SELECT path FROM dirs WHERE parent = ?1")?;
        let rows = st.query_map([parent], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records a directory.
    pub fn add_dir(&self, path: &str, parent: &str) -> Result<(), StateError> {
        self.db
            .prepare_cached("INSERT OR IGNORE INTO dirs (path, parent) VALUES (?1, ?2)")?
            .execute(params![path, parent])?;
        Ok(())
    }

    /// A directory vanished: every live file under it is deleted at `now`,
    /// and it and its subdirectories are forgotten. Returns the files.
    pub fn remove_tree(&self, path: &str, now: i64) -> Result<u64, StateError> {
        let lo = format!("{path}/");
        let hi = format!("{path}0");
        self.db.execute(
            "DELETE FROM files WHERE error = 'outbox'
             AND (parent = ?1 OR (parent >= ?2 AND parent < ?3))",
            params![path, lo, hi],
        )?;
        let n = self.db.execute(
            "UPDATE files SET deleted_ms = ?1, del_passes = 0
             WHERE deleted_ms IS NULL AND (parent = ?2 OR (parent >= ?3 AND parent < ?4))",
            params![now, path, lo, hi],
        )?;
        self.db.execute(
            "DELETE FROM dirs WHERE path = ?1 OR (path >= ?2 AND path < ?3)",
            params![path, lo, hi],
        )?;
        Ok(n as u64)
    }

    /// A new file, or a new version of one (passes start again at 0).
    pub fn upsert(&self, f: &FileRow) -> Result<(), StateError> {
        self.db
            .prepare_cached(
                "INSERT INTO files (parent, name, size, mtime_ns, touched_ms, ino, mode, digest,
                   first_seen_ms, passes, last_sent_ms, deleted_ms, del_passes, error)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, 0, NULL, NULL, 0, NULL)
                 ON CONFLICT (parent, name) DO UPDATE SET size = ?3, mtime_ns = ?4,
                   touched_ms = ?5, ino = ?6, mode = ?7, digest = NULL, first_seen_ms = ?8,
                   passes = 0, last_sent_ms = NULL, deleted_ms = NULL, del_passes = 0,
                   error = NULL",
            )?
            .execute(params![
                f.parent,
                f.name,
                f.size.cast_signed(),
                f.mtime_ns,
                f.touched_ms,
                f.ino.cast_signed(),
                f.mode,
                f.first_seen_ms
            ])?;
        Ok(())
    }

    /// Only the settle time moved (ctime changed, content did not).
    pub fn touch(&self, parent: &str, name: &str, touched_ms: i64) -> Result<(), StateError> {
        self.db
            .prepare_cached("UPDATE files SET touched_ms = ?3 WHERE parent = ?1 AND name = ?2")?
            .execute(params![parent, name, touched_ms])?;
        Ok(())
    }

    /// The file is gone from its directory. A file the outbox took away
    /// on purpose is forgotten instead (its deletion is not announced).
    pub fn mark_deleted(&self, parent: &str, name: &str, now: i64) -> Result<(), StateError> {
        self.db
            .prepare_cached(
                "DELETE FROM files WHERE parent = ?1 AND name = ?2 AND error = 'outbox'",
            )?
            .execute(params![parent, name])?;
        self.db
            .prepare_cached(
                "UPDATE files SET deleted_ms = ?3, del_passes = 0
                 WHERE parent = ?1 AND name = ?2 AND deleted_ms IS NULL",
            )?
            .execute(params![parent, name, now])?;
        Ok(())
    }

    /// The outbox is about to take the file away: it is done, and its
    /// disappearance must not be announced as a deletion.
    pub fn outboxed(&self, parent: &str, name: &str) -> Result<(), StateError> {
        self.set_error(parent, name, "outbox")
    }

    /// The live, sendable version of one file, if any.
    pub fn current(&self, parent: &str, name: &str) -> Result<Option<FileRow>, StateError> {
        let mut st = self.db.prepare_cached(select_rows!(
            "FROM files WHERE parent = ?1 AND name = ?2
             AND deleted_ms IS NULL AND error IS NULL"
        ))?;
        Ok(st.query_row(params![parent, name], row).optional()?)
    }

    /// The file cannot be sent (logged); it is not tried again until it changes.
    pub fn set_error(&self, parent: &str, name: &str, why: &str) -> Result<(), StateError> {
        self.db
            .prepare_cached("UPDATE files SET error = ?3 WHERE parent = ?1 AND name = ?2")?
            .execute(params![parent, name, why])?;
        Ok(())
    }

    /// Files that still need a pass: live, stable since `stable_before`
    /// (Unix ms), sent `passes` times (`passes` exactly, so the scheduler
    /// can ask for new files and for repeats apart), oldest touched first
    /// (then by path), and after `after` in that order when given: the
    /// scheduler reads on from its last page instead of from the top, where
    /// the files it has in flight (not yet counted) would fill the page.
    pub fn candidates(
        &self,
        passes: u32,
        stable_before: i64,
        after: Option<&PageKey>,
        limit: usize,
    ) -> Result<Vec<FileRow>, StateError> {
        // No file sorts before (i64::MIN, "", ""): its name is not empty.
        let (touched, parent, name) = after.map_or((i64::MIN, "", ""), |k| {
            (k.touched_ms, k.parent.as_str(), k.name.as_str())
        });
        let mut st = self.db.prepare_cached(select_rows!(
            "FROM files
             WHERE passes = ?1 AND deleted_ms IS NULL AND error IS NULL AND touched_ms <= ?2
               AND (touched_ms, parent, name) > (?4, ?5, ?6)
             ORDER BY touched_ms, parent, name LIMIT ?3"
        ))?;
        let rows = st.query_map(
            params![
                passes,
                stable_before,
                i64::try_from(limit).unwrap_or(i64::MAX),
                touched,
                parent,
                name
            ],
            row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The lowest pass count among live files below `max` (`None`: none left).
    pub fn lowest_pass(&self, max: u32) -> Result<Option<u32>, StateError> {
        Ok(self
            .db
            .prepare_cached(LOWEST_PASS_SQL)?
            .query_row([max], |r| r.get::<_, Option<u32>>(0))
            .optional()?
            .flatten())
    }

    /// Live files below `max` passes (stable or not).
    pub fn pending(&self, max: u32) -> Result<u64, StateError> {
        Ok(self
            .db
            .prepare_cached(PENDING_SQL)?
            .query_row([max], |r| r.get::<_, i64>(0))? as u64)
    }

    /// One pass of a file version went out: count it, keep its digest. A
    /// version that changed meanwhile (another size or mtime) is left alone.
    pub fn sent(
        &self,
        parent: &str,
        name: &str,
        size: u64,
        mtime_ns: i64,
        digest: &[u8; 32],
        now: i64,
    ) -> Result<Option<u32>, StateError> {
        // One statement, prepared once: a bundle counts hundreds of files.
        Ok(self
            .db
            .prepare_cached(
                "UPDATE files SET passes = passes + 1, last_sent_ms = ?5, digest = ?6
                 WHERE parent = ?1 AND name = ?2 AND size = ?3 AND mtime_ns = ?4
                   AND deleted_ms IS NULL
                 RETURNING passes",
            )?
            .query_row(
                params![parent, name, size.cast_signed(), mtime_ns, now, &digest[..]],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Deletions still to be announced, fewest announcements first.
    pub fn tombstones(&self, max_passes: u32, limit: usize) -> Result<Vec<Tombstone>, StateError> {
        let mut st = self.db.prepare_cached(
            "SELECT parent, name, size, mtime_ns, ino, deleted_ms, del_passes FROM files
             WHERE deleted_ms IS NOT NULL AND del_passes < ?1
             ORDER BY del_passes, deleted_ms LIMIT ?2",
        )?;
        let rows = st.query_map(
            params![max_passes, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| {
                let parent: String = r.get(0)?;
                let name: String = r.get(1)?;
                Ok(Tombstone {
                    path: join(&parent, &name),
                    size: r.get::<_, i64>(2)?.cast_unsigned(),
                    mtime_ns: r.get(3)?,
                    ino: r.get::<_, i64>(4)?.cast_unsigned(),
                    deleted_ms: r.get(5)?,
                    del_passes: r.get(6)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// A live file with the same inode, size and mtime as a deleted one:
    /// where it was renamed to.
    pub fn renamed_to(&self, t: &Tombstone) -> Result<Option<String>, StateError> {
        let mut st = self.db.prepare_cached(
            "SELECT parent, name FROM files
             WHERE ino = ?1 AND size = ?2 AND mtime_ns = ?3 AND deleted_ms IS NULL LIMIT 1",
        )?;
        Ok(st
            .query_row(
                params![t.ino.cast_signed(), t.size.cast_signed(), t.mtime_ns],
                |r| Ok(join(&r.get::<_, String>(0)?, &r.get::<_, String>(1)?)),
            )
            .optional()?)
    }

    /// One announcement of a deletion went out; after `max` the row goes.
    pub fn tombstone_sent(&self, path: &str, deleted_ms: i64, max: u32) -> Result<(), StateError> {
        let (parent, name) = split(path);
        self.db
            .prepare_cached(
                "UPDATE files SET del_passes = del_passes + 1
                 WHERE parent = ?1 AND name = ?2 AND deleted_ms = ?3",
            )?
            .execute(params![parent, name, deleted_ms])?;
        self.db
            .prepare_cached(
                "DELETE FROM files WHERE parent = ?1 AND name = ?2 AND deleted_ms IS NOT NULL
                 AND del_passes >= ?3",
            )?
            .execute(params![parent, name, max])?;
        Ok(())
    }

    /// Reads a counter of the `meta` table.
    pub fn meta(&self, key: &str) -> Result<i64, StateError> {
        Ok(self
            .db
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }

    /// Writes a counter of the `meta` table.
    pub fn set_meta(&self, key: &str, value: i64) -> Result<(), StateError> {
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT (key) DO UPDATE SET value = ?2",
            params![key, value],
        )?;
        Ok(())
    }

    /// Everything `--status` shows, with `passes` the configured number.
    pub fn status(&self, passes: u32) -> Result<StatusCounts, StateError> {
        let (files, bytes, errors): (i64, i64, i64) = self.db.query_row(
            "SELECT COUNT(*), COALESCE(SUM(size), 0), COUNT(error) FROM files WHERE deleted_ms IS NULL",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let mut by_passes = vec![0u64; passes as usize + 1];
        let mut st = self.db.prepare(
            "SELECT MIN(passes, ?1), COUNT(*) FROM files WHERE deleted_ms IS NULL GROUP BY 1",
        )?;
        for r in st.query_map([passes], |r| Ok((r.get::<_, u32>(0)?, r.get::<_, i64>(1)?)))? {
            let (p, n) = r?;
            if let Some(slot) = by_passes.get_mut(p as usize) {
                *slot = n as u64;
            }
        }
        let deletions: i64 = self.db.query_row(
            "SELECT COUNT(*) FROM files WHERE deleted_ms IS NOT NULL AND del_passes < ?1",
            [passes],
            |r| r.get(0),
        )?;
        Ok(StatusCounts {
            files: files as u64,
            bytes: bytes as u64,
            pending: self.pending(passes)?,
            by_passes,
            deletions_pending: deletions as u64,
            errors: errors as u64,
            scans: self.meta("scans")? as u64,
            last_scan_ms: self.meta("last_scan_ms")?,
        })
    }
}

/// `parent/name` → (`parent`, `name`).
pub fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(parent: &str, name: &str, size: u64) -> FileRow {
        FileRow {
            parent: parent.into(),
            name: name.into(),
            size,
            mtime_ns: 1_000_000_000,
            touched_ms: 1000,
            ino: size,
            mode: 0o644,
            digest: None,
            first_seen_ms: 5,
            passes: 0,
        }
    }

    #[test]
    fn the_pending_count_and_lowest_pass_read_only_their_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = State::open(&dir.path().join("s.sqlite")).expect("open");
        for sql in [PENDING_SQL, LOWEST_PASS_SQL] {
            let plan: Vec<String> =
                s.db.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .expect("plan")
                    .query_map([2], |r| r.get::<_, String>(3))
                    .expect("rows")
                    .collect::<Result<_, _>>()
                    .expect("plan rows");
            assert!(
                plan.iter()
                    .any(|p| p.contains("COVERING INDEX files_pending_covering")),
                "{sql}: {plan:?}"
            );
        }
    }

    #[test]
    fn pages_read_on_after_the_last_row_in_touched_then_path_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = State::open(&dir.path().join("s.sqlite")).expect("open");
        for (parent, name, touched) in [
            ("r", "c", 1000),
            ("r", "a", 1000),
            ("q", "z", 1000),
            ("r", "d", 3000),
            ("r", "b", 2000),
        ] {
            let mut f = file(parent, name, 1);
            f.touched_ms = touched;
            s.upsert(&f).expect("insert");
        }
        let names = |rows: &[FileRow]| -> Vec<String> { rows.iter().map(FileRow::path).collect() };
        let first = s.candidates(0, 5000, None, 2).expect("q");
        assert_eq!(names(&first), ["q/z", "r/a"]);
        let after = PageKey::of(first.last().expect("row"));
        let second = s.candidates(0, 5000, Some(&after), 2).expect("q");
        assert_eq!(
            names(&second),
            ["r/c", "r/b"],
            "on after r/a, not from the top"
        );
        let after = PageKey::of(second.last().expect("row"));
        let third = s.candidates(0, 5000, Some(&after), 2).expect("q");
        assert_eq!(names(&third), ["r/d"]);
        let after = PageKey::of(&third[0]);
        assert!(s
            .candidates(0, 5000, Some(&after), 2)
            .expect("q")
            .is_empty());
        // Not yet stable is not read on past either.
        assert_eq!(
            names(
                &s.candidates(0, 2500, Some(&PageKey::of(&first[1])), 5)
                    .expect("q")
            ),
            ["r/c", "r/b"]
        );
    }

    #[test]
    fn passes_count_per_version_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("s.sqlite");
        {
            let s = State::open(&db).expect("open");
            s.upsert(&file("r", "a", 1)).expect("insert");
            s.upsert(&file("r/sub", "b", 2)).expect("insert");
            assert_eq!(s.candidates(0, 2000, None, 10).expect("q").len(), 2);
            assert_eq!(
                s.candidates(0, 500, None, 10).expect("q").len(),
                0,
                "not stable"
            );
            let d = [7u8; 32];
            assert_eq!(
                s.sent("r", "a", 1, 1_000_000_000, &d, 9).expect("s"),
                Some(1)
            );
            assert_eq!(
                s.sent("r", "a", 2, 1_000_000_000, &d, 9).expect("s"),
                None,
                "old version"
            );
            assert_eq!(s.lowest_pass(2).expect("q"), Some(0));
        }
        let s = State::open(&db).expect("reopen");
        let kids = s.children("r").expect("q");
        assert_eq!(kids["a"].passes, 1);
        assert_eq!(kids["a"].digest, Some([7u8; 32]));
        assert_eq!(s.status(2).expect("status").by_passes, vec![1, 1, 0]);
        // A new version starts over.
        let mut a2 = file("r", "a", 3);
        a2.first_seen_ms = 6;
        s.upsert(&a2).expect("update");
        assert_eq!(s.children("r").expect("q")["a"].passes, 0);
        // A vanished subtree becomes tombstones, announced twice, then forgotten.
        s.add_dir("r/sub", "r").expect("dir");
        assert_eq!(s.remove_tree("r/sub", 50).expect("rm"), 1);
        let t = s.tombstones(2, 10).expect("t");
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].path, "r/sub/b");
        s.tombstone_sent("r/sub/b", 50, 2).expect("sent");
        s.tombstone_sent("r/sub/b", 50, 2).expect("sent");
        assert!(s.tombstones(2, 10).expect("t").is_empty());
        assert!(s.subdirs("r").expect("q").is_empty());
    }
}
