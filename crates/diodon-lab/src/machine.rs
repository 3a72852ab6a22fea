//! What a trial run changes on the machine, and the one place that changes
//! it: `net.core.rmem_*`, the testbed and the guard tables of each cell
//! group, and the processes the harness starts. Each is put back when its
//! owner is dropped (also on error and on panic unwinding); a run killed
//! outright is undone by the next through the `recovery` module, which calls
//! the same functions.
//!
//! ```text
//!  RmemGuard::new ─► set(rcvbuf) per configuration ─► drop: values found put back
//!  LinkUp::up(mtu, loss) ─► testbed.sh up (--mtu, --loss) ─► guard apply tx, rx
//!                      drop ─► guards removed (given diode) ─► testbed.sh down
//!  ns_cmd(ns, program) ─► ip netns exec NS PROGRAM, dies with the harness
//!                      ─► wait_bound (its UDP port in the namespace's socket table)
//!                      ─► kill(pid) only PIDs the harness started (or, in recovery,
//!                         found inside a dead run's own testbed)
//! ```
//!
//! Processes are started through `ip netns exec`, which `exec`s the program,
//! so the child's PID is the tool itself and a kill reaches it.

use crate::diode::Diode;
use crate::plan::Plan;
use diodon_apps::guard::{self, GuardError, GuardSpec};
use diodon_apps::nft::{run as run_tool, ToolError};
use diodon_io::netns::{spawn_in, NetnsError};
use std::fs;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Errors changing the machine.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// A sysctl or a file.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The testbed script, `ip`, `nft`.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The guard.
    #[error(transparent)]
    Guard(#[from] GuardError),
    /// Entering a namespace.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A helper thread panicked.
    #[error("{0} thread panicked")]
    Panicked(&'static str),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> MachineError {
    let what = what.into();
    move |source| MachineError::Io { what, source }
}

const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";
const RMEM_DEFAULT: &str = "/proc/sys/net/core/rmem_default";

/// The current `net.core.rmem_max` and `rmem_default`.
pub fn read_rmem() -> Result<(String, String), MachineError> {
    let max = fs::read_to_string(RMEM_MAX).map_err(io_err(RMEM_MAX))?;
    let def = fs::read_to_string(RMEM_DEFAULT).map_err(io_err(RMEM_DEFAULT))?;
    Ok((max.trim().to_owned(), def.trim().to_owned()))
}

/// Sets `net.core.rmem_max` and `rmem_default`.
pub fn write_rmem(max: &str, def: &str) -> Result<(), MachineError> {
    fs::write(RMEM_MAX, max).map_err(io_err(RMEM_MAX))?;
    fs::write(RMEM_DEFAULT, def).map_err(io_err(RMEM_DEFAULT))?;
    Ok(())
}

/// Sets `net.core.rmem_max` and `rmem_default` and puts the old values back
/// when dropped (also on error and on panic unwinding).
#[derive(Debug)]
pub struct RmemGuard {
    saved: Option<(String, String)>,
}

impl RmemGuard {
    /// Remembers the current values.
    pub fn new() -> Result<Self, MachineError> {
        Ok(RmemGuard {
            saved: Some(read_rmem()?),
        })
    }

    /// Sets both to `bytes`, or back to the saved values for 0.
    pub fn set(&self, bytes: u64) -> Result<(), MachineError> {
        let (max, def) = match (&self.saved, bytes) {
            (Some((m, d)), 0) => (m.clone(), d.clone()),
            (_, b) => (b.to_string(), b.to_string()),
        };
        write_rmem(&max, &def)
    }

    /// The values found at the start.
    pub fn saved(&self) -> Option<&(String, String)> {
        self.saved.as_ref()
    }
}

impl Drop for RmemGuard {
    fn drop(&mut self) {
        if let Some((max, def)) = self.saved.take() {
            if write_rmem(&max, &def).is_err() {
                eprintln!("trial: could not restore net.core.rmem_max={max} rmem_default={def}");
            }
        }
    }
}

/// A testbed (`scripts/testbed.sh`) for one MTU × loss; taken down on drop.
#[derive(Debug)]
pub struct Testbed {
    script: PathBuf,
    name: String,
}

impl Testbed {
    /// `testbed.sh up --mtu MTU [--loss LOSS]` as testbed `name`.
    pub fn up(script: &Path, name: &str, mtu: u32, loss: f64) -> Result<Self, ToolError> {
        let mut c = Command::new("bash");
        c.arg(script)
            .args(["up", "--mtu", &mtu.to_string()])
            .env("DIODON_TB", name);
        if loss > 0.0 {
            c.args(["--loss", &loss.to_string()]);
        }
        run_tool(c, None)?;
        Ok(Testbed {
            script: script.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if let Err(e) = testbed_down(&self.script, &self.name) {
            eprintln!("trial: testbed down failed: {e}");
        }
    }
}

/// `scripts/testbed.sh down` for testbed `name` (fine if it is not up).
pub fn testbed_down(script: &Path, name: &str) -> Result<(), ToolError> {
    let mut c = Command::new("bash");
    c.arg(script).arg("down").env("DIODON_TB", name);
    run_tool(c, None).map(drop)
}

/// The link of one cell group: the testbed (when the plan builds one) and
/// the guards (when it loads them). Dropping it takes the testbed down, or
/// on a real diode removes the guards again.
#[derive(Debug)]
pub struct LinkUp {
    testbed: Option<Testbed>,
    guards: Option<(GuardSpec, GuardSpec)>,
    keep_guards: bool,
}

impl LinkUp {
    /// Builds the testbed of `script`/`name` at `mtu` and `loss` (when the
    /// plan builds one) and loads the guards on `diode` (when it loads them).
    pub fn up(
        plan: &Plan,
        script: &Path,
        name: &str,
        diode: &Diode,
        mtu: u32,
        loss: f64,
    ) -> Result<Self, MachineError> {
        let testbed = if plan.link.testbed {
            Some(Testbed::up(script, name, mtu, loss)?)
        } else {
            None
        };
        let guards = if plan.link.guard {
            let (tx, rx) = diode.guard_specs()?;
            guard::apply(&tx)?;
            guard::apply(&rx)?;
            Some((tx, rx))
        } else {
            None
        };
        Ok(LinkUp {
            testbed,
            guards,
            keep_guards: plan.link.testbed,
        })
    }
}

impl Drop for LinkUp {
    fn drop(&mut self) {
        if let (Some((tx, rx)), false) = (&self.guards, self.keep_guards) {
            let _ = guard::remove(tx.ns.as_deref(), &tx.table);
            let _ = guard::remove(rx.ns.as_deref(), &rx.table);
        }
        // The testbed (and with it the guards) goes down after this.
        drop(self.testbed.take());
    }
}

/// `ip netns exec NS PROGRAM` (which `exec`s PROGRAM), killed when the
/// harness dies.
pub fn ns_cmd(ns: &str, program: &Path) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    // A harness killed outright must not leave a receiver waiting or a
    // sender sending. The kernel ties this to the thread that starts the
    // child: the run loop is called from one that outlives the run (the
    // binary's main thread).
    diodon_io::child::die_with_parent(&mut c);
    c
}

/// Sends `sig` (e.g. `-KILL`) to `pid`; whether it was delivered.
pub fn kill(pid: u32, sig: &str) -> bool {
    Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Exit status as a shell would show it (128 + signal when killed).
pub fn rc(s: ExitStatus) -> i32 {
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// PIDs of the processes in network namespace `ns` (none if it is gone).
pub fn netns_pids(ns: &str) -> Vec<u32> {
    if !diodon_io::netns::path_of(ns).exists() {
        return Vec::new();
    }
    Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `/proc/net/udp` or `udp6` text lists a socket bound to local `port`.
pub fn udp_port_bound(proc_net_udp: &str, port: u16) -> bool {
    let want = format!("{port:04X}");
    proc_net_udp.lines().skip(1).any(|l| {
        l.split_whitespace()
            .nth(1)
            .and_then(|local| local.rsplit_once(':'))
            .is_some_and(|(_, p)| p == want)
    })
}

/// Waits until a UDP socket is bound to `port` in namespace `ns`; `false`
/// when `limit` passed or the process `child` exited first.
#[expect(
    clippy::disallowed_methods,
    reason = "a wall-clock bound on the receiver's start-up"
)]
pub fn wait_bound(
    ns: &str,
    port: u16,
    child: &mut Child,
    limit: Duration,
) -> Result<bool, MachineError> {
    let start = Instant::now();
    loop {
        let bound = spawn_in(ns, move || {
            ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"]
                .iter()
                .any(|p| fs::read_to_string(p).is_ok_and(|t| udp_port_bound(&t, port)))
        })?
        .join()
        .map_err(|_| MachineError::Panicked("socket-table"))??;
        if bound {
            return Ok(true);
        }
        if start.elapsed() >= limit
            || child
                .try_wait()
                .map_err(io_err("waiting for the receiver"))?
                .is_some()
        {
            return Ok(false);
        }
        thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_bound_udp_port() {
        let v4 = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                  \x20 12: 02004D0A:1E6E 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n";
        assert!(udp_port_bound(v4, 7790));
        assert!(!udp_port_bound(v4, 7791));
        assert!(!udp_port_bound(v4, 0x4D0A), "the address is not the port");
        let v6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                  \x20 5: 00000000000000000000000000000000:1E6E 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 99 2 0000000000000000 0\n";
        assert!(udp_port_bound(v6, 7790));
        assert!(!udp_port_bound("", 7790));
    }

    #[test]
    fn exit_status_reads_as_a_shell_shows_it() {
        let killed = ExitStatus::from_raw(9);
        assert_eq!(rc(killed), 137);
        let exited = ExitStatus::from_raw(3 << 8);
        assert_eq!(rc(exited), 3);
        assert!(netns_pids("diodon-no-such-namespace").is_empty());
    }
}
