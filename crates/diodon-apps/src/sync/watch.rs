//! The file-system watch of the source roots: inotify, used directly.
//!
//! ```text
//!  scanner: reads a directory ─► Watch::add(dir) first (no gap: what changes
//!           after the add is reported, what changed before is read)
//!  watch thread: inotify events ─► dir of the watch + name ─► Watched::Path
//!                a new or moved-in directory: watched at once (the scanner
//!                then walks it); a directory moved away: its watches dropped
//!                queue overflow ─► Watched::Overflow (the scanner scans all)
//! ```
//!
//! Only changes are asked of the kernel — created, written, closed after
//! writing, attributes, deleted, moved — never opens, reads or closes
//! without writing, so the readers' own work reports nothing. There is no
//! walk of its own: a directory is watched when the scanner reads it
//! (a recursive watcher that walks the tree first would `stat` every file
//! before the first scan could start). Symbolic links to directories are
//! not watched; their changes are found by the periodic rescan.

use inotify::{EventMask, Inotify, WatchMask, Watches};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// What the watch hands the scanner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// Something changed at this path (created, written, removed, moved,
    /// its attributes).
    Path(PathBuf),
    /// The kernel's event queue overflowed: events were lost.
    Overflow,
}

/// How often the watch thread looks for events when there were none.
const IDLE: Duration = Duration::from_millis(20);

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::DONT_FOLLOW
        | WatchMask::EXCL_UNLINK
}

/// The watched directories, by watch descriptor.
#[derive(Debug)]
struct Dirs {
    watches: Watches,
    paths: HashMap<i32, PathBuf>,
    /// The kernel refused a watch for lack of watches (logged once).
    full: bool,
}

impl Dirs {
    fn add(&mut self, dir: &Path) {
        match self.watches.add(dir, mask()) {
            Ok(wd) => {
                self.paths
                    .insert(wd.get_watch_descriptor_id(), dir.to_owned());
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                if !self.full {
                    self.full = true;
                    tracing::warn!(
                        dir = %dir.display(),
                        "cannot watch more folders (fs.inotify.max_user_watches): changes in the folders not watched are found by --rescan"
                    );
                }
            }
            // Gone already, or not a directory: nothing to watch.
            Err(e) => tracing::debug!(dir = %dir.display(), "not watched: {e}"),
        }
    }

