//! The receiving side of a directory-tree sync, beside the file sink: it
//! recognises a file it already holds from its announcement (size, mtime
//! and digest), applies the sender's manifests (deletions into a dated
//! `.diodon-deleted/` folder, renames), purges that folder after
//! `--delete-after`, measures availability time, and writes the audit log:
//! one JSON line per file decision, rotated.
//!
//! ```text
//!  Opened (sync info + digest) ─► present()? ─ yes ─► skip: the core drops the channel
//!                                            └ no ──► the file sink writes it as usual
//!  committed (verified) ─► digest kept as xattr user.diodon.blake3 ─► audit + counters
//!  manifest (verified) ─► delete: move to .diodon-deleted/<unix s>/<path> (same size and mtime only)
//!                      ─► rename: move in place, or delete `from` when `path` is already there
//!  --delete-after D ─► .diodon-deleted/<unix s> older than D removed
//! ```

use crate::names::{sanitize, SafePath};
use crate::sync::manifest::{self, Op, Record};
use diodon_proto::ChannelMeta;
use serde::Serialize;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Where deleted files go, under the output folder.
pub const DELETED: &str = ".diodon-deleted";
/// The extended attribute that keeps a verified file's BLAKE3 (32 bytes;
/// 64 hex digits from receivers before 2026-11, still read).
pub const DIGEST_XATTR: &str = "user.diodon.blake3";

/// How the mirror behaves.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MirrorOptions {
    /// Really delete what went to `.diodon-deleted/` after this long
    /// (`None`: keep it).
    pub delete_after: Option<Duration>,
    /// The audit log (JSON Lines), rotated at 64 MiB, 8 files kept.
    pub audit: Option<PathBuf>,
}

diodon_counters::counters! {
    /// What the mirror decided (a snapshot of [`MirrorStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct MirrorCounters in Diodon "mirror" {
        verified: counter Count "files_verified" "Files verified and renamed into place.",
        failed: counter Count "files_failed" "Files failed (quarantined with a reason).",
        present: counter Count "files_present" "Files announced with a size, mtime and digest the receiver already held: not written again.",
        deleted: counter Count "files_deleted" "Files moved to .diodon-deleted/ by a manifest.",
        renamed: counter Count "files_renamed" "Files moved to their new name by a manifest.",
        not_applied: counter Count "records_not_applied" "Manifest records whose file here differs from the one the sender deleted or renamed (left alone, logged).",
        purged: counter Count "purged" "Folders of .diodon-deleted/ removed after --delete-after.",
        avail_1s: counter Count "availability_le_1s" "Files available within 1 s of the sender first seeing them.",
        avail_10s: counter Count "availability_le_10s" "Files available within 10 s (cumulative).",
        avail_60s: counter Count "availability_le_60s" "Files available within 60 s (cumulative).",
        avail_600s: counter Count "availability_le_600s" "Files available within 600 s (cumulative).",
        avail_count: counter Count "availability_count" "Files with a measured availability time.",
        avail_ms_sum: counter Count "availability_milliseconds_sum" "Sum of the availability times, ms.",
        avail_ms_max: gauge Count "availability_milliseconds_max" "Longest availability time so far, ms.",
        audit_errors: counter Count "audit_write_errors" "Audit records that could not be written (each logged).",
    }
}

/// Live counters of the mirror.
#[derive(Debug, Default)]
#[expect(
    missing_docs,
    reason = "each field is the MirrorCounters field of the same name"
)]
pub struct MirrorStats {
    pub verified: AtomicU64,
    pub failed: AtomicU64,
    pub present: AtomicU64,
    pub deleted: AtomicU64,
    pub renamed: AtomicU64,
    pub not_applied: AtomicU64,
    pub purged: AtomicU64,
    pub avail_1s: AtomicU64,
    pub avail_10s: AtomicU64,
    pub avail_60s: AtomicU64,
    pub avail_600s: AtomicU64,
    pub avail_count: AtomicU64,
    pub avail_ms_sum: AtomicU64,
    pub avail_ms_max: AtomicU64,
    pub audit_errors: AtomicU64,
}

