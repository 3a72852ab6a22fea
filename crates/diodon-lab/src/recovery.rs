//! What a trial run changes on the machine, written down before it changes
//! it, so that a run killed outright (SIGKILL, OOM killer, a closed session)
//! is undone by the next `diodon-lab trial` — and so two runs never overlap.
//!
//! ```text
//!  run starts ─► recover(): for every record in /run/diodon/trial/
//!                  its process alive?  ─► refuse: another run is going
//!                  dead                ─► kill what runs in its testbed, testbed down,
//!                                         its trial guard tables removed,
//!                                         net.core.rmem_* back (if still its own value),
//!                                         record deleted
//!            ─► RunRecord::create (pid + start time, rmem found, testbed, guards)
//!            ─► ... trials ...
//!  run ends (also on error, panic, SIGINT) ─► RunRecord dropped: file deleted
//! ```
//!
//! A signal the harness can catch (SIGINT, SIGTERM) needs none of this: the
//! run restores everything itself ([`crate::machine::RmemGuard`], testbed and
//! guard drops). The tools the harness starts die with it on their own
//! (`PR_SET_PDEATHSIG`, [`crate::machine::ns_cmd`]); recovery kills what is
//! still inside the dead run's testbed namespaces as a second line, and
//! nothing else. Undoing uses the same functions as doing ([`crate::machine`]).
//!
//! A process is identified by PID *and* its start time (`/proc/PID/stat`
//! field 22), so a recycled PID is never mistaken for the run.

use crate::machine::{kill, netns_pids, read_rmem, testbed_down, write_rmem};
use diodon_apps::guard;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where records live: `/run` is a tmpfs, so a reboot (which restores the
/// sysctls and removes namespaces anyway) also removes the records.
pub const DEFAULT_DIR: &str = "/run/diodon/trial";

/// Errors of recovery and of writing the record.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// Another harness is running: its sysctls and load would mix with ours.
    #[error(
        "another trial run is going (pid {pid}, record {record}); it sets net.core.rmem_* and \
         loads the CPU, so runs must not overlap: wait for it or stop it (kill -INT {pid})"
    )]
    Busy {
        /// Its PID.
        pid: u32,
        /// Its record file.
        record: PathBuf,
    },
    /// A record that cannot be read or parsed: left for a human.
    #[error("trial run record {path}: {why} (remove it after checking net.core.rmem_* and `ip netns list` by hand)")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Files.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> RecoveryError {
    let what = what.into();
    move |source| RecoveryError::Io { what, source }
}

/// What one run may change, as stored in its record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The harness's PID.
    pub pid: u32,
    /// Its start time (clock ticks after boot, `/proc/PID/stat` field 22).
    pub start_time: u64,
    /// `net.core.rmem_max` and `rmem_default` as the run found them, when it
    /// sets them.
    pub rmem_found: Option<(String, String)>,
    /// The values the run may set (the plan's non-zero `rcvbuf`s).
    pub rmem_set: Vec<u64>,
    /// The testbed script and testbed name, when the run builds one.
    pub testbed: Option<(PathBuf, String)>,
    /// Namespaces on a given diode into which the run loads its guard table.
    pub guard_ns: Vec<String>,
    /// That table's name.
    pub guard_table: String,
}

