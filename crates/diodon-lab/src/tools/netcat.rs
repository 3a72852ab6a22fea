//! OpenBSD netcat (`nc -u`), as in the thesis: UDP netcat has no pacing
//! and no end of file, so the harness feeds it at the bitrate (like the
//! thesis's `regulator.py`) and its receiver stops after an idle timeout.
//!
//! ```text
//!  input ─► pace() at bitrate ─► SEQPACKET records ─► tx ns: nc -u -n -q 0 -s TX RX PORT
//!  rx ns: nc -u -l -n -w IDLE RX PORT ─► OUT/out.bin
//! ```
//!
//! Records travel on a `SOCK_SEQPACKET` pair: each `read()` of nc's returns
//! at most one record, so datagrams stay near the record size. A record
//! that does not fit the rest of nc's 16 KiB stdin buffer is truncated by
//! that read (its bytes are lost before any socket): records of a power of
//! two never straddle it.

use super::program::{last_line, on_path, Program, Readout, Started, Trial};
use crate::machine::ns_cmd;
use crate::plan::{Plan, Tool};
use socket2::{Domain, Socket, Type};
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// The receiver's output file, inside the output directory.
const OUT_FILE: &str = "out.bin";

/// OpenBSD netcat, paced by the harness.
#[derive(Clone, Copy, Debug)]
pub struct Netcat;

impl Program for Netcat {
    fn tool(&self) -> Tool {
        Tool::Netcat
    }

    fn missing(&self, _diodon_bin: &Path) -> Option<String> {
        (!on_path("nc"))
            .then(|| "tool netcat needs `nc` on PATH (Debian package netcat-openbsd)".to_owned())
    }

    fn start_receiver(&self, t: &Trial<'_>, out: &Path) -> io::Result<Child> {
        let file = File::create(out.join(OUT_FILE))?;
        ns_cmd(&t.diode.rx_ns, Path::new("nc"))
            .args(["-u", "-l", "-n", "-w"])
            .arg(t.plan.netcat_idle_s.to_string())
            .arg(t.diode.rx_addr.to_string())
            .arg(t.diode.port.to_string())
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(t.receiver_log()?)
            .spawn()
    }

    fn start_sender(&self, t: &Trial<'_>) -> io::Result<Started> {
        let e = t.diode;
        let (ours, theirs) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None)?;
        let child = ns_cmd(&e.tx_ns, Path::new("nc"))
            .args(["-u", "-n", "-q", "0", "-s", &e.tx_addr.to_string()])
            .arg(e.rx_addr.to_string())
            .arg(e.port.to_string())
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(t.sender_log()?)
            .spawn()?;
        let room = t.config.mtu as usize - if e.rx_addr.is_ipv4() { 28 } else { 48 };
        let chunk = netcat_record(room);
        let input = t.input.to_owned();
        let stop = Arc::clone(t.stop);
        let bits_per_s = t.bitrate * 1e6;
        let pacer = thread::Builder::new()
            .name("nc-pacer".into())
            .spawn(move || pace(&input, ours, chunk, bits_per_s, &stop))?;
        Ok(Started {
            child,
            pacer: Some(pacer),
        })
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
        0.0
    }
}

/// The largest power of two that fits a datagram of `room` payload bytes
/// (1024 at MTU 1500, 8192 at MTU 9000): it divides nc's 16 KiB buffer.
fn netcat_record(room: usize) -> usize {
    if room < 2 {
        return 1;
    }
    1 << (usize::BITS - 1 - room.leading_zeros())
}

/// Feeds `input` in `chunk`-byte messages at `bits_per_s` (payload bits), like
/// the thesis's `regulator.py`.
#[expect(
    clippy::disallowed_methods,
    reason = "pacing against the wall clock is the point"
)]
#[expect(
    clippy::needless_pass_by_value,
    reason = "dropping the socket at the end is nc's end of file"
)]
fn pace(
    input: &Path,
    sock: Socket,
    chunk: usize,
    bits_per_s: f64,
    stop: &AtomicBool,
) -> io::Result<()> {
    let mut f = File::open(input)?;
    let mut buf = vec![0u8; chunk];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut n = 0;
        while n < chunk {
            let r = f.read(&mut buf[n..])?;
            if r == 0 {
                break;
            }
            n += r;
        }
        if n == 0 {
            return Ok(()); // dropping `sock` is nc's EOF
        }
        let due = Duration::from_secs_f64(sent as f64 * 8.0 / bits_per_s);
        let elapsed = start.elapsed();
        if let Some(ahead) = due.checked_sub(elapsed) {
            if ahead > Duration::from_micros(200) {
                thread::sleep(ahead);
            }
        }
        match sock.send(&buf[..n]) {
            Ok(_) => {}
            // nc went away (killed): stop feeding.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e),
        }
        sent += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netcat_records_divide_its_buffer() {
        assert_eq!(netcat_record(1472), 1024);
        assert_eq!(netcat_record(8972), 8192);
        assert_eq!(netcat_record(1024), 1024);
        assert_eq!(16384 % netcat_record(1452), 0);
    }

    #[test]
    fn its_word_is_the_last_stderr_line() {
        let r = Netcat.read("", "nc: bind failed, Address in use\n");
        assert_eq!(r.why.as_deref(), Some("nc: bind failed; Address in use"));
        assert_eq!(r.missing, None);
    }
}
