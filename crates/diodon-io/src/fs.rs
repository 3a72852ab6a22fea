//! Filesystem space: how big the filesystem under a path is and how much of
//! it may still be written (`fstatvfs(3)`), for callers that must refuse
//! what cannot fit before they write a byte of it.
//!
//! ```text
//!  path ─► open (O_RDONLY | O_CLOEXEC) ─► fstatvfs(fd) ─► Space { total, available }
//! ```

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// The size of a filesystem and the room left on it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Size of the filesystem (`f_blocks × f_frsize`).
    pub total: u64,
    /// Bytes an unprivileged writer may still use (`f_bavail × f_frsize`):
    /// blocks reserved for root are not counted as room.
    pub available: u64,
}

/// The space of the filesystem that holds `path` (a file or directory).
pub fn space(path: &Path) -> io::Result<Space> {
    let file = File::open(path)?;
    fspace(&file)
}

/// The space of the filesystem that holds the open `file`.
#[expect(unsafe_code, reason = "fstatvfs(3) has no safe std wrapper")]
pub fn fspace(file: &File) -> io::Result<Space> {
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for the call and `st` is a valid,
    // writable statvfs that outlives it.
    let rc = unsafe { libc::fstatvfs(file.as_raw_fd(), &raw mut st) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // 64-bit Linux: fsblkcnt_t and c_ulong are both u64.
    Ok(Space {
        total: st.f_blocks.saturating_mul(st.f_frsize),
        available: st.f_bavail.saturating_mul(st.f_frsize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_current_directory_has_a_size() {
        let s = space(Path::new(".")).expect("statvfs of .");
        assert!(s.total > 0, "{s:?}");
        assert!(s.available <= s.total, "{s:?}");
        assert!(space(Path::new("/nonexistent/diodon")).is_err());
    }
}
