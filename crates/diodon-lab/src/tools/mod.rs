//! The measured programs, one [`Program`] each: what it needs on the
//! machine, its receiver's and its sender's command lines, where its
//! receiver writes the file, and how to read what it said about a trial.
//!
//! ```text
//!  plan::Tool ─► program() ─► Diodon | Netcat | Pydiode { redundancy }
//!     missing()              a sentence when it cannot run here (binary, PATH)
//!     start_receiver(rx ns)  ─► Child  (stderr ─► work/receiver.log)
//!     start_sender(tx ns)    ─► Started { child, pacer }  (stderr ─► work/sender.log)
//!     output(out dir)        ─► the file the receiver wrote (hashed by the run loop)
//!     read(stdout, stderr)   ─► Readout { missing, recovered, socket_drops, app_rcvbuf,
//!                                         corrupt, why }
//! ```
//!
//! The trait and the shared types are in [`program`]; this module only
//! picks the program of a plan's tool.
//!
//! `Xfer_time` covers, per tool (the run loop starts the clock once the
//! receiver's socket is bound and stops it when the receiver exits):
//!
//! ```text
//!  diodon   sender start-up, the paced transfer (data + repair + trailer), the
//!           receiver's BLAKE3 check and rename: `recv --channels 1` exits as
//!           soon as the one file is decided. Not the sender's 0.75 s linger
//!           of closing beacons (the harness waits for it between trials).
//!  pydiode  Python start-up of the sender, every chunk sent `r` times, up to
//!           the receiver's exit on the first end-of-file datagram (after its
//!           SHA-256 check); not the rest of the end-of-file chunk.
//!  netcat   the paced transfer plus the receiver's idle timeout (`nc -w 1`):
//!           UDP netcat has no end of file, so its times are the transfer + 1 s,
//!           as in the thesis (ch. 4.2.3).
//! ```

pub mod diodon;
pub mod netcat;
pub mod program;
pub mod pydiode;

use crate::plan::Tool;
pub use program::{
    csv_safe, last_line, on_path, Program, Readout, Started, Trial, RECEIVER_LOG, SENDER_LOG,
};

/// The program of `tool`.
pub fn program(tool: Tool) -> Box<dyn Program> {
    match tool {
        Tool::Diodon => Box::new(diodon::Diodon),
        Tool::Netcat => Box::new(netcat::Netcat),
        Tool::Pydiode(redundancy) => Box::new(pydiode::Pydiode { redundancy }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use std::path::Path;

    #[test]
    fn every_tool_has_its_program() {
        for tool in [
            Tool::Diodon,
            Tool::Netcat,
            Tool::Pydiode(1),
            Tool::Pydiode(2),
        ] {
            assert_eq!(program(tool).tool(), tool);
        }
        let plan =
            Plan::parse("tools = [\"diodon\"]\nbitrates_mbps = [1]\ntrials = 1\n").expect("plan");
        assert!((program(Tool::Diodon).repair_ratio(&plan) - 0.1).abs() < 1e-9);
        assert!(program(Tool::Netcat).repair_ratio(&plan).abs() < 1e-9);
        assert!((program(Tool::Pydiode(2)).repair_ratio(&plan) - 1.0).abs() < 1e-9);
        let none = Path::new("/nonexistent/diodon");
        let said = program(Tool::Diodon)
            .missing(none)
            .expect("no binary there");
        assert!(said.contains("/nonexistent/diodon"), "{said}");
    }
}