impl MirrorStats {
    /// The counters now.
    pub fn snapshot(&self) -> MirrorCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MirrorCounters {
            verified: g(&self.verified),
            failed: g(&self.failed),
            present: g(&self.present),
            deleted: g(&self.deleted),
            renamed: g(&self.renamed),
            not_applied: g(&self.not_applied),
            purged: g(&self.purged),
            avail_1s: g(&self.avail_1s),
            avail_10s: g(&self.avail_10s),
            avail_60s: g(&self.avail_60s),
            avail_600s: g(&self.avail_600s),
            avail_count: g(&self.avail_count),
            avail_ms_sum: g(&self.avail_ms_sum),
            avail_ms_max: g(&self.avail_ms_max),
            audit_errors: g(&self.audit_errors),
        }
    }

    fn add(a: &AtomicU64) {
        a.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one availability time.
    fn availability(&self, ms: u64) {
        for (limit, a) in [
            (1_000, &self.avail_1s),
            (10_000, &self.avail_10s),
            (60_000, &self.avail_60s),
            (600_000, &self.avail_600s),
        ] {
            if ms <= limit {
                Self::add(a);
            }
        }
        Self::add(&self.avail_count);
        self.avail_ms_sum.fetch_add(ms, Ordering::Relaxed);
        self.avail_ms_max.fetch_max(ms, Ordering::Relaxed);
    }
}

/// One line of the audit log: one decision about one file.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditRecord {
    /// When the decision was made, Unix ms.
    pub at_ms: u64,
    /// The file's name as announced.
    pub path: String,
    /// Its size.
    pub size: u64,
    /// Its BLAKE3 (hex), when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub blake3: String,
    /// The sender session (hex).
    pub session: String,
    /// The channel.
    pub channel: u32,
    /// When its channel-open arrived (first datagram the sink saw), Unix ms.
    pub opened_ms: u64,
    /// When it was verified, Unix ms (0 if not).
    pub verified_ms: u64,
    /// When the sender first saw it, Unix ms (0 without sync information).
    pub first_seen_ms: u64,
    /// `verified_ms − first_seen_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_ms: Option<u64>,
    /// The sender's pass that delivered or carried it.
    pub pass: u16,
    /// Blocks kept from earlier passes (or an earlier run of the receiver)
    /// that this pass did not have to deliver again.
    #[serde(skip_serializing_if = "is_zero")]
    pub held_blocks: u64,
    /// `verified`, `present`, `failed`, `deleted`, `renamed`, `not_applied`.
    pub verdict: &'static str,
    /// Why (failures, records not applied), or where it went.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A JSON Lines file, rotated: `audit.jsonl` → `audit.jsonl.1` → … `.8`.
#[derive(Debug)]
struct AuditLog {
    path: PathBuf,
    file: File,
    written: u64,
}

const AUDIT_MAX_BYTES: u64 = 64 << 20;
const AUDIT_KEEP: usize = 8;

