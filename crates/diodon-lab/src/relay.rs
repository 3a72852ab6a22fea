//! A seeded impairment relay: what `sch_netem` would do, in user space (this
//! kernel has none). Each direction runs a `diodon-sim` node chain (an
//! [`Impairment`]: loss, reordering, delay) on the wall clock instead of
//! virtual time, so the relay and the simulated tests share one loss model,
//! and a run is reproducible by its seed.
//!
//! ```text
//!            ┌──────────── Direction a→b: Impairment::link(seed) ────────────┐
//!  port A ──▶│ recv ─▶ Link::send(now) ─▶ loss ─▶ reorder ─▶ delay ─▶ poll_deliver(now) ─▶ send │──▶ port B
//!  port A ◀──│ ... same, b→a, its own seed ...                                                 │◀── port B
//!            └────────────────────────────────────────────────────────────────┘
//! ```
//!
//! Two kinds of ports:
//! - **UDP** ([`run_udp`]): listens on A; the first datagram's source becomes
//!   the client; datagrams go to B from an ephemeral socket, replies come back
//!   to the client. One client at a time (the latest source wins).
//! - **TUN** ([`run_tun_pair`]): a TUN device in each of two network
//!   namespaces, so the impairment applies at the IP level to every protocol
//!   alike (TCP and Delta-t over UDP see the same link).
//!
//! Reordering: a packet picked with probability `reorder` is held
//! `reorder_gap` longer than the others, so the packets behind it overtake it.
//! Loss and reordering are drawn independently per packet and per direction.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use diodon_io::clock::MonotonicClock;
use diodon_io::tun::Tun;
use diodon_sim::{Link, NodeStats, Timestamp};

pub use diodon_sim::{Impairment, Seed};

/// One direction of the relay: its impairments and the seed of their draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Direction {
    /// What happens to the packets (the relay uses loss, delay and reordering).
    pub impairment: Impairment,
    /// Seed of the direction's random draws.
    pub seed: Seed,
}

/// Per-direction counters: every packet is forwarded or counted as dropped.
#[derive(Debug, Default)]
pub struct DirectionStats {
    /// Packets read from the input port.
    pub received: AtomicU64,
    /// Packets dropped by the loss draw.
    pub dropped: AtomicU64,
    /// Packets held back for reordering.
    pub reordered: AtomicU64,
    /// Packets written to the output port.
    pub forwarded: AtomicU64,
    /// Writes that failed (counted, the packet is lost: the relay is a lossy link).
    pub send_errors: AtomicU64,
}

impl DirectionStats {
    /// `received dropped reordered forwarded send_errors` as one line.
    pub fn summary(&self) -> String {
        format!(
            "received {} dropped {} reordered {} forwarded {} send_errors {}",
            self.received.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            self.reordered.load(Ordering::Relaxed),
            self.forwarded.load(Ordering::Relaxed),
            self.send_errors.load(Ordering::Relaxed)
        )
    }

    /// Copies what the direction's nodes counted.
    fn publish(&self, nodes: &NodeStats) {
        self.dropped.store(nodes.dropped, Ordering::Relaxed);
        self.reordered.store(nodes.reordered, Ordering::Relaxed);
    }
}

/// What [`Line::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Dropped by the loss draw.
    Dropped,
    /// Queued with the normal delay.
    Queued,
    /// Queued with the extra reorder gap.
    Reordered,
}

/// One direction's node chain, fed and drained at wall-clock times: the
/// relay's pure part.
#[derive(Debug)]
pub struct Line {
    link: Link,
}

impl Line {
    /// An empty line impairing as `direction` says.
    pub fn new(direction: Direction) -> Line {
        Line {
            link: direction.impairment.link(direction.seed),
        }
    }

