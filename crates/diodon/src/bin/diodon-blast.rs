//! `diodon-blast`: the raw one-way UDP ceiling of a link, for
//! `scripts/bench-link.sh` (iperf3 cannot run over a diode: it needs a TCP
//! control connection back).
//!
//! ```text
//!  diodon-blast send DEST PAYLOAD SECONDS [SNDBUF] ─► sendmsg + UDP GSO, unpaced ─► link
//!  diodon-blast send-file DEST PAYLOAD FILE REPAIR% ─► read, BLAKE3, the same sends
//!  diodon-blast sink LISTEN [IDLE_MS]     ◄─ recvmmsg + GRO, 256 MiB rcvbuf; counts
//! ```
//!
//! Each prints one JSON line: datagrams, payload bytes, seconds, Mbit/s of
//! UDP payload, the process's CPU seconds (per byte, the floor any sender or
//! receiver pays on that link: the kernel's work without Diodon's), and
//! (sink) the socket's kernel drops. `send-file` is the floor of a sender
//! that verifies: it reads FILE in blocks as Diodon's reader does, digests
//! it (BLAKE3, printed), and sends every byte once plus REPAIR % of each
//! block again (the bytes repair symbols would take); no FEC, no check, no
//! pacing, so its CPU per file byte is what no verifying sender on that
//! link can go below. The sink measures from
//! its first to its last datagram and exits after `IDLE_MS` (default 1000) of
//! silence.

use diodon_io::{BatchReceiver, BatchSender, MonotonicClock, UdpConfig};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("send") if (4..=5).contains(&args.len()) => blast(
            &args[1],
            &args[2],
            &args[3],
            args.get(4).map(String::as_str),
        ),
        Some("send-file") if args.len() == 5 => send_file(&args[1], &args[2], &args[3], &args[4]),
        Some("sink") if args.len() >= 2 => sink(&args[1], args.get(2).map(String::as_str)),
        _ => Err(
            "usage: diodon-blast send DEST PAYLOAD SECONDS [SNDBUF] | send-file DEST PAYLOAD FILE REPAIR% | sink LISTEN [IDLE_MS]"
                .into(),
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("diodon-blast: {e}");
            ExitCode::from(2)
        }
    }
}

fn mbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// A sending socket to `dest` with a 4 MiB send buffer (or `sndbuf`; 0
/// leaves the kernel's default).
fn open_sender(dest: SocketAddr, sndbuf: usize) -> Result<BatchSender, String> {
    let bind = if dest.is_ipv6() {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    };
    let mut cfg = UdpConfig::new(bind);
    cfg.sndbuf = (sndbuf > 0).then_some(sndbuf);
    BatchSender::open(&cfg).map_err(|e| e.to_string())
}

/// Reads, digests and sends `file` (see the module's text).
fn send_file(dest: &str, payload: &str, file: &str, repair: &str) -> Result<(), String> {
    let dest: SocketAddr = dest.parse().map_err(|e| format!("DEST: {e}"))?;
    let payload: usize = payload.parse().map_err(|e| format!("PAYLOAD: {e}"))?;
    let repair: usize = repair.parse().map_err(|e| format!("REPAIR%: {e}"))?;
    if payload == 0 || repair > 100 {
        return Err("PAYLOAD must be above 0 and REPAIR% at most 100".into());
    }
    let mut sock = open_sender(dest, 4 << 20)?;
    let mut f = std::fs::File::open(file).map_err(|e| format!("{file}: {e}"))?;
    // A block of Diodon's default geometry: 224 source symbols.
    let block = payload * usize::from(diodon_proto::SenderConfig::default().block_symbols);
    let per_call = (65_000 / payload).clamp(1, 64) * payload;
    let mut hasher = blake3::Hasher::new();
    let mut buf = Vec::new();
    let clock = MonotonicClock::new();
    let start = clock.now();
    let (mut n, mut bytes, mut file_bytes) = (0u64, 0u64, 0u64);
    loop {
        buf = diodon_apps::files::read_chunk(&mut f, buf, block)
            .map_err(|e| format!("{file}: {e}"))?;
        if buf.is_empty() {
            break;
        }
        hasher.update(&buf);
        file_bytes += buf.len() as u64;
        let again = buf.len() * repair / 100;
        for part in buf.chunks(per_call).chain(buf[..again].chunks(per_call)) {
            let r = sock.send(dest, part, payload).map_err(|e| e.to_string())?;
            n += r.datagrams;
            bytes += r.bytes;
        }
    }
    let secs = clock.now().saturating_duration_since(start).as_secs_f64();
    println!(
        "{{\"side\":\"send-file\",\"datagrams\":{n},\"bytes\":{bytes},\"file_bytes\":{file_bytes},\"blake3\":\"{}\",\"seconds\":{secs:.3},\"mbps\":{:.1},\"cpu_s\":{:.3}}}",
        hasher.finalize().to_hex(),
        mbps(bytes, secs),
        diodon_io::counters::process_cpu_seconds(),
    );
    Ok(())
}

