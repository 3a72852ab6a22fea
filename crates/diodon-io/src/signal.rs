//! SIGHUP as a counter: "reload your configuration", the Unix convention
//! the tap follows for its rule file. The handler only increments an
//! atomic (async-signal-safe); the program polls [`hangups`] where it is
//! safe to act.
//!
//! ```text
//!  kill -HUP pid ─► handler: HANGUPS += 1 ─► reload thread: hangups() changed ─► reload
//! ```
//!
//! Install it after any library that claims SIGHUP for termination (the
//! CLI's stop handler does, for the other commands): the last `sigaction`
//! wins.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

static HANGUPS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_hangup(_: libc::c_int) {
    HANGUPS.fetch_add(1, Ordering::Relaxed);
}

/// Counts SIGHUPs from now on instead of dying of them.
#[expect(unsafe_code, reason = "sigaction(2) has no safe std wrapper")]
pub fn count_hangups() -> io::Result<()> {
    // SAFETY: sigaction is plain old data; zero is a valid starting value.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_hangup as extern "C" fn(libc::c_int) as libc::sighandler_t;
    sa.sa_flags = libc::SA_RESTART;
    // SAFETY: `sa` is valid for the call; the handler only touches an atomic.
    let rc = unsafe { libc::sigaction(libc::SIGHUP, &raw const sa, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// SIGHUPs received since [`count_hangups`].
pub fn hangups() -> u64 {
    HANGUPS.load(Ordering::Relaxed)
}
