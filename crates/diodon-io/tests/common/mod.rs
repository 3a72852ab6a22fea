//! Shared fixtures for the integration tests: verifiable datagram payloads,
//! a paced sender/receiver pair, and the root/namespace gate.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use diodon_io::{BatchReceiver, BatchSender, MonotonicClock};

/// Payload of datagram `seq` with length `len`: a 6-byte header (seq, len)
/// then bytes derived from both, so any mix-up or corruption shows.
pub fn payload(seq: u32, len: usize, out: &mut Vec<u8>) {
    assert!(len >= 6);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend((6..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i * 7) as u8));
}

/// Checks one received datagram and returns its sequence number.
pub fn verify(data: &[u8]) -> u32 {
    assert!(data.len() >= 6, "runt datagram of {} bytes", data.len());
    let seq = u32::from_be_bytes(data[..4].try_into().expect("4 bytes"));
    let len = u16::from_be_bytes(data[4..6].try_into().expect("2 bytes")) as usize;
    assert_eq!(len, data.len(), "datagram {seq}: length field");
    let mut expected = Vec::with_capacity(len);
    payload(seq, len, &mut expected);
    assert!(expected == data, "datagram {seq}: content differs");
    seq
}

/// How a test run went.
#[derive(Debug, Default)]
pub struct Transfer {
    pub sent: u64,
    pub received: u64,
    pub seconds: f64,
    pub gso_calls: u64,
    pub sendmmsg_calls: u64,
    pub retries: u64,
    pub gro_packets: u64,
    pub socket_drops: u64,
}

/// Sends `count` datagrams in GSO-contract buffers (`per_call` datagrams of
/// `seg` bytes, the last of each buffer `seg / 2` long), never more than
/// `window` ahead of what the receiver has taken (`progress`).
pub fn send_all(
    tx: &mut BatchSender,
    dest: SocketAddr,
    count: u32,
    seg: usize,
    per_call: u32,
    progress: &AtomicU64,
    window: u64,
) {
    let mut buf = Vec::with_capacity(seg * per_call as usize);
    let mut seq = 0;
    while seq < count {
        while u64::from(seq) > progress.load(Ordering::Acquire) + window {
            std::thread::sleep(Duration::from_micros(50));
        }
        buf.clear();
        let n = per_call.min(count - seq);
        for i in 0..n {
            let len = if i + 1 == n { seg / 2 } else { seg };
            payload(seq + i, len, &mut buf);
        }
        let report = tx.send(dest, &buf, seg).expect("send");
        assert_eq!(report.datagrams, u64::from(n));
        assert_eq!(report.bytes, buf.len() as u64);
        seq += n;
    }
}

/// Receives until `count` distinct datagrams arrived (every byte verified) or
/// `idle` passes without traffic.
pub fn receive_all(
    rx: &mut BatchReceiver,
    count: u32,
    progress: &AtomicU64,
    idle: Duration,
) -> u64 {
    let mut seen = vec![false; count as usize];
    let mut got = 0u64;
    while got < u64::from(count) {
        let batch = rx.recv_batch(Some(idle)).expect("recv_batch");
        if batch.is_empty() {
            break;
        }
        for d in batch {
            let seq = verify(d.data) as usize;
            assert!(seq < seen.len(), "unexpected sequence {seq}");
            assert!(!seen[seq], "duplicate datagram {seq}");
            seen[seq] = true;
            got += 1;
        }
        progress.store(got, Ordering::Release);
    }
    got
}

/// Runs a full paced transfer on the current threads' namespace(s).
pub fn transfer(
    mut tx: BatchSender,
    mut rx: BatchReceiver,
    count: u32,
    seg: usize,
    per_call: u32,
) -> Transfer {
    let dest = rx.local_addr();
    let progress = Arc::new(AtomicU64::new(0));
    let rx_progress = Arc::clone(&progress);
    let receiver = std::thread::spawn(move || {
        let got = receive_all(&mut rx, count, &rx_progress, Duration::from_secs(3));
        (got, rx)
    });
    let clock = MonotonicClock::new();
    send_all(&mut tx, dest, count, seg, per_call, &progress, 4_000);
    let (received, rx) = receiver.join().expect("receiver thread");
    let seconds = clock.now().as_nanos() as f64 / 1e9;
    let c = tx.counters();
    Transfer {
        sent: c.datagrams,
        received,
        seconds,
        gso_calls: c.gso_calls,
        sendmmsg_calls: c.sendmmsg_calls,
        retries: c.enobufs_retries + c.eagain_retries + c.async_error_retries,
        gro_packets: rx.counters().gro_packets,
        socket_drops: rx.socket_drops(),
    }
}
