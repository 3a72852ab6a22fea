//! One trial, start to row: the receiver started and bound, the measuring
//! points read, the sender started and timed, both waited for (and killed
//! when the plan says so), the file's SHA-256 checked, the points read
//! again and the receiver's word read through its [`Program`].
//!
//! ```text
//!  start_receiver ─► wait_bound ─► snapshots ─► t0 ─► start_sender
//!   ─► wait: sender exit? receiver exit (t1)? fault kill? grace / timeout ─► kill
//!   ─► snapshots ─► SHA-256 of output ─► Program::read ─► failure() ─► Row
//! ```

use crate::diode::Diode;
use crate::error::{io_err, TrialError};
use crate::machine::{kill, rc, wait_bound};
use crate::plan::Plan;
use crate::row::{Config, Row};
use crate::testfile::sha256_file;
use crate::tools::{self, Program, Readout, Started, Trial, RECEIVER_LOG};
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the harness looks whether the sender or receiver exited (the
/// resolution of `Xfer_time`).
const POLL: Duration = Duration::from_millis(2);

/// How long a receiver may take to bind its socket.
const BIND_WAIT: Duration = Duration::from_secs(10);

/// What every trial of a run shares.
pub(crate) struct TrialCtx<'a> {
    pub(crate) plan: &'a Plan,
    /// The `diodon` gateway binary.
    pub(crate) diodon_bin: &'a Path,
    /// Set when the run is interrupted.
    pub(crate) stop: &'a Arc<AtomicBool>,
    pub(crate) diode: &'a Diode,
    pub(crate) input: &'a Path,
    pub(crate) in_sha: &'a str,
    pub(crate) in_size: u64,
    pub(crate) work: &'a Path,
}

/// How the receiver and the sender of one trial ended.
struct Ended {
    sender_rc: i32,
    receiver_rc: i32,
    /// When the receiver was seen to exit (or was killed).
    t1: Instant,
    /// The plan's fault injection killed the receiver.
    killed_by_fault: bool,
}

