//! Test support shared by Diodon's crates (a dev-dependency only; no
//! product code links it): the one policy for tests that need root and
//! network namespaces ([`require_netns`]: skip with a visible message, or
//! fail under `CI=true`; [`require_root`] likewise), [`Namespace`], a
//! namespace that is deleted when the test ends, even by a panic;
//! [`SmallFs`], a small tmpfs to fill a disk on purpose; [`selftest`],
//! what the sandbox's self-test hook logged; and [`kafka`], a real Kafka
//! broker in a namespace (`scripts/kafka.sh`).

pub mod kafka;

use std::io::Write;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Whether `CI=true` is set: tests that could skip must run.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether this test may use root and network namespaces. Prints why not and
/// returns `false` (skip) — unless `CI=true`, where it panics instead: CI runs
/// as root and must run these tests.
pub fn require_netns(test: &str) -> bool {
    let reason = match Command::new("id").arg("-u").output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim() == "0" => probe_netns(),
        Ok(out) => Some(format!(
            "needs root (id -u = {})",
            String::from_utf8_lossy(&out.stdout).trim()
        )),
        Err(e) => Some(format!("cannot run `id -u`: {e}")),
    };
    let Some(reason) = reason else { return true };
    assert!(
        !ci(),
        "{test}: {reason}; CI=true, so this test must run, not skip"
    );
    // Straight to the stderr handle: the test harness captures `eprintln!`
    // of passing tests, and a skip must be visible.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {reason} (run as root with `ip netns` to run it)"
    );
    false
}

/// Whether this test may act as root (mount filesystems, force buffers).
/// Same policy as [`require_netns`]: skip visibly, or fail under `CI=true`.
pub fn require_root(test: &str) -> bool {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if uid.as_deref().is_ok_and(|u| u == "0") {
        return true;
    }
    assert!(
        !ci(),
        "{test}: needs root; CI=true, so this test must run, not skip"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: needs root (run as root to run it)"
    );
    false
}

/// Whether the programs `tools` are on PATH. Same policy as
/// [`require_netns`]: skip visibly, or fail under `CI=true` (where
/// `scripts/setup.sh` installs them).
pub fn require_tools(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        !ci(),
        "{test}: missing {missing:?} (scripts/setup.sh installs them); CI=true, so this test must run"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: missing {missing:?} (scripts/setup.sh installs them)"
    );
    false
}

/// A tmpfs of a few MiB mounted on a directory, unmounted when dropped
/// (even if the test panics); needs root ([`require_root`]).
#[derive(Debug)]
pub struct SmallFs {
    dir: std::path::PathBuf,
    /// The directory was made for this mount (removed after it).
    owned: bool,
}

impl SmallFs {
    /// A tmpfs of `mib` MiB on a fresh temporary directory.
    pub fn mount(mib: u64) -> SmallFs {
        static MOUNTS: AtomicU64 = AtomicU64::new(0);
        let n = MOUNTS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("diodon-smallfs-{}-{n}", std::process::id()));
        let mut fs = SmallFs::mount_at(&dir, mib);
        fs.owned = true;
        fs
    }

    /// A tmpfs of `mib` MiB on `dir` (created if missing).
    pub fn mount_at(dir: &std::path::Path, mib: u64) -> SmallFs {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let path = dir.to_str().expect("test paths are UTF-8");
        run(&[
            "mount",
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mib}m,mode=0755"),
            "diodon-test",
            path,
        ]);
        SmallFs {
            dir: dir.to_owned(),
            owned: false,
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &std::path::Path {
        &self.dir
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Another test's fork may hold a file of ours open for an instant
        // (until its exec closes it): retry, then detach lazily.
        let unmounted = (0..20).any(|_| {
            let ok = Command::new("umount")
                .arg(&self.dir)
                .output()
                .is_ok_and(|o| o.status.success());
            if !ok {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            ok
        });
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        if self.owned {
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

fn probe_netns() -> Option<String> {
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let n = PROBES.fetch_add(1, Ordering::Relaxed);
    let name = format!("diodon-probe-{}-{n}", std::process::id());
    match Command::new("ip").args(["netns", "add", &name]).output() {
        Ok(out) if out.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
            None
        }
        Ok(out) => Some(format!(
            "`ip netns add` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run `ip`: {e}")),
    }
}

/// A network namespace with loopback up, deleted when dropped (even if the
/// test panics).
#[derive(Debug)]
pub struct Namespace(String);

impl Namespace {
    /// Creates `name` (deleting a leftover of that name first).
    pub fn new(name: &str) -> Namespace {
        let _ = Command::new("ip").args(["netns", "del", name]).status();
        run(&["ip", "netns", "add", name]);
        let ns = Namespace(name.to_owned());
        run(&["ip", "-n", name, "link", "set", "lo", "up"]);
        ns
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The names of the entries of `dir`, sorted (panics if it cannot be read).
pub fn entries(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// Runs a command; panics with its stderr if it fails.
pub fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A loopback UDP address no socket holds right now (`127.0.0.1:PORT`), for
/// a process the test starts to bind.
pub fn free_udp() -> std::net::SocketAddr {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port on loopback");
    s.local_addr().expect("its address")
}

/// A loopback TCP address no listener holds right now.
pub fn free_tcp() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a TCP port on loopback");
    l.local_addr().expect("its address")
}

/// Reading the lines a sandboxed `diodon` logs for its self-test hook
/// (`DIODON_SANDBOX_SELFTEST=write:PATH,read:PATH,…`): each probe's
/// outcome, `allowed` or `denied` with its errno.
pub mod selftest {
    use std::ffi::OsStr;

    /// The self-test's line for `probe target` (panics when there is none).
    pub fn probe_line<'a>(
        log: &'a str,
        probe: &str,
        target: &(impl AsRef<OsStr> + ?Sized),
    ) -> &'a str {
        let target = target.as_ref().to_string_lossy();
        let needle = format!("probe=\"{probe}\" target=\"{target}\"");
        log.lines()
            .find(|l| l.contains("sandbox self-test") && l.contains(&needle))
            .unwrap_or_else(|| panic!("no self-test line for {probe} {target} in:\n{log}"))
    }

    /// Asserts that `probe target` was denied with `errno`.
    pub fn denied_with(log: &str, probe: &str, target: &(impl AsRef<OsStr> + ?Sized), errno: i32) {
        let line = probe_line(log, probe, target);
        assert!(
            line.contains("denied") && line.contains(&format!("errno={errno}")),
            "{probe} {} should be denied with errno {errno}: {line}",
            target.as_ref().to_string_lossy()
        );
    }

    /// Asserts that `probe target` was allowed.
    pub fn allowed(log: &str, probe: &str, target: &(impl AsRef<OsStr> + ?Sized)) {
        let line = probe_line(log, probe, target);
        assert!(
            line.contains("allowed"),
            "{probe} {}: {line}",
            target.as_ref().to_string_lossy()
        );
    }
}
