//! The one error type of the command-line front end: an error with the exit
//! status it maps to ([`Exit`]); `main` prints it once and exits.

use diodon_apps::gateway::GatewayError;
use diodon_apps::report::Exit;

/// An error with the exit status it maps to.
pub struct Fatal(pub Exit, pub anyhow::Error);

impl Fatal {
    /// A usage or configuration error (exit 2).
    pub fn config(e: anyhow::Error) -> Fatal {
        Fatal(Exit::Config, e)
    }

    /// An IO error (exit 3).
    pub fn io(e: anyhow::Error) -> Fatal {
        Fatal(Exit::Io, e)
    }

    /// A run that ended before it had a summary.
    pub fn gateway(e: GatewayError) -> Fatal {
        Fatal(e.exit(), e.into())
    }
}
