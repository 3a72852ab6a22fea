//! `diodon trial PLAN.toml`: the packet-loss thesis's experiment as a tool
//! (see `diodon_lab::trial` and `diodon_lab::report`).
//!
//! ```text
//!  plan ─► diodon_lab::trial::run (testbed, guards, rmem, trials) ─► rows
//!       ─► diodon_lab::report::write_all ─► CSV, testresults.txt, summary.txt, PNG
//! ```

use crate::fatal::Fatal;
use clap::Args;
use diodon_apps::report::Exit;
use diodon_lab::plan::Plan;
use diodon_lab::report;
use diodon_lab::resume::{self, Journal, TrialKey};
use diodon_lab::row::Row;
use diodon_lab::trial::{self, RunOptions, TrialError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// `diodon trial`.
#[derive(Debug, Args)]
pub struct TrialArgs {
    /// The plan (TOML).
    pub plan: PathBuf,
    /// Output directory (default: results/<plan file stem>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `scripts/testbed.sh` (default: `$DIODON_TESTBED`, `./scripts/testbed.sh`,
    /// or next to the binary's source tree).
    #[arg(long)]
    pub testbed: Option<PathBuf>,
    /// Testbed name (namespaces NAME-tx / NAME-rx). Default: dtr<pid>.
    #[arg(long)]
    pub name: Option<String>,
    /// No per-trial progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Add trials to the results already in the output directory (a run
    /// that finished, was interrupted, or was killed): the trials it has are
    /// skipped, the rest run, and the reports cover all of them. The plan
    /// must be the earlier one but for `trials` (raise it for more rounds).
    #[arg(long)]
    pub resume: bool,
    /// Run no trials: rewrite the reports (per-cell CSVs, testresults.txt,
    /// summary.txt, table.md, plots) from the trials the output directory
    /// holds, including a killed run's journal — e.g. after an upgrade of
    /// the report, or to read a run that is still going.
    #[arg(long, conflicts_with = "resume")]
    pub report_only: bool,
}

fn find_testbed(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("DIODON_TESTBED") {
        return PathBuf::from(p);
    }
    let here = PathBuf::from("scripts/testbed.sh");
    if here.is_file() {
        return here;
    }
    // target/<profile>/diodon → <tree>/scripts/testbed.sh
    std::env::current_exe()
        .ok()
        .and_then(|e| {
            e.ancestors()
                .map(|a| a.join("scripts/testbed.sh"))
                .find(|p| p.is_file())
        })
        .unwrap_or(here)
}

/// A flag set by SIGINT/SIGTERM. Unlike the transfer commands, a second
/// signal does not exit at once: the harness must still kill its children,
/// restore `net.core.rmem_*` and take the testbed down.
fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let _ = ctrlc::set_handler(move || {
        eprintln!("diodon: stopping the trial run, restoring the system");
        s.store(true, Ordering::SeqCst);
    });
    stop
}

