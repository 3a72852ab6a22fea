//! `diodon-lab stream send|recv`: a paced, timestamped UDP stream and its
//! receiver, for the tunnel's latency case (`scripts/bench-tunnel.sh
//! --video`). The stamp and the tally are `diodon_lab::stream`; this file
//! owns the sockets and the pacing.
//!
//! ```text
//!  stream send --to ADDR --mbit 25 --payload 1316 --seconds 10 [--fps 25]  ─► one JSON line: sent
//!  stream recv --listen ADDR [--idle-ms 2000]                    ─► one JSON line: tally
//! ```

use crate::fatal::Fatal;
use anyhow::Context;
use clap::{Args, Subcommand};
use diodon_apps::report::Exit;
use diodon_io::clock::unix_time_ns;
use diodon_io::{BatchReceiver, MonotonicClock, UdpConfig};
use diodon_lab::stream::{Stamp, Tally, STAMP_LEN};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `diodon-lab stream`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// Which end.
    #[command(subcommand)]
    pub end: End,
}

/// The two ends of a stream.
#[derive(Debug, Subcommand)]
pub enum End {
    /// Send a paced stream of stamped datagrams.
    Send {
        /// Where to send.
        #[arg(long)]
        to: SocketAddr,
        /// Local address (default: any, port chosen by the kernel).
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Rate in Mbit/s of UDP payload.
        #[arg(long, default_value_t = 25.0)]
        mbit: f64,
        /// Payload bytes per datagram (1316 = 7 MPEG-TS packets).
        #[arg(long, default_value_t = 1316)]
        payload: usize,
        /// How long to send.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
        /// Send like a video encoder: this many frames a second, each frame's
        /// datagrams back to back (the bursts that overflow a short TUN
        /// queue). 0: every datagram evenly spaced.
        #[arg(long, default_value_t = 0.0)]
        fps: f64,
    },
    /// Receive a stream and print its tally once it has been silent.
    Recv {
        /// Address to listen on.
        #[arg(long)]
        listen: SocketAddr,
        /// Stop after this long without a datagram (once one came).
        #[arg(long, default_value_t = 2000)]
        idle_ms: u64,
        /// Give up if nothing came for this long from the start.
        #[arg(long, default_value_t = 30_000)]
        first_ms: u64,
        /// The sender's count, for the loss figure (else gaps below the highest).
        #[arg(long)]
        sent: Option<u64>,
    },
}

/// Runs one end.
pub fn run(args: &StreamArgs, stop: &AtomicBool) -> Result<Exit, Fatal> {
    match &args.end {
        End::Send {
            to,
            bind,
            mbit,
            payload,
            seconds,
            fps,
        } => send(
            *to,
            *bind,
            Pace {
                mbit: *mbit,
                payload: *payload,
                seconds: *seconds,
                fps: *fps,
            },
            stop,
        ),
        End::Recv {
            listen,
            idle_ms,
            first_ms,
            sent,
        } => recv(*listen, *idle_ms, *first_ms, *sent, stop),
    }
}

/// How a stream is paced.
#[derive(Clone, Copy, Debug)]
struct Pace {
    mbit: f64,
    payload: usize,
    seconds: f64,
    fps: f64,
}

impl Pace {
    /// Datagrams sent back to back at each deadline, and the time between
    /// deadlines.
    fn burst_and_interval(self) -> (u64, Duration) {
        let bits = self.payload as f64 * 8.0;
        if self.fps > 0.0 {
            let per_frame = (self.mbit * 1e6 / self.fps / bits).ceil().max(1.0);
            (
                per_frame as u64,
                Duration::from_secs_f64(per_frame * bits / (self.mbit * 1e6)),
            )
        } else {
            (1, Duration::from_secs_f64(bits / (self.mbit * 1e6)))
        }
    }
}

fn send(
    to: SocketAddr,
    bind: Option<SocketAddr>,
    pace: Pace,
    stop: &AtomicBool,
) -> Result<Exit, Fatal> {
    let Pace {
        mbit,
        payload,
        seconds,
        fps,
    } = pace;
    if !(fps >= 0.0 && fps.is_finite()) {
        return Err(Fatal::config(anyhow::anyhow!("--fps must be 0 or more")));
    }
    if !(STAMP_LEN..=65_507).contains(&payload) {
        return Err(Fatal::config(anyhow::anyhow!(
            "--payload must be {STAMP_LEN} to 65507 bytes"
        )));
    }
    if !(mbit > 0.0 && mbit.is_finite() && seconds > 0.0 && seconds.is_finite()) {
        return Err(Fatal::config(anyhow::anyhow!(
            "--mbit and --seconds must be positive"
        )));
    }
    let bind = bind.unwrap_or_else(|| {
        if to.is_ipv6() {
            "[::]:0".parse().expect("literal")
        } else {
            "0.0.0.0:0".parse().expect("literal")
        }
    });
    let sock = UdpSocket::bind(bind)
        .with_context(|| format!("bind {bind}"))
        .map_err(Fatal::io)?;
    let (burst, interval) = pace.burst_and_interval();
    let clock = MonotonicClock::new();
    let start = clock.now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut buf = vec![0u8; payload];
    let (mut sent, mut errors) = (0u64, 0u64);
    let mut next = start;
    while next < end && !stop.load(Ordering::Relaxed) {
        clock.sleep_until(next);
        for _ in 0..burst {
            Stamp {
                seq: sent,
                sent_unix_ns: unix_time_ns(),
            }
            .write(&mut buf);
            // A send error (a full queue, no route yet) loses this datagram
            // at the source: counted, and the sequence number still advances
            // so the receiver sees it as lost.
            if sock.send_to(&buf, to).is_err() {
                errors += 1;
            }
            sent += 1;
        }
        next += interval;
    }
    let secs = clock.elapsed_since(start).as_secs_f64();
    println!(
        "{{\"side\":\"stream-send\",\"sent\":{sent},\"send_errors\":{errors},\"burst\":{burst},\"seconds\":{secs:.3},\"mbps\":{:.2}}}",
        sent as f64 * payload as f64 * 8.0 / secs.max(1e-9) / 1e6
    );
    Ok(Exit::Success)
}

fn recv(
    listen: SocketAddr,
    idle_ms: u64,
    first_ms: u64,
    sent: Option<u64>,
    stop: &AtomicBool,
) -> Result<Exit, Fatal> {
    // The measuring socket must not be the place the stream loses
    // datagrams: a forced 32 MiB buffer, and its own drops are printed.
    let mut cfg = UdpConfig::new(listen);
    cfg.rcvbuf = Some(32 << 20);
    cfg.gro = false;
    let mut sock = BatchReceiver::open(&cfg).map_err(|e| Fatal::io(anyhow::anyhow!("{e}")))?;
    let clock = MonotonicClock::new();
    let mut last = clock.now();
    let mut tally = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        let batch = sock
            .recv_batch(Some(Duration::from_millis(100)))
            .map_err(|e| Fatal::io(anyhow::anyhow!("{e}")))?;
        if !batch.is_empty() {
            let now = unix_time_ns();
            for d in batch {
                tally.record(d.data, now);
            }
            last = clock.now();
        }
        let quiet = clock.elapsed_since(last);
        let limit = if tally.received() == 0 {
            first_ms
        } else {
            idle_ms
        };
        if quiet >= Duration::from_millis(limit) {
            break;
        }
    }
    let drops = sock.socket_drops_now().unwrap_or(0);
    let json = tally.summary(sent).to_json();
    println!("{},\"socket_dropped\":{drops}}}", &json[..json.len() - 1]);
    Ok(Exit::Success)
}
