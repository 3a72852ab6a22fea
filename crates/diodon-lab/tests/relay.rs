//! The impairment relay on loopback carrying a Delta-t transfer: 300 KB
//! through 20 % loss one way (10 ms delay) arrive identical, and the relay
//! counted the losses it caused.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use diodon_apps::deltat::{DeltatListener, DeltatStream};
use diodon_lab::relay::{run_udp, Direction, RelayStats};
use diodon_sim::{Impairment, Seed, SeedReport};

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().expect("addr")
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
fn transfer_through_lossy_relay_completes() {
    const LEN: usize = 300_000;
    let seed = Seed::from_env_or(20);
    let _report = SeedReport::new("transfer_through_lossy_relay_completes", &seed);
    let data = pattern(LEN, 3);
    let listener = DeltatListener::bind(any()).expect("bind");
    let server_addr = listener.local_addr().expect("addr");
    let relay_addr = {
        let s = std::net::UdpSocket::bind(any()).expect("bind");
        s.local_addr().expect("addr")
    };
    let stats = Arc::new(RelayStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (st, sp) = (Arc::clone(&stats), Arc::clone(&stop));
    let forward = Direction {
        impairment: Impairment {
            delay: Duration::from_millis(10),
            loss: 0.2,
            ..Impairment::default()
        },
        seed,
    };
    let backward = Direction {
        impairment: Impairment {
            loss: 0.0,
            ..forward.impairment
        },
        seed: Seed(seed.0.wrapping_add(1)),
    };
    let relay =
        thread::spawn(move || run_udp(relay_addr, server_addr, (forward, backward), &st, &sp));
    thread::sleep(Duration::from_millis(50));
    let expect = data.clone();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(20)));
        let mut got = vec![0u8; LEN];
        let r = s.read_exact(&mut got);
        eprintln!("server stats: {:?}", s.stats());
        r.expect("read all");
        assert!(got == expect, "data differ");
    });
    let mut c = DeltatStream::connect(relay_addr).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(25)));
    let r = c.write_all(&data).and_then(|()| c.flush());
    eprintln!("client stats: {:?}", c.stats());
    eprintln!("relay: {}", stats.forward.summary());
    let served = server.join();
    r.expect("delivered through 20 % loss");
    served.expect("server");
    stop.store(true, Ordering::SeqCst);
    relay.join().expect("relay").expect("relay ok");
    assert!(stats.forward.dropped.load(Ordering::Relaxed) > 0);
}
