//! The counters of a sync, declared once ([`SyncCounters`]) beside the
//! live atomics every sync thread counts into ([`SyncStats`]); the metrics
//! endpoint and the summary are their subscribers.

use std::sync::atomic::{AtomicU64, Ordering};

diodon_counters::counters! {
    /// What a sync did (a snapshot of [`SyncStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct SyncCounters in Diodon "sync" {
        scans: counter Count "scans" "Full scans of the source roots completed.",
        scanned: counter Count "scanned_files" "Files looked at by the scans.",
        found_changed: counter Count "found_changed" "New files and new versions found by the scans.",
        found_deleted: counter Count "found_deleted" "Files the scans found gone.",
        skipped: counter Count "scan_skipped" "Entries the scans skipped: ignore globs, symlinks, special files, names that are not UTF-8.",
        watch_checked: counter Count "watch_checked" "Paths the file-system watch reported, each checked on its own.",
        watch_dirs: counter Count "watch_dirs" "Directories read again because the watch reported the directory itself (new, moved in, a root).",
        files_new: counter Count "files_sent_first" "Files sent for the first time (new or changed versions).",
        files_repeat: counter Count "files_sent_repeat" "Files sent again by the carousel.",
        bytes_new: counter Bytes "sent_first" "Bytes of files sent for the first time.",
        bytes_repeat: counter Bytes "sent_repeat" "Bytes of files sent again by the carousel.",
        aborted: counter Count "aborted" "File channels aborted (changed or unreadable while sent, or the sync stopped).",
        vanished: counter Count "vanished" "Files gone between scan and send.",
        changed_while_sent: counter Count "changed_while_sent" "Files found changed when their turn came or while they were read.",
        unsettled: counter Count "unsettled" "Files not sent yet because they were touched within the settle time.",
        unreadable: counter Count "unreadable" "Files that cannot be sent (permissions, refused names), each logged.",
        bundles: counter Count "bundles" "Bundle channels sent: several small files in one channel (PROTOCOL.md § 5.6).",
        bundled_files: counter Count "bundled_files" "Files sent inside bundles (each also counted as sent first or repeated).",
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
    pub watch_checked: AtomicU64,
    pub watch_dirs: AtomicU64,
    pub files_new: AtomicU64,
    pub files_repeat: AtomicU64,
    pub bytes_new: AtomicU64,
    pub bytes_repeat: AtomicU64,
    pub aborted: AtomicU64,
    pub vanished: AtomicU64,
    pub changed_while_sent: AtomicU64,
    pub unsettled: AtomicU64,
    pub unreadable: AtomicU64,
    pub bundles: AtomicU64,
    pub bundled_files: AtomicU64,
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
            watch_checked: g(&self.watch_checked),
            watch_dirs: g(&self.watch_dirs),
            files_new: g(&self.files_new),
            files_repeat: g(&self.files_repeat),
            bytes_new: g(&self.bytes_new),
            bytes_repeat: g(&self.bytes_repeat),
            aborted: g(&self.aborted),
            vanished: g(&self.vanished),
            changed_while_sent: g(&self.changed_while_sent),
            unsettled: g(&self.unsettled),
            unreadable: g(&self.unreadable),
            bundles: g(&self.bundles),
            bundled_files: g(&self.bundled_files),
            manifests: g(&self.manifests),
            deletions: g(&self.deletions),
            renames: g(&self.renames),
            outbox_done: g(&self.outbox_done),
            outbox_errors: g(&self.outbox_errors),
            pending: g(&self.pending),
        }
    }
}
