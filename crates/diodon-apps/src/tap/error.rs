//! Why a tap run fails: typed, one sentence each, with the exit status
//! it maps to (a leaf module: the run and its workers use it).

use super::rulebook::RuleLoadError;
use crate::report::Exit;

/// Why a tap run failed.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The rule file at start.
    #[error(transparent)]
    Rules(#[from] RuleLoadError),
    /// Settings that cannot work.
    #[error("{0}")]
    Config(String),
    /// Capturing (the interface went away, no permission).
    #[error("capture on {interface}: {source}")]
    Capture {
        /// The interface.
        interface: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Sending to the agents' segment.
    #[error("sending to the agents on {interface}: {source}")]
    Send {
        /// The interface.
        interface: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The one-way sender stopped (its socket failed).
    #[error("the one-way sender stopped")]
    SenderStopped,
    /// The sender pipeline failed.
    #[error(transparent)]
    Pipeline(#[from] crate::PipelineError),
    /// A thread could not start or panicked.
    #[error("the {0} thread failed")]
    Thread(&'static str),
    /// The process could not restrict itself once set up.
    #[error("restricting the process: {0}")]
    Sandbox(String),
}

impl TapError {
    /// The exit status.
    pub fn exit(&self) -> Exit {
        match self {
            TapError::Rules(_) | TapError::Config(_) => Exit::Config,
            _ => Exit::Io,
        }
    }
}
