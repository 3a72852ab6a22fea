//! A verified sync bundle (PROTOCOL.md § 5.6) unpacked into the mirrored
//! tree: each entry is decided on its own like a file channel of its own
//! would be — a refused name is quarantined, a file already here with the
//! same size, mtime and digest is left alone, every other one is staged,
//! committed (mode, mtime, digest attribute, rename into place) and written
//! to the audit log with its availability time.
//!
//! ```text
//!  bundle bytes ─► bundle::parse (every entry's digest checked) ─► entry
//!    ─► sanitize ─✗─► quarantine record          (counted failed)
//!    ─► present? ─✓─► audit "present"            (not rewritten)
//!    ─► staging file ─► commit ─► audit "verified"
//! ```
//!
//! A bundle whose channel failed (a block lost for good, a link that went
//! silent) is not all lost: the core delivers its bytes in order up to the
//! first lost block, and every entry that lies wholly before that point is
//! landed the same way (`bundle::complete_entries`, each content checked
//! against its digest). The later ones wait for the carousel's next pass.

use super::{FileSink, Staged};
use crate::mirror::AuditRecord;
use crate::names::{fits_under, sanitize};
use crate::recv::ChannelKey;
use crate::sink_error::{FileOp, SinkFailure};
use diodon_proto::bundle::{complete_entries, parse, BundleEntry};
use diodon_proto::{ChannelKind, ChannelMeta, SyncInfo};
use std::fs;
use std::io::Write;

/// What became of one entry.
enum Landed {
    Written,
    Present,
    Failed(String),
}

impl FileSink {
    /// Unpacks a verified bundle staged at `st.tmp`: `Ok` with a one-line
    /// account when every file landed (or was here already), else the
    /// first failure and how many failed (each failed file has its own
    /// audit record and quarantine entry).
    pub(super) fn apply_bundle(
        &mut self,
        key: ChannelKey,
        st: &mut Staged,
    ) -> Result<String, SinkFailure> {
        drop(st.file.take());
        let bytes = fs::read(&st.tmp).map_err(SinkFailure::file(FileOp::Write))?;
        let _ = fs::remove_file(&st.tmp);
        let entries = parse(&bytes).map_err(|e| SinkFailure::Bundle(e.to_string()))?;
        let (written, present, failed) = self.land_entries(key, st.opened_ms, &entries);
        let n = entries.len();
        if let Some((name, why)) = failed.first() {
            return Err(SinkFailure::BundleFiles(format!(
                "{} of the bundle's {n} files failed (first: {}: {why}); {written} written, {present} already present",
                failed.len(),
                crate::names::escape(name)
            )));
        }
        tracing::debug!(%key, files = n, written, present, "bundle unpacked");
        Ok(format!(
            "bundle of {n} files: {written} written, {present} already present"
        ))
    }

    /// A bundle whose channel failed, staged at `st.tmp` up to its first
    /// lost byte: lands every entry that arrived whole before it. `None`
    /// when this is no bundle or no entry arrived whole, else what became
    /// of them (for the channel's failure reason). A bundle malformed
    /// before the loss lands nothing, as a whole one would not.
    pub(super) fn salvage_bundle(&mut self, key: ChannelKey, st: &Staged) -> Option<String> {
        if st.meta.kind != ChannelKind::Bundle || st.error.is_some() || st.written == 0 {
            return None;
        }
        let mut bytes = match fs::read(&st.tmp) {
            Ok(b) => b,
            Err(e) => return Some(format!("its first files could not be read back: {e}")),
        };
        // A reserved staging file is longer than what was written.
        bytes.truncate(usize::try_from(st.written).unwrap_or(usize::MAX));
        let entries = match complete_entries(&bytes) {
            Ok(entries) if entries.is_empty() => return None,
            Ok(entries) => entries,
            Err(e) => return Some(format!("nothing of it landed: {e}")),
        };
        let (written, present, failed) = self.land_entries(key, st.opened_ms, &entries);
        tracing::info!(
            %key,
            files = entries.len(),
            written,
            present,
            failed = failed.len(),
            "failed bundle: the files that arrived whole before the loss landed"
        );
        Some(format!(
            "{} files arrived whole before the loss and landed: {written} written, \
             {present} already present, {} failed",
            entries.len(),
            failed.len()
        ))
    }

