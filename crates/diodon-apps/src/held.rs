//! The held area: the partly received files of a directory-tree sync, kept
//! across carousel passes and receiver restarts so that a later pass only
//! has to fill the blocks an earlier one missed (PROTOCOL.md § 7.7). It
//! owns `OUT/.diodon-staging/held/`; the file sink asks it for a file's
//! staging place and tells it what it wrote.
//!
//! ```text
//!  OUT/.diodon-staging/held/<key>.data   the file's bytes, sparse, block n at n·B
//!  OUT/.diodon-staging/held/<key>.map    block size, block count, one bit per block
//!        key = BLAKE3(name, size, mtime) — the version of the file
//! ```
//!
//! A block's bit is set only after its bytes were written, and the map is
//! rewritten after every block, so a killed receiver keeps what it wrote.
//! Held files are bounded (bytes on disk and count); the oldest is evicted
//! first. Nothing here is trusted: the file sink renames a merged file into
//! place only after its BLAKE3 digest matched the trailer's.

use diodon_proto::{BlockSet, ChannelMeta};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The held area's directory under the staging directory.
pub const HELD: &str = "held";

/// Bounds of the held area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldLimits {
    /// Bytes of held files on disk (allocated, so a sparse file counts what
    /// it holds).
    pub max_bytes: u64,
    /// Held files.
    pub max_files: usize,
}

impl Default for HeldLimits {
    fn default() -> Self {
        HeldLimits {
            max_bytes: 4 << 30,
            max_files: 256,
        }
    }
}

/// One held file.
#[derive(Debug, Clone)]
struct Entry {
    /// When its map was last written (eviction order), ns since the epoch.
    touched: i128,
    /// Bytes it takes on disk.
    bytes: u64,
}

/// A held file opened for a channel: its data file, its map and where they are.
#[derive(Debug)]
pub struct HeldFile {
    /// The data file (read-write, sparse).
    pub file: File,
    /// Where the data file is.
    pub data_path: PathBuf,
    /// Where the map is.
    pub map_path: PathBuf,
    /// The blocks written (and, from an earlier pass, held).
    pub map: BlockSet,
    /// Blocks it held when it was opened (from earlier passes or runs).
    pub resumed: u64,
}

impl HeldFile {
    /// Writes a block's bytes at its offset, then sets its bit and rewrites
    /// the map (the bit never claims bytes that are not on disk).
    pub fn write_block(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)?;
        let block_bytes = u64::from(self.map.block_bytes());
        let block = offset / block_bytes;
        let last = block + 1 == self.map.total();
        if offset.is_multiple_of(block_bytes) && (data.len() as u64 == block_bytes || last) {
            self.map.insert(block);
            write_map(&self.map_path, &self.map)?;
        }
        Ok(())
    }
}

/// The held area (see the module doc).
#[derive(Debug)]
pub struct Held {
    dir: PathBuf,
    limits: HeldLimits,
    entries: HashMap<String, Entry>,
}

/// What opening the held area or placing a file in it removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HeldEvicted {
    /// Held files removed.
    pub files: u64,
    /// Their bytes on disk.
    pub bytes: u64,
}