    /// Offers a packet received at `now`.
    pub fn push(&mut self, now: Timestamp, packet: &[u8]) -> Fate {
        let before = self.link.totals();
        // Every decision is taken at send time (see `Impairment`), so the
        // counters say at once what happened to it.
        self.link.send(now, packet.to_vec());
        let after = self.link.totals();
        if after.dropped > before.dropped {
            Fate::Dropped
        } else if after.reordered > before.reordered {
            Fate::Reordered
        } else {
            Fate::Queued
        }
    }

    /// The next packet due at or before `now`.
    pub fn pop_due(&mut self, now: Timestamp) -> Option<Vec<u8>> {
        self.link.poll_deliver(now).map(|(_, p)| p)
    }

    /// When the next packet is due (or a packet is due to pass a node).
    pub fn next_due(&self) -> Option<Timestamp> {
        self.link.next_delivery()
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.link.in_flight()
    }

    /// No packet held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the nodes counted.
    pub fn totals(&self) -> NodeStats {
        self.link.totals()
    }
}

/// The wall clock the lines run on, as the simulator's time type.
struct Clock(MonotonicClock);

impl Clock {
    fn new() -> Clock {
        Clock(MonotonicClock::new())
    }

    fn now(&self) -> Timestamp {
        self.0.now()
    }
}

/// One side of a relay direction.
trait Port: Send {
    /// One packet, waiting at most `timeout`.
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>>;
    /// Sends one packet (`Ok(false)`: nowhere to send it yet).
    fn send(&mut self, packet: &[u8]) -> io::Result<bool>;
}

const POLL: Duration = Duration::from_millis(20);

