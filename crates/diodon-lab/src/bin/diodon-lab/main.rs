//! `diodon-lab`: the measuring lab's own binary, so the gateway binary
//! `diodon` links none of it (no plotting, no SHA-256, no trial harness, no
//! simulator). It parses arguments and calls `diodon_lab`.
//!
//! ```text
//!  diodon-lab trial PLAN.toml ─► trial.rs ─► diodon_lab::trial::run ─► diodon_lab::report
//!  diodon-lab relay …         ─► relay.rs ─► diodon_lab::relay::{run_udp, run_tun_pair}
//!  diodon-lab trace …         ─► trace.rs ─► diodon_lab::trace::write (pcap for tcpreplay)
//!  diodon-lab plot-fig4 …     ─► plot.rs  ─► diodon_lab::plot::plot_fig4 (bench-tunnel.sh's CSV)
//!  diodon-lab stream send|recv ─► stream.rs ─► diodon_lab::stream (stamped stream, latency tally)
//! ```
//!
//! Exit codes: 0 success (for `trial`: all trials ran, whatever their
//! outcome); 2 bad plan or usage; 3 the harness or relay itself failed;
//! 130 interrupted (the trials that completed are written all the same).

mod fatal;
mod plot;
mod relay;
mod stream;
mod trace;
mod trial;
mod values;

use clap::{Parser, Subcommand};
use fatal::Fatal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// diodon-lab: measure Diodon against netcat and pydiode across a diode,
/// and impair a link with a return path.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// What to do.
    #[command(subcommand)]
    cmd: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run a diode trial plan (the packet-loss thesis's experiment): CSV, summary, plots.
    Trial(trial::TrialArgs),
    /// Impairment relay (delay, loss, reordering) over UDP or between two TUN devices.
    Relay(relay::RelayArgs),
    /// Write a pcap trace for the tap (the prefilter thesis's mixes, random flows).
    Trace(trace::TraceArgs),
    /// Draw a scripts/bench-tunnel.sh run as the NODROP paper's Fig. 4 (loss and throughput).
    PlotFig4(plot::PlotFig4Args),
    /// A paced, timestamped UDP stream and its receiver (loss and one-way latency).
    Stream(stream::StreamArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().cmd {
        Command::Trial(args) => trial::run(&args),
        Command::Relay(args) => relay::run(&args, &stop_flag()).map_err(Fatal::io),
        Command::Trace(args) => trace::run(&args),
        Command::PlotFig4(args) => plot::run(&args),
        Command::Stream(args) => stream::run(&args, &stop_flag()),
    };
    match result {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(Fatal(exit, e)) => {
            eprintln!("diodon-lab: {e:#}");
            ExitCode::from(exit.code())
        }
    }
}

/// Sets the returned flag on SIGINT/SIGTERM; a second signal exits at once.
fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = Arc::clone(&stop);
    let first = Arc::new(AtomicBool::new(true));
    let _ = ctrlc::set_handler(move || {
        if first.swap(false, Ordering::SeqCst) {
            eprintln!("diodon-lab: stopping (again to force)");
            s.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    });
    stop
}
