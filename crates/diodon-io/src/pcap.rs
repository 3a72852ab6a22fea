//! pcap files: writing captured frames with nanosecond timestamps, rotated
//! by size or age, and reading them back (both timestamp precisions, both
//! byte orders). A rotated file is written under `NAME.partial` and renamed
//! to `NAME` when it is complete, so a reader never sees a half-written
//! file under its final name.
//!
//! ```text
//!  file:   global header (24 bytes: magic a1b23c4d = ns, version 2.4, snaplen, link type 1)
//!          record: ts sec (4) | ts ns (4) | captured len (4) | wire len (4) | frame …
//!  Rotating: DIR/PREFIX-000001.pcap.partial ─(size or age reached)─► DIR/PREFIX-000001.pcap
//! ```
//!
//! Any tool that reads pcap (tcpdump, tshark, softflowd, Suricata) reads
//! these files.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Magic of a nanosecond-resolution pcap file (as written in our byte order).
pub const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Magic of a microsecond-resolution pcap file.
pub const MAGIC_US: u32 = 0xa1b2_c3d4;
/// Link type Ethernet.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Length of the global header.
pub const HEADER_LEN: u64 = 24;
/// Length of a record header.
pub const RECORD_HEADER_LEN: u64 = 16;

/// Writes one pcap file.
#[derive(Debug)]
pub struct PcapWriter {
    out: BufWriter<File>,
    bytes: u64,
    records: u64,
}

impl PcapWriter {
    /// Creates `path` (truncating) and writes the global header.
    pub fn create(path: &Path, snaplen: u32) -> io::Result<PcapWriter> {
        let file = File::create(path)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&MAGIC_NS.to_le_bytes())?;
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&snaplen.to_le_bytes())?;
        out.write_all(&LINKTYPE_ETHERNET.to_le_bytes())?;
        Ok(PcapWriter {
            out,
            bytes: HEADER_LEN,
            records: 0,
        })
    }

    /// Appends one frame.
    pub fn write(&mut self, timestamp_ns: u64, wire_len: u32, frame: &[u8]) -> io::Result<()> {
        let sec = (timestamp_ns / 1_000_000_000) as u32;
        let ns = (timestamp_ns % 1_000_000_000) as u32;
        self.out.write_all(&sec.to_le_bytes())?;
        self.out.write_all(&ns.to_le_bytes())?;
        self.out.write_all(&(frame.len() as u32).to_le_bytes())?;
        self.out
            .write_all(&wire_len.max(frame.len() as u32).to_le_bytes())?;
        self.out.write_all(frame)?;
        self.bytes += RECORD_HEADER_LEN + frame.len() as u64;
        self.records += 1;
        Ok(())
    }

    /// Bytes written so far (header included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes to the kernel.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and syncs the file to disk.
    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out.get_ref().sync_all()
    }
}

/// When a rotating writer starts the next file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// After this many bytes (0: never by size).
    pub max_bytes: u64,
    /// After this long since the file was opened (zero: never by age).
    pub max_age: Duration,
}

/// pcap files in a folder, one after the other: `PREFIX-000001.pcap`, ….
#[derive(Debug)]
pub struct RotatingPcap {
    dir: PathBuf,
    prefix: String,
    snaplen: u32,
    rotation: Rotation,
    current: Option<(PcapWriter, PathBuf, Duration)>,
    next: u64,
    completed: Vec<PathBuf>,
}

