//! `--user` and `--no-sandbox` (and their TOML keys) become the
//! [`SandboxOptions`] the library's policy starts from.
//!
//! ```text
//!  SandboxArgs + FileConfig + --config, key file's folder, --metrics ─► SandboxOptions
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
use std::path::{Path, PathBuf};

/// The operator's sandbox settings, the user looked up.
pub fn options(
    a: &SandboxArgs,
    file: &FileConfig,
    link: &LinkArgs,
    metrics: bool,
) -> Result<SandboxOptions, Fatal> {
    // The key file's folder, not the file: SIGHUP reads the key file again,
    // and an editor or a deployment tool replaces it by a new file (a new
    // inode a rule on the old file would not cover).
    let key_folder = link
        .key_file
        .clone()
        .or_else(|| file.key_file.clone())
        .and_then(|k| std::path::absolute(k).ok())
        .and_then(|k| k.parent().map(Path::to_path_buf));
    let config_files = [link.config.clone(), key_folder]
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
