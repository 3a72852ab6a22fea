//! The file sink's quarantine folder: where a file that failed leaves a
//! record of what was lost (a `.reason` file: name, sizes, reason, time,
//! what became of its bytes) and, within a quota, its partial bytes. The
//! folder is bounded in bytes and in entries; the oldest entries go first
//! and every eviction is reported to the caller, who counts it.
//!
//! ```text
//!  OUT/.diodon-quarantine/<name>.<id>          partial bytes, if kept
//!  OUT/.diodon-quarantine/<name>.<id>.reason   the record (always written)
//!
//!  put(item) ─► the partial: failed for lack of room ─► removed (frees the disk)
//!            │               larger than the byte limit ─► removed
//!            │               otherwise ─► evict oldest until it fits ─► renamed in
//!            └► evict oldest until one more entry fits ─► write the record
//!                                           (a record that cannot be written is logged)
//! ```
//!
//! Names always fit `NAME_MAX` (a long name is cut and marked with a
//! digest, [`crate::names::fit_file_name`]). The folder is scanned at
//! start, so the bounds hold across restarts (entries ordered by mtime).

use crate::names::{escape, fit_file_name};
use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::SystemTime;

/// The quarantine directory under the output directory.
pub const QUARANTINE: &str = ".diodon-quarantine";
/// Suffix of a record file.
pub const REASON_SUFFIX: &str = ".reason";
/// The default byte limit: this percentage of the output filesystem …
pub const DEFAULT_PERCENT: u8 = 10;
/// … but at most this many bytes.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// The default entry limit.
pub const DEFAULT_MAX_ENTRIES: u64 = 1000;

/// How many bytes (partial data and records) the quarantine may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuarantineBytes {
    /// 10 % of the output filesystem, at most 1 GiB.
    #[default]
    Auto,
    /// A fixed number of bytes.
    Bytes(u64),
    /// A percentage (0–100) of the output filesystem's size.
    Percent(u8),
}

/// A quarantine byte limit that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuarantineBytesError {
    /// Not a number with an optional unit.
    #[error("quarantine size {0:?}: expected bytes (`500000`, `64MiB`, `2GiB`) or a share of the output filesystem (`10%`)")]
    Syntax(String),
    /// A percentage above 100.
    #[error("quarantine size {0}%: at most 100%")]
    Percent(u64),
    /// Too large to count.
    #[error("quarantine size {0:?} overflows")]
    Overflow(String),
}

impl QuarantineBytes {
    /// The limit in bytes on a filesystem of `fs_total` bytes (unknown:
    /// `Auto` and percentages give 1 GiB).
    pub fn resolve(self, fs_total: Option<u64>) -> u64 {
        let share = |p: u8| fs_total.map(|t| (u128::from(t) * u128::from(p) / 100) as u64);
        match self {
            QuarantineBytes::Auto => share(DEFAULT_PERCENT)
                .unwrap_or(DEFAULT_MAX_BYTES)
                .min(DEFAULT_MAX_BYTES),
            QuarantineBytes::Bytes(b) => b,
            QuarantineBytes::Percent(p) => share(p).unwrap_or(DEFAULT_MAX_BYTES),
        }
    }
}

impl FromStr for QuarantineBytes {
    type Err = QuarantineBytesError;

    /// `auto`, `N%`, or bytes with an optional binary unit (`KiB`, `MiB`,
    /// `GiB`, `TiB`; `K`, `M`, `G`, `T` mean the same).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let syntax = || QuarantineBytesError::Syntax(s.to_owned());
        if t.eq_ignore_ascii_case("auto") {
            return Ok(QuarantineBytes::Auto);
        }
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(syntax());
        }
        let value: u64 = t[..digits]
            .parse()
            .map_err(|_| QuarantineBytesError::Overflow(s.to_owned()))?;
        let unit = t[digits..].trim();
        if unit == "%" {
            return u8::try_from(value)
                .ok()
                .filter(|&p| p <= 100)
                .map(QuarantineBytes::Percent)
                .ok_or(QuarantineBytesError::Percent(value));
        }
        let shift = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" => 10,
            "m" | "mib" => 20,
            "g" | "gib" => 30,
            "t" | "tib" => 40,
            _ => return Err(syntax()),
        };
        value
            .checked_mul(1 << shift)
            .map(QuarantineBytes::Bytes)
            .ok_or_else(|| QuarantineBytesError::Overflow(s.to_owned()))
    }
}

