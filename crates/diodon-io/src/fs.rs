//! Filesystem space: how big the filesystem under a path is and how much of
//! it may still be written (`fstatvfs(3)`), for callers that must refuse
//! what cannot fit before they write a byte of it; and extended attributes
//! of an open file (`fsetxattr(2)`, `fgetxattr(2)`), where a receiver keeps
//! the digest of a file it verified; and an exclusive advisory lock on an
//! open file (`flock(2)`), by which receivers sharing a folder tell a live
//! staging file from one a crash left; and the disk blocks of a file
//! reserved before it is written (`fallocate(2)`), so a receiver learns at
//! a file's open, not halfway through it, that the disk cannot hold it.
//!
//! ```text
//!  path ─► open (O_RDONLY | O_CLOEXEC) ─► fstatvfs(fd) ─► Space { total, available }
//!  open file ─► fsetxattr / fgetxattr (user.* names) ─► bytes
//!  open file ─► fallocate(KEEP_SIZE, 0, len) ─► blocks reserved, size unchanged
//! ```

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

/// Takes an exclusive `flock` on `file` without waiting: `Ok(true)` when
/// taken (held until every descriptor of this open file is closed),
/// `Ok(false)` when another open file holds it.
#[expect(
    unsafe_code,
    reason = "flock(2) has no safe std wrapper before Rust 1.89"
)]
pub fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on an open descriptor; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Reserves the disk blocks for the first `len` bytes of `file` without
/// changing its size (`fallocate(2)` with `FALLOC_FL_KEEP_SIZE`): later
/// writes there cannot fail for lack of room, and cost the filesystem less
/// than delayed allocation (ext4: a fifth less system time for writing and
/// syncing 1 GB). A later `set_len` to the written size (the size it has) gives
/// back what was reserved beyond it. Errors: `ENOSPC`/`EDQUOT` when the room is not
/// there; `EOPNOTSUPP` on filesystems that cannot reserve.
#[expect(unsafe_code, reason = "fallocate(2) has no safe std wrapper")]
pub fn reserve(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: fallocate on an open descriptor; no memory is passed.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

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

/// Sets the extended attribute `name` (e.g. `user.diodon.blake3`) of an
/// open file. Filesystems without user attributes answer `ENOTSUP`.
#[expect(unsafe_code, reason = "fsetxattr(2) has no safe std wrapper")]
pub fn set_xattr(file: &File, name: &str, value: &[u8]) -> io::Result<()> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: the descriptor is open, `name` is NUL-terminated and `value`
    // is a valid slice for the duration of the call.
    let rc = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads the extended attribute `name` of an open file (at most 256 bytes).
#[expect(unsafe_code, reason = "fgetxattr(2) has no safe std wrapper")]
pub fn get_xattr(file: &File, name: &str) -> io::Result<Vec<u8>> {
    let name = std::ffi::CString::new(name).map_err(io::Error::other)?;
    let mut buf = vec![0u8; 256];
    // SAFETY: the descriptor is open, `name` is NUL-terminated and `buf`
    // is writable for its full length during the call.
    let n = unsafe {
        libc::fgetxattr(
            file.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n.cast_unsigned());
    Ok(buf)
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

    #[test]
    fn a_reservation_allocates_blocks_and_keeps_the_size() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("diodon-reserve-{}", std::process::id()));
        let file = File::create(&dir).expect("create");
        reserve(&file, 4 << 20).expect("fallocate");
        let m = file.metadata().expect("stat");
        assert_eq!(m.len(), 0, "the size stays");
        assert!(m.blocks() * 512 >= 4 << 20, "{} blocks", m.blocks());
        std::io::Write::write_all(&mut &file, &[7; 4096]).expect("write");
        file.set_len(4096).expect("trim");
        let m = file.metadata().expect("stat");
        assert!(
            m.blocks() * 512 <= 64 << 10,
            "trimmed: {} blocks",
            m.blocks()
        );
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn a_lock_is_held_until_its_file_closes() {
        let path = std::env::temp_dir().join(format!("diodon-flock-{}", std::process::id()));
        std::fs::write(&path, b"x").expect("write");
        let first = File::open(&path).expect("open");
        assert!(try_lock(&first).expect("flock"));
        let second = File::open(&path).expect("open again");
        assert!(!try_lock(&second).expect("flock"), "two holders");
        drop(first);
        assert!(try_lock(&second).expect("flock"), "released on close");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn an_extended_attribute_reads_back_or_is_unsupported() {
        let path = std::env::temp_dir().join(format!("diodon-xattr-{}", std::process::id()));
        std::fs::write(&path, b"x").expect("write");
        let f = File::open(&path).expect("open");
        match set_xattr(&f, "user.diodon.test", b"abc") {
            Ok(()) => assert_eq!(get_xattr(&f, "user.diodon.test").expect("get"), b"abc"),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}"),
        }
        assert!(get_xattr(&f, "user.diodon.absent").is_err());
        let _ = std::fs::remove_file(&path);
    }
}
