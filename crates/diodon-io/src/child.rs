//! Child processes that die with the process that started them.
//!
//! A measuring harness killed outright (SIGKILL, the OOM killer, a closed
//! session) runs no cleanup; a receiver it started would wait forever and a
//! sender would go on sending into a link nobody measures.
//! [`die_with_parent`] asks the kernel (`PR_SET_PDEATHSIG`) to SIGKILL the
//! child when its parent goes.
#![expect(
    unsafe_code,
    reason = "Command::pre_exec and prctl(2) have no safe std API"
)]

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the child `cmd` starts get SIGKILL when this process's calling
/// thread ends — the kernel ties the signal to the *thread* that forked, so
/// start children from a thread that lives as long as they should (a main
/// thread does). Survives `exec` of programs that are not setuid/setgid
/// (`ip netns exec` execs its program, so the tool itself gets it).
pub fn die_with_parent(cmd: &mut Command) -> &mut Command {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec; it only
    // calls prctl(2) and getppid(2), both async-signal-safe, and allocates
    // nothing (an OS error is a plain code).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died between fork and prctl: no signal will come.
            if libc::getppid().cast_unsigned() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Child, Stdio};
    use std::time::Duration;

    /// Starts `sleep 30` from a thread that then ends.
    fn sleep_from_a_thread(die: bool) -> Child {
        std::thread::spawn(move || {
            let mut cmd = Command::new("sleep");
            cmd.arg("30").stdin(Stdio::null());
            if die {
                die_with_parent(&mut cmd);
            }
            cmd.spawn().unwrap()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn the_child_dies_with_the_thread_that_started_it() {
        let mut child = sleep_from_a_thread(true);
        // Up to 5 s.
        let mut status = None;
        for _ in 0..250 {
            status = child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = status.expect("the child outlived its parent thread");
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn without_it_the_child_outlives_the_thread() {
        let mut child = sleep_from_a_thread(false);
        std::thread::sleep(Duration::from_millis(200));
        assert!(child.try_wait().unwrap().is_none(), "still running");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
