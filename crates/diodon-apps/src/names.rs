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
//!
//! Lengths: a component longer than `NAME_MAX` (255 bytes) is refused here;
//! a whole path is checked against `PATH_MAX` once the output folder is
//! known ([`fits_under`]), before anything is created. Names the receiver
//! makes itself (quarantine entries) are kept within `NAME_MAX` by
//! [`fit_file_name`]: cut at a character boundary, marked with a digest.
//!
//! ```text
//!  "sub/nnn…n" (254 bytes) + ".1712345678901.reason"
//!     ─► "sub_nnn…n" cut at 217 bytes + "~9f2c4e1a0b3d5c7e" + ".1712345678901.reason"  (255)
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Longest accepted name, bytes.
pub const MAX_NAME: usize = 4096;
/// Longest accepted path component, bytes (`NAME_MAX`).
pub const MAX_COMPONENT: usize = 255;
/// Longest path the kernel takes, bytes, counting the terminating NUL
/// (`PATH_MAX`).
pub const PATH_MAX: usize = 4096;
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
    /// The name is legal but the path it makes under the output folder is
    /// longer than the kernel takes.
    #[error(
        "the path under the output folder would be {len} bytes, longer than the system's limit of {} (PATH_MAX)",
        PATH_MAX - 1
    )]
    PathTooLong {
        /// Bytes of the whole path (output folder, `/`, name).
        len: usize,
    },
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

/// `root.join(rel)` if the kernel can take it as a path (shorter than
/// [`PATH_MAX`]); checked before any directory of it is made.
pub fn fits_under(root: &Path, rel: &SafePath) -> Result<PathBuf, NameError> {
    let path = root.join(rel.as_path());
    let len = path.as_os_str().len();
    if len >= PATH_MAX {
        return Err(NameError::PathTooLong { len });
    }
    Ok(path)
}

/// A file name `stem + suffix` of at most [`MAX_COMPONENT`] bytes: when it
/// would be longer, `stem` is cut at a character boundary and followed by
/// `~` and 16 hex digits of the BLAKE3 digest of `full` (the name it stands
/// for), so two long names cut alike still differ. `suffix` is the
/// receiver's own (an id, an extension) and is kept whole; it must be
/// shorter than `MAX_COMPONENT - 17` bytes.
pub fn fit_file_name(stem: &str, full: &str, suffix: &str) -> String {
    if stem.len() + suffix.len() <= MAX_COMPONENT {
        return format!("{stem}{suffix}");
    }
    let digest = blake3::hash(full.as_bytes());
    let mark = hex::encode(&digest.as_bytes()[..8]);
    let mut room = MAX_COMPONENT.saturating_sub(suffix.len() + 1 + mark.len());
    while !stem.is_char_boundary(room) {
        room -= 1;
    }
    format!("{}~{mark}{suffix}", &stem[..room])
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

/// A printable, single-line rendering of an untrusted name (for quarantine
/// records, file names there and logs): unsafe bytes become `%XX`. The
/// result can be longer than `NAME_MAX`; a file name made of it goes
/// through [`fit_file_name`].
pub fn escape(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
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
    fn paths_longer_than_path_max_are_refused() {
        let rel = sanitize(&format!("{}ff", "d/".repeat(2040))).unwrap();
        // 13 + 1 + 4082 = 4096 bytes: no room for the terminating NUL.
        assert_eq!(
            fits_under(Path::new("/srv/incoming"), &rel),
            Err(NameError::PathTooLong { len: 4096 })
        );
        // 4095 bytes: the longest path the kernel takes.
        assert!(fits_under(Path::new("/srv/incomin"), &rel).is_ok());
        assert!(NameError::PathTooLong { len: 4096 }
            .to_string()
            .contains("4095 (PATH_MAX)"));
    }

    #[test]
    fn fitted_names_stay_within_name_max_and_tell_long_names_apart() {
        assert_eq!(fit_file_name("a.txt", "a.txt", ".17"), "a.txt.17");
        let suffix = ".1712345678901.reason";
        for stem in ["n".repeat(300), "é".repeat(150), "ファ".repeat(60)] {
            let a = fit_file_name(&stem, &format!("x/{stem}"), suffix);
            let b = fit_file_name(&stem, &format!("y/{stem}"), suffix);
            assert!(a.len() <= MAX_COMPONENT, "{} bytes", a.len());
            assert!(a.len() > MAX_COMPONENT - 3, "cut close to the limit");
            assert!(a.ends_with(suffix), "{a}");
            assert_ne!(a, b, "the digest tells them apart");
        }
    }

    #[test]
    fn escape_is_flat_and_printable() {
        assert_eq!(escape("../../etc/passwd"), "_.._.._etc_passwd");
        assert_eq!(escape("a\0b"), "a%00b");
        assert_eq!(escape(""), "_");
        assert!(!escape(".x").starts_with('.'));
    }
}
