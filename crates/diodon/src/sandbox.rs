//! `--user` and `--no-sandbox` (and their TOML keys) become the
//! [`SandboxOptions`] the library's policy starts from.
//!
//! ```text
//!  SandboxArgs + FileConfig + --config, key file, --metrics ─► SandboxOptions
//!  ─► diodon_apps::sandbox::{recv_policy, send_policy} ─► apply (after open_recv / open_send)
//! ```

use crate::args::{LinkArgs, SandboxArgs};
use crate::config::{pick, FileConfig};
use crate::fatal::Fatal;
use anyhow::anyhow;
use diodon_apps::sandbox::SandboxOptions;
use diodon_io::sandbox::{is_root, User};
use std::path::Path;

/// The operator's sandbox settings, the user looked up.
pub fn options(
    a: &SandboxArgs,
    file: &FileConfig,
    link: &LinkArgs,
    metrics: bool,
) -> Result<SandboxOptions, Fatal> {
    let user = match pick(a.user.as_ref(), file.user.as_ref()) {
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
    Ok(SandboxOptions {
        user,
        off: a.no_sandbox || file.no_sandbox.unwrap_or(false),
        config_files,
        metrics,
    })
}
