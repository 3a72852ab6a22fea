//! Diodon's measuring lab (issue 5, after the packet-loss thesis): the trial
//! harness that runs Diodon, netcat and pydiode across a software or a real
//! diode and writes the thesis's tables and plots. It ships as its own
//! binary, `diodon-lab`, so the gateway binary `diodon` links none of it
//! (no plotting, no SHA-256); the measuring points it reads (the one-way
//! guard, the kernel counters, a running Diodon's counters) are production
//! code in `diodon_apps::{guard, stats}`.
//!
//! ```text
//!  plan      the TOML trial plan                                  (leaf)
//!  row       one trial: Table A.1 + Diodon columns, its CSV line  ◄ plan
//!  resume    the run journal, reading rows back, `--resume`       ◄ plan, row
//!  plot      PNG lines of a metric against bitrate (plotters)     (leaf)
//!  report    CSV per cell, testresults.txt, summary, table, PNGs  ◄ plan, row, plot
//!  testfile  the file every trial sends, SHA-256                  ◄ plan
//!  diode     both ends, guard specs, measuring points             ◄ plan
//!  machine   rmem_*, testbed + guards (LinkUp), processes         ◄ plan, diode
//!  recovery  what a run changes, recorded first; undone by the next ◄ machine
//!  tools     one Program per measured tool (tools::{diodon, netcat, pydiode}, each over
//!            the shared tools::program): command lines, results   ◄ plan, row, diode, machine
//!  error     TrialError: what stops a run                          ◄ plan, diode, machine,
//!                                                                    recovery, resume
//!  measure   one trial: start, time, wait, verify, measure ─► Row  ◄ error, tools, testfile, ...
//!  trial     the run loop: rounds × cells, link, rmem, journal     ◄ measure and the rest
//!  relay     seeded impairment relay (UDP or TUN pair): diodon-sim's nodes
//!            on the wall clock (for transports with a return path)   (leaf)
//!  trace     pcap traces for the tap (the prefilter thesis's mixes)   (leaf)
//!  stream    a timestamped test stream: stamp, loss and latency tally (leaf)
//! ```
//!
//! The arrows are the only imports between the modules: no module imports
//! one above it, so there is no import loop. Everything here drives the
//! kernel through `ip`, `nft` and `/proc`, and needs root for namespaces;
//! pure parts (CSV, plans, records, summaries) are unit-tested without it.

pub mod diode;
pub mod error;
pub mod machine;
mod measure;
pub mod plan;
pub mod plot;
pub mod recovery;
pub mod relay;
pub mod report;
pub mod resume;
pub mod row;
pub mod stream;
pub mod testfile;
pub mod tools;
pub mod trace;
pub mod trial;