/// The quarantine's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineLimits {
    /// Bytes of partial data and records.
    pub max_bytes: QuarantineBytes,
    /// Entries (one per failed file: its record and maybe its bytes).
    pub max_entries: u64,
}

impl Default for QuarantineLimits {
    fn default() -> Self {
        QuarantineLimits {
            max_bytes: QuarantineBytes::Auto,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

/// What is recorded of a failed file.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// The name as announced (untrusted; escaped when written).
    pub name: &'a str,
    /// The readable stem of the entry's file names (a flattened or escaped name).
    pub stem: &'a str,
    /// Session id.
    pub session: String,
    /// Channel id.
    pub channel: String,
    /// Bytes received (written to staging).
    pub received: u64,
    /// Size the sender announced, if any.
    pub announced: Option<u64>,
    /// Why it failed (the verdict's reason).
    pub why: &'a str,
    /// When, ms since the Unix epoch.
    pub at_ms: u64,
}

/// One failed file handed to the quarantine.
#[derive(Debug, Clone)]
pub struct Item<'a> {
    /// Its record.
    pub record: Record<'a>,
    /// Its staging file, if one may exist.
    pub partial: Option<&'a Path>,
    /// It failed for lack of room: its bytes are removed, never kept.
    pub no_space: bool,
}

/// What became of a failed file's bytes.
#[derive(Debug)]
pub enum Fate {
    /// There were none.
    NoData,
    /// Kept in the quarantine, here.
    Kept(PathBuf),
    /// Removed to free the space: the output filesystem was full.
    FreedNoSpace,
    /// Removed: more bytes than the quarantine may hold.
    FreedOverQuota {
        /// The byte limit.
        limit: u64,
    },
    /// Removed: the move into the quarantine failed.
    FreedMoveFailed(io::Error),
}

impl Fate {
    /// The outcome's location: the kept file, or what happened.
    pub fn location(&self) -> String {
        match self {
            Fate::NoData => "(no data)".into(),
            Fate::Kept(p) => p.display().to_string(),
            Fate::FreedNoSpace => "(removed: output disk full)".into(),
            Fate::FreedOverQuota { .. } => "(removed: over the quarantine limit)".into(),
            Fate::FreedMoveFailed(_) => "(removed: could not be quarantined)".into(),
        }
    }
}

impl fmt::Display for Fate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fate::NoData => f.write_str("none"),
            Fate::Kept(p) => write!(
                f,
                "kept as {}",
                p.file_name().unwrap_or_default().to_string_lossy()
            ),
            Fate::FreedNoSpace => {
                f.write_str("removed to free the space (the output filesystem was full)")
            }
            Fate::FreedOverQuota { limit } => write!(
                f,
                "removed: more than the quarantine's limit of {limit} bytes"
            ),
            Fate::FreedMoveFailed(e) => {
                write!(f, "removed: could not be moved into the quarantine: {e}")
            }
        }
    }
}

/// Entries removed to keep the bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evicted {
    /// How many.
    pub entries: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl std::ops::AddAssign for Evicted {
    fn add_assign(&mut self, o: Evicted) {
        self.entries += o.entries;
        self.bytes += o.bytes;
    }
}

/// What [`Quarantine::put`] did.
#[derive(Debug)]
pub struct Placed {
    /// What became of the bytes.
    pub fate: Fate,
    /// Partial bytes removed (not kept).
    pub freed: u64,
    /// The record, or `None` when it could not be written (logged).
    pub reason: Option<PathBuf>,
    /// Older entries removed to make room.
    pub evicted: Evicted,
}

