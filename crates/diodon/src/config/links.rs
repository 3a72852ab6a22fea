//! The links of a sender with one or several (`send`, `sync`): from the
//! flags (`--to` repeated, `--bind`) or the file (`[[link]]` tables, or
//! `to`), checked (never both forms in the file, no link twice).

use super::{FileConfig, LinkTable};
use crate::args::SendArgs;
use anyhow::{bail, Result};
use std::net::SocketAddr;

/// The links of a sender (`send`, `sync`): every `--to` (with `--bind`),
/// else the file's `[[link]]` tables, else its `to`. Empty when none is
/// given.
pub fn links(
    to: &[SocketAddr],
    bind: Option<SocketAddr>,
    f: &FileConfig,
) -> Result<Vec<LinkTable>> {
    let bind = bind.or(f.bind);
    let one = |to| LinkTable {
        to,
        bind,
        device: None,
    };
    let links: Vec<LinkTable> = if !to.is_empty() {
        to.iter().copied().map(one).collect()
    } else if f.link.is_empty() {
        f.to.into_iter().map(one).collect()
    } else if f.to.is_some() {
        bail!("the file gives both `to` and [[link]] tables: give one of them");
    } else {
        f.link
            .iter()
            .map(|l| LinkTable {
                bind: l.bind.or(bind),
                ..l.clone()
            })
            .collect()
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(l) = links.iter().find(|l| !seen.insert(l.to)) {
        bail!("link {} is given twice", l.to);
    }
    Ok(links)
}

impl SendArgs {
    /// This command's links: see [`links`].
    pub fn links(&self, f: &FileConfig) -> Result<Vec<LinkTable>> {
        links(&self.to, self.bind, f)
    }
}
