//! The scheduler: decides what goes on the link next and keeps the state
//! database up to date with what went out.
//!
//! ```text
//!  State ─ candidates(passes = 0)  "new and changed" ─┐ share rule: repeats take at most
//!        ─ candidates(lowest pass) "the carousel"   ─┴► --repeat-share of the bytes while
//!                                                        new files wait ─► Job ─► readers
//!  State ─ tombstones ─► manifest channel (deletions, renames) ─► SourceHandle
//!  inbox ◄─ Started / Done (readers) · SentNotice (core) · ScanDone (scanner)
//!        ─► State::sent (passes + 1, digest) ─► outbox (delete | move) after the last pass
//! ```
//!
//! At most `in_flight` jobs are being sent at once (plus one manifest); a
//! job is one file, or a bundle of consecutive small candidates packed into
//! one channel (`--bundle`, PROTOCOL.md § 5.6; a repeat's bundle is at most
//! one short block, [`REPEAT_BUNDLE_SYMBOLS`]). Every
//! candidate is checked against its row again before it is dispatched, so
//! a page read before a pass was counted never sends the same pass twice.
//! Pages are read on from where the last one ended (`next_page`): read
//! from the top, each page was mostly the files still in flight.

use super::inbox::{Inbox, ReadResult};
use super::manifest::{Op, Record, MANIFEST_NAME, MAX_RECORDS};
use super::options::{AfterSend, SyncOptions};
use super::reader::{Job, Work};
use super::state::{split, FileRow, PageKey, State, StateError};
use super::stats::SyncStats;
use crate::send::{SentNotice, SentStatus, SourceHandle};
use diodon_proto::bundle::ENTRY_HEADER_LEN;
use diodon_proto::{ChannelKind, ChannelMeta};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::Duration;

/// Candidates read per query.
const PAGE: usize = 1024;
/// A file this large (bytes) is "large": at most one is sent at a time, so
/// a tree of large files delivers them one after the other (the first is
/// available after its own bytes, not after all of theirs) while small
/// files still pass beside it.
pub const LARGE: u64 = 16 << 20;

/// Files in one bundle at most.
const BUNDLE_FILES: usize = 1024;

/// A repeat's bundle holds at most this many symbols of bytes: one short
/// block, whose repair the loss model sizes for the design loss like a lone
/// file's (PROTOCOL.md § 5.6). Beyond that loss it still fails rarely
/// (0.4 % at 8 % loss), so the carousel repairs what a lossier link than
/// configured took in the first pass, while a repeat of 2.5 KB files costs
/// about 3 datagrams each instead of 17 alone (5 copies each of an open and
/// a trailer, the data, and a short block's repair).
pub const REPEAT_BUNDLE_SYMBOLS: u64 = 32;

struct InFlight {
    row: FileRow,
    token: Option<u64>,
    repeat: bool,
    /// Its reader is still reading it (the core may hold its tail after).
    reading: bool,
    /// The job it belongs to (one file, or a bundle's members).
    job: u64,
    /// A bundle member: the digest of the bytes put in the bundle.
    bundled: Option<[u8; 32]>,
}

/// The scheduler's state (runs on the sync's own thread).
pub struct Scheduler<'a> {
    pub(super) state: State,
    pub(super) opts: &'a SyncOptions,
    pub(super) stats: &'a SyncStats,
    pub(super) handle: Option<SourceHandle>,
    pub(super) jobs: Option<SyncSender<Work>>,
    inflight: HashMap<String, InFlight>,
    /// Members still in flight, per job (its length is the jobs in flight).
    job_members: HashMap<u64, usize>,
    next_job: u64,
    by_token: HashMap<u64, Vec<String>>,
    orphans: HashMap<u64, SentNotice>,
    manifest: Option<(u64, Vec<(String, i64)>)>,
    new_page: VecDeque<FileRow>,
    repeat_page: VecDeque<FileRow>,
    /// Where the last new page ended (`None`: read from the top), and the
    /// last repeat page with its pass: the next page reads on from there,
    /// so the files in flight from earlier pages do not fill it.
    new_after: Option<PageKey>,
    repeat_after: Option<(u32, PageKey)>,
    /// Unix ms of the last candidate query.
    last_query: Option<u64>,
    /// Files that left flight (sent, failed, changed) since the new and
    /// the repeat page were read: only their page rows may be stale, so
    /// only they are read again before dispatch.
    landed_since_new: HashSet<String>,
    landed_since_repeat: HashSet<String>,
    /// The last query found nothing to send.
    found_none: bool,
    /// A job went out since the last query (its candidates were not all
    /// in flight already): the next query may follow at once.
    dispatched_since_query: bool,
    bytes_new: u64,
    bytes_repeat: u64,
    scans: u64,
    /// The scanner died: stop.
    failed: bool,
}

