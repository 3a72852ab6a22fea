//! The Delta-t driver over real UDP sockets on loopback: echo, a 10 MB
//! transfer compared byte for byte, and connection failures surfacing as
//! `io::Error` (refused by the peer, and a peer that never answers).

use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use diodon_apps::deltat::{DeltatListener, DeltatStream, DEFAULT_PORT};
use diodon_deltat::Config;

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
}

/// Δt = 3 s (MPL 1 s, R 1.5 s, A 0.5 s): Stimer 9 s, so failures show quickly.
fn short() -> Config {
    Config {
        max_packet_lifetime: Duration::from_secs(1),
        max_retransmit_time: Duration::from_millis(1500),
        max_ack_delay: Duration::from_millis(500),
        initial_rto: Duration::from_millis(300),
        max_rto: Duration::from_millis(600),
        ..Config::default()
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn echo_round_trips() {
    let listener = DeltatListener::bind(any()).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = thread::spawn(move || {
        let (mut s, peer) = listener.accept().expect("accept");
        assert!(peer.ip().is_loopback());
        let mut buf = [0u8; 4096];
        let mut total = 0;
        while total < 3 * 1000 {
            let n = s.read(&mut buf).expect("server read");
            s.write_all(&buf[..n]).expect("server write");
            total += n;
        }
        s.flush().expect("server flush");
    });
    let mut c = DeltatStream::connect(addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(10)));
    for round in 0..3u64 {
        let msg = pattern(1000, round);
        c.write_all(&msg).expect("write");
        let mut back = vec![0u8; msg.len()];
        c.read_exact(&mut back).expect("read echo");
        assert_eq!(back, msg, "round {round}");
    }
    c.flush().expect("flush");
    assert_eq!(c.unacked().expect("unacked"), 0);
    server.join().expect("server");
}

#[test]
fn ten_megabytes_arrive_identical() {
    const LEN: usize = 10 * 1024 * 1024;
    let data = pattern(LEN, 7);
    let listener = DeltatListener::bind(any()).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let expect = data.clone();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(30)));
        let mut got = vec![0u8; LEN];
        s.read_exact(&mut got).expect("read all");
        assert!(got == expect, "10 MB differ");
        let stats = s.stats();
        assert_eq!(stats.bytes_received, LEN as u64);
    });
    let mut c = DeltatStream::connect(addr).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(30)));
    c.write_all(&data).expect("write");
    c.flush().expect("all acknowledged");
    assert_eq!(c.stats().bytes_acked, LEN as u64);
    server.join().expect("server");
}

#[test]
fn port_without_listener_is_refused() {
    // A Delta-t endpoint listens on another port: the peer naks (port unreachable).
    let listener = DeltatListener::bind_with(any(), DEFAULT_PORT + 1, short()).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut c = DeltatStream::connect_with(addr, DEFAULT_PORT, short()).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(5)));
    c.write_all(b"hello").expect("queued");
    let e = c.flush().expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    let e = c.write(b"more").expect_err("still failed");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
}

#[test]
fn silent_peer_fails_with_timeout_after_stimer() {
    // A bound UDP socket that never answers: R7 fails the connection at Stimer.
    let hole = std::net::UdpSocket::bind(any()).expect("bind");
    let mut c = DeltatStream::connect_with(hole.local_addr().expect("addr"), DEFAULT_PORT, short())
        .expect("connect");
    c.write_all(b"into the void").expect("queued");
    let clock = diodon_io::MonotonicClock::new();
    let t0 = clock.now();
    let e = c.flush().expect_err("unacknowledged");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("unacknowledged"), "{e}");
    assert!(clock.elapsed_since(t0) < Duration::from_secs(15));
}

#[test]
fn write_timeout_and_read_timeout_are_errors() {
    let listener = DeltatListener::bind(any()).expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut c = DeltatStream::connect(addr).expect("connect");
    c.write_all(b"x").expect("write");
    let (mut s, _) = listener.accept().expect("accept");
    s.set_read_timeout(Some(Duration::from_millis(200)));
    let mut b = [0u8; 4];
    assert_eq!(s.read(&mut b).expect("one byte"), 1);
    let e = s.read(&mut b).expect_err("nothing more");
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(listener
        .accept_timeout(Some(Duration::from_millis(50)))
        .expect("no error")
        .is_none());
}
