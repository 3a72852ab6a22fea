//! The process's memory allocator: how many glibc malloc arenas it may use.
//!
//! glibc gives threads up to 8 arenas per core. Diodon hands buffers from
//! thread to thread (a reader fills a 1 MiB bundle, the core thread sends
//! and frees it; the receiver's decoder fills blocks its writer frees), so
//! memory freed into one arena is not reused by the thread allocating in
//! another, and a sync's resident memory grows with the arenas, not with
//! its work (a 3 GB tree of mixed files: sender 276 → 174 MiB, receiver
//! 179 → 71 MiB with two arenas; BENCHMARKS.md). The `diodon` binary limits
//! the arenas once, at start, before any thread exists.

/// Arenas the `diodon` binary allows.
pub const ARENAS: i32 = 2;

/// Limits glibc's malloc to `arenas` arenas (`mallopt(M_ARENA_MAX)`),
/// unless the operator chose with `MALLOC_ARENA_MAX` (their setting is
/// kept). Returns whether the limit is now ours. Call before spawning
/// threads: a thread that already has an arena keeps it.
#[expect(unsafe_code, reason = "mallopt(3) has no safe wrapper")]
pub fn limit_malloc_arenas(arenas: i32) -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    // SAFETY: mallopt takes two plain integers and changes only malloc's
    // tuning; M_ARENA_MAX is a valid parameter on glibc.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_accepts_the_limit_and_an_operators_setting_is_kept() {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            assert!(limit_malloc_arenas(ARENAS), "mallopt(M_ARENA_MAX) refused");
        } else {
            assert!(!limit_malloc_arenas(ARENAS));
        }
    }
}