    /// Lands `entries` one by one: how many were written, were present
    /// already, and which failed (name, why).
    fn land_entries<'a>(
        &mut self,
        key: ChannelKey,
        opened_ms: u64,
        entries: &[BundleEntry<'a>],
    ) -> (usize, usize, Vec<(&'a str, String)>) {
        let (mut written, mut present, mut failed) = (0usize, 0usize, Vec::new());
        for e in entries {
            match self.land_entry(key, opened_ms, e) {
                Landed::Written => written += 1,
                Landed::Present => present += 1,
                Landed::Failed(why) => failed.push((e.name, why)),
            }
        }
        self.mirror_stats_sync();
        (written, present, failed)
    }

    fn land_entry(&mut self, key: ChannelKey, opened_ms: u64, e: &BundleEntry<'_>) -> Landed {
        let meta = ChannelMeta {
            kind: ChannelKind::File,
            size: Some(e.content.len() as u64),
            mode: e.mode,
            mtime_sec: e.mtime_sec,
            mtime_nsec: e.mtime_nsec,
            name: e.name.to_owned(),
            aligned: false,
            sync: Some(SyncInfo {
                first_seen_unix_ms: e.first_seen_unix_ms,
                pass: e.pass,
                digest: Some(e.digest),
                block_bytes: 0,
            }),
        };
        let rel = sanitize(&meta.name);
        let mut st = Staged {
            name: meta.name.clone(),
            rel: rel.as_ref().ok().cloned(),
            meta,
            tmp: self.staging.join("-"),
            file: None,
            written: 0,
            error: None,
            no_space: false,
            opened_ms,
            held: None,
            reserved: false,
        };
        let blake3 = hex::encode(e.digest);
        let rel = match rel {
            Ok(rel) => rel,
            Err(e) => {
                let why = SinkFailure::Name(e).to_string();
                self.quarantine(key, st, &why);
                return Landed::Failed(why);
            }
        };
        if self.mirror.present(&rel, &st.meta) {
            let mut rec = Self::audit_record(key, &st, "present");
            rec.blake3 = blake3;
            self.mirror.skipped(&rec);
            return Landed::Present;
        }
        let staged = self.stage_entry(&mut st, &rel, e.content);
        let result = staged.and_then(|()| self.commit(&mut st, &rel, &e.digest));
        match result {
            Ok(dest) => {
                let mut rec: AuditRecord = Self::audit_record(key, &st, "verified");
                rec.blake3 = blake3;
                rec.verified_ms = diodon_io::unix_time_ms();
                rec.reason = dest.display().to_string();
                self.mirror.verified(rec);
                Landed::Written
            }
            Err(why) => {
                if why.is_no_space() {
                    super::out_of_room(&self.stats, key, &mut st, &why);
                }
                let text = why.to_string();
                self.quarantine(key, st, &text);
                Landed::Failed(text)
            }
        }
    }

    /// Writes an entry's bytes to a staging file of its own.
    fn stage_entry(
        &self,
        st: &mut Staged,
        rel: &crate::names::SafePath,
        content: &[u8],
    ) -> Result<(), SinkFailure> {
        fits_under(&self.out, rel).map_err(SinkFailure::Name)?;
        self.check_room(content.len() as u64)?;
        st.tmp = self
            .staging
            .join(format!("{:016x}.part", rand::random::<u64>()));
        let mut f = super::create_staging(&st.tmp)?;
        f.write_all(content)
            .map_err(SinkFailure::file(FileOp::Write))?;
        self.room.wrote(content.len() as u64);
        st.written = content.len() as u64;
        st.file = Some(f);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{FileSinkOptions, FileSinkStats, STAGING};
    use super::*;
    use crate::mirror::MirrorOptions;
    use crate::recv::{Sink, SinkEvent, Verdict};
    use diodon_proto::bundle::{push_entry, BUNDLE_NAME};
    use diodon_proto::{ChannelId, SessionId};
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    fn entry<'a>(name: &'a str, content: &'a [u8], mtime_sec: i64) -> BundleEntry<'a> {
        BundleEntry {
            name,
            pass: 1,
            mode: 0o4750,
            mtime_sec,
            mtime_nsec: 5,
            first_seen_unix_ms: diodon_io::unix_time_ms() - 100,
            digest: *blake3::hash(content).as_bytes(),
            content,
        }
    }

    /// Opens bundle channel `c` of `total` bytes and gives the sink its
    /// first bytes, `data`; the channel's key.
    fn open_with(sink: &mut FileSink, c: u32, total: usize, data: &[u8]) -> ChannelKey {
        let key = ChannelKey {
            session: SessionId(9),
            channel: ChannelId(c),
        };
        let mut meta = ChannelMeta::file(BUNDLE_NAME, total as u64);
        meta.kind = ChannelKind::Bundle;
        FileSink::admit(&meta).expect("a bundle's label is admitted");
        assert!(sink
            .handle(SinkEvent::Opened { key, meta })
            .unwrap()
            .is_none());
        sink.handle(SinkEvent::Data {
            key,
            offset: 0,
            data: data.to_vec(),
        })
        .unwrap();
        key
    }

    /// Delivers `bytes` as one verified bundle channel; the outcome.
    fn deliver(sink: &mut FileSink, c: u32, bytes: &[u8]) -> crate::recv::ChannelOutcome {
        let key = open_with(sink, c, bytes.len(), bytes);
        sink.handle(SinkEvent::Complete {
            key,
            bytes: bytes.len() as u64,
            digest: *blake3::hash(bytes).as_bytes(),
        })
        .unwrap()
        .expect("an outcome")
    }

    fn sink(out: &Path) -> (FileSink, Arc<FileSinkStats>) {
        let stats = Arc::new(FileSinkStats::default());
        let opts = FileSinkOptions {
            mirror: MirrorOptions {
                audit: Some(out.join("audit.jsonl")),
                ..MirrorOptions::default()
            },
            ..FileSinkOptions::default()
        };
        let out_dir = out.join("out");
        (
            FileSink::new(&out_dir, &opts, Arc::clone(&stats)).unwrap(),
            stats,
        )
    }

    fn audit(dir: &Path) -> Vec<serde_json::Value> {
        fs::read_to_string(dir.join("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The audit log's (path, verdict) pairs, in order.
    fn verdicts(dir: &Path) -> Vec<(String, String)> {
        audit(dir)
            .iter()
            .map(|r| {
                (
                    r["path"].as_str().unwrap().into(),
                    r["verdict"].as_str().unwrap().into(),
                )
            })
            .collect()
    }

    #[test]
    fn a_bundle_lands_each_file_once_and_refuses_a_hostile_name_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, stats) = sink(dir.path());
        let mut bytes = Vec::new();
        push_entry(&mut bytes, &entry("t/a.txt", b"alpha", 1_600_000_000));
        push_entry(&mut bytes, &entry("t/sub/empty", b"", 1_600_000_001));
        push_entry(&mut bytes, &entry("../escape", b"evil", 1_600_000_002));
        let out = deliver(&mut sink, 1, &bytes);
        let Verdict::Failed { reason } = &out.verdict else {
            panic!("one file failed, so does the bundle: {out:?}")
        };
        assert!(
            reason.starts_with("1 of the bundle's 3 files failed"),
            "{reason}"
        );
        let root = dir.path().join("out");
        assert_eq!(fs::read(root.join("t/a.txt")).unwrap(), b"alpha");
        let m = fs::metadata(root.join("t/a.txt")).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o750, "set-uid stripped");
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_000, 5));
        assert_eq!(fs::read(root.join("t/sub/empty")).unwrap(), b"");
        assert!(!dir.path().join("escape").exists());
        assert!(fs::read_dir(root.join(STAGING)).unwrap().next().is_none());
        let verdicts = verdicts(dir.path());
        assert_eq!(
            verdicts,
            [
                ("t/a.txt".into(), "verified".into()),
                ("t/sub/empty".into(), "verified".into()),
                ("../escape".into(), "failed".into()),
            ]
        );
        let rec = &audit(dir.path())[0];
        assert!(rec["availability_ms"].as_u64().unwrap() >= 100, "{rec}");
        assert_eq!(
            rec["blake3"],
            hex::encode(blake3::hash(b"alpha").as_bytes())
        );
        assert_eq!(stats.mirror.verified.load(Ordering::Relaxed), 2);
        assert_eq!(stats.mirror.failed.load(Ordering::Relaxed), 1);

        // The same files again (a repeat): recognised, not rewritten.
        let mut again = Vec::new();
        push_entry(&mut again, &entry("t/a.txt", b"alpha", 1_600_000_000));
        push_entry(&mut again, &entry("t/sub/empty", b"", 1_600_000_001));
        let ino = fs::metadata(root.join("t/a.txt")).unwrap().ino();
        let out = deliver(&mut sink, 2, &again);
        assert!(matches!(out.verdict, Verdict::Verified { .. }), "{out:?}");
        assert_eq!(
            out.location,
            "bundle of 2 files: 0 written, 2 already present"
        );
        assert_eq!(fs::metadata(root.join("t/a.txt")).unwrap().ino(), ino);
        assert_eq!(stats.mirror.present.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_bundle_that_does_not_parse_places_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, _) = sink(dir.path());
        let mut bytes = Vec::new();
        push_entry(&mut bytes, &entry("good", b"fine", 1));
        push_entry(&mut bytes, &entry("bad", b"text", 1));
        // The sender's own digest of the second entry is wrong.
        *bytes.last_mut().unwrap() ^= 1;
        let out = deliver(&mut sink, 1, &bytes);
        let Verdict::Failed { reason } = &out.verdict else {
            panic!("{out:?}")
        };
        assert!(
            reason.contains("bundle entry 2") && reason.contains("does not match its digest"),
            "{reason}"
        );
        let root = dir.path().join("out");
        assert!(
            !root.join("good").exists(),
            "nothing of a bad bundle is placed"
        );
        assert!(fs::read_dir(root.join(STAGING)).unwrap().next().is_none());
    }

