//! pydiode (from `PyPI`), with redundancy `r`: every chunk sent `r` times, the
//! receiver checks SHA-256 and exits on the first end-of-file datagram.
//!
//! ```text
//!  tx ns: pydiode send RX TX --port PORT --max-bitrate BPS --redundancy R < INPUT
//!  rx ns: pydiode receive RX --port PORT ─► OUT/out.bin
//! ```
//!
//! Its datagrams (65,507 bytes) are larger than any MTU, so the IP layer
//! fragments them: `snmp_ReasmFails` counts the ones that never reached UDP.

use super::program::{last_line, on_path, Program, Readout, Started, Trial};
use crate::machine::ns_cmd;
use crate::plan::{Plan, Tool};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

/// The receiver's output file, inside the output directory.
const OUT_FILE: &str = "out.bin";

/// pydiode with this redundancy (1: every chunk once, 2: twice).
#[derive(Clone, Copy, Debug)]
pub struct Pydiode {
    /// Times each chunk is sent.
    pub redundancy: u8,
}

impl Program for Pydiode {
    fn tool(&self) -> Tool {
        Tool::Pydiode(self.redundancy)
    }

    fn missing(&self, _diodon_bin: &Path) -> Option<String> {
        (!on_path("pydiode")).then(|| {
            format!(
                "tool {} needs `pydiode` on PATH (`pip install pydiode`)",
                self.tool()
            )
        })
    }

    fn start_receiver(&self, t: &Trial<'_>, out: &Path) -> io::Result<Child> {
        let file = File::create(out.join(OUT_FILE))?;
        ns_cmd(&t.diode.rx_ns, Path::new("pydiode"))
            .args(["receive", &t.diode.rx_addr.to_string(), "--port"])
            .arg(t.diode.port.to_string())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(t.receiver_log()?)
            .spawn()
    }

    fn start_sender(&self, t: &Trial<'_>) -> io::Result<Started> {
        let e = t.diode;
        let child = ns_cmd(&e.tx_ns, Path::new("pydiode"))
            .args(["send", &e.rx_addr.to_string(), &e.tx_addr.to_string()])
            .args(["--port", &e.port.to_string()])
            .args(["--max-bitrate", &format!("{}", (t.bitrate * 1e6) as u64)])
            .args(["--redundancy", &self.redundancy.to_string()])
            .stdin(File::open(t.input)?)
            .stdout(Stdio::null())
            .stderr(t.sender_log()?)
            .spawn()?;
        Ok(Started { child, pacer: None })
    }

    fn output(&self, _t: &Trial<'_>, out: &Path) -> PathBuf {
        out.join(OUT_FILE)
    }

    fn read(&self, _stdout: &str, stderr: &str) -> Readout {
        Readout {
            why: last_line(stderr),
            ..Readout::default()
        }
    }

    fn repair_ratio(&self, _plan: &Plan) -> f64 {
        f64::from(self.redundancy) - 1.0
    }
}
