//! TUN and TAP devices: IP packets (TUN) or Ethernet frames (TAP) of a
//! network interface, read and written by a user process. A frame written
//! to a TAP arrives on its interface as if received from a wire: any
//! capture tool, flow exporter or IDS reads it there (the tap agent's and
//! the receiver's `--tap-out`). The impairment relay (`diodon-lab`'s `relay`) joins two TUN devices in
//! two namespaces into an IP link with delay, loss and reordering, which is
//! what this kernel's missing `sch_netem` would have done.
//!
//! ```text
//!   kernel (ns A) ──IP──▶ tun dt0 ──read──▶ relay ──write──▶ tun dt0 ──IP──▶ kernel (ns B)
//! ```
//!
//! The device exists while the file is open (non-persistent); the caller
//! gives it addresses and brings it up (`ip addr add … dev NAME; ip link set NAME up`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `TUNSETIFF` = `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// An open TUN or TAP device (no packet-information header: each read is
/// one IP packet or one Ethernet frame).
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates (or attaches to) TUN device `name` in the calling thread's
    /// network namespace. Needs `CAP_NET_ADMIN`.
    pub fn open(name: &str) -> io::Result<Tun> {
        Tun::open_with(name, libc::IFF_TUN)
    }

    /// Creates (or attaches to) TAP device `name` (Ethernet frames).
    pub fn open_tap(name: &str) -> io::Result<Tun> {
        Tun::open_with(name, libc::IFF_TAP)
    }

    #[expect(unsafe_code, reason = "ioctl(TUNSETIFF) has no safe std wrapper")]
    fn open_with(name: &str, kind: libc::c_int) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TUN name '{name}': 1..{} bytes", libc::IFNAMSIZ - 1),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *d = s.cast_signed();
        }
        req.ifr_ifru.ifru_flags = (kind | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: `req` is a valid ifreq that lives for the call; the fd is open.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &raw mut req) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun {
            file,
            name: name.to_owned(),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one packet, waiting at most `timeout`; `Ok(None)` on timeout.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        if !poll_readable(self.file.as_raw_fd(), timeout)? {
            return Ok(None);
        }
        match io::Read::read(&mut &self.file, buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes one packet.
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        io::Write::write(&mut &self.file, packet).map(|_| ())
    }

    /// A second handle on the same device (for a thread per direction).
    pub fn try_clone(&self) -> io::Result<Tun> {
        Ok(Tun {
            file: self.file.try_clone()?,
            name: self.name.clone(),
        })
    }
}

/// Brings interface `name` up (`SIOCSIFFLAGS` with `IFF_UP`), as
/// `ip link set NAME up` does. Needs `CAP_NET_ADMIN`.
#[expect(
    unsafe_code,
    reason = "ioctl(SIOCGIFFLAGS/SIOCSIFFLAGS) has no safe std wrapper"
)]
pub fn set_link_up(name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s.cast_signed();
    }
    // SAFETY: `req` is a valid ifreq for both calls; the fd is open.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &raw mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &raw mut req) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `poll(2)` for readability with a timeout.
#[expect(unsafe_code, reason = "poll(2) has no safe std wrapper")]
fn poll_readable(fd: std::os::fd::RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd, nfds = 1, lives for the call.
    let rc = unsafe { libc::poll(&raw mut p, 1, ms) };
    match rc {
        0 => Ok(false),
        r if r > 0 => Ok(true),
        _ => {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}
