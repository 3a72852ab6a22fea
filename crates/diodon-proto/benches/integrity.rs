//! What each integrity mode costs per datagram, sealing and opening: the
//! CRC32C, the two keyed MACs (BLAKE3, AES-GMAC) and ChaCha20-Poly1305
//! encryption (PROTOCOL.md § 4), on full data symbols of MTU 1500 (1418 bytes) and 9000 (8918
//! bytes). Throughput is symbol payload bytes: 1 GiB at the measured rate
//! costs 1 / rate seconds of one core on each side together.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use diodon_proto::crypto::CipherCache;
use diodon_proto::wire::{
    open_datagram, Body, DatagramRepr, Header, Integrity, Sealer, SymbolRepr,
};
use diodon_proto::{ChannelId, KeyRing, SessionId};

const DATAGRAMS: u64 = 256;
const KEY: [u8; 32] = [0x5A; 32];

fn repr(seq: u64, payload: &[u8]) -> DatagramRepr<'_> {
    DatagramRepr {
        header: Header {
            session: SessionId(0x0123_4567_89AB_CDEF),
            seq,
            channel: ChannelId(1),
            timestamp_ms: 1500,
            lifetime_ms: 2000,
        },
        body: Body::Data(SymbolRepr {
            block: 7,
            index: 3,
            k: 256,
            m: 26,
            tail_len: payload.len() as u16,
            group_pos: 0,
            group_len: 4,
            payload,
        }),
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("integrity");
    group.sample_size(20);
    let ring = KeyRing::single(KEY);
    let modes = [
        ("crc32c", Integrity::Crc32c),
        ("mac", Integrity::mac(KEY)),
        ("gmac", Integrity::Gmac(ring.clone())),
        ("encrypted", Integrity::Encrypted(ring.clone())),
    ];
    for symbol in [1418usize, 8918] {
        let payload: Vec<u8> = (0..symbol).map(|i| (i * 7) as u8).collect();
        group.throughput(Throughput::Bytes(DATAGRAMS * symbol as u64));
        for (name, integrity) in &modes {
            // The sender keeps its sealer (a session's key), the receiver
            // its cache.
            let sealer = Sealer::new(integrity, SessionId(0x0123_4567_89AB_CDEF), 0);
            let mut ciphers = CipherCache::new(integrity.key_ring().cloned());
            let mut buf = vec![0u8; repr(0, &payload).buffer_len(integrity)];
            let mut plain = Vec::new();
            group.bench_function(BenchmarkId::new(*name, symbol), |b| {
                b.iter(|| {
                    for seq in 0..DATAGRAMS {
                        let r = repr(seq, &payload);
                        let n = match &sealer {
                            Some(sealer) => r.emit_sealed(&mut buf, sealer),
                            None => r.emit(&mut buf, integrity),
                        };
                        let opened = open_datagram(&buf[..n], integrity, &mut ciphers, &mut plain);
                        assert!(opened.is_ok());
                    }
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
