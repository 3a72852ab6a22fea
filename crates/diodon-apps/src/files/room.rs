//! Room on the output filesystem: whether a file about to be staged fits
//! beside what the files being written still need and [`SPACE_RESERVE`].
//!
//! The filesystem is asked (`fstatvfs`) once, and then at most once a
//! second while an estimate says yes: what it had available then, less
//! every file let in since (rounded up to whole blocks, plus a slack for
//! its inode, directory entry and attributes) and every byte written
//! since. The estimate only ever lets a file in; a "no" is asked of the
//! filesystem again, so a file is refused only on the filesystem's own
//! answer. (Before, a tree of 10 KB files paid an `open`, `fstatvfs` and
//! `close` of the staging folder per file.)
//!
use crate::sink_error::SinkFailure;
use diodon_io::fs::Space;
use std::cell::Cell;
use std::fs::File;
use std::io;
use std::path::Path;

/// Bytes always left free on the output filesystem: a file whose announced
/// size would eat into them is refused before its first byte.
pub const SPACE_RESERVE: u64 = 1 << 20;
/// The estimate is trusted this long (ms) after the filesystem's answer.
const TRUSTED_MS: u64 = 1000;
/// Blocks a file's bytes are counted in.
const BLOCK: u64 = 4096;
/// Counted for every file on top of its blocks: inode, directory entry,
/// extended attributes.
const PER_FILE: u64 = 2 * BLOCK;

/// What the filesystem answered, and what was spent of it since.
#[derive(Debug, Clone, Copy)]
struct Sample {
    available: u64,
    /// Pending bytes at the answer, plus every file let in since.
    promised: u64,
    /// [`Room::written`] at the answer.
    written_at: u64,
    at_ms: u64,
}

/// Where the free space comes from: the staging folder's filesystem, or
/// (tests) anything else.
type Source = Box<dyn Fn() -> io::Result<Space> + Send>;

/// The room check of one file sink.
pub(super) struct Room {
    source: Source,
    sample: Cell<Option<Sample>>,
    written: Cell<u64>,
}

impl std::fmt::Debug for Room {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Room")
            .field("sample", &self.sample.get())
            .field("written", &self.written.get())
            .finish_non_exhaustive()
    }
}

impl Room {
    /// The room of the filesystem holding `staging` (kept open). A folder
    /// that cannot be opened lets the writes decide, as an unreadable
    /// filesystem size does.
    pub(super) fn of(staging: &Path) -> Self {
        let dir = File::open(staging).ok();
        Room::from_source(Box::new(move || match &dir {
            Some(d) => diodon_io::fs::fspace(d),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }))
    }

    fn from_source(source: Source) -> Self {
        Room {
            source,
            sample: Cell::new(None),
            written: Cell::new(0),
        }
    }

    /// `n` more bytes were written to the output filesystem.
    pub(super) fn wrote(&self, n: u64) {
        self.written.set(self.written.get().saturating_add(n));
    }

    /// Whether `size` more bytes fit; `pending` is what the files being
    /// written still announce (only asked when the filesystem is).
    pub(super) fn check(
        &self,
        size: u64,
        pending: impl FnOnce() -> u64,
    ) -> Result<(), SinkFailure> {
        self.check_at(diodon_io::unix_time_ms(), size, pending)
    }

