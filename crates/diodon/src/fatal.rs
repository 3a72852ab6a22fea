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

    /// The error as one sentence: each cause once. Many of our errors
    /// already name their cause in their own message; a cause whose text
    /// the sentence holds already is not repeated.
    pub fn sentence(&self) -> String {
        sentence(&self.1)
    }
}

/// [`Fatal::sentence`] of any error chain.
pub fn sentence(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("send failed: {source}")]
    struct Inner {
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("UDP: {0}")]
    struct Outer(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("reading the key file")]
    struct Bare(#[source] std::io::Error);

    #[test]
    fn each_cause_is_said_once() {
        let io = || std::io::Error::other("Network is unreachable");
        let e = anyhow::Error::new(Outer(Inner { source: io() }));
        assert_eq!(
            format!("{e:#}"),
            "UDP: send failed: Network is unreachable: send failed: Network is unreachable: Network is unreachable",
            "what anyhow prints"
        );
        assert_eq!(sentence(&e), "UDP: send failed: Network is unreachable");
        // A cause its error does not name is kept.
        let e = anyhow::Error::new(Bare(io())).context("--key-file k");
        assert_eq!(
            sentence(&e),
            "--key-file k: reading the key file: Network is unreachable"
        );
    }
}
