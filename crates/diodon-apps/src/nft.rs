//! Running `nft` (and `ip`) inside a named network namespace.
//!
//! ```text
//!  ns = Some(NAME) ─► ip netns exec NAME nft ARGS  (stdin: ruleset text)
//!  ns = None       ─► nft ARGS                      (the caller's namespace)
//! ```

use std::io::Write;
use std::process::{Command, Stdio};

/// Errors from running an external tool.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The program could not be started (not installed, not root).
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and failed.
    #[error("`{command}` failed (exit {code:?}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit code.
        code: Option<i32>,
        /// What it printed on stderr.
        stderr: String,
    },
}

/// A command that runs `program args` in namespace `ns` (or here).
pub fn in_ns(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

/// Runs `nft ARGS` in `ns` with `stdin` fed in; returns stdout.
pub fn nft(ns: Option<&str>, args: &[&str], stdin: Option<&str>) -> Result<String, ToolError> {
    let mut cmd = in_ns(ns, "nft");
    cmd.args(args);
    run(cmd, stdin)
}

/// Runs `cmd` to completion, feeding `stdin`; stdout on success.
pub fn run(mut cmd: Command, stdin: Option<&str>) -> Result<String, ToolError> {
    let line = format!("{cmd:?}").replace('"', "");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let program = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .map_err(|source| ToolError::Spawn { program, source })?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A failed write shows up as the tool's own error below.
        let _ = pipe.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|source| ToolError::Spawn {
            program: line.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(ToolError::Failed {
            command: line,
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}