    fn check_at(
        &self,
        now_ms: u64,
        size: u64,
        pending: impl FnOnce() -> u64,
    ) -> Result<(), SinkFailure> {
        let need = size
            .div_ceil(BLOCK)
            .saturating_mul(BLOCK)
            .saturating_add(PER_FILE);
        if let Some(mut s) = self.sample.get() {
            let spent = s
                .promised
                .saturating_add(self.written.get().saturating_sub(s.written_at));
            if now_ms.abs_diff(s.at_ms) < TRUSTED_MS
                && spent.saturating_add(need).saturating_add(SPACE_RESERVE) <= s.available
            {
                s.promised = s.promised.saturating_add(need);
                self.sample.set(Some(s));
                return Ok(());
            }
        }
        self.sample.set(None);
        let Ok(space) = (self.source)() else {
            return Ok(());
        };
        let pending = pending();
        if size.saturating_add(pending).saturating_add(SPACE_RESERVE) > space.available {
            return Err(SinkFailure::WontFit {
                size,
                available: space.available,
                pending,
                reserve: SPACE_RESERVE,
            });
        }
        self.sample.set(Some(Sample {
            available: space.available,
            promised: pending.saturating_add(need),
            written_at: self.written.get(),
            at_ms: now_ms,
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    const MIB: u64 = 1 << 20;

    /// A room over a filesystem whose free space the test sets, counting
    /// how often it is asked.
    fn room(free: &Arc<AtomicU64>, asked: &Arc<AtomicU64>) -> Room {
        let (free, asked) = (Arc::clone(free), Arc::clone(asked));
        Room::from_source(Box::new(move || {
            asked.fetch_add(1, Ordering::Relaxed);
            Ok(Space {
                total: 1 << 40,
                available: free.load(Ordering::Relaxed),
            })
        }))
    }

    #[test]
    fn small_files_ask_the_filesystem_once_a_second_and_a_no_is_always_asked_again() {
        let free = Arc::new(AtomicU64::new(100 * MIB));
        let asked = Arc::new(AtomicU64::new(0));
        let room = room(&free, &asked);
        // A thousand 10 KB files in the same second: one question.
        for i in 0..1000 {
            room.check_at(5_000 + i / 10, 10_240, || 0).unwrap();
            room.wrote(10_240);
        }
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        // A second later: asked again.
        room.check_at(6_500, 10_240, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 2);
        // The estimate cannot grant 99 MiB more after what was spent; the
        // filesystem (freed meanwhile) can: asked, and let in.
        free.store(200 * MIB, Ordering::Relaxed);
        room.check_at(6_600, 99 * MIB, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        // Someone else fills the disk: within the second the estimate still
        // lets a file in (its write would then fail, and free its bytes)...
        free.store(10 * MIB, Ordering::Relaxed);
        room.check_at(6_700, 20 * MIB, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 3);
        // ...after it, the filesystem is asked, and refuses with its numbers.
        let err = room.check_at(8_000, 20 * MIB, || 3 * MIB).unwrap_err();
        assert!(
            matches!(
                err,
                SinkFailure::WontFit {
                    available,
                    pending,
                    ..
                } if available == 10 * MIB && pending == 3 * MIB
            ),
            "{err:?}"
        );
        assert_eq!(asked.load(Ordering::Relaxed), 4);
        // A refusal leaves no estimate: the next file asks again.
        room.check_at(8_001, 1024, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn the_estimate_counts_files_let_in_and_bytes_written_since_the_answer() {
        let free = Arc::new(AtomicU64::new(10 * MIB));
        let asked = Arc::new(AtomicU64::new(0));
        let room = room(&free, &asked);
        // 4 MiB let in, leaving 10 - 4 - 8 KiB of slack - 1 MiB reserve.
        room.check_at(0, 4 * MIB, || 0).unwrap();
        // 4 MiB more: within the estimate, not asked.
        room.check_at(1, 4 * MIB, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 1);
        // A stream of unknown size wrote 2 MiB: the next 1 KB file no
        // longer fits the estimate, and the filesystem (told nothing of
        // it here) is asked.
        room.wrote(2 * MIB);
        room.check_at(2, 1024, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 2);
        // Pending bytes at the answer count as spent.
        room.check_at(2_000, 1024, || 9 * MIB - 16 * 1024).unwrap();
        room.check_at(2_001, 1024, || 0).unwrap();
        assert_eq!(asked.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn an_unreadable_filesystem_lets_the_writes_decide() {
        let room = Room::of(Path::new("/nonexistent/staging"));
        room.check(1 << 50, || 0).unwrap();
    }
}
