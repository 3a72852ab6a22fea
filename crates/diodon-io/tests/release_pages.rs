//! `RecvBuffer::release_pages` gives a filled receive buffer's memory back
//! to the kernel (the process's resident set falls by what the datagrams
//! had made resident) and the buffer still works afterwards. Its own test
//! binary: the resident set is the whole process's, so no other test may
//! run beside it.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use diodon_io::{BatchReceiver, UdpConfig};

const DATAGRAMS: usize = 32;
const LEN: usize = 60_000;

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

fn fill(rx: &mut BatchReceiver, buf: &mut diodon_io::RecvBuffer, to: SocketAddr, tag: u8) {
    let tx = UdpSocket::bind("127.0.0.1:0").expect("sender");
    for i in 0..DATAGRAMS {
        tx.send_to(&vec![tag ^ i as u8; LEN], to).expect("send");
    }
    let mut got = 0;
    while got < DATAGRAMS {
        rx.recv_into(buf, Some(Duration::from_secs(2)))
            .expect("receive");
        assert!(!buf.is_empty(), "datagrams lost on loopback");
        for d in buf.iter() {
            assert_eq!(d.data.len(), LEN);
            assert!(
                d.data.iter().all(|&b| b == tag ^ got as u8),
                "datagram {got}"
            );
            got += 1;
        }
    }
}

#[test]
fn released_pages_leave_the_resident_set_and_the_buffer_still_works() {
    let mut cfg = UdpConfig::new("127.0.0.1:0".parse().expect("address"));
    cfg.gro = false;
    cfg.rcvbuf = Some(16 << 20);
    cfg.recv_slots = DATAGRAMS;
    let mut rx = BatchReceiver::open(&cfg).expect("receiver");
    let to = rx.local_addr();
    let mut buf = rx.new_buffer();
    let before = rss_kib();
    fill(&mut rx, &mut buf, to, 0x5a);
    let filled = rss_kib();
    buf.release_pages();
    let released = rss_kib();
    eprintln!("VmRSS KiB: empty buffer {before}, filled {filled}, released {released}");
    let touched = (DATAGRAMS * LEN / 1024) as u64;
    assert!(
        filled >= before + touched / 2,
        "filling made {} KiB resident",
        filled - before
    );
    assert!(
        released + touched / 2 <= filled,
        "releasing gave back only {} KiB of about {touched}",
        filled.saturating_sub(released)
    );
    assert!(buf.is_empty());
    fill(&mut rx, &mut buf, to, 0xa5);
}