impl AuditLog {
    fn open(path: &Path) -> io::Result<Self> {
        if let Some(p) = path.parent() {
            fs::create_dir_all(p)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let written = file.metadata()?.len();
        Ok(AuditLog {
            path: path.to_owned(),
            file,
            written,
        })
    }

    fn write(&mut self, rec: &AuditRecord) -> io::Result<()> {
        let mut line = serde_json::to_vec(rec).map_err(io::Error::other)?;
        line.push(b'\n');
        if self.written + line.len() as u64 > AUDIT_MAX_BYTES {
            self.rotate()?;
        }
        self.file.write_all(&line)?;
        self.written += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> io::Result<()> {
        let name = |i: usize| PathBuf::from(format!("{}.{i}", self.path.display()));
        for i in (1..AUDIT_KEEP).rev() {
            let _ = fs::rename(name(i), name(i + 1));
        }
        fs::rename(&self.path, name(1))?;
        self.file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.written = 0;
        Ok(())
    }
}

/// The mirror of one output folder (owned by the file sink).
#[derive(Debug)]
pub struct Mirror {
    out: PathBuf,
    delete_after: Option<Duration>,
    audit: Option<AuditLog>,
    stats: Arc<MirrorStats>,
}

impl Mirror {
    /// The mirror of `out`; opens the audit log and purges old deletions.
    pub fn new(out: &Path, opts: &MirrorOptions, stats: Arc<MirrorStats>) -> io::Result<Self> {
        let audit = opts.audit.as_deref().map(AuditLog::open).transpose()?;
        let mut m = Mirror {
            out: out.to_owned(),
            delete_after: opts.delete_after,
            audit,
            stats,
        };
        m.purge();
        Ok(m)
    }

    /// The counters.
    pub fn stats(&self) -> &MirrorStats {
        &self.stats
    }

    /// Whether the announced file is already here: same size, mtime and
    /// digest (from its attribute, or read once and then kept there).
    pub fn present(&self, rel: &SafePath, meta: &ChannelMeta) -> bool {
        let Some(want) = meta.sync.and_then(|s| s.digest) else {
            return false;
        };
        let path = self.out.join(rel.as_path());
        let Ok(mut file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            return false;
        };
        let Ok(m) = file.metadata() else { return false };
        if !m.is_file()
            || Some(m.len()) != meta.size
            || m.mtime() != meta.mtime_sec
            || m.mtime_nsec() != i64::from(meta.mtime_nsec)
        {
            return false;
        }
        let kept = diodon_io::fs::get_xattr(&file, DIGEST_XATTR)
            .ok()
            .and_then(|v| kept_digest(&v));
        if let Some(kept) = kept {
            return kept == want;
        }
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    h.update(&buf[..n]);
                }
                Err(_) => return false,
            }
        }
        let same = *h.finalize().as_bytes() == want;
        if same {
            keep_digest(&file, &want);
        }
        same
    }

    /// Counts a verified file (and its availability time) and audits it.
    pub fn verified(&mut self, mut rec: AuditRecord) {
        MirrorStats::add(&self.stats.verified);
        if rec.first_seen_ms > 0 {
            let ms = rec.verified_ms.saturating_sub(rec.first_seen_ms);
            rec.availability_ms = Some(ms);
            self.stats.availability(ms);
        }
        self.audit(&rec);
    }

    /// Counts a file found present and audits it.
    pub fn skipped(&mut self, rec: &AuditRecord) {
        MirrorStats::add(&self.stats.present);
        self.audit(rec);
    }

    /// Counts a failed file and audits it.
    pub fn failed(&mut self, rec: &AuditRecord) {
        MirrorStats::add(&self.stats.failed);
        self.audit(rec);
    }

    fn audit(&mut self, rec: &AuditRecord) {
        if let Some(log) = &mut self.audit {
            if let Err(e) = log.write(rec) {
                MirrorStats::add(&self.stats.audit_errors);
                tracing::error!(path = %log.path.display(), "audit log: {e}");
            }
        }
    }

    /// Applies a verified manifest; returns a one-line account.
    pub fn apply(
        &mut self,
        bytes: &[u8],
        base: &AuditRecord,
    ) -> Result<String, manifest::ManifestError> {
        let records = manifest::parse(bytes)?;
        let (mut deleted, mut renamed, mut left) = (0, 0, 0);
        for r in &records {
            let outcome = self.apply_one(r);
            let (verdict, reason) = match &outcome {
                Applied::Deleted(to) => {
                    deleted += 1;
                    MirrorStats::add(&self.stats.deleted);
                    ("deleted", to.display().to_string())
                }
                Applied::Renamed => {
                    renamed += 1;
                    MirrorStats::add(&self.stats.renamed);
                    ("renamed", r.from.clone().unwrap_or_default())
                }
                Applied::Nothing => continue,
                Applied::Differs(why) => {
                    left += 1;
                    MirrorStats::add(&self.stats.not_applied);
                    tracing::warn!(path = %r.path.escape_debug(), "manifest record not applied: {why}");
                    ("not_applied", why.clone())
                }
            };
            let rec = AuditRecord {
                at_ms: diodon_io::unix_time_ms(),
                path: r.path.clone(),
                size: r.size,
                first_seen_ms: r.first_seen_ms.max(0).cast_unsigned(),
                pass: u16::try_from(r.pass).unwrap_or(u16::MAX),
                verdict,
                reason,
                ..base.clone()
            };
            self.audit(&rec);
        }
        self.purge();
        Ok(format!(
            "manifest: {} records, {deleted} deleted, {renamed} renamed, {left} not applied",
            records.len()
        ))
    }

    fn apply_one(&self, r: &Record) -> Applied {
        let Ok(path) = sanitize(&r.path) else {
            return Applied::Differs("unsafe name".into());
        };
        let victim = match (r.op, &r.from) {
            (Op::Delete, _) => path.clone(),
            (Op::Rename, Some(from)) => match sanitize(from) {
                Ok(f) => f,
                Err(_) => return Applied::Differs("unsafe name".into()),
            },
            (Op::Rename, None) => return Applied::Differs("rename without from".into()),
        };
        let at = self.out.join(victim.as_path());
        let m = match fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Applied::Nothing,
            Err(e) => return Applied::Differs(e.to_string()),
        };
        if !m.is_file()
            || m.len() != r.size
            || m.mtime() != r.mtime_sec
            || m.mtime_nsec() != i64::from(r.mtime_nsec)
        {
            return Applied::Differs("the file here is another version".into());
        }
        if r.op == Op::Rename {
            let dest = self.out.join(path.as_path());
            if fs::symlink_metadata(&dest).is_err()
                && crate::outdir::ensure_parent(&self.out, &path).is_ok()
                && fs::rename(&at, &dest).is_ok()
            {
                self.prune(&victim);
                return Applied::Renamed;
            }
        }
        self.delete(&victim, &at)
    }

    /// Moves a file into `.diodon-deleted/<unix s>/<path>`.
    fn delete(&self, rel: &SafePath, at: &Path) -> Applied {
        let secs = diodon_io::unix_time_ms() / 1000;
        let to = self
            .out
            .join(DELETED)
            .join(secs.to_string())
            .join(rel.as_path());
        let moved = to
            .parent()
            .map_or(Ok(()), fs::create_dir_all)
            .and_then(|()| fs::rename(at, &to));
        match moved {
            Ok(()) => {
                self.prune(rel);
                Applied::Deleted(to)
            }
            Err(e) => Applied::Differs(format!("cannot move to {DELETED}: {e}")),
        }
    }

    /// Removes the now empty directories above a removed file.
    fn prune(&self, rel: &SafePath) {
        let mut dir = rel.as_path().parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            if fs::remove_dir(self.out.join(d)).is_err() {
                break;
            }
            dir = d.parent();
        }
    }

    /// Removes the folders of `.diodon-deleted/` older than `--delete-after`.
    pub fn purge(&mut self) {
        let Some(after) = self.delete_after else {
            return;
        };
        let now = diodon_io::unix_time_ms() / 1000;
        let Ok(dir) = fs::read_dir(self.out.join(DELETED)) else {
            return;
        };
        for e in dir.flatten() {
            let old = e
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|t| t + after.as_secs() <= now);
            if old && fs::remove_dir_all(e.path()).is_ok() {
                MirrorStats::add(&self.stats.purged);
            }
        }
    }
}