/// The page of candidates with `passes` passes after `after`, which it
/// moves to the page's last row; at the end of the order (a short page) the
/// next page starts from the top again, where files that were in flight or
/// failed before are found once more.
fn next_page(
    state: &State,
    passes: u32,
    stable_before: i64,
    after: &mut Option<PageKey>,
) -> Result<VecDeque<FileRow>, StateError> {
    let mut rows = state.candidates(passes, stable_before, after.as_ref(), PAGE)?;
    if rows.is_empty() && after.is_some() {
        rows = state.candidates(passes, stable_before, None, PAGE)?;
    }
    *after = if rows.len() < PAGE {
        None
    } else {
        rows.last().map(PageKey::of)
    };
    Ok(rows.into())
}

/// Records that `key` left flight since `page` was read. A page held for
/// long (a deferred large file at its front) is dropped and read again
/// rather than its landed set let grow: `true` then, and its rows not taken
/// yet come again from the top.
fn note_landed(landed: &mut HashSet<String>, page: &mut VecDeque<FileRow>, key: &str) -> bool {
    if landed.len() >= 4 * PAGE {
        landed.clear();
        page.clear();
        true
    } else {
        landed.insert(key.to_owned());
        false
    }
}

impl<'a> Scheduler<'a> {
    /// A scheduler over `state`.
    pub fn new(
        state: State,
        opts: &'a SyncOptions,
        stats: &'a SyncStats,
        handle: SourceHandle,
        jobs: SyncSender<Work>,
    ) -> Self {
        Scheduler {
            state,
            opts,
            stats,
            handle: Some(handle),
            jobs: Some(jobs),
            inflight: HashMap::new(),
            job_members: HashMap::new(),
            next_job: 0,
            by_token: HashMap::new(),
            orphans: HashMap::new(),
            manifest: None,
            new_page: VecDeque::new(),
            repeat_page: VecDeque::new(),
            new_after: None,
            repeat_after: None,
            last_query: None,
            landed_since_new: HashSet::new(),
            landed_since_repeat: HashSet::new(),
            found_none: false,
            dispatched_since_query: false,
            bytes_new: 0,
            bytes_repeat: 0,
            scans: 0,
            failed: false,
        }
    }

