//! The diode trial harness's run loop (thesis ch. 4, Listing 4.2).
//!
//! ```text
//!  recover (undo killed runs; refuse while one is alive) ─► RunRecord ─► test file
//!  for round (trial number) × (mtu, loss): LinkUp (testbed up ─► guard apply tx, rx)
//!   for tool × rcvbuf (RmemGuard::set) × bitrate:
//!     [loss > 0: link anew] ─► Program::start_receiver (rx ns) ─► wait_bound
//!     ─► Diode::snapshots ─► t0 ─► Program::start_sender (tx ns)
//!     ─► wait (grace after sender exit / timeout → kill, failed) ─► t1 = receiver exit
//!     ─► SHA-256 ─► snapshots ─► Program::read ─► Row ─► journal (synced)
//! ```
//!
//! The loop owns the order of things and nothing else: one trial is
//! the private `measure` module's, the machine's state [`crate::machine`]'s (and
//! [`crate::recovery`]'s after a kill), each measured program's command
//! lines and results its [`crate::tools`] module's, the diode's ends and
//! measuring points [`crate::diode`]'s, the row and its CSV
//! [`crate::row`]'s, the journal [`crate::resume`]'s.
//!
//! `Xfer_time` is the thesis's (Listing 4.2): from just before the sender is
//! started to the moment the receiver has exited (seen within 2 ms). The
//! receiver is started first and the clock starts only once its socket is
//! bound (read from the namespace's `/proc/net/udp`), so its start-up is not
//! counted; what it covers per tool is in [`crate::tools`].
//!
//! A trial whose receiver is still running `receiver_grace_s` after its sender
//! exited fails (nothing more can arrive), and so does one still running at
//! `timeout_s`. With injected loss the testbed is rebuilt before every trial:
//! fragments of datagrams that lost a piece otherwise wait 30 s
//! (`net.ipv4.ipfrag_time`) in the reassembly queue and hold its memory.
//!
//! On a real diode (`link.testbed = false`) the harness counts with a guard
//! table of its own ([`crate::diode::TRIAL_TABLE`]) and removes only that
//! table afterwards: the operator's guard and the namespaces are left as
//! they were found.

pub use crate::error::TrialError;

use crate::diode::{Diode, TRIAL_TABLE};
use crate::error::io_err;
use crate::machine::{read_rmem, LinkUp, MachineError, RmemGuard};
use crate::measure::TrialCtx;
use crate::plan::Plan;
use crate::recovery::{self, Record, RunRecord};
use crate::resume::{Journal, TrialKey};
use crate::row::{Config, Row};
use crate::testfile::{make_file, sha256_file};
use crate::tools;
use std::collections::HashSet;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How to run (things not in the plan).
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The `diodon` gateway binary.
    pub diodon_bin: PathBuf,
    /// `scripts/testbed.sh`.
    pub testbed_script: PathBuf,
    /// Output directory.
    pub out_dir: PathBuf,
    /// Testbed name (`DIODON_TB`).
    pub testbed_name: String,
    /// Set to stop after the current trial.
    pub stop: Arc<AtomicBool>,
    /// Progress lines on stderr.
    pub verbose: bool,
    /// Trials an earlier run already did (`--resume`): skipped.
    pub done: HashSet<TrialKey>,
    /// Append every finished row to `out_dir/journal.csv` (synced), so a
    /// killed run loses at most the trial it was in.
    pub journal: bool,
    /// Where the run records what it changes on the machine
    /// ([`recovery::DEFAULT_DIR`]), so a killed run is undone by the next.
    pub record_dir: PathBuf,
}