impl Record {
    /// The record's text: one `key=value` per line.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "pid={}", self.pid);
        let _ = writeln!(s, "start_time={}", self.start_time);
        if let Some((max, def)) = &self.rmem_found {
            let _ = writeln!(s, "rmem_max={max}");
            let _ = writeln!(s, "rmem_default={def}");
        }
        for v in &self.rmem_set {
            let _ = writeln!(s, "rmem_set={v}");
        }
        if let Some((script, name)) = &self.testbed {
            let _ = writeln!(s, "testbed_script={}", script.display());
            let _ = writeln!(s, "testbed={name}");
        }
        for ns in &self.guard_ns {
            let _ = writeln!(s, "guard_ns={ns}");
        }
        if !self.guard_ns.is_empty() {
            let _ = writeln!(s, "guard_table={}", self.guard_table);
        }
        s
    }

    /// Parses [`Record::to_text`]'s output.
    pub fn parse(text: &str) -> Result<Record, String> {
        let mut r = Record::default();
        let (mut max, mut def, mut script, mut name) = (None, None, None, None);
        let mut have_pid = false;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {line:?} is not key=value"))?;
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("{k}={v:?}: not a number"))
            };
            match k {
                "pid" => {
                    r.pid = u32::try_from(num(v)?).map_err(|_| format!("pid {v} out of range"))?;
                    have_pid = true;
                }
                "start_time" => r.start_time = num(v)?,
                "rmem_max" => max = Some(v.to_owned()),
                "rmem_default" => def = Some(v.to_owned()),
                "rmem_set" => r.rmem_set.push(num(v)?),
                "testbed_script" => script = Some(PathBuf::from(v)),
                "testbed" => name = Some(v.to_owned()),
                "guard_ns" => r.guard_ns.push(v.to_owned()),
                "guard_table" => v.clone_into(&mut r.guard_table),
                _ => return Err(format!("unknown key {k:?}")),
            }
        }
        if !have_pid {
            return Err("no pid".into());
        }
        r.rmem_found = match (max, def) {
            (Some(m), Some(d)) => Some((m, d)),
            (None, None) => None,
            _ => return Err("rmem_max without rmem_default or the other way round".into()),
        };
        r.testbed = match (script, name) {
            (Some(s), Some(n)) => Some((s, n)),
            (None, None) => None,
            _ => return Err("testbed_script without testbed or the other way round".into()),
        };
        if !r.guard_ns.is_empty() && r.guard_table.is_empty() {
            return Err("guard_ns without guard_table".into());
        }
        Ok(r)
    }
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`), or
/// `None` when there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces and
    // ')': the fields after it start past the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest: " state ppid ..." — state is field 3, start time field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process a record names is still the one that wrote it.
fn alive(r: &Record) -> bool {
    start_time(r.pid) == Some(r.start_time)
}

/// A record on disk, deleted when dropped (the run ended, however).
#[derive(Debug)]
pub struct RunRecord {
    path: PathBuf,
}

impl RunRecord {
    /// Writes `record` (its pid and start time are this process's) to `dir`.
    pub fn create(dir: &Path, mut record: Record) -> Result<RunRecord, RecoveryError> {
        for name in record
            .guard_ns
            .iter()
            .chain(record.testbed.iter().map(|(_, n)| n))
        {
            if name.contains('\n') {
                return Err(RecoveryError::BadRecord {
                    path: dir.to_owned(),
                    why: format!("name {name:?} cannot be recorded"),
                });
            }
        }
        record.pid = std::process::id();
        record.start_time = start_time(record.pid).ok_or_else(|| RecoveryError::Io {
            what: "reading /proc/self/stat".into(),
            source: io::Error::other("no start time"),
        })?;
        fs::create_dir_all(dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let path = dir.join(format!("{}.run", record.pid));
        let tmp = dir.join(format!(".{}.run.tmp", record.pid));
        fs::write(&tmp, record.to_text()).map_err(io_err(format!("writing {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(io_err(format!("writing {}", path.display())))?;
        Ok(RunRecord { path })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunRecord {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Undoes what dead runs recorded in `dir` left behind; refuses while a run
/// is alive. Returns one line per thing done, for the operator.
pub fn recover(dir: &Path) -> Result<Vec<String>, RecoveryError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(format!("reading {}", dir.display()))(e)),
    };
    let mut records = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(io_err(format!("reading {}", dir.display())))?
            .path();
        if path.extension().is_none_or(|e| e != "run") {
            continue;
        }
        let text =
            fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))?;
        let record = Record::parse(&text).map_err(|why| RecoveryError::BadRecord {
            path: path.clone(),
            why,
        })?;
        if alive(&record) {
            if record.pid == std::process::id() {
                continue; // our own, still in use
            }
            return Err(RecoveryError::Busy {
                pid: record.pid,
                record: path,
            });
        }
        records.push((path, record));
    }
    let mut done = Vec::new();
    for (path, record) in records {
        done.extend(undo(&record));
        fs::remove_file(&path).map_err(io_err(format!("removing {}", path.display())))?;
    }
    Ok(done)
}

/// Undoes one dead run's changes (each step on its own: one failing does
/// not stop the rest). Returns what was done and what could not be.
fn undo(r: &Record) -> Vec<String> {
    let who = format!("killed trial run (pid {})", r.pid);
    let mut done = Vec::new();
    if let Some((script, name)) = &r.testbed {
        for side in ["tx", "rx"] {
            let ns = format!("{name}-{side}");
            for pid in netns_pids(&ns) {
                // Only what runs inside the dead run's own testbed.
                if kill(pid, "-KILL") {
                    done.push(format!("{who}: killed pid {pid} left in namespace {ns}"));
                }
            }
        }
        match testbed_down(script, name) {
            Ok(()) => done.push(format!("{who}: testbed {name} taken down")),
            Err(e) => done.push(format!("{who}: testbed {name} down failed: {e}")),
        }
    }
    for ns in &r.guard_ns {
        if diodon_io::netns::path_of(ns).exists() {
            match guard::remove(Some(ns), &r.guard_table) {
                Ok(()) => done.push(format!(
                    "{who}: guard table {} removed from {ns}",
                    r.guard_table
                )),
                Err(e) => done.push(format!(
                    "{who}: removing guard table {} from {ns} failed: {e}",
                    r.guard_table
                )),
            }
        }
    }
    if let Some((max, def)) = &r.rmem_found {
        done.extend(restore_rmem(&who, max, def, &r.rmem_set));
    }
    done
}

/// Puts `net.core.rmem_*` back to what the dead run found, but only while
/// they still hold a value the run itself set: a value someone chose since
/// is left alone (and said so).
fn restore_rmem(who: &str, max: &str, def: &str, set: &[u64]) -> Option<String> {
    let (now_max, now_def) = read_rmem().ok()?;
    if now_max == max && now_def == def {
        return None;
    }
    let its_own = |v: &str| v.parse::<u64>().is_ok_and(|v| set.contains(&v));
    if !(its_own(&now_max) && its_own(&now_def)) {
        return Some(format!(
            "{who}: net.core.rmem_max={now_max} rmem_default={now_def} are not values it set; \
             left as they are (it found {max} / {def})"
        ));
    }
    Some(if write_rmem(max, def).is_ok() {
        format!("{who}: net.core.rmem_max {now_max} -> {max}, rmem_default {now_def} -> {def}")
    } else {
        format!("{who}: could not restore net.core.rmem_max={max} rmem_default={def}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            pid: 4242,
            start_time: 987_654,
            rmem_found: Some(("212992".into(), "212992".into())),
            rmem_set: vec![4_194_304, 16_777_216],
            testbed: Some((PathBuf::from("/x/scripts/testbed.sh"), "dtr4242".into())),
            guard_ns: vec!["diode-tx".into(), "diode-rx".into()],
            guard_table: "diodon_trial".into(),
        }
    }

    #[test]
    fn record_text_round_trips() {
        let r = sample();
        assert_eq!(Record::parse(&r.to_text()).unwrap(), r);
        let bare = Record {
            pid: 1,
            ..Record::default()
        };
        assert_eq!(Record::parse(&bare.to_text()).unwrap(), bare);
    }

    #[test]
    fn malformed_records_are_refused() {
        for bad in [
            "",
            "start_time=1\n",
            "pid=x\n",
            "pid=1\nrmem_max=5\n",
            "pid=1\ntestbed=dtr1\n",
            "pid=1\nguard_ns=a\n",
            "pid=1\nwhat=ever\n",
            "pid=1\nno equals sign\n",
        ] {
            assert!(Record::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn start_time_tells_this_process_from_a_missing_one() {
        let me = std::process::id();
        let t = start_time(me).expect("own start time");
        assert!(alive(&Record {
            pid: me,
            start_time: t,
            ..Record::default()
        }));
        // Same PID, other start time: a recycled PID, not the run.
        assert!(!alive(&Record {
            pid: me,
            start_time: t + 1,
            ..Record::default()
        }));
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn a_record_is_deleted_when_the_run_ends_and_a_dead_one_is_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let rec = RunRecord::create(dir.path(), Record::default()).unwrap();
        let text = fs::read_to_string(rec.path()).unwrap();
        assert!(text.starts_with(&format!("pid={}\n", std::process::id())));
        // Our own record does not make us "busy".
        assert!(recover(dir.path()).is_ok());
        let rec = RunRecord::create(dir.path(), Record::default()).unwrap();
        let path = rec.path().to_owned();
        drop(rec);
        assert!(!path.exists());
        // A dead run's record (no such start time) with nothing to undo is
        // simply cleared.
        let dead = Record {
            pid: std::process::id(),
            start_time: 1,
            ..Record::default()
        };
        fs::write(dir.path().join("1.run"), dead.to_text()).unwrap();
        assert_eq!(recover(dir.path()).unwrap(), Vec::<String>::new());
        assert!(!dir.path().join("1.run").exists());
        // A garbled one is left for a human, with a clear error.
        fs::write(dir.path().join("2.run"), "garbage").unwrap();
        let e = recover(dir.path()).unwrap_err().to_string();
        assert!(e.contains("2.run") && e.contains("by hand"), "{e}");
    }

    #[test]
    fn a_live_run_makes_another_refuse() {
        let dir = tempfile::tempdir().unwrap();
        // PID 1 is alive; its real start time makes it "a run going".
        let init = Record {
            pid: 1,
            start_time: start_time(1).unwrap(),
            ..Record::default()
        };
        fs::write(dir.path().join("1.run"), init.to_text()).unwrap();
        let e = recover(dir.path()).unwrap_err();
        assert!(matches!(e, RecoveryError::Busy { pid: 1, .. }), "{e}");
        assert!(dir.path().join("1.run").exists());
    }
}