#[derive(Debug)]
struct Entry {
    base: OsString,
    bytes: u64,
}

/// The bounded quarantine folder (see the module doc).
#[derive(Debug)]
pub struct Quarantine {
    dir: PathBuf,
    max_bytes: u64,
    max_entries: u64,
    entries: VecDeque<Entry>,
    bytes: u64,
}

impl Quarantine {
    /// Takes stock of `dir` (an existing directory) and evicts what is over
    /// the bounds already (an earlier run with other bounds).
    pub fn open(dir: PathBuf, max_bytes: u64, max_entries: u64) -> io::Result<(Self, Evicted)> {
        let mut found: BTreeMap<OsString, (u64, SystemTime)> = BTreeMap::new();
        for e in fs::read_dir(&dir)? {
            let e = e?;
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let name = e.file_name();
            let bytes = name.as_bytes();
            let base = bytes
                .strip_suffix(REASON_SUFFIX.as_bytes())
                .map_or_else(|| name.clone(), |b| OsString::from_vec(b.to_vec()));
            let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let slot = found.entry(base).or_insert((0, mtime));
            slot.0 += meta.len();
            slot.1 = slot.1.min(mtime);
        }
        let mut list: Vec<(SystemTime, OsString, u64)> = found
            .into_iter()
            .map(|(base, (bytes, at))| (at, base, bytes))
            .collect();
        list.sort();
        let mut q = Quarantine {
            dir,
            max_bytes,
            max_entries,
            bytes: list.iter().map(|e| e.2).sum(),
            entries: list
                .into_iter()
                .map(|(_, base, bytes)| Entry { base, bytes })
                .collect(),
        };
        let evicted = q.evict_until(0, 0);
        Ok((q, evicted))
    }