impl TrialCtx<'_> {
    #[expect(
        clippy::disallowed_methods,
        reason = "the harness measures wall-clock transfer time, as the thesis did"
    )]
    /// Runs trial number `trial` of cell `c` at `bitrate` Mbit/s.
    pub(crate) fn run_one(&self, c: &Config, bitrate: f64, trial: u32) -> Result<Row, TrialError> {
        let program = tools::program(c.tool);
        let t = Trial {
            plan: self.plan,
            diode: self.diode,
            config: c,
            bitrate,
            input: self.input,
            work: self.work,
            diodon_bin: self.diodon_bin,
            stop: self.stop,
        };
        let out = self.work.join("out");
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).map_err(io_err("creating the output directory"))?;
        let mut reason = String::new();
        let mut receiver = program
            .start_receiver(&t, &out)
            .map_err(io_err(format!("starting the {} receiver", c.tool)))?;
        // Nothing is sent before the receiver's socket is bound (a fixed
        // sleep would either waste time or lose the first datagrams).
        let (rx_ns, port) = (&self.diode.rx_ns, self.diode.port);
        if !wait_bound(rx_ns, port, &mut receiver, BIND_WAIT)? {
            reason = format!(
                "receiver did not bind UDP port {port} within {} s",
                BIND_WAIT.as_secs()
            );
        }
        let (tx0, rx0) = self.diode.snapshots()?;
        let t0 = Instant::now();
        let sender = if reason.is_empty() {
            match program.start_sender(&t) {
                Ok(s) => Some(s),
                Err(e) => {
                    reason = format!("sender did not start: {e}");
                    kill(receiver.id(), "-KILL");
                    None
                }
            }
        } else {
            kill(receiver.id(), "-KILL");
            None
        };
        let ended = self.wait(&*program, &mut receiver, sender, t0, trial, &mut reason)?;
        let mut stdout = String::new();
        if let Some(mut o) = receiver.stdout.take() {
            let _ = o.read_to_string(&mut stdout);
        }
        let (tx1, rx1) = self.diode.snapshots()?;
        let (dtx, drx) = (tx1.delta(&tx0), rx1.delta(&rx0));
        let (out_sha, out_size) = sha256_file(&program.output(&t, &out)).unwrap_or_default();
        let log = fs::read_to_string(self.work.join(RECEIVER_LOG)).unwrap_or_default();
        let said = program.read(&stdout, &log);
        let receiver_rc = ended.receiver_rc;
        if reason.is_empty() {
            reason = self.failure(&ended, &said, &out_sha, out_size);
        }
        let link_tx = dtx.link.unwrap_or_default();
        let link_rx = drx.link.unwrap_or_default();
        Ok(Row {
            config: c.clone(),
            bitrate,
            trial,
            sender_rc: ended.sender_rc,
            receiver_rc,
            xfer_time: Row::recorded_seconds(ended.t1.duration_since(t0)),
            xfer_success: reason.is_empty(),
            in_file_size: self.in_size,
            out_file_size: out_size,
            dtgrms_sent: dtx.guard.as_ref().map(|g| g.accepted.packets),
            dtgrms_received: drx.guard.as_ref().map(|g| g.accepted.packets),
            dtgrms_corrupt: Some(drx.udp.in_csum_errors + said.corrupt),
            tx_errors: link_tx.tx_errors,
            tx_dropped: link_tx.tx_dropped,
            rx_errors: link_rx.rx_errors,
            rx_dropped: link_rx.rx_dropped + link_rx.rx_missed_errors,
            snmp_out_datagrams: dtx.udp.out_datagrams,
            snmp_sndbuf_errors: dtx.udp.sndbuf_errors,
            snmp_in_datagrams: drx.udp.in_datagrams,
            snmp_in_errors: drx.udp.in_errors,
            snmp_rcvbuf_errors: drx.udp.rcvbuf_errors,
            snmp_reasm_fails: drx.ip.reasm_fails,
            missing: said.missing,
            recovered: said.recovered,
            socket_drops: said.socket_drops,
            repair_ratio: Some(program.repair_ratio(self.plan)),
            app_rcvbuf: said.app_rcvbuf,
            reason,
        })
    }

    /// Why a trial that went its course failed (empty: it did not), in the
    /// order the thesis's harness checked: the receiver (killed, or its own
    /// word), the sender, the file's SHA-256.
    fn failure(&self, ended: &Ended, said: &Readout, out_sha: &str, out_size: u64) -> String {
        let receiver_rc = ended.receiver_rc;
        if ended.killed_by_fault {
            format!("receiver killed (fault injection), exit {receiver_rc}")
        } else if receiver_rc != 0 {
            // With the receiver's own word on why, where it gave one.
            match &said.why {
                Some(why) => format!("receiver exit {receiver_rc}: {why}"),
                None => format!("receiver exit {receiver_rc}"),
            }
        } else if ended.sender_rc != 0 {
            format!("sender exit {}", ended.sender_rc)
        } else if out_sha != self.in_sha {
            if out_size == 0 {
                "no output file".to_owned()
            } else {
                format!("SHA-256 differs ({out_size} of {} bytes)", self.in_size)
            }
        } else {
            String::new()
        }
    }

    /// Waits for the receiver and the sender started at `t0`: kills the
    /// receiver when the plan's fault says so, when it outlives its sender
    /// by the grace time, and both at the timeout (saying so in `reason`).
    /// Interrupted (`opts.stop`): kills both and returns the error.
    #[expect(
        clippy::disallowed_methods,
        reason = "the harness measures wall-clock transfer time, as the thesis did"
    )]
    fn wait(
        &self,
        program: &dyn Program,
        receiver: &mut Child,
        mut sender: Option<Started>,
        t0: Instant,
        trial: u32,
        reason: &mut String,
    ) -> Result<Ended, TrialError> {
        let deadline = t0 + Duration::from_secs_f64(self.plan.timeout_s);
        let kill_at = self.plan.fault.as_ref().and_then(|f| {
            (f.kill_receiver_trial == trial)
                .then(|| t0 + Duration::from_millis(f.kill_receiver_after_ms))
        });
        let grace = Duration::from_secs_f64(self.plan.receiver_grace_s);
        let mut sender_rc = -1;
        let mut sender_done: Option<Instant> = None;
        let mut receiver_rc = None;
        let mut t1 = None;
        let mut killed_by_fault = false;
        loop {
            if let Some(s) = sender.as_mut() {
                if let Some(st) = s
                    .child
                    .try_wait()
                    .map_err(io_err("waiting for the sender"))?
                {
                    sender_rc = rc(st);
                    sender_done = Some(Instant::now());
                    if let Some(p) = s.pacer.take() {
                        if let Ok(Err(e)) = p.join() {
                            *reason = format!("{} pacer: {e}", program.tool());
                        }
                    }
                    sender = None;
                }
            }
            if receiver_rc.is_none() {
                if let Some(st) = receiver
                    .try_wait()
                    .map_err(io_err("waiting for the receiver"))?
                {
                    receiver_rc = Some(rc(st));
                    t1 = Some(Instant::now());
                }
            }
            if receiver_rc.is_some() && sender.is_none() {
                break;
            }
            if self.stop.load(Ordering::Relaxed) {
                if receiver_rc.is_none() {
                    kill(receiver.id(), "-KILL");
                    let _ = receiver.wait();
                }
                if let Some(s) = sender.take() {
                    let _ = stop_sender(s);
                }
                return Err(TrialError::Interrupted);
            }
            let now = Instant::now();
            if kill_at.is_some_and(|k| now >= k) && receiver_rc.is_none() && !killed_by_fault {
                kill(receiver.id(), "-KILL");
                killed_by_fault = true;
            }
            if receiver_rc.is_none() && sender_done.is_some_and(|d| now >= d + grace) {
                kill(receiver.id(), "-KILL");
                let st = receiver.wait().map_err(io_err("reaping the receiver"))?;
                receiver_rc = Some(rc(st));
                t1 = Some(now);
                if reason.is_empty() {
                    *reason = format!(
                        "receiver still running {} s after the sender exited",
                        self.plan.receiver_grace_s
                    );
                }
                break;
            }
            if now >= deadline {
                if receiver_rc.is_none() {
                    kill(receiver.id(), "-KILL");
                    let st = receiver.wait().map_err(io_err("reaping the receiver"))?;
                    receiver_rc = Some(rc(st));
                    if reason.is_empty() {
                        *reason = format!("receiver still running after {} s", self.plan.timeout_s);
                    }
                }
                if let Some(s) = sender.take() {
                    sender_rc = stop_sender(s)?;
                    if reason.is_empty() {
                        *reason = format!("sender still running after {} s", self.plan.timeout_s);
                    }
                }
                break;
            }
            thread::sleep(POLL);
        }
        Ok(Ended {
            sender_rc,
            receiver_rc: receiver_rc.unwrap_or(-1),
            t1: t1.unwrap_or_else(Instant::now),
            killed_by_fault,
        })
    }
}

/// Kills a sender still running and its pacer's feed; its exit status.
fn stop_sender(mut s: Started) -> Result<i32, TrialError> {
    kill(s.child.id(), "-KILL");
    let st = s.child.wait().map_err(io_err("reaping the sender"))?;
    if let Some(p) = s.pacer.take() {
        let _ = p.join();
    }
    Ok(rc(st))
}
