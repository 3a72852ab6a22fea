//! The reader threads of a sync: each takes one file at a time from the
//! scheduler, checks that it is still the version the database knows and
//! that it has settled, announces it (with its sync information) and reads
//! it into the sender's queue. Several readers run at once, so small files
//! go out between the blocks of a large one (the core interleaves the
//! channels' groups).
//!
//! ```text
//!  scheduler ─Job─► reader: open (O_NOFOLLOW, O_NOATIME) ─► fstat: same version? settled?
//!                     │  no: Changed / Unstable / Vanished / Unreadable ─► scheduler
//!                     ▼
//!                   SourceHandle::open(meta + SyncInfo) ─► Started{token} ─► scheduler
//!                   read 256 KiB chunks ─► SourceHandle::data
//!                   fstat again: changed while read? ─► abort : finish ─► Done ─► scheduler
//! ```
//!
//! A [`Work::Bundle`] of small files is read whole, file by file, into one
//! bundle channel (PROTOCOL.md § 5.6): a member that changed, vanished or
//! has not settled is reported on its own and left out; the others go out
//! together (`Bundled`, then `Done` for each).

use super::inbox::{Inbox, ReadResult};
use super::state::FileRow;
use crate::files::read_chunk;
use crate::send::SourceHandle;
use diodon_proto::bundle::{push_entry, BundleEntry, BUNDLE_NAME};
use diodon_proto::{ChannelKind, ChannelMeta, SyncInfo};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One file to send.
#[derive(Debug, Clone)]
pub struct Job {
    /// The database's version of it.
    pub row: FileRow,
    /// Where it is on disk.
    pub path: PathBuf,
}

/// What a reader is given: one file in its own channel, or several small
/// ones in a bundle.
#[derive(Debug, Clone)]
pub enum Work {
    /// One file, one channel.
    One(Job),
    /// Small files, one bundle channel.
    Bundle(Vec<Job>),
}

/// The settings every reader shares.
#[derive(Debug, Clone, Copy)]
pub struct ReaderConfig {
    /// Follow symlinks (else `O_NOFOLLOW`).
    pub follow_symlinks: bool,
    /// A file must be untouched this long.
    pub settle: Duration,
}

/// A reader thread's loop: until the job queue closes.
pub fn run(
    jobs: &Arc<Mutex<Receiver<Work>>>,
    handle: &SourceHandle,
    inbox: &Sender<Inbox>,
    cfg: ReaderConfig,
) {
    loop {
        let work = {
            let Ok(rx) = jobs.lock() else { return };
            match rx.recv() {
                Ok(w) => w,
                Err(_) => return,
            }
        };
        let done = match work {
            Work::One(job) => {
                let key = job.row.path();
                let result = send_one(&job, handle, inbox, cfg);
                vec![(key, result)]
            }
            Work::Bundle(jobs) => send_bundle(&jobs, handle, inbox, cfg),
        };
        for (key, result) in done {
            if inbox.send(Inbox::Done { key, result }).is_err() {
                return;
            }
        }
    }
}

fn stat_row(job: &Job, meta: &std::fs::Metadata) -> FileRow {
    let now = diodon_io::unix_time_ms().cast_signed();
    super::scan::file_row(&job.row.parent, &job.row.name, meta, now)
}

fn same_version(a: &FileRow, b: &FileRow) -> bool {
    a.size == b.size && a.mtime_ns == b.mtime_ns && a.ino == b.ino
}

/// Opens for reading without updating the file's access time where the
/// kernel lets us (the owner, or `CAP_FOWNER`): an access-time update is
/// an inode write per file sent, and a watched tree reports it as an
/// attribute change.
fn open_noatime(path: &std::path::Path, flags: i32) -> io::Result<File> {
    match OpenOptions::new()
        .read(true)
        .custom_flags(flags | libc::O_NOATIME)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            OpenOptions::new().read(true).custom_flags(flags).open(path)
        }
        other => other,
    }
}

/// Opens the job's file and checks that it is still the version the
/// database knows and that it has settled.
fn open_checked(job: &Job, cfg: ReaderConfig) -> Result<File, ReadResult> {
    let flags = if cfg.follow_symlinks {
        0
    } else {
        libc::O_NOFOLLOW
    };
    let file: File = match open_noatime(&job.path, flags) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(path = %job.path.display(), "vanished between scan and send; its deletion will be announced");
            return Err(ReadResult::Vanished);
        }
        Err(e) => return Err(ReadResult::Unreadable(format!("open: {e}"))),
    };
    let meta = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Err(ReadResult::Unreadable("not a regular file".into())),
        Err(e) => return Err(ReadResult::Unreadable(format!("stat: {e}"))),
    };
    let now = stat_row(job, &meta);
    if !same_version(&now, &job.row) {
        return Err(ReadResult::Changed(Box::new(now)));
    }
    let settled_at = diodon_io::unix_time_ms().cast_signed() - cfg.settle.as_millis() as i64;
    if now.touched_ms > settled_at {
        return Err(ReadResult::Unstable(now.touched_ms));
    }
    Ok(file)
}

