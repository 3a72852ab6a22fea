//! The file every trial sends: written once per run from the plan's size
//! and content, hashed with SHA-256 (the thesis's check), and the
//! receiver's copy hashed the same way.
//!
//! ```text
//!  plan.file (size, content a|random) ─► make_file ─► OUT/work/input.bin ─► sha256_file
//!  receiver's output file ──────────────────────────────────────────────► sha256_file ─► same?
//! ```

use crate::plan::Content;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

/// Writes the test file: `size` bytes of `a`, or of a fixed-seed
/// pseudo-random sequence.
pub fn make_file(path: &Path, size: u64, content: Content) -> io::Result<()> {
    let f = File::create(path)?;
    let mut w = BufWriter::with_capacity(1 << 20, f);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![b'a'; 1 << 16];
    let mut left = size;
    while left > 0 {
        if content == Content::Random {
            for chunk in buf.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
        }
        let n = left.min(buf.len() as u64) as usize;
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    w.flush()
}

/// SHA-256 of a file (hex) and its size.
pub fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n_total = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        n_total += n as u64;
        h.update(&buf[..n]);
    }
    Ok((hex(&h.finalize()), n_total))
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn test_file_content_and_hash() {
        let dir = tempfile::tempdir().expect("test");
        let p = dir.path().join("a.bin");
        make_file(&p, 100_000, Content::A).expect("test");
        let data = fs::read(&p).expect("test");
        assert_eq!(data.len(), 100_000);
        assert!(data.iter().all(|&b| b == b'a'));
        let (h, n) = sha256_file(&p).expect("test");
        assert_eq!(n, 100_000);
        assert_eq!(h.len(), 64);
        make_file(&p, 1000, Content::Random).expect("test");
        assert!(fs::read(&p).expect("test").iter().any(|&b| b != b'a'));
        let (empty, _) = {
            fs::write(&p, b"").expect("test");
            sha256_file(&p).expect("test")
        };
        assert_eq!(
            empty,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
