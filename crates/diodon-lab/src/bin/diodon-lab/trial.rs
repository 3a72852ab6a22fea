//! `diodon-lab trial PLAN.toml`: runs the packet-loss thesis's experiment
//! with the `diodon` binary it finds next to itself (or `--diodon PATH`),
//! resumes a run in pieces, or rewrites the reports of the trials a run holds.
//!
//! ```text
//!  plan ─► diodon_lab::trial::run (testbed, guards, rmem, trials; runs `diodon send|recv`)
//!       ─► rows ─► diodon_lab::report::write_all ─► CSV, testresults.txt, summary.txt, PNG
//! ```

use crate::fatal::Fatal;
use anyhow::anyhow;
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

/// `diodon-lab trial`.
#[derive(Debug, Args)]
pub struct TrialArgs {
    /// The plan (TOML).
    plan: PathBuf,
    /// Output directory (default: results/<plan file stem>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// The `diodon` gateway binary the trials run (default: the one next to
    /// this `diodon-lab`, as `cargo build` puts them).
    #[arg(long, value_name = "PATH")]
    diodon: Option<PathBuf>,
    /// `scripts/testbed.sh` (default: `$DIODON_TESTBED`, `./scripts/testbed.sh`,
    /// or next to the binary's source tree).
    #[arg(long)]
    testbed: Option<PathBuf>,
    /// Testbed name (namespaces NAME-tx / NAME-rx). Default: dtr<pid>.
    #[arg(long)]
    name: Option<String>,
    /// No per-trial progress lines.
    #[arg(long)]
    quiet: bool,
    /// Add trials to the results already in the output directory (a run
    /// that finished, was interrupted, or was killed): the trials it has are
    /// skipped, the rest run, and the reports cover all of them. The plan
    /// must be the earlier one but for `trials` (raise it for more rounds).
    #[arg(long)]
    resume: bool,
    /// Run no trials: rewrite the reports (per-cell CSVs, testresults.txt,
    /// summary.txt, table.md, plots) from the trials the output directory
    /// holds, including a killed run's journal — e.g. after an upgrade of
    /// the report, or to read a run that is still going.
    #[arg(long, conflicts_with = "resume")]
    report_only: bool,
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
    // target/<profile>/diodon-lab → <tree>/scripts/testbed.sh
    std::env::current_exe()
        .ok()
        .and_then(|e| {
            e.ancestors()
                .map(|a| a.join("scripts/testbed.sh"))
                .find(|p| p.is_file())
        })
        .unwrap_or(here)
}

/// The `diodon` binary: `--diodon PATH`, else the one next to this
/// executable (`cargo build` puts both into the same target directory). A
/// plan with the `diodon` tool refuses to start when it is not there, and
/// says where it looked.
fn find_diodon(given: Option<&Path>) -> PathBuf {
    if let Some(p) = given {
        return p.to_owned();
    }
    let name = format!("diodon{}", std::env::consts::EXE_SUFFIX);
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(&name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// A flag set by SIGINT/SIGTERM. A second signal does not exit at once:
/// the harness must still kill its children, restore `net.core.rmem_*` and
/// take the testbed down.
fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let _ = ctrlc::set_handler(move || {
        eprintln!("diodon-lab: stopping the trial run, restoring the system");
        s.store(true, Ordering::SeqCst);
    });
    stop
}

/// Runs `diodon-lab trial`.
pub fn run(a: &TrialArgs) -> Result<Exit, Fatal> {
    let plan = Plan::load(&a.plan).map_err(Fatal::config)?;
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
    std::fs::create_dir_all(&out).map_err(Fatal::io)?;
    let copy = out.join("plan.toml");
    // Never copy the plan onto itself (that would truncate it).
    if std::fs::canonicalize(&a.plan).ok() != std::fs::canonicalize(&copy).ok() {
        std::fs::copy(&a.plan, &copy).map_err(Fatal::io)?;
    }
    let opts = RunOptions {
        diodon_bin: find_diodon(a.diodon.as_deref()),
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
        Err(e @ TrialError::Plan(_)) => return Err(Fatal::config(e)),
        Err(e) => return Err(Fatal::io(e)),
    };
    let interrupted = opts.stop.load(Ordering::Relaxed);
    if interrupted {
        eprintln!(
            "diodon-lab: trial run interrupted with {} trials in all; rmem and testbed restored, writing the partial results",
            rows.len()
        );
        if rows.is_empty() {
            Journal::remove(&out).map_err(Fatal::io)?;
            return Ok(Exit::Interrupted);
        }
    }
    write_reports(&out, &rows)?;
    // Every row is in trials.csv now.
    Journal::remove(&out).map_err(Fatal::io)?;
    eprintln!("diodon-lab: results in {}", out.display());
    Ok(if interrupted {
        Exit::Interrupted
    } else {
        Exit::Success
    })
}

/// Writes every report of `rows` into `out` and prints the summary.
fn write_reports(out: &Path, rows: &[Row]) -> Result<(), Fatal> {
    report::write_all(out, rows).map_err(Fatal::io)?;
    print!("{}", report::summary(&report::cells(rows)));
    Ok(())
}

/// The trials `out` already holds that this run keeps: with `--resume`,
/// those of an earlier run of the same measurement (refused otherwise);
/// without, none — and results already there are refused, not overwritten.
fn earlier_rows(a: &TrialArgs, plan: &Plan, out: &Path) -> Result<Vec<Row>, Fatal> {
    if !a.resume {
        if resume::has_results(out) {
            return Err(Fatal::config(anyhow!(
                "{} already holds trial results; --resume adds trials to them, or choose another --out",
                out.display()
            )));
        }
        return Ok(Vec::new());
    }
    let earlier = out.join("plan.toml");
    if earlier.is_file() {
        let earlier = Plan::load(&earlier).map_err(Fatal::config)?;
        resume::same_measurement(&earlier, plan).map_err(Fatal::config)?;
    } else if resume::has_results(out) {
        return Err(Fatal::config(anyhow!(
            "{} has results but no plan.toml: cannot tell whether the plan measures the same cells",
            out.display()
        )));
    }
    let rows = resume::prior_rows(out).map_err(Fatal::io)?;
    if let Some(r) = rows.iter().find(|r| r.in_file_size != plan.file.size) {
        return Err(Fatal::config(anyhow!(
            "{} holds trials of a {}-byte file, the plan sends {} bytes",
            out.display(),
            r.in_file_size,
            plan.file.size
        )));
    }
    eprintln!(
        "diodon-lab: resuming {}: {} trials already done",
        out.display(),
        rows.len()
    );
    Ok(rows)
}

/// `--report-only`: the reports of the trials in `out`, none run. The
/// journal is left alone (a run may still be appending to it).
fn report_only(out: &Path) -> Result<Exit, Fatal> {
    let rows = resume::prior_rows(out).map_err(Fatal::io)?;
    if rows.is_empty() {
        return Err(Fatal::config(anyhow!(
            "{} holds no trial results to report",
            out.display()
        )));
    }
    write_reports(out, &rows)?;
    eprintln!(
        "diodon-lab: reports of {} trials rewritten in {}",
        rows.len(),
        out.display()
    );
    Ok(Exit::Success)
}
