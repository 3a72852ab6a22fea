//! Diodon's measuring instruments (issue 5, after the packet-loss thesis):
//!
//! ```text
//!  guard     nftables one-way guard per host: allow only the diode's UDP, count, verify
//!  stats     kernel measuring points: /proc/net/snmp Udp, link stats64, guard counters
//!  plan      the TOML trial plan
//!  trial     the trial harness: receiver, snapshots, sender, wait, SHA-256, snapshots
//!  report    CSV (Table A.1 + Diodon columns), testresults.txt, summary, PNG plots
//!  resume    the run journal, reading rows back, continuing a run (`--resume`)
//!  recovery  what a run changes, recorded first: a killed run is undone by the next
//!  relay     seeded impairment relay (UDP or TUN pair): diodon-sim's nodes on the wall clock
//! ```
//!
//! Everything here drives the kernel through `ip`, `nft` and `/proc`, and
//! needs root for namespaces; pure parts (ruleset text, JSON parsing, CSV,
//! summaries) are unit-tested without it.

pub mod guard;
pub mod nft;
pub mod plan;
pub mod recovery;
pub mod relay;
pub mod report;
pub mod resume;
pub mod stats;
pub mod trial;