/// Moves packets from `input` to `output` through a line until `stop`.
fn pump(
    mut input: impl Port,
    mut output: impl Port,
    direction: Direction,
    stats: &DirectionStats,
    stop: &AtomicBool,
) -> io::Result<()> {
    let clock = Clock::new();
    let mut line = Line::new(direction);
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let now = clock.now();
        while let Some(p) = line.pop_due(now) {
            match output.send(&p) {
                Ok(true) => stats.forwarded.fetch_add(1, Ordering::Relaxed),
                Ok(false) | Err(_) => stats.send_errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        let wait = line.next_due().map_or(POLL, |d| {
            d.saturating_duration_since(clock.now())
                .clamp(Duration::from_micros(50), POLL)
        });
        if let Some(n) = input.recv(&mut buf, wait)? {
            stats.received.fetch_add(1, Ordering::Relaxed);
            line.push(clock.now(), &buf[..n]);
            stats.publish(&line.totals());
        }
    }
    Ok(())
}

struct UdpPort {
    socket: UdpSocket,
    /// Fixed destination (the server) or the learned client.
    dest: Arc<Mutex<Option<SocketAddr>>>,
    /// Record the source of received datagrams as the destination.
    learn: bool,
    last_timeout: Option<Duration>,
}

impl Port for UdpPort {
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        if self.last_timeout != Some(timeout) {
            self.socket
                .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
            self.last_timeout = Some(timeout);
        }
        match self.socket.recv_from(buf) {
            Ok((n, from)) => {
                if self.learn {
                    *self
                        .dest
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(from);
                }
                Ok(Some(n))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionRefused
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn send(&mut self, packet: &[u8]) -> io::Result<bool> {
        let dest = *self
            .dest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match dest {
            Some(d) => self.socket.send_to(packet, d).map(|_| true),
            None => Ok(false),
        }
    }
}

struct TunPort(Tun);

impl Port for TunPort {
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        self.0.recv(buf, timeout)
    }

    fn send(&mut self, packet: &[u8]) -> io::Result<bool> {
        self.0.send(packet).map(|()| true)
    }
}

/// Counters of both directions of a running relay.
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Client → server (UDP) or namespace A → B (TUN).
    pub forward: DirectionStats,
    /// Server → client (UDP) or namespace B → A (TUN).
    pub backward: DirectionStats,
}

fn join(handles: Vec<std::thread::JoinHandle<io::Result<()>>>) -> io::Result<()> {
    let mut first = Ok(());
    for h in handles {
        let r = h
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("relay thread panicked")));
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// UDP relay: listens on `listen`, forwards to `to`, replies back to the last
/// client. Runs until `stop` is set; `directions` are the forward (client →
/// server) and backward impairments (give the two different seeds).
pub fn run_udp(
    listen: SocketAddr,
    to: SocketAddr,
    directions: (Direction, Direction),
    stats: &Arc<RelayStats>,
    stop: &Arc<AtomicBool>,
) -> io::Result<()> {
    let front = UdpSocket::bind(listen)?;
    let bind: SocketAddr = if to.is_ipv6() {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    };
    let back = UdpSocket::bind(bind)?;
    let client = Arc::new(Mutex::new(None));
    let server = Arc::new(Mutex::new(Some(to)));
    let port = |socket: UdpSocket, dest: &Arc<Mutex<Option<SocketAddr>>>, learn| UdpPort {
        socket,
        dest: Arc::clone(dest),
        learn,
        last_timeout: None,
    };
    let fwd = (
        port(front.try_clone()?, &client, true),
        port(back.try_clone()?, &server, false),
    );
    let bwd = (port(back, &server, false), port(front, &client, false));
    spawn_pair(fwd, bwd, directions, stats, stop)
}

fn spawn_pair(
    fwd: (impl Port + 'static, impl Port + 'static),
    bwd: (impl Port + 'static, impl Port + 'static),
    (forward, backward): (Direction, Direction),
    stats: &Arc<RelayStats>,
    stop: &Arc<AtomicBool>,
) -> io::Result<()> {
    let (s1, t1) = (Arc::clone(stats), Arc::clone(stop));
    let h1 = std::thread::Builder::new()
        .name("relay-fwd".into())
        .spawn(move || pump(fwd.0, fwd.1, forward, &s1.forward, &t1))?;
    let (s2, t2) = (Arc::clone(stats), Arc::clone(stop));
    let h2 = std::thread::Builder::new()
        .name("relay-bwd".into())
        .spawn(move || pump(bwd.0, bwd.1, backward, &s2.backward, &t2))?;
    let r = join(vec![h1, h2]);
    stop.store(true, Ordering::SeqCst);
    r
}

/// Opens TUN device `name` in each of the namespaces `ns_a` and `ns_b`
/// (`None`: the current one) and returns the two devices.
pub fn open_tun_pair(name: &str, ns_a: Option<&str>, ns_b: Option<&str>) -> io::Result<(Tun, Tun)> {
    let open_in = |ns: Option<&str>| -> io::Result<Tun> {
        let ns = ns.map(str::to_owned);
        let name = name.to_owned();
        std::thread::spawn(move || {
            if let Some(ns) = ns {
                diodon_io::netns::enter_current_thread(&ns).map_err(io::Error::other)?;
            }
            Tun::open(&name)
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("TUN open thread panicked")))
    };
    Ok((open_in(ns_a)?, open_in(ns_b)?))
}

/// IP relay between two TUN devices (see [`open_tun_pair`]): packets read
/// from `a` are written to `b` (impaired by `directions.0`) and vice versa
/// (`directions.1`). Runs until `stop`.
pub fn run_tun_pair(
    a: Tun,
    b: Tun,
    directions: (Direction, Direction),
    stats: &Arc<RelayStats>,
    stop: &Arc<AtomicBool>,
) -> io::Result<()> {
    let fwd = (TunPort(a.try_clone()?), TunPort(b.try_clone()?));
    let bwd = (TunPort(b), TunPort(a));
    spawn_pair(fwd, bwd, directions, stats, stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    fn direction(impairment: Impairment, seed: u64) -> Direction {
        Direction {
            impairment,
            seed: Seed(seed),
        }
    }

    #[test]
    fn delay_holds_packets_until_due_in_order() {
        let mut l = Line::new(direction(
            Impairment {
                delay: Duration::from_millis(50),
                ..Impairment::default()
            },
            1,
        ));
        assert_eq!(l.push(ms(0), b"a"), Fate::Queued);
        assert_eq!(l.push(ms(1), b"b"), Fate::Queued);
        assert_eq!(l.pop_due(ms(49)), None);
        assert_eq!(l.next_due(), Some(ms(50)));
        assert_eq!(l.pop_due(ms(50)).as_deref(), Some(&b"a"[..]));
        assert_eq!(l.pop_due(ms(50)), None);
        assert_eq!(l.pop_due(ms(51)).as_deref(), Some(&b"b"[..]));
        assert!(l.is_empty());
    }

    #[test]
    fn loss_rate_matches_and_is_reproducible_by_seed() {
        let seed = Seed::from_env_or(42);
        let _report = diodon_sim::SeedReport::new("relay_loss_rate", &seed);
        let d = Direction {
            impairment: Impairment::loss(0.05),
            seed,
        };
        let run = || {
            let mut l = Line::new(d);
            (0..100_000)
                .map(|_| l.push(ms(0), b"x"))
                .filter(|f| *f == Fate::Dropped)
                .count()
        };
        let dropped = run();
        assert_eq!(dropped, run(), "same seed, same drops");
        assert!((4_500..5_500).contains(&dropped), "seed {seed}: {dropped}");
    }

    #[test]
    fn reordered_packet_is_overtaken() {
        // Find the first seed whose draws hold back the first packet and not
        // the second (each seed's draws are fixed, so this is deterministic).
        let imp = Impairment {
            delay: Duration::from_millis(10),
            reorder: 0.5,
            reorder_gap: Duration::from_millis(5),
            ..Impairment::default()
        };
        let mut checked = false;
        for seed in 0..64 {
            let mut l = Line::new(direction(imp, seed));
            let fates = (l.push(ms(0), b"first"), l.push(ms(1), b"second"));
            if fates != (Fate::Reordered, Fate::Queued) {
                continue;
            }
            assert_eq!(l.pop_due(ms(10)), None);
            assert_eq!(l.pop_due(ms(11)).as_deref(), Some(&b"second"[..]));
            assert_eq!(l.pop_due(ms(14)), None);
            assert_eq!(l.pop_due(ms(15)).as_deref(), Some(&b"first"[..]));
            assert_eq!(l.totals().reordered, 1);
            checked = true;
            break;
        }
        assert!(checked, "no seed in 0..64 reordered the first packet only");
    }

    #[test]
    fn udp_relay_forwards_both_ways_with_delay() {
        let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let listen = {
            let s = UdpSocket::bind("127.0.0.1:0").expect("bind");
            s.local_addr().expect("addr")
        };
        let stats = Arc::new(RelayStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let to = server.local_addr().expect("addr");
        let (st, sp) = (Arc::clone(&stats), Arc::clone(&stop));
        let relay = std::thread::spawn(move || {
            let d = direction(
                Impairment {
                    delay: Duration::from_millis(30),
                    ..Impairment::default()
                },
                1,
            );
            run_udp(listen, to, (d, d), &st, &sp)
        });
        std::thread::sleep(Duration::from_millis(50));
        let client = UdpSocket::bind("127.0.0.1:0").expect("bind");
        client
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        server
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let clock = Clock::new();
        let t0 = clock.now();
        client.send_to(b"ping", listen).expect("send");
        let mut buf = [0u8; 16];
        let (n, via) = server.recv_from(&mut buf).expect("server receives");
        assert_eq!(&buf[..n], b"ping");
        server.send_to(b"pong", via).expect("reply");
        let (n, _) = client.recv_from(&mut buf).expect("client receives");
        assert_eq!(&buf[..n], b"pong");
        let rtt = clock.now().saturating_duration_since(t0);
        assert!(rtt >= Duration::from_millis(60), "rtt {rtt:?}");
        stop.store(true, Ordering::SeqCst);
        relay.join().expect("join").expect("relay ok");
        assert_eq!(stats.forward.forwarded.load(Ordering::Relaxed), 1);
        assert_eq!(stats.backward.forwarded.load(Ordering::Relaxed), 1);
    }
}
