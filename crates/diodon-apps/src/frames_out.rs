//! Where delivered frames go, for the agent and for the receiver's packet
//! channels: a TAP interface (any capture tool, flow exporter or IDS reads
//! it as an ordinary interface), rotated pcap files, or a local Unix
//! datagram socket (one frame per datagram).
//!
//! ```text
//!  frame ─► FrameOut::Tap     write(2) to /dev/net/tun (IFF_TAP) ─► interface NAME (up, no IPv6)
//!        ─► FrameOut::Pcap    DIR/PREFIX-NNNNNN.pcap(.partial until rotated or closed)
//!        ─► FrameOut::Socket  send(2) on a Unix datagram socket connected to PATH
//! ```
//!
//! A TAP write never blocks: a frame the kernel cannot queue is dropped by
//! the kernel and counted in the interface's `rx_dropped`
//! ([`FrameOut::kernel_drops`] reads it), the one drop point of a TAP
//! output. The socket output blocks while the reader is behind
//! (backpressure); the pcap output blocks on the disk.

use diodon_io::pcap::{RotatingPcap, Rotation};
use diodon_io::tun::Tun;
use diodon_io::LinkStats;
use diodon_io::MonotonicClock;
use diodon_proto::Timestamp;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What to deliver frames to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameTarget {
    /// A TAP interface of this name (created, brought up).
    Tap(String),
    /// pcap files in a folder, rotated.
    Pcap {
        /// The folder.
        dir: PathBuf,
        /// File-name prefix.
        prefix: String,
        /// When to start the next file.
        rotation: Rotation,
    },
    /// A Unix datagram socket bound by the reader at this path.
    Socket(PathBuf),
}

/// Why a frame output failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameOutError {
    /// Opening it.
    #[error("cannot open {what}: {source}")]
    Open {
        /// TAP name, folder or socket path.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Delivering a frame (the interface went away, the disk filled, the
    /// reader closed its socket).
    #[error("writing to {what}: {source}")]
    Write {
        /// TAP name, folder or socket path.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// An open frame output.
#[derive(Debug)]
pub enum FrameOut {
    /// A TAP device and the `rx_dropped` it had when opened.
    Tap(Tun, u64),
    /// Rotated pcap files and the clock that ages them.
    Pcap(RotatingPcap, MonotonicClock, PathBuf),
    /// A connected Unix datagram socket.
    Socket(UnixDatagram, PathBuf),
}

impl FrameOut {
    /// Opens `target`. A TAP is created (or attached to), its IPv6 turned
    /// off (so the kernel adds no frames of its own) and brought up.
    pub fn open(target: &FrameTarget) -> Result<FrameOut, FrameOutError> {
        match target {
            FrameTarget::Tap(name) => {
                let what = format!("TAP {name}");
                let open = |source| FrameOutError::Open {
                    what: what.clone(),
                    source,
                };
                let tap = Tun::open_tap(name).map_err(open)?;
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "1");
                diodon_io::tun::set_up(name).map_err(open)?;
                let base = LinkStats::read(name).map_or(0, |l| l.rx_dropped);
                Ok(FrameOut::Tap(tap, base))
            }
            FrameTarget::Pcap {
                dir,
                prefix,
                rotation,
            } => {
                let w = RotatingPcap::new(dir, prefix, 65_535, *rotation).map_err(|source| {
                    FrameOutError::Open {
                        what: format!("pcap folder {}", dir.display()),
                        source,
                    }
                })?;
                Ok(FrameOut::Pcap(w, MonotonicClock::new(), dir.clone()))
            }
            FrameTarget::Socket(path) => {
                let open = |source| FrameOutError::Open {
                    what: format!("socket {}", path.display()),
                    source,
                };
                let s = UnixDatagram::unbound().map_err(open)?;
                s.connect(path).map_err(open)?;
                Ok(FrameOut::Socket(s, path.clone()))
            }
        }
    }

    fn name(&self) -> String {
        match self {
            FrameOut::Tap(t, _) => format!("TAP {}", t.name()),
            FrameOut::Pcap(_, _, dir) => format!("pcap folder {}", dir.display()),
            FrameOut::Socket(_, p) => format!("socket {}", p.display()),
        }
    }

    /// Delivers one frame (capture time and length on the wire go into pcap).
    pub fn deliver(
        &mut self,
        timestamp_ns: u64,
        wire_len: u32,
        frame: &[u8],
    ) -> Result<(), FrameOutError> {
        let r = match self {
            FrameOut::Tap(t, _) => t.send(frame),
            FrameOut::Pcap(w, clock, _) => {
                let age = clock.now().saturating_duration_since(Timestamp::ZERO);
                w.write(age, timestamp_ns, wire_len, frame)
            }
            FrameOut::Socket(s, _) => send_blocking(s, frame),
        };
        r.map_err(|source| FrameOutError::Write {
            what: self.name(),
            source,
        })
    }

    /// Pushes buffered frames out (pcap: to the kernel).
    pub fn flush(&mut self) -> Result<(), FrameOutError> {
        let r = match self {
            FrameOut::Pcap(w, _, _) => w.flush(),
            _ => Ok(()),
        };
        r.map_err(|source| FrameOutError::Write {
            what: self.name(),
            source,
        })
    }

    /// Completes the output (pcap: sync and rename the last file).
    pub fn close(&mut self) -> Result<(), FrameOutError> {
        let r = match self {
            FrameOut::Pcap(w, _, _) => w.close(),
            _ => Ok(()),
        };
        r.map_err(|source| FrameOutError::Write {
            what: self.name(),
            source,
        })
    }

    /// Frames the kernel dropped behind a TAP since it was opened
    /// (`rx_dropped` of the interface); 0 for the other outputs.
    pub fn kernel_drops(&self) -> u64 {
        match self {
            FrameOut::Tap(t, base) => {
                LinkStats::read(t.name()).map_or(0, |l| l.rx_dropped.saturating_sub(*base))
            }
            _ => 0,
        }
    }

    /// The pcap files completed so far.
    pub fn completed_files(&self) -> Vec<PathBuf> {
        match self {
            FrameOut::Pcap(w, _, _) => w.completed().to_vec(),
            _ => Vec::new(),
        }
    }
}

/// `send(2)`, waiting out a full socket buffer (the reader is behind).
fn send_blocking(s: &UnixDatagram, frame: &[u8]) -> io::Result<()> {
    let mut tries = 0u32;
    loop {
        match s.send(frame) {
            Ok(_) => return Ok(()),
            Err(e)
                if tries < 100_000
                    && (e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted
                        || e.raw_os_error() == Some(libc::ENOBUFS)) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A pcap target under `dir` with `prefix`, rotated by size and age.
pub fn pcap_target(dir: &Path, prefix: &str, max_bytes: u64, max_age: Duration) -> FrameTarget {
    FrameTarget::Pcap {
        dir: dir.to_owned(),
        prefix: prefix.to_owned(),
        rotation: Rotation { max_bytes, max_age },
    }
}