/// The digest kept with a file: 32 raw bytes, or 64 hex digits as
/// receivers before the raw form wrote it.
fn kept_digest(value: &[u8]) -> Option<Vec<u8>> {
    match value.len() {
        32 => Some(value.to_vec()),
        64 => hex::decode(value).ok(),
        _ => None,
    }
}

enum Applied {
    Deleted(PathBuf),
    Renamed,
    Nothing,
    Differs(String),
}

/// Keeps a verified file's digest with it (best effort: a filesystem
/// without user attributes only costs a read at the next pass).
///
/// The 32 raw bytes, not 64 hex digits: with its name they fit in the
/// spare room of a 256-byte ext4 inode, where hex would take an extra
/// 4 KiB block for every received file.
pub fn keep_digest(file: &File, digest: &[u8; 32]) {
    if let Err(e) = diodon_io::fs::set_xattr(file, DIGEST_XATTR, digest) {
        tracing::debug!("cannot keep the digest as an extended attribute: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::sanitize;
    use diodon_proto::{ChannelMeta, SyncInfo};

    fn meta(name: &str, content: &[u8], mtime: &fs::Metadata) -> ChannelMeta {
        let mut m = ChannelMeta::file(name, content.len() as u64);
        m.mtime_sec = mtime.mtime();
        m.mtime_nsec = mtime.mtime_nsec() as u32;
        m.sync = Some(SyncInfo {
            first_seen_unix_ms: 1,
            pass: 2,
            digest: Some(*blake3::hash(content).as_bytes()),
            block_bytes: 0,
        });
        m
    }

    #[test]
    fn the_kept_digest_is_32_raw_bytes_and_the_old_hex_form_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = Mirror::new(dir.path(), &MirrorOptions::default(), Arc::default()).unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"content").unwrap();
        let want = meta("f", b"content", &fs::metadata(&path).unwrap());
        let rel = sanitize("f").unwrap();
        let digest = *blake3::hash(b"content").as_bytes();

        keep_digest(&File::open(&path).unwrap(), &digest);
        let kept = diodon_io::fs::get_xattr(&File::open(&path).unwrap(), DIGEST_XATTR).unwrap();
        assert_eq!(kept, digest, "raw bytes, small enough for the inode");
        assert!(mirror.present(&rel, &want));

        // What receivers before the raw form kept.
        diodon_io::fs::set_xattr(
            &File::open(&path).unwrap(),
            DIGEST_XATTR,
            hex::encode(digest).as_bytes(),
        )
        .unwrap();
        assert!(mirror.present(&rel, &want));

        // A kept digest that differs means another file: not present.
        keep_digest(&File::open(&path).unwrap(), &[9; 32]);
        assert!(!mirror.present(&rel, &want));
        // One of no known form: the bytes are hashed instead.
        diodon_io::fs::set_xattr(&File::open(&path).unwrap(), DIGEST_XATTR, b"junk").unwrap();
        assert!(mirror.present(&rel, &want));
    }
}