    /// Forgets the watches of `dir` and everything below it (moved away).
    fn drop_below(&mut self, dir: &Path) {
        let gone: Vec<i32> = self
            .paths
            .iter()
            .filter(|(_, p)| p.starts_with(dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.paths.remove(&wd);
        }
        // The kernel keeps following the moved inodes; their events now
        // name no known directory and are dropped (see `path_of`).
    }
}

/// A running watch; dropping it stops its thread.
#[derive(Debug)]
pub struct Watch {
    dirs: Arc<Mutex<Dirs>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watch {
    /// Starts the watch; its events go to `tx`. `None` (logged) where the
    /// system refuses: the periodic rescan alone then finds changes.
    pub fn start(tx: Sender<Watched>) -> Option<Watch> {
        let inotify = match Inotify::init() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!("no file-system watch ({e}); changes are found by --rescan");
                return None;
            }
        };
        let dirs = Arc::new(Mutex::new(Dirs {
            watches: inotify.watches(),
            paths: HashMap::new(),
            full: false,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (dirs, stop) = (Arc::clone(&dirs), Arc::clone(&stop));
            thread::Builder::new()
                .name("diodon-watch".into())
                .spawn(move || run(inotify, &dirs, &stop, &tx))
                .ok()?
        };
        Some(Watch {
            dirs,
            stop,
            thread: Some(thread),
        })
    }

    /// Watches `dir` (again: a moved directory gets its new path).
    pub fn add(&self, dir: &Path) {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(dir);
    }

    /// Directories watched now.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .paths
            .len()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watch thread: reads events until stopped.
fn run(mut inotify: Inotify, dirs: &Mutex<Dirs>, stop: &AtomicBool, tx: &Sender<Watched>) {
    let mut buf = vec![0u8; 64 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let events = match inotify.read_events(&mut buf) {
            Ok(ev) => ev,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(IDLE);
                continue;
            }
            Err(e) => {
                tracing::warn!("the file-system watch failed ({e}); changes are found by --rescan");
                return;
            }
        };
        let mut d = dirs.lock().unwrap_or_else(PoisonError::into_inner);
        for ev in events {
            let out = handle(&mut d, ev.wd.get_watch_descriptor_id(), ev.mask, ev.name);
            if let Some(w) = out {
                if tx.send(w).is_err() {
                    return;
                }
            }
        }
    }
}

/// One event: what the scanner is told, if anything.
fn handle(d: &mut Dirs, wd: i32, mask: EventMask, name: Option<&OsStr>) -> Option<Watched> {
    if mask.contains(EventMask::Q_OVERFLOW) {
        return Some(Watched::Overflow);
    }
    if mask.contains(EventMask::IGNORED) {
        d.paths.remove(&wd);
        return None;
    }
    let dir = d.paths.get(&wd)?.clone();
    let Some(name) = name else {
        // The watched directory itself: gone or moved is news (its
        // subtree is removed by the scanner); its own attributes are not.
        return if mask.intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
            Some(Watched::Path(dir))
        } else {
            None
        };
    };
    let path = dir.join(name);
    if mask.contains(EventMask::ISDIR) {
        if mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
            // Watched now; the scanner walks it (and watches below).
            d.add(&path);
        } else if mask.contains(EventMask::MOVED_FROM) {
            d.drop_below(&path);
        }
    }
    Some(Watched::Path(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::sync::mpsc;

    /// Everything reported within `ms`.
    fn drain(rx: &mpsc::Receiver<Watched>, ms: u64) -> Vec<Watched> {
        let mut got = Vec::new();
        while let Ok(w) = rx.recv_timeout(Duration::from_millis(ms)) {
            got.push(w);
        }
        got
    }

    #[test]
    fn changes_are_reported_by_path_and_reads_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("old"), b"old").unwrap();
        let (tx, rx) = mpsc::channel();
        let watch = Watch::start(tx).unwrap();
        watch.add(&root);
        // Reading a file is not a change.
        let _ = fs::read(root.join("old")).unwrap();
        let _ = fs::File::open(root.join("old")).unwrap();
        assert_eq!(drain(&rx, 200), vec![], "an open or a read reported");
        // A new file, a removal, a new directory (watched at once: a file
        // written in it is reported with its own path).
        fs::write(root.join("new"), b"n").unwrap();
        fs::remove_file(root.join("old")).unwrap();
        fs::create_dir(root.join("sub")).unwrap();
        thread::sleep(Duration::from_millis(100));
        fs::write(root.join("sub/inner"), b"i").unwrap();
        let got = drain(&rx, 300);
        for p in ["new", "old", "sub", "sub/inner"] {
            assert!(
                got.contains(&Watched::Path(root.join(p))),
                "{p} not reported: {got:?}"
            );
        }
        assert_eq!(watch.watched(), 2);
        // A directory moved away: its watch is dropped, its old path reported.
        let away = dir.path().join("away");
        fs::rename(root.join("sub"), &away).unwrap();
        let got = drain(&rx, 300);
        assert!(got.contains(&Watched::Path(root.join("sub"))), "{got:?}");
        fs::write(away.join("later"), b"l").unwrap();
        let got = drain(&rx, 300);
        assert!(
            got.iter()
                .all(|w| *w != Watched::Path(root.join("sub/later"))),
            "a directory moved out of the tree still reports: {got:?}"
        );
        assert_eq!(watch.watched(), 1);
        // Removing the root itself is reported as the root's path.
        fs::remove_file(root.join("new")).unwrap();
        fs::remove_dir(&root).unwrap();
        let got = drain(&rx, 300);
        assert!(got.contains(&Watched::Path(root.clone())), "{got:?}");
    }
}