impl Held {
    /// Opens `staging/held` (created with its first file), forgets data
    /// without a readable map and maps without data, and brings it within
    /// `limits`.
    pub fn open(staging: &Path, limits: HeldLimits) -> io::Result<(Self, HeldEvicted)> {
        let dir = staging.join(HELD);
        let mut held = Held {
            dir,
            limits,
            entries: HashMap::new(),
        };
        match fs::symlink_metadata(&held.dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{} must be a directory",
                    held.dir.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok((held, HeldEvicted::default()))
            }
            Err(e) => return Err(e),
        }
        for entry in fs::read_dir(&held.dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(key) = name.strip_suffix(".map") {
                match held.entry_of(key) {
                    Some(e) => {
                        held.entries.insert(key.to_owned(), e);
                    }
                    None => held.remove(key),
                }
            } else if let Some(key) = name.strip_suffix(".data") {
                if !held.paths(key).1.exists() {
                    held.remove(key);
                }
            }
        }
        let evicted = held.evict(None);
        Ok((held, evicted))
    }

    /// Held files now.
    pub fn files(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the held files take on disk.
    pub fn bytes(&self) -> u64 {
        self.entries.values().map(|e| e.bytes).sum()
    }

    /// The key of a sync file's version: its name, size and mtime.
    pub fn key(meta: &ChannelMeta) -> String {
        let mut h = blake3::Hasher::new();
        h.update(&meta.size.unwrap_or(0).to_be_bytes());
        h.update(&meta.mtime_sec.to_be_bytes());
        h.update(&meta.mtime_nsec.to_be_bytes());
        h.update(meta.name.as_bytes());
        hex::encode(&h.finalize().as_bytes()[..16])
    }

    /// The held blocks of `key`, if it is held with this geometry.
    pub fn blocks(&self, key: &str, block_bytes: u32, total: u64) -> Option<BlockSet> {
        if !self.entries.contains_key(key) {
            return None;
        }
        let map = read_map(&self.paths(key).1).ok()?;
        (map.block_bytes() == block_bytes && map.total() == total).then_some(map)
    }

    /// Opens the held file of `key` for a new pass over it: the one kept
    /// if its geometry is the same (its blocks count as held), otherwise a
    /// new empty one (an older one is forgotten). Makes room first.
    pub fn place(
        &mut self,
        key: &str,
        block_bytes: u32,
        total: u64,
    ) -> io::Result<(HeldFile, HeldEvicted)> {
        let (data_path, map_path) = self.paths(key);
        if let Some(map) = self.blocks(key, block_bytes, total) {
            let file = open_data(&data_path, false)?;
            let resumed = map.len();
            return Ok((
                HeldFile {
                    file,
                    data_path,
                    map_path,
                    map,
                    resumed,
                },
                HeldEvicted::default(),
            ));
        }
        self.forget(key);
        match fs::create_dir(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let map = BlockSet::new(block_bytes, total).map_err(io::Error::other)?;
        let file = open_data(&data_path, true)?;
        write_map(&map_path, &map)?;
        self.entries.insert(
            key.to_owned(),
            Entry {
                touched: now_ns(),
                bytes: 0,
            },
        );
        let evicted = self.evict(Some(key));
        Ok((
            HeldFile {
                file,
                data_path,
                map_path,
                map,
                resumed: 0,
            },
            evicted,
        ))
    }

    /// A pass ended with `key` still incomplete: its size on disk and age
    /// are taken now, and the area is brought within its bounds (the file
    /// just kept is evicted last).
    pub fn kept(&mut self, key: &str) -> HeldEvicted {
        if let Some(e) = self.entry_of(key) {
            self.entries.insert(key.to_owned(), e);
        }
        self.evict(Some(key))
    }

    /// Removes a held file (delivered, or its bytes proved wrong).
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
        self.remove(key);
    }

    /// Removes only the map of `key` (its data file was renamed into place).
    pub fn release(&mut self, key: &str) {
        self.entries.remove(key);
        let _ = fs::remove_file(self.paths(key).1);
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{key}.data")),
            self.dir.join(format!("{key}.map")),
        )
    }

    fn entry_of(&self, key: &str) -> Option<Entry> {
        let (data, map) = self.paths(key);
        read_map(&map).ok()?;
        let d = fs::symlink_metadata(&data)
            .ok()
            .filter(fs::Metadata::is_file)?;
        let m = fs::symlink_metadata(&map).ok()?;
        Some(Entry {
            touched: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            bytes: d.blocks() * 512,
        })
    }

    fn remove(&self, key: &str) {
        let (data, map) = self.paths(key);
        let _ = fs::remove_file(map);
        let _ = fs::remove_file(data);
    }

    /// Evicts the oldest held files (never `keep`) until the area is within
    /// its bounds.
    fn evict(&mut self, keep: Option<&str>) -> HeldEvicted {
        let mut out = HeldEvicted::default();
        let mut order: Vec<(i128, String)> = self
            .entries
            .iter()
            .filter(|(k, _)| Some(k.as_str()) != keep)
            .map(|(k, e)| (e.touched, k.clone()))
            .collect();
        order.sort();
        let mut order = order.into_iter();
        while self.entries.len() > self.limits.max_files || self.bytes() > self.limits.max_bytes {
            let Some((_, key)) = order.next() else { break };
            let bytes = self.entries.get(&key).map_or(0, |e| e.bytes);
            tracing::info!(
                key,
                bytes,
                "held file evicted (oldest first) to stay within the held area's bounds"
            );
            self.forget(&key);
            out.files += 1;
            out.bytes += bytes;
        }
        out
    }
}

