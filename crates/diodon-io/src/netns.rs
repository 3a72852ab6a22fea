//! Network namespaces: move the calling thread into a named namespace (as
//! created by `ip netns add NAME`, i.e. bound at `/var/run/netns/NAME`).
//!
//! A namespace switch is per thread and one-way here: run the work on a
//! dedicated thread ([`spawn_in`]) that never goes back, so nothing else in
//! the process is affected. Sockets keep the namespace they were created in.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::thread::JoinHandle;

/// Errors entering a namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// The namespace file could not be opened (missing namespace, no permission).
    #[error("cannot open network namespace {path}: {source}")]
    Open {
        /// `/var/run/netns/NAME`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `setns(2)` failed (usually: not root / no `CAP_SYS_ADMIN`).
    #[error("setns({path}) failed: {source}")]
    Setns {
        /// `/var/run/netns/NAME`.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The thread could not be spawned.
    #[error("cannot spawn namespace thread: {0}")]
    Spawn(#[source] io::Error),
}

/// The path `ip netns` binds a namespace called `name` to.
pub fn path_of(name: &str) -> PathBuf {
    PathBuf::from("/var/run/netns").join(name)
}

/// Moves the **calling thread** into the network namespace `name`.
///
/// Every socket the thread creates afterwards lives in that namespace, and
/// `/proc/thread-self/net/*` shows that namespace's counters.
#[expect(unsafe_code, reason = "setns(2) has no safe std wrapper")]
pub fn enter_current_thread(name: &str) -> Result<(), NetnsError> {
    let path = path_of(name);
    let file = File::open(&path).map_err(|source| NetnsError::Open {
        path: path.clone(),
        source,
    })?;
    // SAFETY: `file` is an open namespace file descriptor that outlives the
    // call; setns only reads it and changes the calling thread's namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(NetnsError::Setns {
            path,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Runs `f` on a new thread inside network namespace `name`; the thread ends
/// with `f` and never returns to the original namespace.
pub fn spawn_in<T, F>(name: &str, f: F) -> Result<JoinHandle<Result<T, NetnsError>>, NetnsError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let name = name.to_owned();
    std::thread::Builder::new()
        .name(format!("netns-{name}"))
        .spawn(move || {
            enter_current_thread(&name)?;
            Ok(f())
        })
        .map_err(NetnsError::Spawn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_namespace_is_a_typed_error() {
        let err = enter_current_thread("diodon-no-such-namespace").expect_err("must fail");
        assert!(matches!(err, NetnsError::Open { .. }), "{err}");
    }
}
