//! What the package installs beside the binary, generated from the CLI
//! definition so it can never disagree with it: shell completion scripts
//! (`diodon completions SHELL`) and man pages (`diodon man DIR`: diodon.1
//! and diodon-SUBCOMMAND.1 for every subcommand, nested ones joined by `-`).

use crate::args::Cli;
use crate::fatal::Fatal;
use anyhow::Context;
use clap::CommandFactory;
use diodon_apps::report::Exit;
use std::path::Path;

/// Writes the completion script for `shell` on stdout.
pub fn completions(shell: clap_complete::Shell) -> Exit {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "diodon", &mut std::io::stdout());
    Exit::Success
}

/// Writes every man page into `dir`.
pub fn man_pages(dir: &Path) -> Result<Exit, Fatal> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", dir.display()))
        .map_err(Fatal::io)?;
    let mut cmd = Cli::command();
    cmd.build();
    let mut written = 0usize;
    write_pages(&cmd, "diodon", dir, &mut written).map_err(Fatal::io)?;
    eprintln!("diodon: {written} man pages written to {}", dir.display());
    Ok(Exit::Success)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut usize,
) -> anyhow::Result<()> {
    if cmd.is_hide_set() {
        return Ok(());
    }
    let page = cmd.clone().name(name.to_owned());
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .with_context(|| format!("rendering the man page of {name}"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, out).with_context(|| format!("writing {}", path.display()))?;
    *written += 1;
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
