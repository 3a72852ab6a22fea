//! The reader threads of a sync: each takes one file at a time from the
//! scheduler, checks that it is still the version the database knows and
//! that it has settled, announces it (with its sync information) and reads
//! it into the sender's queue. Several readers run at once, so small files
//! go out between the blocks of a large one (the core interleaves the
//! channels' groups).
//!
//! ```text
//!  scheduler ─Job─► reader: open (O_NOFOLLOW) ─► fstat: same version? settled?
//!                     │  no: Changed / Unstable / Vanished / Unreadable ─► scheduler
//!                     ▼
//!                   SourceHandle::open(meta + SyncInfo) ─► Started{token} ─► scheduler
//!                   read 256 KiB chunks ─► SourceHandle::data
//!                   fstat again: changed while read? ─► abort : finish ─► Done ─► scheduler
//! ```

use super::inbox::{Inbox, ReadResult};
use super::state::FileRow;
use crate::files::read_chunk;
use crate::send::{SourceHandle, CHUNK};
use diodon_proto::{ChannelKind, ChannelMeta, SyncInfo};
use std::fs::{File, OpenOptions};
use std::io;
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
    jobs: &Arc<Mutex<Receiver<Job>>>,
    handle: &SourceHandle,
    inbox: &Sender<Inbox>,
    cfg: ReaderConfig,
) {
    loop {
        let job = {
            let Ok(rx) = jobs.lock() else { return };
            match rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        let key = job.row.path();
        let result = send_one(&job, handle, inbox, cfg);
        if inbox.send(Inbox::Done { key, result }).is_err() {
            return;
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

fn send_one(
    job: &Job,
    handle: &SourceHandle,
    inbox: &Sender<Inbox>,
    cfg: ReaderConfig,
) -> ReadResult {
    let flags = if cfg.follow_symlinks {
        0
    } else {
        libc::O_NOFOLLOW
    };
    let mut file: File = match OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(&job.path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            tracing::warn!(path = %job.path.display(), "vanished between scan and send; its deletion will be announced");
            return ReadResult::Vanished;
        }
        Err(e) => return ReadResult::Unreadable(format!("open: {e}")),
    };
    let meta = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(_) => return ReadResult::Unreadable("not a regular file".into()),
        Err(e) => return ReadResult::Unreadable(format!("stat: {e}")),
    };
    let now = stat_row(job, &meta);
    if !same_version(&now, &job.row) {
        return ReadResult::Changed(now);
    }
    let settled_at = diodon_io::unix_time_ms().cast_signed() - cfg.settle.as_millis() as i64;
    if now.touched_ms > settled_at {
        return ReadResult::Unstable(now.touched_ms);
    }
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
    let Ok(token) = handle.open(cm) else {
        return ReadResult::Closed;
    };
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
        let buf = match read_chunk(&mut file, CHUNK) {
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
        if handle.data(token, buf).is_err() {
            return ReadResult::Closed;
        }
        if n < CHUNK {
            break;
        }
    }
    let after = file.metadata().map(|m| stat_row(job, &m));
    match after {
        Ok(a) if same_version(&a, row) && total == row.size => {
            if handle.finish(token).is_err() {
                return ReadResult::Closed;
            }
            ReadResult::Finished
        }
        Ok(a) => {
            tracing::warn!(path = %job.path.display(), "changed while it was sent; aborted, it goes again once it settles");
            let _ = handle.abort(token, "changed while sent");
            ReadResult::Changed(a)
        }
        Err(e) => {
            let _ = handle.abort(token, "stat after read failed");
            ReadResult::Unreadable(format!("stat: {e}"))
        }
    }
}