/// Runs every cell of `plan`; returns all rows. When `opts.stop` is set the
/// run ends after killing the current trial's processes and restoring the
/// system, and returns the rows of the trials that completed.
pub fn run(plan: &Plan, opts: &RunOptions) -> Result<Vec<Row>, TrialError> {
    let tools = plan.tool_list()?;
    let diode = preflight(plan, opts)?;
    let sets_rmem = plan.rcvbuf.iter().any(|&b| b != 0);
    // Declared before everything it describes, so it is deleted last.
    let _record = RunRecord::create(&opts.record_dir, record(plan, opts, &diode, sets_rmem)?)?;
    let work = opts.out_dir.join("work");
    fs::create_dir_all(&work).map_err(io_err(format!("creating {}", work.display())))?;
    let input = work.join("input.bin");
    make_file(&input, plan.file.size, plan.file.content)
        .map_err(io_err(format!("writing the test file {}", input.display())))?;
    let (in_sha, in_size) = sha256_file(&input).map_err(io_err("hashing the input"))?;
    let rmem = if sets_rmem {
        Some(RmemGuard::new()?)
    } else {
        None
    };
    let mut journal = if opts.journal {
        Some(Journal::open(&opts.out_dir)?)
    } else {
        None
    };
    let ctx = TrialCtx {
        plan,
        diodon_bin: &opts.diodon_bin,
        stop: &opts.stop,
        diode: &diode,
        input: &input,
        in_sha: &in_sha,
        in_size,
        work: &work,
    };
    let configs = |mtu: u32, loss: f64| {
        tools.iter().flat_map(move |&tool| {
            plan.rcvbuf.iter().map(move |&rcvbuf| Config {
                tool,
                rcvbuf,
                mtu,
                loss,
            })
        })
    };
    let link_up = |mtu, loss| {
        LinkUp::up(
            plan,
            &opts.testbed_script,
            &opts.testbed_name,
            &diode,
            mtu,
            loss,
        )
    };
    let mut rows = Vec::new();
    // An interruption ends the run after cleaning up and keeps the rows so
    // far; the caller sees `opts.stop` set.
    // Rounds: trial 1 of every cell, then trial 2 of every cell, ... so a
    // change of the machine's load during a long run spreads over all cells,
    // and an interrupted run leaves every cell with (nearly) as many trials.
    'all: for trial in 1..=plan.trials {
        for &mtu in &plan.mtu {
            for &loss in &plan.loss {
                let todo = |c: &Config, bitrate: f64| {
                    !opts.done.contains(&TrialKey::new(c, bitrate, trial))
                };
                let cell_todo = |c: &Config| plan.bitrates_mbps.iter().any(|&b| todo(c, b));
                // A group an earlier run finished needs no link at all.
                if !configs(mtu, loss).any(|c| cell_todo(&c)) {
                    continue;
                }
                let mut link = Some(link_up(mtu, loss)?);
                let mut fresh = true;
                for config in configs(mtu, loss).filter(|c| cell_todo(c)) {
                    if let Some(r) = &rmem {
                        r.set(config.rcvbuf)?;
                    }
                    for &bitrate in &plan.bitrates_mbps {
                        if opts.stop.load(Ordering::Relaxed) {
                            break 'all;
                        }
                        if !todo(&config, bitrate) {
                            continue;
                        }
                        // With injected loss, fragments of datagrams that
                        // lost a piece wait net.ipv4.ipfrag_time (30 s) in
                        // the receiver's reassembly queue and hold its
                        // memory; a new testbed per trial keeps one
                        // trial's leftovers from starving the next.
                        if plan.link.testbed && loss > 0.0 && !fresh {
                            drop(link.take());
                            link = Some(link_up(mtu, loss)?);
                        }
                        fresh = false;
                        let row = match ctx.run_one(&config, bitrate, trial) {
                            Err(TrialError::Interrupted) => break 'all,
                            other => other?,
                        };
                        if opts.verbose {
                            eprintln!("trial {}", row.progress());
                        }
                        if let Some(j) = journal.as_mut() {
                            j.append(&row)?;
                        }
                        rows.push(row);
                    }
                }
                drop(link);
            }
        }
    }
    drop(rmem);
    let _ = fs::remove_dir_all(&work);
    Ok(rows)
}

/// Everything checked before the machine is changed: the tools, the
/// testbed script, a given diode's namespaces; then dead runs are undone
/// (and a live one refused). The diode the run measures.
fn preflight(plan: &Plan, opts: &RunOptions) -> Result<Diode, TrialError> {
    for t in plan.tool_list()? {
        if let Some(why) = tools::program(t).missing(&opts.diodon_bin) {
            return Err(TrialError::Missing(why));
        }
    }
    if plan.link.testbed && !opts.testbed_script.is_file() {
        return Err(TrialError::Missing(format!(
            "testbed script {} not found",
            opts.testbed_script.display()
        )));
    }
    let diode = Diode::of(plan, &opts.testbed_name)?;
    if !plan.link.testbed {
        diode.check_exist()?;
    }
    // A run killed outright (SIGKILL) left sysctls, a testbed or guard
    // tables behind: undo that first; refuse while another run is going.
    for line in recovery::recover(&opts.record_dir)? {
        eprintln!("trial: {line}");
    }
    Ok(diode)
}

/// What this run may change, for its record.
fn record(
    plan: &Plan,
    opts: &RunOptions,
    diode: &Diode,
    sets_rmem: bool,
) -> Result<Record, MachineError> {
    Ok(Record {
        rmem_found: if sets_rmem { Some(read_rmem()?) } else { None },
        rmem_set: plan.rcvbuf.iter().copied().filter(|&b| b != 0).collect(),
        testbed: plan.link.testbed.then(|| {
            let script = fs::canonicalize(&opts.testbed_script)
                .unwrap_or_else(|_| opts.testbed_script.clone());
            (script, opts.testbed_name.clone())
        }),
        guard_ns: if plan.link.guard && !plan.link.testbed {
            vec![diode.tx_ns.clone(), diode.rx_ns.clone()]
        } else {
            Vec::new()
        },
        guard_table: TRIAL_TABLE.to_owned(),
        ..Record::default()
    })
}