    /// Entries held now.
    pub fn entries(&self) -> u64 {
        self.entries.len() as u64
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The byte limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The entry limit.
    pub fn max_entries(&self) -> u64 {
        self.max_entries
    }

    /// Records a failed file and decides what becomes of its bytes (see
    /// the module doc). Never fails: what goes wrong is logged and shows in
    /// the result.
    pub fn put(&mut self, item: &Item<'_>) -> Placed {
        let r = &item.record;
        let base = self.unique_base(r.stem, r.name, r.at_ms);
        let reason_path = self.dir.join(format!("{base}{REASON_SUFFIX}"));
        let partial = item
            .partial
            .and_then(|p| fs::symlink_metadata(p).ok().map(|m| (p, m)))
            .filter(|(_, m)| m.is_file())
            .map(|(p, m)| (p, m.len()));
        let mut evicted = Evicted::default();
        let mut freed = 0;
        let mut kept = 0;
        let fate = match partial {
            Some((path, len)) => {
                let dest = self.dir.join(&base);
                let text = render(r, &Fate::Kept(dest.clone()));
                let need = len + text.len() as u64;
                if item.no_space || need > self.max_bytes {
                    freed = remove_partial(path, len);
                    if item.no_space {
                        Fate::FreedNoSpace
                    } else {
                        Fate::FreedOverQuota {
                            limit: self.max_bytes,
                        }
                    }
                } else {
                    evicted += self.evict_until(need, 1);
                    match fs::rename(path, &dest) {
                        Ok(()) => {
                            kept = len;
                            Fate::Kept(dest)
                        }
                        Err(e) => {
                            tracing::error!(
                                from = %path.display(), to = %dest.display(),
                                "cannot move a failed file into the quarantine, removing its bytes: {e}"
                            );
                            freed = remove_partial(path, len);
                            Fate::FreedMoveFailed(e)
                        }
                    }
                }
            }
            None if item.no_space && r.received > 0 => Fate::FreedNoSpace,
            None => Fate::NoData,
        };
        let text = render(r, &fate);
        evicted += self.evict_until(kept + text.len() as u64, 1);
        let reason = match fs::write(&reason_path, &text) {
            Ok(()) => Some(reason_path),
            Err(e) => {
                tracing::error!(
                    path = %reason_path.display(),
                    "cannot write the quarantine record of a failed file: {e}"
                );
                // No empty or cut record is left behind.
                let _ = fs::remove_file(&reason_path);
                None
            }
        };
        let bytes = kept + reason.as_ref().map_or(0, |_| text.len() as u64);
        if kept > 0 || reason.is_some() {
            self.entries.push_back(Entry {
                base: OsString::from(base),
                bytes,
            });
            self.bytes += bytes;
        }
        Placed {
            fate,
            freed,
            reason,
            evicted,
        }
    }

    /// A base name `stem.<id>` free in the folder, whose record name
    /// (`stem.<id>.reason`) fits `NAME_MAX`.
    fn unique_base(&self, stem: &str, full: &str, at_ms: u64) -> String {
        let mut n = 0u32;
        loop {
            let id = if n == 0 {
                format!(".{at_ms}")
            } else {
                format!(".{at_ms}-{n}")
            };
            let name = fit_file_name(stem, full, &format!("{id}{REASON_SUFFIX}"));
            let base = name.strip_suffix(REASON_SUFFIX).unwrap_or(&name).to_owned();
            let taken = |p: &str| fs::symlink_metadata(self.dir.join(p)).is_ok();
            if !taken(&base) && !taken(&name) {
                return base;
            }
            n += 1;
        }
    }

    /// Removes the oldest entries until `bytes` more bytes and `entries`
    /// more entries fit the bounds (or nothing is left to remove).
    fn evict_until(&mut self, bytes: u64, entries: u64) -> Evicted {
        let mut evicted = Evicted::default();
        while self.bytes + bytes > self.max_bytes
            || self.entries.len() as u64 + entries > self.max_entries
        {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            for name in [old.base.clone(), {
                let mut r = old.base.clone();
                r.push(REASON_SUFFIX);
                r
            }] {
                match fs::remove_file(self.dir.join(&name)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => tracing::error!(
                        entry = %escape(&name.to_string_lossy()),
                        "cannot remove an evicted quarantine entry: {e}"
                    ),
                }
            }
            tracing::info!(
                entry = %escape(&old.base.to_string_lossy()),
                bytes = old.bytes,
                "quarantine full: removed its oldest entry"
            );
            self.bytes = self.bytes.saturating_sub(old.bytes);
            evicted += Evicted {
                entries: 1,
                bytes: old.bytes,
            };
        }
        evicted
    }
}

/// Removes a partial file; returns the bytes freed (0 if it could not be removed: logged).
fn remove_partial(path: &Path, len: u64) -> u64 {
    match fs::remove_file(path) {
        Ok(()) => len,
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => {
            tracing::error!(path = %path.display(), "cannot remove the partial bytes of a failed file: {e}");
            0
        }
    }
}

/// The text of a record.
fn render(r: &Record<'_>, fate: &Fate) -> String {
    let announced = r
        .announced
        .map_or_else(|| "unknown".to_owned(), |n| n.to_string());
    format!(
        "name: {}\nsession: {}\nchannel: {}\nbytes received: {}\nsize announced: {announced}\nreason: {}\ntime: {}\ndata: {fate}\n",
        escape(r.name),
        r.session,
        r.channel,
        r.received,
        r.why,
        utc(r.at_ms),
    )
}

/// `ms` since the Unix epoch as an RFC 3339 UTC time (`2024-05-01T12:00:00.000Z`).
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_testkit::entries;

    fn record<'a>(name: &'a str, why: &'a str, at_ms: u64) -> Record<'a> {
        Record {
            name,
            stem: name,
            session: "00000000000000aa".into(),
            channel: "1".into(),
            received: 0,
            announced: Some(10),
            why,
            at_ms,
        }
    }

