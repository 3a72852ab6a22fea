//! The pre-shared key file (PROTOCOL.md § 4.2): one key, or a current and
//! a next key with their key ids; reading it, and reading it again when the
//! process gets SIGHUP. A leaf module: the pipelines and the front ends use
//! it, it uses none of them.
//!
//! ```text
//!  --key-file FILE  ─► read_keys ─► KeyRing (Integrity::Keyed: the MAC's keys;
//!                                           Integrity::Encrypted with --encrypt)
//!  SIGHUP           ─► KeyReload::poll ─► the key file's new KeyRing (the core takes it)
//! ```

use diodon_proto::{KeyRing, KeyRingError, Secret};
use std::path::{Path, PathBuf};

/// A key file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// It could not be read.
    #[error("cannot read key file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// It holds something else.
    #[error(
        "key file {0} must hold 32 raw bytes, 64 hex characters, or the lines \
         `current ID HEX` and optionally `next ID HEX`"
    )]
    Format(PathBuf),
    /// A line of a key file with ids is wrong.
    #[error("key file {path}, line {line}: {why}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// The current and the next key do not make a ring.
    #[error("key file {path}: {source}")]
    Ring {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KeyRingError,
    },
}

/// The keys of a key file (PROTOCOL.md § 4.2): 32 raw bytes or 64 hex
/// characters (surrounding whitespace ignored) are one key with id 0;
/// otherwise lines `current ID HEX` (once) and `next ID HEX` (at most
/// once), `#` comments and empty lines ignored.
pub fn read_keys(path: &Path) -> Result<KeyRing, KeyFileError> {
    let bytes =
        zeroize::Zeroizing::new(std::fs::read(path).map_err(|source| KeyFileError::Read {
            path: path.to_owned(),
            source,
        })?);
    if let Ok(k) = <[u8; 32]>::try_from(bytes.as_slice()) {
        return Ok(KeyRing::single(k));
    }
    let format = || KeyFileError::Format(path.to_owned());
    let text = std::str::from_utf8(&bytes).map_err(|_| format())?;
    if let Some(key) = hex_key(text.trim()) {
        return Ok(KeyRing::single(*key.bytes()));
    }
    let (mut current, mut next) = (None, None);
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |why| KeyFileError::Line {
            path: path.to_owned(),
            line: i + 1,
            why,
        };
        let mut words = line.split_whitespace();
        let slot = match words.next() {
            Some("current") => &mut current,
            Some("next") => &mut next,
            // Not a key file with ids at all: say what a key file holds.
            _ if current.is_none() && next.is_none() => return Err(format()),
            _ => return Err(bad("expected `current ID HEX` or `next ID HEX`")),
        };
        let id: u8 = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or_else(|| bad("the key id must be a number 0 … 255"))?;
        let key = words
            .next()
            .and_then(hex_key)
            .ok_or_else(|| bad("the key must be 64 hex characters"))?;
        if words.next().is_some() {
            return Err(bad("more than `WORD ID HEX` on the line"));
        }
        if slot.replace((id, key)).is_some() {
            return Err(bad("a second key in the same role"));
        }
    }
    let current = current.ok_or_else(format)?;
    KeyRing::new(current, next).map_err(|source| KeyFileError::Ring {
        path: path.to_owned(),
        source,
    })
}

/// The key file, read again after every SIGHUP (`kill -HUP`, `systemctl
/// reload`): how a running sender switches keys and a running receiver
/// accepts a new pair, without a restart (PROTOCOL.md § 4.4). The process
/// must count SIGHUPs (`diodon_io::signal::count_hangups`).
#[derive(Debug, Clone)]
pub struct KeyReload {
    path: PathBuf,
    seen: u64,
}

impl KeyReload {
    /// Watches for SIGHUPs from now on; `path` is the key file.
    pub fn new(path: PathBuf) -> Self {
        KeyReload {
            path,
            seen: diodon_io::signal::hangups(),
        }
    }

    /// The key file's keys if a SIGHUP came since the last call (`None`
    /// otherwise); an unusable file is an error, and the caller keeps the
    /// keys it has.
    pub fn poll(&mut self) -> Option<Result<KeyRing, KeyFileError>> {
        let now = diodon_io::signal::hangups();
        if now == self.seen {
            return None;
        }
        self.seen = now;
        Some(read_keys(&self.path))
    }

    /// The key file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// 64 hex characters as a key.
fn hex_key(text: &str) -> Option<Secret> {
    let decoded = zeroize::Zeroizing::new(hex::decode(text).ok()?);
    <[u8; 32]>::try_from(decoded.as_slice())
        .ok()
        .map(Secret::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_formats() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("key");
        std::fs::write(&path, [7u8; 32]).expect("write");
        assert_eq!(read_keys(&path).expect("raw"), KeyRing::single([7u8; 32]));
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).expect("write");
        assert_eq!(read_keys(&path).expect("hex"), KeyRing::single([0xab; 32]));
        std::fs::write(&path, "short").expect("write");
        let e = read_keys(&path).expect_err("too short");
        assert!(
            e.to_string()
                .contains("must hold 32 raw bytes, 64 hex characters, or the lines"),
            "{e}"
        );
        let two = format!(
            "# rollover\ncurrent 1 {}\n\nnext 2 {}\n",
            "11".repeat(32),
            "22".repeat(32)
        );
        std::fs::write(&path, two).expect("write");
        let ring = read_keys(&path).expect("two keys");
        assert_eq!((ring.current_id(), ring.next_id()), (1, Some(2)));
        assert_eq!(ring.key(2).map(Secret::bytes), Some(&[0x22; 32]));
        for (text, says) in [
            (format!("next 2 {}", "22".repeat(32)), "must hold"),
            (
                format!("current 1 {}\nnext 1 {}", "11".repeat(32), "22".repeat(32)),
                "key id 1",
            ),
            (
                format!("current 1 {}", "1".repeat(63)),
                "line 1: the key must be 64 hex",
            ),
            (
                format!("current 300 {}", "11".repeat(32)),
                "line 1: the key id",
            ),
            (
                format!("current 1 {0}\ncurrent 2 {0}", "11".repeat(32)),
                "line 2: a second key",
            ),
        ] {
            std::fs::write(&path, text).expect("write");
            let e = read_keys(&path).expect_err("refused").to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("11111111"), "a key in an error: {e}");
        }
    }
}
