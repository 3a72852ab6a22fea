//! The one error type of the lab's command line: an error with the exit
//! status it maps to; `main` prints it once.

use diodon_apps::report::Exit;

/// An error with the exit status it maps to.
pub struct Fatal(pub Exit, pub anyhow::Error);

impl Fatal {
    pub fn config(e: impl Into<anyhow::Error>) -> Fatal {
        Fatal(Exit::Config, e.into())
    }

    pub fn io(e: impl Into<anyhow::Error>) -> Fatal {
        Fatal(Exit::Io, e.into())
    }
}
