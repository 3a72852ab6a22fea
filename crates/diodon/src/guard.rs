//! `diodon guard`: the one-way nftables guard of one diode host (see
//! `diodon_apps::guard`).
//!
//! ```text
//!  apply    load/replace table netdev diodon_diode on --if in --ns
//!  verify   exit 1 with the first difference when missing or altered
//!  counters accepted / dropped_in / dropped_out (--json)
//!  reset    zero the counters        remove   delete the table
//! ```

use crate::fatal::Fatal;
use clap::{Args, ValueEnum};
use diodon_apps::guard::{self, GuardError, GuardSpec, Role};
use diodon_apps::report::Exit;
use std::net::{IpAddr, SocketAddr};

/// What `diodon guard` does.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum GuardAction {
    /// Load (or atomically replace) the guard table.
    Apply,
    /// Compare the live table with the expected one; exit 1 on any difference.
    Verify,
    /// Print the named counters.
    Counters,
    /// Zero the counters.
    Reset,
    /// Delete the table.
    Remove,
}

/// Host role.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum RoleArg {
    /// Lets out only the diode's UDP, nothing in.
    Sender,
    /// Lets in only the diode's UDP, nothing out.
    Receiver,
}

/// `diodon guard`.
#[derive(Debug, Args)]
pub struct GuardArgs {
    /// apply | verify | counters | reset | remove.
    #[arg(value_enum)]
    pub action: GuardAction,
    /// Network namespace (`ip netns` name); default: this one.
    #[arg(long)]
    pub ns: Option<String>,
    /// The diode interface (apply, verify).
    #[arg(long = "if", value_name = "IF")]
    pub iface: Option<String>,
    /// This host's role (apply, verify).
    #[arg(long, value_enum)]
    pub role: Option<RoleArg>,
    /// The receiver's address and port (apply, verify).
    #[arg(long, value_name = "ADDR:PORT")]
    pub peer: Option<SocketAddr>,
    /// The sender's address (default: any).
    #[arg(long, value_name = "ADDR")]
    pub source: Option<IpAddr>,
    /// nftables table name.
    #[arg(long, default_value = guard::DEFAULT_TABLE)]
    pub table: String,
    /// Counters as JSON.
    #[arg(long)]
    pub json: bool,
    /// apply: print the ruleset instead of loading it.
    #[arg(long)]
    pub dry_run: bool,
}

fn spec(a: &GuardArgs) -> Result<GuardSpec, Fatal> {
    let missing = |what: &str| Fatal::config(anyhow::anyhow!("guard {:?} needs {what}", a.action));
    let iface = a.iface.as_deref().ok_or_else(|| missing("--if IF"))?;
    let role = match a.role.ok_or_else(|| missing("--role sender|receiver"))? {
        RoleArg::Sender => Role::Sender,
        RoleArg::Receiver => Role::Receiver,
    };
    let peer = a.peer.ok_or_else(|| missing("--peer ADDR:PORT"))?;
    GuardSpec::new(a.ns.clone(), iface, role, peer, a.source, &a.table)
        .map_err(|e| Fatal::config(e.into()))
}

fn io(e: GuardError) -> Fatal {
    Fatal::io(e.into())
}

/// Runs `diodon guard`. Exit: 0 ok; 1 verify found a difference; 2 usage; 3 nft/ip failed.
pub fn run(a: &GuardArgs) -> Result<Exit, Fatal> {
    let ns = a.ns.as_deref();
    match a.action {
        GuardAction::Apply => {
            let s = spec(a)?;
            if a.dry_run {
                print!("{}", s.ruleset());
                return Ok(Exit::Success);
            }
            guard::apply(&s).map_err(io)?;
            guard::verify(&s).map_err(io)?;
            eprintln!(
                "guard applied: table netdev {} on {} ({}, peer {})",
                s.table, s.iface, s.role, s.peer
            );
            Ok(Exit::Success)
        }
        GuardAction::Verify => {
            let s = spec(a)?;
            match guard::verify(&s) {
                Ok(()) => {
                    println!(
                        "guard ok: table netdev {} on {} ({})",
                        s.table, s.iface, s.role
                    );
                    Ok(Exit::Success)
                }
                Err(e @ GuardError::Mismatch { .. }) => {
                    eprintln!("diodon: guard verify FAILED: {e}");
                    Ok(Exit::ChannelFailed)
                }
                Err(e) => Err(io(e)),
            }
        }
        GuardAction::Counters => {
            let c = guard::counters(ns, &a.table).map_err(io)?;
            if a.json {
                println!("{}", serde_json::to_string(&c).unwrap_or_default());
            } else {
                println!(
                    "accepted {} packets {} bytes\nfragments {} packets {} bytes\ndropped_in {} packets {} bytes\ndropped_out {} packets {} bytes",
                    c.accepted.packets,
                    c.accepted.bytes,
                    c.fragments.packets,
                    c.fragments.bytes,
                    c.dropped_in.packets,
                    c.dropped_in.bytes,
                    c.dropped_out.packets,
                    c.dropped_out.bytes
                );
            }
            Ok(Exit::Success)
        }
        GuardAction::Reset => {
            guard::reset(ns, &a.table).map_err(io)?;
            Ok(Exit::Success)
        }
        GuardAction::Remove => {
            guard::remove(ns, &a.table).map_err(io)?;
            Ok(Exit::Success)
        }
    }
}
