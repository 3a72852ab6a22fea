//! Channel-name sanitizer: turns an untrusted name from the wire into a
//! relative path of plain components, or says why it is refused.
//!
//! ```text
//!  "docs/a.txt"  ─► ok: docs / a.txt
//!  "/etc/passwd" ─► Absolute        "a/../b" ─► DotComponent
//!  "a//b", "a/"  ─► EmptyComponent  "x\0y"   ─► Control
//!  "CON", "lpt1.txt" ─► DeviceName  ".diodon-staging/x" ─► Reserved
//! ```
//!
//! Symlink escapes are not visible in a name; the file sink refuses to
//! traverse any existing symlink in the output tree (see `files.rs`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Longest accepted name, bytes.
pub const MAX_NAME: usize = 4096;
/// Longest accepted path component, bytes.
pub const MAX_COMPONENT: usize = 255;
/// Prefix of the receiver's own directories in the output tree.
pub const RESERVED_PREFIX: &str = ".diodon-";

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty name.
    #[error("empty name")]
    Empty,
    /// Starts with `/`.
    #[error("absolute path")]
    Absolute,
    /// A `.` or `..` component.
    #[error("`.` or `..` component")]
    DotComponent,
    /// `a//b` or a trailing `/`.
    #[error("empty path component")]
    EmptyComponent,
    /// NUL, another control character or a backslash.
    #[error("control character or backslash in name")]
    Control,
    /// A Windows device name (`CON`, `NUL`, `COM1`, …).
    #[error("device name {0:?}")]
    DeviceName(String),
    /// Collides with the receiver's own `.diodon-*` directories.
    #[error("reserved name")]
    Reserved,
    /// Too long.
    #[error("name or component too long")]
    TooLong,
}

/// A relative path made only of plain, checked components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafePath(PathBuf);

impl SafePath {
    /// The relative path.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The components joined with `_` (a flat name for the quarantine).
    pub fn flat(&self) -> String {
        self.0
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("_")
    }
}

/// Checks `name` (see the module doc for the rules).
pub fn sanitize(name: &str) -> Result<SafePath, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong);
    }
    if name.chars().any(|c| c.is_control() || c == '\\') {
        return Err(NameError::Control);
    }
    if name.starts_with('/') {
        return Err(NameError::Absolute);
    }
    let mut path = PathBuf::new();
    for (i, part) in name.split('/').enumerate() {
        if part.is_empty() {
            return Err(NameError::EmptyComponent);
        }
        if part == "." || part == ".." {
            return Err(NameError::DotComponent);
        }
        if part.len() > MAX_COMPONENT {
            return Err(NameError::TooLong);
        }
        if i == 0 && part.starts_with(RESERVED_PREFIX) {
            return Err(NameError::Reserved);
        }
        if is_device_name(part) {
            return Err(NameError::DeviceName(part.to_owned()));
        }
        path.push(part);
    }
    Ok(SafePath(path))
}

/// `CON`, `PRN`, `AUX`, `NUL`, `COM0-9`, `LPT0-9`, with any extension, any case.
fn is_device_name(part: &str) -> bool {
    let stem = part
        .split('.')
        .next()
        .unwrap_or(part)
        .trim_end_matches(' ')
        .to_ascii_uppercase();
    match stem.as_str() {
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$" => true,
        s if s.len() == 4 && (s.starts_with("COM") || s.starts_with("LPT")) => {
            s.as_bytes()[3].is_ascii_digit()
        }
        _ => false,
    }
}

/// A printable, single-line rendering of an untrusted name (for file names
/// in the quarantine and for logs): unsafe bytes become `%XX`.
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars().take(200) {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | ',' | '=') {
            out.push(c);
        } else if c == '/' {
            out.push('_');
        } else {
            let mut b = [0u8; 4];
            for byte in c.encode_utf8(&mut b).bytes() {
                let _ = write!(out, "%{byte:02X}");
            }
        }
    }
    if out.is_empty() || out.starts_with('.') {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        assert_eq!(sanitize("a.txt").unwrap().as_path(), Path::new("a.txt"));
        assert_eq!(
            sanitize("dir/sub/f.bin").unwrap().as_path(),
            Path::new("dir/sub/f.bin")
        );
        assert_eq!(sanitize(".hidden").unwrap().as_path(), Path::new(".hidden"));
        assert_eq!(sanitize("a/.diodon-x").unwrap().flat(), "a_.diodon-x");
        assert!(sanitize("über/ファイル").is_ok());
        assert!(sanitize("console.txt").is_ok());
        assert!(sanitize("COM10").is_ok());
    }

    #[test]
    fn hostile_names_are_refused() {
        let cases: &[(&str, NameError)] = &[
            ("", NameError::Empty),
            ("/etc/passwd", NameError::Absolute),
            ("//x", NameError::Absolute),
            ("..", NameError::DotComponent),
            ("../x", NameError::DotComponent),
            ("a/../../x", NameError::DotComponent),
            ("a/./b", NameError::DotComponent),
            (".", NameError::DotComponent),
            ("a//b", NameError::EmptyComponent),
            ("a/", NameError::EmptyComponent),
            ("a\0b", NameError::Control),
            ("a\nb", NameError::Control),
            ("a\\..\\b", NameError::Control),
            ("CON", NameError::DeviceName("CON".into())),
            ("dir/nul.txt", NameError::DeviceName("nul.txt".into())),
            ("lpt1", NameError::DeviceName("lpt1".into())),
            ("Com3.tar.gz", NameError::DeviceName("Com3.tar.gz".into())),
            (".diodon-staging/x", NameError::Reserved),
            (".diodon-quarantine", NameError::Reserved),
        ];
        for (name, want) in cases {
            assert_eq!(sanitize(name).as_ref().err(), Some(want), "{name:?}");
        }
        assert_eq!(sanitize(&"a".repeat(256)), Err(NameError::TooLong));
        assert_eq!(sanitize(&"a/".repeat(3000)), Err(NameError::TooLong));
    }

    #[test]
    fn escape_is_flat_and_printable() {
        assert_eq!(escape("../../etc/passwd"), "_.._.._etc_passwd");
        assert_eq!(escape("a\0b"), "a%00b");
        assert_eq!(escape(""), "_");
        assert!(!escape(".x").starts_with('.'));
    }
}
