//! Continuing a trial run: reading rows back from `trials.csv` and from the
//! journal a run appends to as it goes, checking that a plan measures the
//! same thing as the one already in the output directory, and the journal
//! writer itself.
//!
//! ```text
//!  run:      every finished trial ─► OUT/journal.csv (appended, synced)
//!            end or interrupt     ─► OUT/trials.csv + reports; journal removed
//!  killed:   OUT/journal.csv stays (nothing else was written)
//!  --resume: OUT/trials.csv ∪ OUT/journal.csv ─► rows already done (keys skipped)
//!            OUT/plan.toml vs the new plan: only `trials` and `name` may differ
//! ```
//!
//! A 100-trials-per-cell reproduction takes many hours on a small machine;
//! this is what lets it run in pieces, and lets a crash or a reboot cost one
//! trial instead of the whole run.

use crate::plan::{Plan, Tool};
use crate::row::{Config, Row, CSV_HEADER};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The journal's file name inside the output directory.
pub const JOURNAL: &str = "journal.csv";
/// The combined CSV's file name inside the output directory.
pub const TRIALS: &str = "trials.csv";

/// What identifies one trial: its cell and its number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TrialKey {
    tool: Tool,
    rcvbuf: u64,
    mtu: u32,
    loss_bits: u64,
    bitrate_bits: u64,
    trial: u32,
}

impl TrialKey {
    /// The key of a trial of `config` at `bitrate`.
    pub fn new(config: &Config, bitrate: f64, trial: u32) -> TrialKey {
        TrialKey {
            tool: config.tool,
            rcvbuf: config.rcvbuf,
            mtu: config.mtu,
            // +0.0 for -0.0, so both spell the same cell.
            loss_bits: (config.loss + 0.0).to_bits(),
            bitrate_bits: (bitrate + 0.0).to_bits(),
            trial,
        }
    }

    /// The key of a finished row.
    pub fn of(row: &Row) -> TrialKey {
        TrialKey::new(&row.config, row.bitrate, row.trial)
    }
}

/// Errors continuing a run.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// Reading or writing the output directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A line that is not a row of ours.
    #[error("{path} line {line}: {message}")]
    Row {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The plan measures something else than the earlier run.
    #[error("{0}")]
    Mismatch(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ResumeError + '_ {
    move |source| ResumeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Reads the rows of a CSV written by [`Row::csv`] under [`CSV_HEADER`].
/// A missing file is no rows. A last line cut short (a run killed while
/// writing it) is skipped; any other bad line is an error.
pub fn read_rows(path: &Path) -> Result<Vec<Row>, ResumeError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at(path)(e)),
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        None => return Ok(Vec::new()),
        Some((_, h)) if h == CSV_HEADER => {}
        Some(_) => {
            return Err(ResumeError::Row {
                path: path.to_owned(),
                line: 1,
                message: "not a trial CSV of this version (header differs)".into(),
            })
        }
    }
    let complete = text.ends_with('\n');
    let lines: Vec<(usize, &str)> = lines.collect();
    let mut rows = Vec::with_capacity(lines.len());
    for (i, (n, line)) in lines.iter().enumerate() {
        if line.is_empty() {
            continue;
        }
        match Row::from_csv(line) {
            Ok(r) => rows.push(r),
            Err(_) if !complete && i + 1 == lines.len() => {}
            Err(message) => {
                return Err(ResumeError::Row {
                    path: path.to_owned(),
                    line: n + 1,
                    message,
                })
            }
        }
    }
    Ok(rows)
}

/// The rows an earlier run in `out` finished: `trials.csv`, then the
/// journal of a run that was killed before it could write one. A trial in
/// both counts once (the first seen).
pub fn prior_rows(out: &Path) -> Result<Vec<Row>, ResumeError> {
    let mut rows = read_rows(&out.join(TRIALS))?;
    let mut seen: HashSet<TrialKey> = rows.iter().map(TrialKey::of).collect();
    for r in read_rows(&out.join(JOURNAL))? {
        if seen.insert(TrialKey::of(&r)) {
            rows.push(r);
        }
    }
    // Rounds in order, as a run writes them (a stable sort keeps each
    // round's own order).
    rows.sort_by_key(|r| r.trial);
    Ok(rows)
}

/// Whether `out` holds results of a run (finished, or killed after at least
/// one trial; an unreadable journal counts, so it is never overwritten).
pub fn has_results(out: &Path) -> bool {
    out.join(TRIALS).exists() || read_rows(&out.join(JOURNAL)).map_or(true, |r| !r.is_empty())
}

/// Checks that `plan` measures the same cells, the same way, as `earlier`:
/// everything but `trials` and `name` must be equal. The error names the
/// keys that differ.
pub fn same_measurement(earlier: &Plan, plan: &Plan) -> Result<(), ResumeError> {
    let table = |p: &Plan| -> Result<toml::Table, ResumeError> {
        let v = toml::Value::try_from(p)
            .map_err(|e| ResumeError::Mismatch(format!("cannot compare plans: {e}")))?;
        let toml::Value::Table(mut t) = v else {
            return Err(ResumeError::Mismatch("a plan is not a table".into()));
        };
        t.remove("trials");
        t.remove("name");
        Ok(t)
    };
    let (a, b) = (table(earlier)?, table(plan)?);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let differ: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| format!("`{k}`"))
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(ResumeError::Mismatch(format!(
            "the plan differs from the earlier run's plan.toml in {} (only `trials` may change when resuming; use another --out for a new measurement)",
            differ.join(", ")
        )))
    }
}