/// Floods `dest`. `sndbuf`: the socket's send buffer in bytes (default 4 MiB;
/// 0 leaves the kernel's default, as an ordinary application would).
fn blast(dest: &str, payload: &str, seconds: &str, sndbuf: Option<&str>) -> Result<(), String> {
    let dest: SocketAddr = dest.parse().map_err(|e| format!("DEST: {e}"))?;
    let payload: usize = payload.parse().map_err(|e| format!("PAYLOAD: {e}"))?;
    let seconds: f64 = seconds.parse().map_err(|e| format!("SECONDS: {e}"))?;
    let sndbuf: usize = sndbuf
        .map(str::parse)
        .transpose()
        .map_err(|e| format!("SNDBUF: {e}"))?
        .unwrap_or(4 << 20);
    let mut sock = open_sender(dest, sndbuf)?;
    let per_call = (65_000 / payload).clamp(1, 64);
    let buf: Vec<u8> = (0..payload * per_call).map(|i| i as u8).collect();
    let clock = MonotonicClock::new();
    let start = clock.now();
    let limit = Duration::from_secs_f64(seconds);
    let (mut n, mut bytes) = (0u64, 0u64);
    loop {
        let elapsed = clock.now().saturating_duration_since(start);
        if elapsed >= limit {
            break;
        }
        let r = sock.send(dest, &buf, payload).map_err(|e| e.to_string())?;
        n += r.datagrams;
        bytes += r.bytes;
    }
    let secs = clock.now().saturating_duration_since(start).as_secs_f64();
    let c = sock.counters();
    println!(
        "{{\"side\":\"blast\",\"datagrams\":{n},\"bytes\":{bytes},\"seconds\":{secs:.3},\"mbps\":{:.1},\"cpu_s\":{:.3},\"gso\":{},\"enobufs_retries\":{}}}",
        mbps(bytes, secs),
        diodon_io::counters::process_cpu_seconds(),
        sock.gso_enabled(),
        c.enobufs_retries
    );
    Ok(())
}

fn sink(listen: &str, idle_ms: Option<&str>) -> Result<(), String> {
    let listen: SocketAddr = listen.parse().map_err(|e| format!("LISTEN: {e}"))?;
    let idle = Duration::from_millis(
        idle_ms
            .map(str::parse)
            .transpose()
            .map_err(|e| format!("IDLE_MS: {e}"))?
            .unwrap_or(1000),
    );
    let mut cfg = UdpConfig::new(listen);
    cfg.rcvbuf = Some(256 << 20);
    let mut sock = BatchReceiver::open(&cfg).map_err(|e| e.to_string())?;
    let clock = MonotonicClock::new();
    let (mut first, mut last) = (None, clock.now());
    let (mut n, mut bytes) = (0u64, 0u64);
    loop {
        let batch = sock
            .recv_batch(Some(Duration::from_millis(100)))
            .map_err(|e| e.to_string())?;
        let now = clock.now();
        if batch.is_empty() {
            if first.is_some() && now.saturating_duration_since(last) >= idle {
                break;
            }
            continue;
        }
        first.get_or_insert(now);
        last = now;
        n += batch.len() as u64;
        bytes += batch.bytes() as u64;
    }
    let secs = first.map_or(0.0, |f| last.saturating_duration_since(f).as_secs_f64());
    let drops = sock
        .socket_drops_now()
        .unwrap_or(0)
        .max(sock.socket_drops());
    println!(
        "{{\"side\":\"sink\",\"datagrams\":{n},\"bytes\":{bytes},\"seconds\":{secs:.3},\"mbps\":{:.1},\"cpu_s\":{:.3},\"socket_drops\":{drops},\"rcvbuf\":{}}}",
        mbps(bytes, secs),
        diodon_io::counters::process_cpu_seconds(),
        sock.setup().rcvbuf
    );
    Ok(())
}