impl RotatingPcap {
    /// Files `DIR/PREFIX-NNNNNN.pcap`, numbered after any already there.
    pub fn new(dir: &Path, prefix: &str, snaplen: u32, rotation: Rotation) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut next = 1;
        for e in std::fs::read_dir(dir)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) = name
                .strip_prefix(&format!("{prefix}-"))
                .and_then(|r| r.split('.').next())
                .and_then(|n| n.parse::<u64>().ok())
            {
                next = next.max(n + 1);
            }
        }
        Ok(RotatingPcap {
            dir: dir.to_owned(),
            prefix: prefix.to_owned(),
            snaplen,
            rotation,
            current: None,
            next,
            completed: Vec::new(),
        })
    }

    /// Appends one frame; `now` (any monotonic time) decides the age.
    pub fn write(
        &mut self,
        now: Duration,
        timestamp_ns: u64,
        wire_len: u32,
        frame: &[u8],
    ) -> io::Result<()> {
        let due = self.current.as_ref().is_some_and(|(w, _, opened)| {
            (self.rotation.max_bytes > 0 && w.bytes() >= self.rotation.max_bytes)
                || (!self.rotation.max_age.is_zero()
                    && now.saturating_sub(*opened) >= self.rotation.max_age)
        });
        if due {
            self.close()?;
        }
        if self.current.is_none() {
            let name = format!("{}-{:06}.pcap", self.prefix, self.next);
            self.next += 1;
            let path = self.dir.join(name);
            let partial = partial_name(&path);
            let w = PcapWriter::create(&partial, self.snaplen)?;
            self.current = Some((w, path, now));
        }
        match &mut self.current {
            Some((w, _, _)) => w.write(timestamp_ns, wire_len, frame),
            None => Ok(()),
        }
    }

    /// Flushes the current file to the kernel.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.current {
            Some((w, _, _)) => w.flush(),
            None => Ok(()),
        }
    }

    /// Completes the current file (sync, rename to its final name).
    pub fn close(&mut self) -> io::Result<()> {
        if let Some((w, path, _)) = self.current.take() {
            w.finish()?;
            std::fs::rename(partial_name(&path), &path)?;
            self.completed.push(path);
        }
        Ok(())
    }

    /// Files completed so far.
    pub fn completed(&self) -> &[PathBuf] {
        &self.completed
    }
}

fn partial_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapRecord {
    /// Nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
    /// Length on the wire.
    pub wire_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Reads every record of a pcap file (either precision, either byte order).
pub fn read_all(path: &Path) -> io::Result<Vec<PcapRecord>> {
    let bad = |what: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {what}", path.display()),
        )
    };
    let mut r = BufReader::new(File::open(path)?);
    let mut h = [0u8; 24];
    r.read_exact(&mut h)?;
    let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let magic_be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let (le, ns) = match (magic_le, magic_be) {
        (MAGIC_NS, _) => (true, true),
        (MAGIC_US, _) => (true, false),
        (_, MAGIC_NS) => (false, true),
        (_, MAGIC_US) => (false, false),
        _ => return Err(bad("not a pcap file")),
    };
    let u32_at = |b: &[u8], i: usize| {
        let w = [b[i], b[i + 1], b[i + 2], b[i + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let mut out = Vec::new();
    let mut rec = [0u8; 16];
    loop {
        match r.read_exact(&mut rec) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(out),
            Err(e) => return Err(e),
        }
        let sec = u64::from(u32_at(&rec, 0));
        let frac = u64::from(u32_at(&rec, 4));
        let caplen = u32_at(&rec, 8) as usize;
        let wire_len = u32_at(&rec, 12);
        if caplen > 1 << 20 {
            return Err(bad("record longer than 1 MiB"));
        }
        let mut data = vec![0u8; caplen];
        r.read_exact(&mut data)?;
        out.push(PcapRecord {
            timestamp_ns: sec * 1_000_000_000 + if ns { frac } else { frac * 1000 },
            wire_len,
            data,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_rotate_by_size_and_read_back() {
        let dir = std::env::temp_dir().join(format!("diodon-pcap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rot = Rotation {
            max_bytes: 1000,
            max_age: Duration::ZERO,
        };
        let mut w = RotatingPcap::new(&dir, "agent-0", 65_535, rot).unwrap();
        for i in 0..20u64 {
            let frame = vec![i as u8; 100];
            w.write(Duration::ZERO, 1_700_000_000_123_456_789 + i, 120, &frame)
                .unwrap();
        }
        w.close().unwrap();
        let files = w.completed().to_vec();
        assert_eq!(files.len(), 3, "{files:?}");
        let mut all = Vec::new();
        for f in &files {
            assert!(!partial_name(f).exists());
            all.extend(read_all(f).unwrap());
        }
        assert_eq!(all.len(), 20);
        assert_eq!(all[5].timestamp_ns, 1_700_000_000_123_456_794);
        assert_eq!(all[5].wire_len, 120);
        assert_eq!(all[5].data, vec![5u8; 100]);
        let again = RotatingPcap::new(&dir, "agent-0", 65_535, rot).unwrap();
        assert_eq!(again.next, 4, "numbering continues after existing files");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