/// Runs `diodon trial`. Exit: 0 all trials ran (whatever their outcome);
/// 2 bad plan; 3 the harness itself failed; 130 interrupted (the trials that
/// completed are written all the same).
pub fn run(a: &TrialArgs) -> Result<Exit, Fatal> {
    let plan = Plan::load(&a.plan).map_err(|e| Fatal::config(e.into()))?;
    let stem = a
        .plan
        .file_stem()
        .map_or_else(|| "trial".into(), |s| s.to_string_lossy().into_owned());
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(stem));
    if a.report_only {
        return report_only(&out);
    }
    let prior = earlier_rows(a, &plan, &out)?;
    // The plan goes in first: a killed run's journal is resumable only
    // next to the plan it was measured with.
    std::fs::create_dir_all(&out).map_err(|e| Fatal::io(e.into()))?;
    let copy = out.join("plan.toml");
    // Never copy the plan onto itself (that would truncate it).
    if std::fs::canonicalize(&a.plan).ok() != std::fs::canonicalize(&copy).ok() {
        std::fs::copy(&a.plan, &copy).map_err(|e| Fatal::io(e.into()))?;
    }
    let opts = RunOptions {
        diodon_bin: std::env::current_exe().map_err(|e| Fatal::io(e.into()))?,
        testbed_script: find_testbed(a.testbed.as_deref()),
        out_dir: out.clone(),
        testbed_name: a
            .name
            .clone()
            .unwrap_or_else(|| format!("dtr{}", std::process::id())),
        stop: stop_on_signal(),
        verbose: !a.quiet,
        done: prior.iter().map(TrialKey::of).collect(),
        journal: true,
        record_dir: PathBuf::from(diodon_lab::recovery::DEFAULT_DIR),
    };
    let rows = match trial::run(&plan, &opts) {
        Ok(new) => {
            let mut rows = prior;
            rows.extend(new);
            // Round by round, as one uninterrupted run would have written them.
            rows.sort_by_key(|r| r.trial);
            rows
        }
        Err(e @ TrialError::Plan(_)) => return Err(Fatal::config(e.into())),
        Err(e) => return Err(Fatal::io(e.into())),
    };
    let interrupted = opts.stop.load(Ordering::Relaxed);
    if interrupted {
        eprintln!(
            "diodon: trial run interrupted with {} trials in all; rmem and testbed restored, writing the partial results",
            rows.len()
        );
        if rows.is_empty() {
            Journal::remove(&out).map_err(|e| Fatal::io(e.into()))?;
            return Ok(Exit::Interrupted);
        }
    }
    write_reports(&out, &rows)?;
    // Every row is in trials.csv now.
    Journal::remove(&out).map_err(|e| Fatal::io(e.into()))?;
    eprintln!("diodon: results in {}", out.display());
    Ok(if interrupted {
        Exit::Interrupted
    } else {
        Exit::Success
    })
}

/// Writes every report of `rows` into `out` and prints the summary.
fn write_reports(out: &Path, rows: &[Row]) -> Result<(), Fatal> {
    report::write_all(out, rows).map_err(|e| Fatal::io(e.into()))?;
    print!("{}", report::summary(&report::cells(rows)));
    Ok(())
}

/// The trials `out` already holds that this run keeps: with `--resume`,
/// those of an earlier run of the same measurement (refused otherwise);
/// without, none — and results already there are refused, not overwritten.
fn earlier_rows(a: &TrialArgs, plan: &Plan, out: &Path) -> Result<Vec<Row>, Fatal> {
    if !a.resume {
        if resume::has_results(out) {
            return Err(Fatal::config(anyhow::anyhow!(
                    "{} already holds trial results; --resume adds trials to them, or choose another --out",
                    out.display()
                ),
            ));
        }
        return Ok(Vec::new());
    }
    let earlier = out.join("plan.toml");
    if earlier.is_file() {
        let earlier = Plan::load(&earlier).map_err(|e| Fatal::config(e.into()))?;
        resume::same_measurement(&earlier, plan).map_err(|e| Fatal::config(e.into()))?;
    } else if resume::has_results(out) {
        return Err(Fatal::config(anyhow::anyhow!(
            "{} has results but no plan.toml: cannot tell whether the plan measures the same cells",
            out.display()
        )));
    }
    let rows = resume::prior_rows(out).map_err(|e| Fatal::io(e.into()))?;
    if let Some(r) = rows.iter().find(|r| r.in_file_size != plan.file.size) {
        return Err(Fatal::config(anyhow::anyhow!(
            "{} holds trials of a {}-byte file, the plan sends {} bytes",
            out.display(),
            r.in_file_size,
            plan.file.size
        )));
    }
    eprintln!(
        "diodon: resuming {}: {} trials already done",
        out.display(),
        rows.len()
    );
    Ok(rows)
}

/// `--report-only`: the reports of the trials in `out`, none run. The
/// journal is left alone (a run may still be appending to it).
fn report_only(out: &Path) -> Result<Exit, Fatal> {
    let rows = resume::prior_rows(out).map_err(|e| Fatal::io(e.into()))?;
    if rows.is_empty() {
        return Err(Fatal::config(anyhow::anyhow!(
            "{} holds no trial results to report",
            out.display()
        )));
    }
    write_reports(out, &rows)?;
    eprintln!(
        "diodon: reports of {} trials rewritten in {}",
        rows.len(),
        out.display()
    );
    Ok(Exit::Success)
}