fn open_data(path: &Path, create: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    if create {
        o.create(true).truncate(true);
    }
    o.open(path)
}

fn read_map(path: &Path) -> io::Result<BlockSet> {
    let bytes = fs::read(path)?;
    BlockSet::from_bytes(&bytes).map_err(io::Error::other)
}

/// Writes the map beside the data: a new file renamed over the old one,
/// so a crash leaves the old map or the new one, never half of one.
fn write_map(path: &Path, map: &BlockSet) -> io::Result<()> {
    let tmp = path.with_extension("map-new");
    fs::write(&tmp, map.to_bytes())?;
    fs::rename(&tmp, path)
}

fn now_ns() -> i128 {
    std::time::SystemTime::UNIX_EPOCH
        .elapsed()
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, size: u64) -> ChannelMeta {
        ChannelMeta::file(name, size)
    }

    #[test]
    fn a_held_file_survives_a_restart_with_its_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let key = Held::key(&meta("a", 10_000));
        {
            let (mut held, _) = Held::open(dir.path(), HeldLimits::default()).unwrap();
            let (mut f, _) = held.place(&key, 4096, 3).unwrap();
            f.write_block(4096, &[7; 4096]).unwrap();
            f.write_block(8192, &[9; 1808]).unwrap();
            // Killed here: no `kept`, no clean shutdown.
        }
        let (held, _) = Held::open(dir.path(), HeldLimits::default()).unwrap();
        let blocks = held.blocks(&key, 4096, 3).unwrap();
        assert_eq!(blocks.iter().collect::<Vec<_>>(), vec![1, 2]);
        assert!(held.blocks(&key, 8192, 2).is_none(), "another geometry");
        let data = fs::read(dir.path().join(HELD).join(format!("{key}.data"))).unwrap();
        assert_eq!(&data[4096..4100], &[7; 4]);
    }

    #[test]
    fn the_oldest_held_file_is_evicted_first() {
        let dir = tempfile::tempdir().unwrap();
        let limits = HeldLimits {
            max_bytes: u64::MAX,
            max_files: 2,
        };
        let (mut held, _) = Held::open(dir.path(), limits).unwrap();
        let keys: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|n| Held::key(&meta(n, 4096)))
            .collect();
        let mut evicted = HeldEvicted::default();
        for k in &keys {
            let (mut f, e) = held.place(k, 4096, 1).unwrap();
            f.write_block(0, &[1; 4096]).unwrap();
            evicted.files += e.files;
            evicted.files += held.kept(k).files;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(evicted.files, 1);
        assert!(held.blocks(&keys[0], 4096, 1).is_none(), "oldest evicted");
        assert!(held.blocks(&keys[1], 4096, 1).is_some());
        assert!(held.blocks(&keys[2], 4096, 1).is_some());
        // The bound on bytes, across a restart: only the newest fits.
        drop(held);
        let limits = HeldLimits {
            max_bytes: 4096 + 4095,
            max_files: 10,
        };
        let (held, evicted) = Held::open(dir.path(), limits).unwrap();
        assert_eq!(evicted.files, 1);
        assert!(held.blocks(&keys[1], 4096, 1).is_none());
        assert!(held.blocks(&keys[2], 4096, 1).is_some());
    }
}
