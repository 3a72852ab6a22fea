//! The errors that stop a whole trial run (a failing trial is a row, not
//! an error), gathered from every module the run loop calls.
//!
//! ```text
//!  PlanError · MachineError · StatsError · DiodeError · RecoveryError · ResumeError
//!        └──────────────────────────► TrialError ◄── io (files, processes), Missing, Interrupted
//! ```

use crate::diode::DiodeError;
use crate::machine::MachineError;
use crate::plan::PlanError;
use crate::recovery::RecoveryError;
use crate::resume::ResumeError;
use diodon_apps::stats::StatsError;
use std::io;

/// Errors that stop a whole run (a failing trial is a row, not an error).
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The plan.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Files, processes.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Sysctls, the testbed, the guards, the tools' processes.
    #[error(transparent)]
    Machine(#[from] MachineError),
    /// Measuring points.
    #[error(transparent)]
    Stats(#[from] StatsError),
    /// A given diode that is not there.
    #[error(transparent)]
    Diode(#[from] DiodeError),
    /// Something the run needs is missing.
    #[error("{0}")]
    Missing(String),
    /// Another run is going, or a killed run's record is unreadable.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// The journal, or an earlier run's rows.
    #[error(transparent)]
    Resume(#[from] ResumeError),
    /// Interrupted.
    #[error("interrupted")]
    Interrupted,
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> TrialError {
    let what = what.into();
    move |source| TrialError::Io { what, source }
}