    /// Puts a failed file `name` with `len` partial bytes.
    fn put(q: &mut Quarantine, staging: &Path, name: &str, len: usize, at_ms: u64) -> Placed {
        let partial = staging.join(format!("{name}.part"));
        fs::write(&partial, vec![1u8; len]).unwrap();
        let mut r = record(name, "block 1 lost", at_ms);
        r.received = len as u64;
        q.put(&Item {
            record: r,
            partial: Some(&partial),
            no_space: false,
        })
    }

    #[test]
    fn sizes_parse_as_bytes_units_or_a_share() {
        let ok = |s: &str| s.parse::<QuarantineBytes>().unwrap();
        assert_eq!(ok("500000"), QuarantineBytes::Bytes(500_000));
        assert_eq!(ok("64MiB"), QuarantineBytes::Bytes(64 << 20));
        assert_eq!(ok("2 G"), QuarantineBytes::Bytes(2 << 30));
        assert_eq!(ok("10%"), QuarantineBytes::Percent(10));
        assert_eq!(ok("auto"), QuarantineBytes::Auto);
        assert!("101%".parse::<QuarantineBytes>().is_err());
        assert!("12 apples".parse::<QuarantineBytes>().is_err());
        assert!("99999999999999999999".parse::<QuarantineBytes>().is_err());
        assert!("20000000TiB".parse::<QuarantineBytes>().is_err());
        assert_eq!(QuarantineBytes::Auto.resolve(Some(50 << 20)), 5 << 20);
        assert_eq!(QuarantineBytes::Auto.resolve(Some(1 << 40)), 1 << 30);
        assert_eq!(QuarantineBytes::Auto.resolve(None), 1 << 30);
        assert_eq!(QuarantineBytes::Percent(50).resolve(Some(1000)), 500);
    }

