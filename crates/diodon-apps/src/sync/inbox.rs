//! What the scheduler hears, from every other thread of a sync: the
//! readers (a file announced, a file done and how), the core (a channel
//! ended, through the sent hook) and the scanner (a full scan done, or
//! failed).

use super::state::FileRow;
use crate::send::SentNotice;

/// What the scheduler hears.
#[derive(Debug)]
pub enum Inbox {
    /// A reader announced a file under this token.
    Started {
        /// The core's token.
        token: u64,
        /// The file's channel name.
        key: String,
    },
    /// A reader announced a bundle of small files under this token; each
    /// member with the digest of the bytes it put in the bundle.
    Bundled {
        /// The core's token.
        token: u64,
        /// The members' channel names and digests.
        members: Vec<(String, [u8; 32])>,
    },
    /// A reader is done with a file.
    Done {
        /// The file's channel name.
        key: String,
        /// What happened.
        result: ReadResult,
    },
    /// The core ended a channel.
    Sent(SentNotice),
    /// The scanner finished a full scan.
    ScanDone,
    /// The scanner stopped with an error: the sync ends.
    ScanFailed(String),
}

/// What a reader did with a job (the pass itself is counted when the
/// core's notice says the channel went out).
#[derive(Debug)]
pub enum ReadResult {
    /// Read and finished; the core's notice follows.
    Finished,
    /// The file is gone.
    Vanished,
    /// Another version is on disk now (its row, as seen).
    Changed(Box<FileRow>),
    /// Touched within the settle time: not yet.
    Unstable(i64),
    /// It cannot be read (logged).
    Unreadable(String),
    /// The sender pipeline stopped.
    Closed,
}
