//! `--user` and `--no-sandbox` (and their TOML keys) become the
//! [`SandboxOptions`] the library's policy starts from.
//!
//! ```text
//!  SandboxArgs + FileConfig + --config, key file, --metrics ─► SandboxOptions
//!  ─► diodon_apps::sandbox::{recv,send,sync,tap,agent}_policy ─► apply (after the
//!     command's privileged half: open_recv / open_send, or run_sync / run_tap / run_agent's
//!     `restrict` hook)
//!  AgentFile user / no-sandbox ─► resolve (the same, for a command with its own TOML keys)
//! ```

use crate::args::{LinkArgs, SandboxArgs};
use crate::config::{pick, FileConfig};
use crate::fatal::Fatal;
use anyhow::anyhow;
use diodon_apps::sandbox::SandboxOptions;
use diodon_io::sandbox::{is_root, User};
use std::path::PathBuf;

/// The operator's sandbox settings, the user looked up.
pub fn options(
    a: &SandboxArgs,
    file: &FileConfig,
    link: &LinkArgs,
    metrics: bool,
) -> Result<SandboxOptions, Fatal> {
    let config_files = [
        link.config.clone(),
        link.key_file.clone().or_else(|| file.key_file.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    resolve(
        pick(a.user.as_ref(), file.user.as_ref()),
        a.no_sandbox || file.no_sandbox.unwrap_or(false),
        config_files,
        metrics,
    )
}

/// [`SandboxOptions`] from settings already merged (a command with a
/// config file of its own: `agent`).
pub fn resolve(
    user: Option<String>,
    off: bool,
    config_files: Vec<PathBuf>,
    metrics: bool,
) -> Result<SandboxOptions, Fatal> {
    let user = match user {
        Some(name) => {
            if !is_root() {
                return Err(Fatal::config(anyhow!(
                    "--user {name}: changing user needs the process to start as root"
                )));
            }
            Some(User::lookup(&name).map_err(|e| Fatal::config(e.into()))?)
        }
        None => None,
    };
    Ok(SandboxOptions {
        user,
        off,
        config_files,
        metrics,
    })
}