/// Reads a small file whole, checking afterwards that it did not change.
fn read_member(job: &Job, cfg: ReaderConfig) -> Result<Vec<u8>, ReadResult> {
    let file = open_checked(job, cfg)?;
    let mut content = Vec::with_capacity(usize::try_from(job.row.size).unwrap_or(0));
    // One byte more than announced shows a file that grew.
    if let Err(e) = (&file).take(job.row.size + 1).read_to_end(&mut content) {
        return Err(ReadResult::Unreadable(format!("read: {e}")));
    }
    match file.metadata().map(|m| stat_row(job, &m)) {
        Ok(a) if same_version(&a, &job.row) && content.len() as u64 == job.row.size => Ok(content),
        Ok(a) => Err(ReadResult::Changed(Box::new(a))),
        Err(e) => Err(ReadResult::Unreadable(format!("stat: {e}"))),
    }
}

/// Sends the readable members of a bundle in one bundle channel; returns
/// what became of each member.
fn send_bundle(
    jobs: &[Job],
    handle: &SourceHandle,
    inbox: &Sender<Inbox>,
    cfg: ReaderConfig,
) -> Vec<(String, ReadResult)> {
    let mut done = Vec::with_capacity(jobs.len());
    let mut members = Vec::with_capacity(jobs.len());
    let mut bytes = Vec::new();
    for job in jobs {
        let key = job.row.path();
        match read_member(job, cfg) {
            Ok(content) => {
                let digest = *blake3::hash(&content).as_bytes();
                let row = &job.row;
                push_entry(
                    &mut bytes,
                    &BundleEntry {
                        name: &key,
                        pass: u16::try_from(row.passes + 1).unwrap_or(u16::MAX),
                        mode: row.mode,
                        mtime_sec: row.mtime_ns.div_euclid(1_000_000_000),
                        mtime_nsec: row.mtime_ns.rem_euclid(1_000_000_000) as u32,
                        first_seen_unix_ms: row.first_seen_ms.cast_unsigned(),
                        digest,
                        content: &content,
                    },
                );
                members.push((key, digest));
            }
            Err(result) => {
                if let ReadResult::Changed(_) = result {
                    tracing::warn!(path = %job.path.display(), "changed while it was read; it goes again once it settles");
                }
                done.push((key, result));
            }
        }
    }
    if members.is_empty() {
        return done;
    }
    // Every entry carries its own pass, first-seen time and digest.
    let meta = ChannelMeta::labelled(ChannelKind::Bundle, BUNDLE_NAME, bytes.len() as u64);
    let closed = |members: Vec<(String, [u8; 32])>, mut done: Vec<_>| {
        done.extend(members.into_iter().map(|(k, _)| (k, ReadResult::Closed)));
        done
    };
    let Ok(token) = handle.open(meta) else {
        return closed(members, done);
    };
    let keys: Vec<String> = members.iter().map(|(k, _)| k.clone()).collect();
    if inbox.send(Inbox::Bundled { token, members }).is_err() {
        return done;
    }
    if handle.data_and_finish(token, &bytes).is_err() {
        return done;
    }
    done.extend(keys.into_iter().map(|k| (k, ReadResult::Finished)));
    done
}

fn send_one(
    job: &Job,
    handle: &SourceHandle,
    inbox: &Sender<Inbox>,
    cfg: ReaderConfig,
) -> ReadResult {
    let mut file = match open_checked(job, cfg) {
        Ok(f) => f,
        Err(result) => return result,
    };
    let row = &job.row;
    let cm = ChannelMeta {
        kind: ChannelKind::File,
        size: Some(row.size),
        mode: row.mode,
        mtime_sec: row.mtime_ns.div_euclid(1_000_000_000),
        mtime_nsec: row.mtime_ns.rem_euclid(1_000_000_000) as u32,
        name: row.path(),
        aligned: false,
        sync: Some(SyncInfo {
            first_seen_unix_ms: row.first_seen_ms.cast_unsigned(),
            pass: u16::try_from(row.passes + 1).unwrap_or(u16::MAX),
            digest: row.digest,
            // The sender's core sets its own block size when it opens the channel.
            block_bytes: 0,
        }),
    };
    // Hashed here as it is read, not on the core thread.
    let Ok(token) = handle.open_digested(cm) else {
        return ReadResult::Closed;
    };
    let mut hasher = blake3::Hasher::new();
    if inbox
        .send(Inbox::Started {
            token,
            key: row.path(),
        })
        .is_err()
    {
        return ReadResult::Closed;
    }
    let mut total = 0u64;
    loop {
        let buf = match read_chunk(&mut file, handle.block_buffer(), handle.chunk()) {
            Ok(buf) => buf,
            Err(e) => {
                let _ = handle.abort(token, format!("read: {e}"));
                return ReadResult::Unreadable(format!("read: {e}"));
            }
        };
        let n = buf.len();
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf);
        if handle.data(token, buf).is_err() {
            return ReadResult::Closed;
        }
        if n < handle.chunk() {
            break;
        }
    }
    let after = file.metadata().map(|m| stat_row(job, &m));
    match after {
        Ok(a) if same_version(&a, row) && total == row.size => {
            if handle
                .finish_digested(token, *hasher.finalize().as_bytes())
                .is_err()
            {
                return ReadResult::Closed;
            }
            ReadResult::Finished
        }
        Ok(a) => {
            tracing::warn!(path = %job.path.display(), "changed while it was sent; aborted, it goes again once it settles");
            let _ = handle.abort(token, "changed while sent");
            ReadResult::Changed(Box::new(a))
        }
        Err(e) => {
            let _ = handle.abort(token, "stat after read failed");
            ReadResult::Unreadable(format!("stat: {e}"))
        }
    }
}