/// Appends finished rows to the journal, one synced line each.
#[derive(Debug)]
pub struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    /// Opens (creates, with the header) `out/journal.csv`.
    pub fn open(out: &Path) -> Result<Journal, ResumeError> {
        fs::create_dir_all(out).map_err(io_at(out))?;
        let path = out.join(JOURNAL);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io_at(&path))?;
        // A line cut short by a kill is dropped, so the next row starts on
        // its own line (the reader forgives only a *last* bad line).
        let whole = whole_lines(&path).map_err(io_at(&path))?;
        file.set_len(whole).map_err(io_at(&path))?;
        if whole == 0 {
            writeln!(file, "{CSV_HEADER}").map_err(io_at(&path))?;
        }
        Ok(Journal { file, path })
    }

    /// Appends one row and syncs it to disk.
    pub fn append(&mut self, row: &Row) -> Result<(), ResumeError> {
        writeln!(self.file, "{}", row.csv()).map_err(io_at(&self.path))?;
        self.file.sync_data().map_err(io_at(&self.path))
    }

    /// Removes the journal once its rows are in `trials.csv`.
    pub fn remove(out: &Path) -> Result<(), ResumeError> {
        let path = out.join(JOURNAL);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_at(&path)(e)),
            _ => Ok(()),
        }
    }
}

/// The length of the file up to and including its last newline.
fn whole_lines(path: &Path) -> io::Result<u64> {
    let data = fs::read(path)?;
    Ok(data
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i as u64 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::tests_support::row;

    /// A row of trial `n` whose CSV reads back equal.
    fn row_of(n: u32) -> Row {
        Row {
            trial: n,
            reason: String::new(),
            ..row()
        }
    }

    #[test]
    fn journal_keeps_rows_across_a_kill_and_prior_rows_dedupe() {
        let dir = tempfile::tempdir().expect("test");
        let out = dir.path();
        assert!(!has_results(out));
        let mut journal = Journal::open(out).expect("open");
        assert!(!has_results(out), "a journal without rows is no result");
        let a = row_of(2);
        journal.append(&a).expect("append");
        drop(journal);
        // A kill while writing the next line leaves half of it.
        let mut file = OpenOptions::new()
            .append(true)
            .open(out.join(JOURNAL))
            .expect("test");
        file.write_all(b"netcat,4194304,15").expect("test");
        drop(file);
        assert!(has_results(out));
        assert_eq!(
            read_rows(&out.join(JOURNAL)).expect("read"),
            vec![a.clone()]
        );
        // Reopened by a resumed run: the cut line is ended, new rows follow.
        let mut journal = Journal::open(out).expect("reopen");
        let b = row_of(3);
        journal.append(&b).expect("append");
        drop(journal);
        let rows = read_rows(&out.join(JOURNAL)).expect("read");
        assert_eq!(rows, vec![a.clone(), b.clone()], "the cut line is gone");
        // A cut line in the middle of a file is an error, not skipped.
        let text = fs::read_to_string(out.join(JOURNAL)).expect("test");
        let cut = text.replacen(&format!("{}\n", b.csv()), "netcat,4\n", 1) + &b.csv() + "\n";
        fs::write(out.join(JOURNAL), cut).expect("test");
        let err = read_rows(&out.join(JOURNAL)).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        fs::write(out.join(JOURNAL), text).expect("test");
        // trials.csv of an earlier finished run holds trial 1 and trial 2.
        let c = row_of(1);
        let csv = format!("{CSV_HEADER}\n{}\n{}\n", a.csv(), c.csv());
        fs::write(out.join(TRIALS), csv).expect("test");
        let rows = prior_rows(out).expect("prior");
        assert_eq!(rows.iter().map(|r| r.trial).collect::<Vec<_>>(), [1, 2, 3]);
        Journal::remove(out).expect("remove");
        Journal::remove(out).expect("removing twice is fine");
        assert!(!out.join(JOURNAL).exists());
    }

    #[test]
    fn a_csv_of_another_layout_is_refused() {
        let dir = tempfile::tempdir().expect("test");
        let p = dir.path().join(TRIALS);
        fs::write(&p, "bitrate,trial\n100,1\n").expect("test");
        assert!(read_rows(&p).unwrap_err().to_string().contains("header"));
        assert!(read_rows(&dir.path().join("none.csv"))
            .expect("missing")
            .is_empty());
    }

    #[test]
    fn only_trials_and_name_may_change() {
        let base = "tools = [\"diodon\"]\nbitrates_mbps = [100, 200]\ntrials = 5\n";
        let earlier = Plan::parse(base).expect("plan");
        let more =
            Plan::parse(&format!("name = \"x\"\n{}", base.replace("= 5", "= 100"))).expect("plan");
        same_measurement(&earlier, &more).expect("same measurement");
        let other = Plan::parse(&format!("{base}mtu = [9000]\nrepair = 20\n")).expect("plan");
        let e = same_measurement(&earlier, &other).unwrap_err().to_string();
        assert!(e.contains("in `mtu`, `repair` ("), "{e}");
    }
}