    #[test]
    fn the_oldest_entries_go_first_and_each_eviction_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (qdir, staging) = (dir.path().join("q"), dir.path().join("s"));
        fs::create_dir(&qdir).unwrap();
        fs::create_dir(&staging).unwrap();
        let (mut q, e) = Quarantine::open(qdir.clone(), 1 << 20, 2).unwrap();
        assert_eq!(e, Evicted::default());
        assert_eq!(put(&mut q, &staging, "a", 100, 1).evicted.entries, 0);
        assert_eq!(put(&mut q, &staging, "b", 100, 2).evicted.entries, 0);
        let third = put(&mut q, &staging, "c", 100, 3);
        assert_eq!(third.evicted.entries, 1, "the entry limit is 2");
        assert!(third.evicted.bytes > 100, "data and record: {third:?}");
        assert_eq!(
            entries(&qdir),
            ["b.2", "b.2.reason", "c.3", "c.3.reason"],
            "a, the oldest, went"
        );
        assert_eq!(q.entries(), 2);
        let on_disk: u64 = fs::read_dir(&qdir)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert_eq!(q.bytes(), on_disk, "the account matches the folder");
        // A restart with a smaller entry limit takes stock and evicts b.
        drop(q);
        let (q, e) = Quarantine::open(qdir.clone(), 1 << 20, 1).unwrap();
        assert_eq!(e.entries, 1);
        assert_eq!(entries(&qdir), ["c.3", "c.3.reason"]);
        assert_eq!(q.bytes(), on_disk - e.bytes);
    }

    #[test]
    fn bytes_over_the_limit_are_removed_but_the_record_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (qdir, staging) = (dir.path().join("q"), dir.path().join("s"));
        fs::create_dir(&qdir).unwrap();
        fs::create_dir(&staging).unwrap();
        let (mut q, _) = Quarantine::open(qdir.clone(), 4096, 10).unwrap();
        let small = put(&mut q, &staging, "small", 1000, 1);
        assert!(matches!(small.fate, Fate::Kept(_)), "{small:?}");
        // 3000 more bytes do not fit beside it: the older entry goes.
        let mid = put(&mut q, &staging, "mid", 3000, 2);
        assert!(matches!(mid.fate, Fate::Kept(_)), "{mid:?}");
        assert_eq!(mid.evicted.entries, 1);
        assert!(q.bytes() <= 4096);
        let big = put(&mut q, &staging, "big", 5000, 3);
        assert!(
            matches!(big.fate, Fate::FreedOverQuota { limit: 4096 }),
            "{big:?}"
        );
        assert_eq!(big.freed, 5000);
        assert!(!staging.join("big.part").exists());
        let text = fs::read_to_string(big.reason.unwrap()).unwrap();
        assert!(
            text.contains("data: removed: more than the quarantine's limit of 4096 bytes"),
            "{text}"
        );
        assert!(text.contains("bytes received: 5000"), "{text}");
        assert!(q.bytes() <= 4096, "{}", q.bytes());
    }

    #[test]
    fn no_space_removes_the_bytes_and_records_what_was_lost() {
        let dir = tempfile::tempdir().unwrap();
        let qdir = dir.path().join("q");
        fs::create_dir(&qdir).unwrap();
        let partial = dir.path().join("x.part");
        fs::write(&partial, [0u8; 777]).unwrap();
        let (mut q, _) = Quarantine::open(qdir.clone(), 1 << 20, 10).unwrap();
        let mut r = record("dir/x.bin", "output disk full: write: No space left", 0);
        r.received = 777;
        r.stem = "dir_x.bin";
        let placed = q.put(&Item {
            record: r,
            partial: Some(&partial),
            no_space: true,
        });
        assert!(matches!(placed.fate, Fate::FreedNoSpace), "{placed:?}");
        assert_eq!(placed.freed, 777);
        assert!(!partial.exists());
        assert_eq!(entries(&qdir), ["dir_x.bin.0.reason"]);
        let text = fs::read_to_string(qdir.join("dir_x.bin.0.reason")).unwrap();
        assert_eq!(
            text,
            "name: dir_x.bin\nsession: 00000000000000aa\nchannel: 1\nbytes received: 777\n\
             size announced: 10\nreason: output disk full: write: No space left\n\
             time: 1970-01-01T00:00:00.000Z\n\
             data: removed to free the space (the output filesystem was full)\n"
        );
        assert_eq!(placed.fate.location(), "(removed: output disk full)");
    }

    #[test]
    fn a_record_that_cannot_be_written_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let qdir = dir.path().join("q");
        fs::create_dir(&qdir).unwrap();
        let (mut q, _) = Quarantine::open(qdir.clone(), 1 << 20, 10).unwrap();
        fs::remove_dir(&qdir).unwrap();
        let placed = q.put(&Item {
            record: record("x", "why", 5),
            partial: None,
            no_space: false,
        });
        assert!(placed.reason.is_none(), "{placed:?}");
        assert_eq!(q.entries(), 0);
    }

    #[test]
    fn names_are_unique_and_fit() {
        let dir = tempfile::tempdir().unwrap();
        let (mut q, _) = Quarantine::open(dir.path().to_owned(), 1 << 20, 10).unwrap();
        let long = "é".repeat(200);
        for _ in 0..3 {
            let p = q.put(&Item {
                record: record(&long, "why", 1_700_000_000_123),
                partial: None,
                no_space: false,
            });
            assert!(p.reason.is_some());
        }
        let n = entries(dir.path());
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(n.iter().all(|n| n.len() <= 255), "{n:?}");
        for id in [".1700000000123.", ".1700000000123-1.", ".1700000000123-2."] {
            assert!(n.iter().any(|n| n.contains(id)), "{id} in {n:?}");
        }
    }

    #[test]
    fn utc_is_rfc3339() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_001), "2000-02-29T00:00:00.001Z");
        assert_eq!(utc(1_714_564_800_250), "2024-05-01T12:00:00.250Z");
    }
}
