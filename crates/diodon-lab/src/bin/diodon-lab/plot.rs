//! `diodon-lab plot-fig4`: draws a `scripts/bench-tunnel.sh` run as the
//! NODROP paper's Fig. 4 (`diodon_lab::plot::plot_fig4`).

use crate::fatal::Fatal;
use clap::Args;
use diodon_apps::report::Exit;
use std::path::PathBuf;

/// `diodon-lab plot-fig4`.
#[derive(Debug, Args)]
pub struct PlotFig4Args {
    /// The run's CSV (`reader,qlen,offered,lost,loss_pct,throughput_mbps`).
    #[arg(long)]
    pub csv: PathBuf,
    /// Where loss.png and throughput.png go (default: beside the CSV).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Reads the CSV, writes the two plots.
pub fn run(args: &PlotFig4Args) -> Result<Exit, Fatal> {
    let text = std::fs::read_to_string(&args.csv)
        .map_err(|e| Fatal::config(anyhow::anyhow!("{}: {e}", args.csv.display())))?;
    let dir = args.out.clone().unwrap_or_else(|| {
        args.csv
            .parent()
            .map_or_else(|| PathBuf::from("."), PathBuf::from)
    });
    diodon_lab::plot::plot_fig4(&text, &dir)
        .map_err(|e| Fatal::config(anyhow::anyhow!("{}: {e}", args.csv.display())))?;
    eprintln!(
        "diodon-lab: wrote {} and {}",
        dir.join("loss.png").display(),
        dir.join("throughput.png").display()
    );
    Ok(Exit::Success)
}
