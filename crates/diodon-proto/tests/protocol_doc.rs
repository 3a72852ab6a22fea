//! PROTOCOL.md's worked examples are decoded here: if the code and the
//! document disagree, this fails. `cargo test -p diodon-proto --test
//! protocol_doc -- --ignored --nocapture print_examples` prints the
//! examples from the code, for the document.

use diodon_proto::crypto::CipherCache;
use diodon_proto::wire::{
    open_datagram, BeaconRepr, Body, ChannelEntry, ChannelKind, ChannelMeta, ChannelState,
    DatagramRepr, Header, Integrity, SymbolRepr, SyncInfo, TrailerRepr, TrailerStatus,
};
use diodon_proto::{ChannelId, KeyRing, Secret, SessionId};

const KEY: [u8; 32] = *b"diodon-example-key-32-bytes-long";

fn header(channel: u32, seq: u64) -> Header {
    Header {
        session: SessionId(0x0123_4567_89AB_CDEF),
        seq,
        channel: ChannelId(channel),
        timestamp_ms: 1500,
        lifetime_ms: 2000,
    }
}

#[expect(clippy::too_many_lines, reason = "one literal per datagram type")]
fn examples() -> Vec<(&'static str, DatagramRepr<'static>, Integrity)> {
    vec![
        (
            "beacon",
            DatagramRepr {
                header: header(0, 0),
                body: Body::Beacon(BeaconRepr {
                    start_unix_ms: 1_795_000_000_000,
                    symbol_size: 1418,
                    block_symbols: 64,
                    repair_symbols: 7,
                    interleave_depth: 4,
                    rate_bps: 950_000_000,
                    delta_t_ms: 2000,
                    beacon_interval_ms: 250,
                    datagrams_sent: 0,
                    bytes_sent: 0,
                    channels: vec![ChannelEntry {
                        channel: ChannelId(1),
                        state: ChannelState::Open,
                        blocks_sent: 0,
                    }],
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "open",
            DatagramRepr {
                header: header(1, 1),
                body: Body::Open(ChannelMeta {
                    kind: ChannelKind::File,
                    size: Some(5),
                    mode: 0o644,
                    mtime_sec: 1_795_000_000,
                    mtime_nsec: 0,
                    name: "hello.txt".into(),
                    aligned: false,
                    sync: None,
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "open-sync",
            DatagramRepr {
                header: header(2, 5),
                body: Body::Open(ChannelMeta {
                    kind: ChannelKind::File,
                    size: Some(5),
                    mode: 0o644,
                    mtime_sec: 1_795_000_000,
                    mtime_nsec: 0,
                    name: "hello.txt".into(),
                    aligned: false,
                    sync: Some(SyncInfo {
                        first_seen_unix_ms: 1_795_000_001_000,
                        pass: 2,
                        digest: Some(*blake3::hash(b"hello").as_bytes()),
                        block_bytes: 358_400,
                    }),
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "data",
            DatagramRepr {
                header: header(1, 2),
                body: Body::Data(SymbolRepr {
                    block: 0,
                    index: 0,
                    k: 1,
                    m: 1,
                    tail_len: 5,
                    group_pos: 0,
                    group_len: 1,
                    payload: b"hello",
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "repair",
            DatagramRepr {
                header: header(1, 3),
                // For k = 1 the Reed–Solomon repair shard of "hello\0" (shard
                // length 6, zero padded) is the shard itself.
                body: Body::Repair(SymbolRepr {
                    block: 0,
                    index: 1,
                    k: 1,
                    m: 1,
                    tail_len: 5,
                    group_pos: 0,
                    group_len: 1,
                    payload: b"hello\0",
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "trailer",
            DatagramRepr {
                header: header(1, 4),
                body: Body::Trailer(TrailerRepr {
                    total_len: 5,
                    total_blocks: 1,
                    status: TrailerStatus::Complete,
                    digest: *blake3::hash(b"hello").as_bytes(),
                }),
            },
            Integrity::Crc32c,
        ),
        (
            "data-keyed",
            DatagramRepr {
                header: header(1, 2),
                body: Body::Data(SymbolRepr {
                    block: 0,
                    index: 0,
                    k: 1,
                    m: 1,
                    tail_len: 5,
                    group_pos: 0,
                    group_len: 1,
                    payload: b"hello",
                }),
            },
            Integrity::mac(KEY),
        ),
        (
            "data-keyed-key-7",
            hello_symbol(),
            Integrity::Keyed(KeyRing::new((7, Secret::new(KEY)), None).expect("one key")),
        ),
        (
            "data-encrypted",
            hello_symbol(),
            Integrity::Encrypted(KeyRing::single(KEY)),
        ),
        (
            "data-encrypted-key-7",
            hello_symbol(),
            Integrity::Encrypted(KeyRing::new((7, Secret::new(KEY)), None).expect("one key")),
        ),
    ]
}

/// The data symbol of the examples (sequence 2, channel 1, `hello`).
fn hello_symbol() -> DatagramRepr<'static> {
    DatagramRepr {
        header: header(1, 2),
        body: Body::Data(SymbolRepr {
            block: 0,
            index: 0,
            k: 1,
            m: 1,
            tail_len: 5,
            group_pos: 0,
            group_len: 1,
            payload: b"hello",
        }),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes
        .chunks(16)
        .map(|line| {
            line.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The hex code blocks of PROTOCOL.md that follow an `<!-- example: NAME -->` marker.
fn document_examples() -> Vec<(String, Vec<u8>)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../PROTOCOL.md"))
        .expect("PROTOCOL.md");
    let mut out = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- example: ")
            .and_then(|r| r.strip_suffix(" -->"))
        else {
            continue;
        };
        assert_eq!(
            lines.next().map(str::trim),
            Some("```hex"),
            "example {name} must be followed by a hex block"
        );
        let mut hex = String::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            hex.push_str(l);
        }
        let clean: String = hex.chars().filter(char::is_ascii_hexdigit).collect();
        out.push((name.to_owned(), hex::decode(clean).expect("valid hex")));
    }
    out
}

#[test]
fn every_example_in_protocol_md_decodes_to_the_documented_values() {
    let doc = document_examples();
    let code = examples();
    assert_eq!(
        doc.len(),
        code.len(),
        "PROTOCOL.md has {} examples, the code {}",
        doc.len(),
        code.len()
    );
    for ((name, bytes), (code_name, repr, integrity)) in doc.iter().zip(&code) {
        assert_eq!(name, code_name);
        let mut ciphers = CipherCache::new(integrity.key_ring().cloned());
        let mut plain = Vec::new();
        let parsed = open_datagram(bytes, integrity, &mut ciphers, &mut plain)
            .unwrap_or_else(|e| panic!("example {name}: {e}"));
        assert_eq!(&parsed, repr, "example {name} decodes to other values");
        let mut buf = vec![0; repr.buffer_len(integrity)];
        repr.emit(&mut buf, integrity);
        assert_eq!(&buf, bytes, "example {name}: emitting gives other bytes");
    }
}

#[test]
fn the_repair_example_really_repairs() {
    use diodon_proto::fec::{ErasureCode, ReedSolomon};
    let mut repair = vec![0u8; 6];
    ReedSolomon::new()
        .encode(1, 1, 6, b"hello\0", &mut repair)
        .unwrap();
    assert_eq!(&repair, b"hello\0");
}

#[test]
#[ignore = "prints the examples for PROTOCOL.md"]
fn print_examples() {
    for (name, repr, integrity) in examples() {
        let mut buf = vec![0; repr.buffer_len(&integrity)];
        repr.emit(&mut buf, &integrity);
        println!("<!-- example: {name} -->\n```hex\n{}\n```\n", to_hex(&buf));
    }
}