    /// Runs until `stop`, or with `once` until every file and every
    /// deletion went out `passes` times after a full scan.
    pub fn run(&mut self, inbox: &Receiver<Inbox>, stop: &AtomicBool) -> Result<(), StateError> {
        let mut gauges_at = 0u64;
        loop {
            if stop.load(Ordering::Relaxed) || self.failed {
                break;
            }
            self.dispatch()?;
            self.maybe_manifest()?;
            match inbox.recv_timeout(Duration::from_millis(50)) {
                Ok(msg) => {
                    self.handle(msg)?;
                    while let Ok(msg) = inbox.try_recv() {
                        self.handle(msg)?;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            let now = diodon_io::unix_time_ms();
            // A count over the pending index: cheap, but not free at 10 M files.
            if now.saturating_sub(gauges_at) > 5000 {
                gauges_at = now;
                let pending = self.state.pending(self.opts.passes)?;
                self.stats.pending.store(pending, Ordering::Relaxed);
            }
            if self.opts.once && self.done()? {
                tracing::info!(
                    "sync done: every file and deletion went out the configured number of times"
                );
                break;
            }
        }
        // Readers and the core end when their queues close.
        self.jobs = None;
        self.handle = None;
        Ok(())
    }

    fn done(&mut self) -> Result<bool, StateError> {
        Ok(self.scans > 0
            && self.inflight.is_empty()
            && self.manifest.is_none()
            && self.state.pending(self.opts.passes)? == 0
            && self.state.tombstones(self.opts.passes, 1)?.is_empty())
    }

    /// Refills the pages from the database: at once while the last query's
    /// candidates went out (a tree of small files drains a page in
    /// milliseconds), else at most every 100 ms, so neither an idle sync
    /// nor one whose candidates are all in flight spins on queries.
    fn refill(&mut self) -> Result<(), StateError> {
        if !self.new_page.is_empty() && !self.repeat_page.is_empty() {
            return Ok(());
        }
        let now = diodon_io::unix_time_ms();
        let productive = !self.found_none && self.dispatched_since_query;
        if self.last_query.is_some_and(|t| now.saturating_sub(t) < 100) && !productive {
            return Ok(());
        }
        self.dispatched_since_query = false;
        self.last_query = Some(now);
        let stable_before =
            diodon_io::unix_time_ms().cast_signed() - self.opts.settle.as_millis() as i64;
        if self.new_page.is_empty() {
            self.new_page = next_page(&self.state, 0, stable_before, &mut self.new_after)?;
            self.landed_since_new.clear();
        }
        if self.repeat_page.is_empty() {
            if let Some(p) = self.state.lowest_pass(self.opts.passes)? {
                let p = p.max(1);
                if p < self.opts.passes {
                    let mut after = match self.repeat_after.take() {
                        Some((pass, key)) if pass == p => Some(key),
                        _ => None,
                    };
                    self.repeat_page = next_page(&self.state, p, stable_before, &mut after)?;
                    self.repeat_after = after.map(|key| (p, key));
                    self.landed_since_repeat.clear();
                }
            }
        }
        self.found_none = self.new_page.is_empty() && self.repeat_page.is_empty();
        Ok(())
    }

    /// Whether the next file should be a repeat: only when no new file
    /// waits, or while repeats stay within their share of the bytes.
    fn repeat_turn(&self) -> bool {
        if self.new_page.is_empty() {
            return true;
        }
        if self.repeat_page.is_empty() {
            return false;
        }
        let share = self.opts.repeat_share.clamp(0.0, 1.0);
        (self.bytes_repeat as f64) * (1.0 - share) < (self.bytes_new as f64) * share
    }

    /// The most bytes of files (with their entry headers) in one bundle of
    /// a first pass, or of a repeat (one short block, at most).
    fn bundle_limit(&self, repeat: bool) -> u64 {
        if !repeat {
            return self.opts.bundle_bytes;
        }
        let config = &self.opts.send.config;
        let symbols = REPEAT_BUNDLE_SYMBOLS.min(u64::from(config.block_symbols));
        self.opts
            .bundle_bytes
            .min(symbols * config.symbol_size.get() as u64)
    }

    /// Whether `size` bytes are bundled, in a first pass or a repeat.
    fn bundles(&self, size: u64, repeat: bool) -> bool {
        self.opts.bundle_bytes > 0
            && size <= self.opts.bundle_file_max
            && size < self.bundle_limit(repeat)
    }

    /// The candidate as it is now, if it still needs this pass and is not
    /// in flight.
    fn checked(&self, cand: FileRow, repeat: bool) -> Result<Option<Job>, StateError> {
        let key = cand.path();
        if self.inflight.contains_key(&key) {
            return Ok(None);
        }
        let page_passes = cand.passes;
        // A file that left flight since its page was read may have had a
        // pass counted since: its row is read again. Any other page row is
        // what the database holds, but for a new version the scanner found
        // meanwhile, which the reader tells apart (same size, mtime, inode).
        let landed = if repeat {
            &self.landed_since_repeat
        } else {
            &self.landed_since_new
        };
        let row = if landed.contains(&key) {
            match self.state.current(&cand.parent, &cand.name)? {
                Some(row) => row,
                None => return Ok(None),
            }
        } else {
            cand
        };
        if row.passes != page_passes || row.passes >= self.opts.passes {
            return Ok(None);
        }
        Ok(self.opts.disk_path(&key).map(|path| Job { row, path }))
    }

    /// More small candidates from the front of the page, for a bundle
    /// that starts with `first`.
    fn gather(&mut self, first: Job, repeat: bool) -> Result<Vec<Job>, StateError> {
        let mut bytes = first.row.size + (ENTRY_HEADER_LEN + first.row.path().len()) as u64;
        let mut members = vec![first];
        loop {
            let page = if repeat {
                &self.repeat_page
            } else {
                &self.new_page
            };
            let Some(next) = page.front() else { break };
            let cost = next.size + (ENTRY_HEADER_LEN + next.path().len()) as u64;
            if !self.bundles(next.size, repeat)
                || bytes + cost > self.bundle_limit(repeat)
                || members.len() >= BUNDLE_FILES
            {
                break;
            }
            let next = if repeat {
                self.repeat_page.pop_front()
            } else {
                self.new_page.pop_front()
            };
            let Some(next) = next else { break };
            // One query's rows name each file once; `checked` skips what
            // is in flight from an earlier page.
            if let Some(job) = self.checked(next, repeat)? {
                bytes += cost;
                members.push(job);
            }
        }
        Ok(members)
    }

    fn dispatch(&mut self) -> Result<(), StateError> {
        let mut deferred = 0;
        while self.job_members.len() < self.opts.in_flight {
            self.refill()?;
            let repeat = self.repeat_turn();
            // A large file whose bytes are all read no longer counts: the
            // next one is read while the core sends the first one's tail.
            let large_busy = self
                .inflight
                .values()
                .any(|f| f.reading && f.row.size >= LARGE);
            let page = if repeat {
                &mut self.repeat_page
            } else {
                &mut self.new_page
            };
            let Some(cand) = page.pop_front() else { break };
            if cand.size >= LARGE && large_busy {
                // Its turn comes when the large file in flight is done.
                page.push_back(cand);
                deferred += 1;
                if deferred >= page.len() {
                    break;
                }
                continue;
            }
            let Some(job) = self.checked(cand, repeat)? else {
                continue;
            };
            // A repeat is a file's repair: its bundle is one short block,
            // which gets the repair the loss model sizes for it (PROTOCOL.md
            // § 6) where a first pass's full blocks get only the ratio.
            let members = if self.bundles(job.row.size, repeat) {
                self.gather(job, repeat)?
            } else {
                vec![job]
            };
            let Some(jobs) = &self.jobs else { break };
            let work = if members.len() == 1 {
                Work::One(members[0].clone())
            } else {
                Work::Bundle(members.clone())
            };
            match jobs.try_send(work) {
                Ok(()) => {
                    self.dispatched_since_query = true;
                    let id = self.next_job;
                    self.next_job += 1;
                    self.job_members.insert(id, members.len());
                    for m in members {
                        let repeat = m.row.passes > 0;
                        self.inflight.insert(
                            m.row.path(),
                            InFlight {
                                row: m.row,
                                token: None,
                                repeat,
                                reading: true,
                                job: id,
                                bundled: None,
                            },
                        );
                    }
                }
                Err(TrySendError::Full(_)) => {
                    // Readers are busy: put them back and wait.
                    let page = if repeat {
                        &mut self.repeat_page
                    } else {
                        &mut self.new_page
                    };
                    for m in members.into_iter().rev() {
                        page.push_front(m.row);
                    }
                    break;
                }
                Err(TrySendError::Disconnected(_)) => break,
            }
        }
        Ok(())
    }

    /// Takes a file out of flight (and its job, with its last member).
    fn land(&mut self, key: &str) -> Option<InFlight> {
        let f = self.inflight.remove(key)?;
        if note_landed(&mut self.landed_since_new, &mut self.new_page, key) {
            self.new_after = None;
        }
        if note_landed(&mut self.landed_since_repeat, &mut self.repeat_page, key) {
            self.repeat_after = None;
        }
        if let Some(n) = self.job_members.get_mut(&f.job) {
            *n -= 1;
            if *n == 0 {
                self.job_members.remove(&f.job);
            }
        }
        Some(f)
    }

    fn handle(&mut self, msg: Inbox) -> Result<(), StateError> {
        match msg {
            Inbox::Started { token, key } => {
                if let Some(f) = self.inflight.get_mut(&key) {
                    f.token = Some(token);
                    self.by_token.insert(token, vec![key]);
                }
                if let Some(n) = self.orphans.remove(&token) {
                    self.sent(n)?;
                }
            }
            Inbox::Bundled { token, members } => {
                let mut keys = Vec::with_capacity(members.len());
                for (key, digest) in members {
                    if let Some(f) = self.inflight.get_mut(&key) {
                        f.token = Some(token);
                        f.bundled = Some(digest);
                        keys.push(key);
                    }
                }
                self.by_token.insert(token, keys);
                if let Some(n) = self.orphans.remove(&token) {
                    self.sent(n)?;
                }
            }
            Inbox::Done { key, result } => self.read_done(&key, result)?,
            Inbox::Sent(n) => self.sent(n)?,
            Inbox::ScanDone => self.scans += 1,
            Inbox::ScanFailed(why) => {
                tracing::error!("no more scans ({why}): stopping");
                self.failed = true;
            }
        }
        Ok(())
    }

    fn read_done(&mut self, key: &str, result: ReadResult) -> Result<(), StateError> {
        let now = diodon_io::unix_time_ms().cast_signed();
        let (parent, name) = split(key);
        let add = |a: &std::sync::atomic::AtomicU64| a.fetch_add(1, Ordering::Relaxed);
        match result {
            ReadResult::Finished => {
                if let Some(f) = self.inflight.get_mut(key) {
                    f.reading = false;
                }
                return Ok(());
            }
            ReadResult::Closed => return Ok(()),
            ReadResult::Vanished => {
                add(&self.stats.vanished);
                self.state.mark_deleted(parent, name, now)?;
            }
            ReadResult::Changed(row) => {
                add(&self.stats.changed_while_sent);
                self.state.upsert(&row)?;
            }
            ReadResult::Unstable(touched) => {
                add(&self.stats.unsettled);
                self.state.touch(parent, name, touched)?;
            }
            ReadResult::Unreadable(why) => {
                add(&self.stats.unreadable);
                tracing::error!(path = %key, "cannot send: {why}");
                self.state.set_error(parent, name, &why)?;
            }
        }
        if let Some(f) = self.land(key) {
            if let Some(t) = f.token {
                if let Some(keys) = self.by_token.get_mut(&t) {
                    keys.retain(|k| k != key);
                    if keys.is_empty() {
                        self.by_token.remove(&t);
                    }
                }
            }
        }
        Ok(())
    }

    fn sent(&mut self, n: SentNotice) -> Result<(), StateError> {
        if let Some((token, records)) = &self.manifest {
            if *token == n.token {
                if n.status == SentStatus::Sent {
                    for (path, deleted_ms) in records {
                        self.state
                            .tombstone_sent(path, *deleted_ms, self.opts.passes)?;
                    }
                    self.stats.manifests.fetch_add(1, Ordering::Relaxed);
                }
                self.manifest = None;
                return Ok(());
            }
        }
        let Some(keys) = self.by_token.remove(&n.token) else {
            self.orphans.insert(n.token, n);
            return Ok(());
        };
        let bundle = keys
            .iter()
            .any(|k| self.inflight.get(k).is_some_and(|f| f.bundled.is_some()));
        if bundle && n.status == SentStatus::Sent {
            self.stats.bundles.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bundled_files
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
        }
        // A bundle's rows change in one transaction, not one per file.
        let batch = keys.len() > 1;
        if batch {
            self.state.begin()?;
        }
        for key in keys {
            self.sent_file(&key, &n)?;
        }
        if batch {
            self.state.commit()?;
        }
        Ok(())
    }

    /// One file of a channel that ended (alone, or a bundle's member).
    fn sent_file(&mut self, key: &str, n: &SentNotice) -> Result<(), StateError> {
        let Some(f) = self.land(key) else {
            return Ok(());
        };
        let row = f.row;
        // A member's bytes are its own; the channel's digest is the bundle's.
        let (bytes, digest) = match f.bundled {
            Some(d) => (row.size, Some(d)),
            None => (n.bytes, n.digest),
        };
        match (&n.status, digest) {
            (SentStatus::Sent, Some(digest)) => {
                let now = diodon_io::unix_time_ms().cast_signed();
                let passes = self.state.sent(
                    &row.parent,
                    &row.name,
                    row.size,
                    row.mtime_ns,
                    &digest,
                    now,
                )?;
                let s = self.stats;
                if f.repeat {
                    s.files_repeat.fetch_add(1, Ordering::Relaxed);
                    s.bytes_repeat.fetch_add(bytes, Ordering::Relaxed);
                    self.bytes_repeat += bytes;
                } else {
                    s.files_new.fetch_add(1, Ordering::Relaxed);
                    s.bytes_new.fetch_add(bytes, Ordering::Relaxed);
                    self.bytes_new += bytes;
                }
                if passes.is_some_and(|p| p >= self.opts.passes) {
                    self.after_last_pass(&row)?;
                }
            }
            (SentStatus::Refused(why), _) => {
                tracing::error!(path = %key, "refused by the sender core: {why}");
                self.stats.unreadable.fetch_add(1, Ordering::Relaxed);
                self.state.set_error(&row.parent, &row.name, why)?;
            }
            _ => {
                self.stats.aborted.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Outbox mode: the file went out `passes` times; take it away.
    fn after_last_pass(&mut self, row: &FileRow) -> Result<(), StateError> {
        let Some(after) = &self.opts.after_send else {
            return Ok(());
        };
        let key = row.path();
        let Some(path) = self.opts.disk_path(&key) else {
            return Ok(());
        };
        // Only the version that was sent goes.
        let same = std::fs::symlink_metadata(&path).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.len() == row.size
                && m.mtime() * 1_000_000_000 + m.mtime_nsec() == row.mtime_ns
                && m.ino() == row.ino
        });
        if !same {
            return Ok(());
        }
        self.state.outboxed(&row.parent, &row.name)?;
        // Moved files keep their path below the root (without its name).
        let rel = key.split_once('/').map_or(key.as_str(), |(_, r)| r);
        let result = match after {
            AfterSend::Delete => std::fs::remove_file(&path),
            AfterSend::Move(dir) => move_into(&path, dir, rel),
        };
        match result {
            Ok(()) => {
                self.stats.outbox_done.fetch_add(1, Ordering::Relaxed);
                tracing::info!(path = %key, "outbox: sent {} times, taken away", self.opts.passes);
            }
            Err(e) => {
                self.stats.outbox_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(path = %key, "outbox: cannot take it away: {e}");
            }
        }
        Ok(())
    }

    /// Announces pending deletions and renames in one manifest channel
    /// (one at a time).
    fn maybe_manifest(&mut self) -> Result<(), StateError> {
        if self.manifest.is_some() || self.handle.is_none() {
            return Ok(());
        }
        let tombs = self.state.tombstones(self.opts.passes, MAX_RECORDS)?;
        if tombs.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        let mut records = Vec::with_capacity(tombs.len());
        for t in &tombs {
            let renamed = self.state.renamed_to(t)?;
            let (op, from, path) = match renamed {
                Some(to) => (Op::Rename, Some(t.path.clone()), to),
                None => (Op::Delete, None, t.path.clone()),
            };
            if op == Op::Rename {
                self.stats.renames.fetch_add(1, Ordering::Relaxed);
            } else {
                self.stats.deletions.fetch_add(1, Ordering::Relaxed);
            }
            Record {
                op,
                from,
                path,
                size: t.size,
                mtime_sec: t.mtime_ns.div_euclid(1_000_000_000),
                mtime_nsec: t.mtime_ns.rem_euclid(1_000_000_000) as u32,
                first_seen_ms: t.deleted_ms,
                pass: t.del_passes + 1,
            }
            .write_line(&mut bytes);
            records.push((t.path.clone(), t.deleted_ms));
        }
        let Some(handle) = &self.handle else {
            return Ok(());
        };
        // Each record carries its own pass and first-seen time; the sync
        // extension is for file channels only (PROTOCOL.md § 5.3.2).
        let meta = ChannelMeta::labelled(ChannelKind::Manifest, MANIFEST_NAME, bytes.len() as u64);
        let Ok(token) = handle.open(meta) else {
            return Ok(());
        };
        if handle.data_and_finish(token, &bytes).is_err() {
            return Ok(());
        }
        tracing::info!(
            records = records.len(),
            "manifest of deletions and renames queued"
        );
        self.manifest = Some((token, records));
        // A notice that came before the token was recorded.
        if let Some(n) = self.orphans.remove(&token) {
            self.sent(n)?;
        }
        Ok(())
    }
}

/// Moves `path` to `dir/rel`, making directories; across filesystems by copy.
fn move_into(path: &std::path::Path, dir: &std::path::Path, rel: &str) -> std::io::Result<()> {
    let dest: PathBuf = dir.join(rel);
    if let Some(p) = dest.parent() {
        std::fs::create_dir_all(p)?;
    }
    match std::fs::rename(path, &dest) {
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::copy(path, &dest)?;
            std::fs::remove_file(path)
        }
        other => other,
    }
}
