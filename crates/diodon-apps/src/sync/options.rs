//! What a sync run is told: the sources, the state database, the passes,
//! the settle and rescan times, the outbox ([`SyncOptions`], [`AfterSend`]).

use super::scan::ScanOptions;
use crate::send::SendOptions;
use std::path::PathBuf;
use std::time::Duration;

/// What the outbox does with a file once it went out `passes` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterSend {
    /// Delete it.
    Delete,
    /// Move it under this directory (same relative path).
    Move(PathBuf),
}

impl std::str::FromStr for AfterSend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delete" => Ok(AfterSend::Delete),
            _ => match s.strip_prefix("move:") {
                Some(dir) if !dir.is_empty() => Ok(AfterSend::Move(PathBuf::from(dir))),
                _ => Err(format!("{s:?}: expected `delete` or `move:DIR`")),
            },
        }
    }
}

/// Everything a sync run needs.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// The sender core, socket and queue (`on_sent` is set by [`super::run_sync`]).
    pub send: SendOptions,
    /// Further links (`--to` more than once): files spread over
    /// `send.dest` and these by a stable hash of their name
    /// (`crate::multilink`).
    pub more_links: Vec<crate::send::LinkTarget>,
    /// The state database.
    pub state: PathBuf,
    /// Roots, ignore globs, symlinks.
    pub scan: ScanOptions,
    /// Times every file (and deletion) is sent (the reference system's redundancy factor).
    pub passes: u32,
    /// Share of the bytes repeats may take while new files wait (0 … 1).
    pub repeat_share: f64,
    /// A file is sent once untouched (mtime and ctime) this long.
    pub settle: Duration,
    /// A full rescan this often.
    pub rescan: Duration,
    /// Watch the roots (inotify) and rescan a changed directory at once.
    pub watch: bool,
    /// Files being sent at once.
    pub in_flight: usize,
    /// Reader threads.
    pub readers: usize,
    /// Small files go out packed in bundle channels of up to this many
    /// bytes (PROTOCOL.md § 5.6); 0 sends every file in its own channel.
    pub bundle_bytes: u64,
    /// Files up to this size (bytes) are bundled.
    pub bundle_file_max: u64,
    /// Outbox mode.
    pub after_send: Option<AfterSend>,
    /// Exit once everything went out `passes` times (after a full scan).
    pub once: bool,
}

impl SyncOptions {
    /// Where the file with channel name `key` is on disk.
    pub fn disk_path(&self, key: &str) -> Option<PathBuf> {
        let (base, rest) = key.split_once('/').unwrap_or((key, ""));
        let root = self.scan.roots.iter().find(|r| r.base == base)?;
        Some(if rest.is_empty() {
            root.path.clone()
        } else {
            root.path.join(rest)
        })
    }
}