    /// Delivers the first `prefix` bytes of a bundle of `total` bytes, then
    /// the core's verdict that a block was lost; the outcome.
    fn deliver_cut(
        sink: &mut FileSink,
        c: u32,
        prefix: &[u8],
        total: usize,
    ) -> crate::recv::ChannelOutcome {
        let key = open_with(sink, c, total, prefix);
        sink.handle(SinkEvent::Failed {
            key,
            reason: diodon_proto::FailReason::BlockLost { block: 3, count: 1 },
        })
        .unwrap()
        .expect("an outcome")
    }

    #[test]
    fn a_failed_bundle_lands_the_files_that_arrived_whole_before_the_loss() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, stats) = sink(dir.path());
        let root = dir.path().join("out");
        fs::create_dir_all(root.join("t")).unwrap();
        let big = vec![0x5a_u8; 3 << 20];
        let entries = [
            entry("t/a.txt", b"alpha", 1_600_000_000),
            entry("t/big.bin", &big, 1_600_000_001),
            entry("t/c.txt", b"gamma", 1_600_000_002),
            entry("t/d.txt", b"delta", 1_600_000_003),
        ];
        let mut bytes = Vec::new();
        for e in &entries {
            push_entry(&mut bytes, e);
        }
        // The loss cut the bundle inside its third file.
        let third = entries[0].encoded_len() + entries[1].encoded_len();
        let out = deliver_cut(&mut sink, 1, &bytes[..third + 70], bytes.len());
        let Verdict::Failed { reason } = &out.verdict else {
            panic!("the bundle itself failed: {out:?}")
        };
        assert!(
            reason.contains("block 3")
                && reason.contains(
                    "2 files arrived whole before the loss and landed: 2 written, 0 already present, 0 failed"
                ),
            "{reason}"
        );
        assert_eq!(fs::read(root.join("t/a.txt")).unwrap(), b"alpha");
        assert_eq!(fs::read(root.join("t/big.bin")).unwrap(), big);
        let m = fs::metadata(root.join("t/big.bin")).unwrap();
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_600_000_001, 5));
        assert!(!root.join("t/c.txt").exists(), "cut by the loss");
        assert!(!root.join("t/d.txt").exists(), "after the loss");
        let verdicts = verdicts(dir.path());
        assert_eq!(
            verdicts[..2],
            [
                ("t/a.txt".into(), "verified".into()),
                ("t/big.bin".into(), "verified".into()),
            ]
        );
        assert_eq!(stats.mirror.verified.load(Ordering::Relaxed), 2);

        // The next pass brings the whole bundle: the two are present.
        let out = deliver(&mut sink, 2, &bytes);
        assert_eq!(
            out.location,
            "bundle of 4 files: 2 written, 2 already present"
        );
        assert_eq!(fs::read(root.join("t/d.txt")).unwrap(), b"delta");
    }

    #[test]
    fn a_failed_bundle_malformed_before_the_loss_lands_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, _) = sink(dir.path());
        let mut bytes = Vec::new();
        push_entry(&mut bytes, &entry("good", b"fine", 1));
        push_entry(&mut bytes, &entry("bad", b"text", 1));
        push_entry(&mut bytes, &entry("later", b"cut", 1));
        let second_end = bytes.len() - entry("later", b"cut", 1).encoded_len();
        bytes[second_end - 1] ^= 1; // the sender's digest of "bad" is wrong
        let out = deliver_cut(&mut sink, 1, &bytes[..bytes.len() - 1], bytes.len());
        let Verdict::Failed { reason } = &out.verdict else {
            panic!("{out:?}")
        };
        assert!(
            reason.contains("nothing of it landed: bundle entry 2"),
            "{reason}"
        );
        assert!(!dir.path().join("out/good").exists());
    }

    #[test]
    fn a_bundle_larger_than_a_receiver_holds_is_refused_before_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut sink, _) = sink(dir.path());
        let key = ChannelKey {
            session: SessionId(9),
            channel: ChannelId(1),
        };
        let mut meta = ChannelMeta::file(BUNDLE_NAME, diodon_proto::bundle::MAX_BUNDLE_BYTES + 1);
        meta.kind = ChannelKind::Bundle;
        let err = sink.handle(SinkEvent::Opened { key, meta }).unwrap_err();
        assert!(err.why.to_string().contains("larger than"), "{}", err.why);
    }
}
