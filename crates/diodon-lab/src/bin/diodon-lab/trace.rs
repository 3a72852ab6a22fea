//! `diodon-lab trace`: writes a pcap trace for the tap's benchmark and
//! tests (`diodon_lab::trace`).

use crate::fatal::Fatal;
use clap::{Args, ValueEnum};
use diodon_apps::report::Exit;
use diodon_lab::trace::{write, Mix};
use std::path::PathBuf;

/// Which traffic.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MixArg {
    /// Sources 10.0.0.1-14 to 10.0.1.1 (the thesis's Tables 4.1 and 4.2).
    Thesis,
    /// The thesis's 16-ACL mix: a fifth of the frames pass (Table 4.3).
    Thesis16,
    /// Random flows, both directions (`--flows`).
    Random,
}

/// `diodon-lab trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The pcap file to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Which traffic.
    #[arg(long, value_enum, default_value = "thesis")]
    pub mix: MixArg,
    /// Frames.
    #[arg(long, default_value_t = 10_000)]
    pub count: u64,
    /// Frame size in bytes (Ethernet header included, no FCS).
    #[arg(long, default_value_t = 574)]
    pub size: usize,
    /// Frames per second (the timestamps; tcpreplay replays them at this rate).
    #[arg(long, default_value_t = 100_000)]
    pub rate: u64,
    /// Flows of the random mix.
    #[arg(long, default_value_t = 1000)]
    pub flows: u32,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

/// Runs `diodon-lab trace`.
pub fn run(a: &TraceArgs) -> Result<Exit, Fatal> {
    let mix = match a.mix {
        MixArg::Thesis => Mix::Thesis,
        MixArg::Thesis16 => Mix::Thesis16,
        MixArg::Random => Mix::Random { flows: a.flows },
    };
    write(&a.out, mix, a.count, a.size, a.rate, a.seed).map_err(Fatal::io)?;
    Ok(Exit::Success)
}
