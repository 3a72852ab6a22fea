//! Stable-toolchain property tests behind the fuzz targets (DESIGN.md, style
//! rule 5): random bytes through every `diodon_proto::fuzzing` function (so
//! `cargo test` exercises what `cargo fuzz` does, in miniature), and wire
//! round trips: every valid `DatagramRepr` (data, repair, beacon, open,
//! trailer) emits and parses back to itself in both integrity modes, and no
//! single-bit flip of an emitted datagram is ever accepted; streams of
//! Kafka records (`kafka_record`) read back to the records framed.

use diodon_proto::crypto::CipherCache;
use diodon_proto::fuzzing;
use diodon_proto::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp};
use diodon_proto::wire::{
    open_datagram, parse_datagram, BeaconRepr, Body, ChannelEntry, ChannelKind, ChannelMeta,
    ChannelState, DatagramRepr, Header, Integrity, SymbolRepr, SyncInfo, TrailerRepr,
    TrailerStatus, MAX_NAME_LEN,
};
use diodon_proto::{ChannelId, SessionId};
use proptest::prelude::*;

/// An owned Kafka record for the round trip (the codec's record borrows).
#[derive(Debug, Clone)]
struct OwnedKafkaRecord {
    source_offset: u64,
    timestamp: RecordTimestamp,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

impl OwnedKafkaRecord {
    fn as_record(&self) -> KafkaRecord<'_> {
        KafkaRecord {
            source_offset: self.source_offset,
            timestamp: self.timestamp,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| RecordHeader {
                    name,
                    value: value.as_deref(),
                })
                .collect(),
        }
    }
}

/// Bytes that may be null, empty or not (null and empty must stay apart).
fn nullable_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    proptest::option::of(prop::collection::vec(any::<u8>(), 0..200))
}

fn kafka_record() -> impl Strategy<Value = OwnedKafkaRecord> {
    let timestamp = prop_oneof![
        Just(RecordTimestamp::NotAvailable),
        any::<i64>().prop_map(RecordTimestamp::CreateTime),
        any::<i64>().prop_map(RecordTimestamp::LogAppendTime),
    ];
    let header = ("\\PC{0,12}", nullable_bytes());
    (
        any::<u64>(),
        timestamp,
        nullable_bytes(),
        nullable_bytes(),
        prop::collection::vec(header, 0..5),
    )
        .prop_map(
            |(source_offset, timestamp, key, value, headers)| OwnedKafkaRecord {
                source_offset,
                timestamp,
                key,
                value,
                headers,
            },
        )
}

/// An owned description of a valid datagram (the repr borrows its payload).
#[derive(Debug, Clone)]
enum Spec {
    Symbol { repair: bool, s: SymbolSpec },
    Beacon(BeaconRepr),
    Open(ChannelMeta),
    Trailer(TrailerRepr),
}

/// Symbol fields consistent with the parser's rules.
#[derive(Debug, Clone)]
struct SymbolSpec {
    block: u64,
    index: u16,
    k: u16,
    m: u16,
    tail_len: u16,
    group_pos: u8,
    group_len: u8,
    payload: Vec<u8>,
}

fn header() -> impl Strategy<Value = Header> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(
            |(session, seq, channel, timestamp_ms, lifetime_ms)| Header {
                session: SessionId(session),
                seq,
                channel: ChannelId(channel),
                timestamp_ms,
                lifetime_ms,
            },
        )
}

/// A source (`repair == false`) or repair symbol: shard length `L` even,
/// tail `1..=L`, the tail symbol carries exactly `tail_len` bytes, every
/// other symbol `L`; the group starts at or after block 0.
fn symbol(repair: bool) -> impl Strategy<Value = Spec> {
    let code = (1u16..=300, if repair { 1u16..=300 } else { 0u16..=300 });
    (
        code,
        1usize..=128,
        any::<u64>(),
        (1u8..=255),
        any::<prop::sample::Index>(),
    )
        .prop_flat_map(move |((k, m), half, block, group_len, pick)| {
            let shard = 2 * half;
            let index = if repair {
                k + pick.index(usize::from(m)) as u16
            } else {
                pick.index(usize::from(k)) as u16
            };
            (
                Just((k, m, index, block, group_len)),
                1..=shard as u16,
                0..group_len,
                prop::collection::vec(any::<u8>(), shard),
            )
        })
        .prop_map(
            move |((k, m, index, block, group_len), tail_len, group_pos, mut payload)| {
                if index + 1 == k {
                    payload.truncate(usize::from(tail_len));
                }
                Spec::Symbol {
                    repair,
                    s: SymbolSpec {
                        block: block.max(u64::from(group_pos)),
                        index,
                        k,
                        m,
                        tail_len,
                        group_pos,
                        group_len,
                        payload,
                    },
                }
            },
        )
}

fn beacon() -> impl Strategy<Value = Spec> {
    let entry =
        (any::<u32>(), 0usize..3, any::<u64>()).prop_map(|(channel, state, blocks_sent)| {
            ChannelEntry {
                channel: ChannelId(channel),
                state: [
                    ChannelState::Open,
                    ChannelState::Finished,
                    ChannelState::Aborted,
                ][state],
                blocks_sent,
            }
        });
    (
        (
            any::<u64>(),
            1u16..=32_767,
            1u16..=u16::MAX,
            any::<u16>(),
            1u8..=u8::MAX,
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
        ),
        prop::collection::vec(entry, 0..40),
    )
        .prop_map(
            |((start, half, k, m, depth), (rate, dt, interval, sent, bytes), channels)| {
                Spec::Beacon(BeaconRepr {
                    start_unix_ms: start,
                    symbol_size: 2 * half,
                    block_symbols: k,
                    repair_symbols: m,
                    interleave_depth: depth,
                    rate_bps: rate,
                    delta_t_ms: dt,
                    beacon_interval_ms: interval,
                    datagrams_sent: sent,
                    bytes_sent: bytes,
                    channels,
                })
            },
        )
}

/// UTF-8 names up to the limit: arbitrary short ones, and long ones of
/// multi-byte characters cut to at most `MAX_NAME_LEN` bytes.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "\\PC{0,40}",
        1 => ("[a-zé€𝄞/]", 1usize..=MAX_NAME_LEN).prop_map(|(c, n)| {
            let mut s = String::new();
            while s.len() + c.len() <= n {
                s.push_str(&c);
            }
            s
        }),
    ]
}

fn open() -> impl Strategy<Value = Spec> {
    let sync = proptest::option::of(
        (any::<u64>(), 1u16.., any::<Option<[u8; 32]>>(), 1u32..).prop_map(
            |(first_seen_unix_ms, pass, digest, block_bytes)| SyncInfo {
                first_seen_unix_ms,
                pass,
                digest,
                block_bytes,
            },
        ),
    );
    (
        0usize..5,
        any::<Option<u64>>(),
        any::<u32>(),
        any::<i64>(),
        0u32..1_000_000_000,
        name(),
        sync,
    )
        .prop_map(|(kind, size, mode, mtime_sec, mtime_nsec, name, sync)| {
            Spec::Open(ChannelMeta {
                kind: [
                    ChannelKind::File,
                    ChannelKind::Stream,
                    ChannelKind::Datagrams,
                    ChannelKind::Manifest,
                    ChannelKind::Bundle,
                ][kind],
                size,
                mode,
                mtime_sec,
                mtime_nsec,
                aligned: kind == 2 && mode & 1 == 1,
                name,
                sync: sync.filter(|_| kind == 0),
            })
        })
}

fn trailer() -> impl Strategy<Value = Spec> {
    (any::<u64>(), any::<u64>(), any::<bool>(), any::<[u8; 32]>()).prop_map(
        |(total_len, total_blocks, aborted, digest)| {
            Spec::Trailer(TrailerRepr {
                total_len,
                total_blocks,
                status: if aborted {
                    TrailerStatus::Aborted
                } else {
                    TrailerStatus::Complete
                },
                digest,
            })
        },
    )
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![symbol(false), symbol(true), beacon(), open(), trailer()]
}

fn repr(mut header: Header, spec: &Spec) -> DatagramRepr<'_> {
    let body = match spec {
        Spec::Symbol { repair, s } => {
            let sym = SymbolRepr {
                block: s.block,
                index: s.index,
                k: s.k,
                m: s.m,
                tail_len: s.tail_len,
                group_pos: s.group_pos,
                group_len: s.group_len,
                payload: &s.payload,
            };
            if *repair {
                Body::Repair(sym)
            } else {
                Body::Data(sym)
            }
        }
        Spec::Beacon(b) => {
            header.channel = ChannelId(0);
            Body::Beacon(b.clone())
        }
        Spec::Open(meta) => Body::Open(meta.clone()),
        Spec::Trailer(t) => Body::Trailer(*t),
    };
    DatagramRepr { header, body }
}

fn emit(repr: &DatagramRepr<'_>, integrity: &Integrity) -> Vec<u8> {
    let mut out = vec![0u8; repr.buffer_len(integrity)];
    let n = repr.emit(&mut out, integrity);
    assert_eq!(n, out.len());
    out
}

fn integrities() -> [Integrity; 2] {
    [Integrity::Crc32c, Integrity::mac(fuzzing::FUZZ_KEY)]
}

/// Bit positions to flip: all of them for small datagrams, an even spread
/// (always including the header and the tag) for large ones.
fn flip_positions(len: usize) -> Vec<usize> {
    let bits = len * 8;
    if bits <= 4096 {
        (0..bits).collect()
    } else {
        let step = bits / 1024;
        (0..32 * 8)
            .chain((32 * 8..bits).step_by(step))
            .chain(bits - 16 * 8..bits)
            .collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn every_valid_datagram_round_trips(header in header(), spec in spec()) {
        let repr = repr(header, &spec);
        for integrity in integrities() {
            let bytes = emit(&repr, &integrity);
            prop_assert_eq!(bytes.len(), repr.buffer_len(&integrity));
            let parsed = parse_datagram(&bytes, &integrity);
            prop_assert_eq!(parsed.as_ref(), Ok(&repr), "{:?}", integrity);
            // And the fuzz function's own checks hold on it.
            fuzzing::wire(&bytes);
        }
    }

    #[test]
    fn single_bit_flips_are_always_rejected(header in header(), spec in spec()) {
        let repr = repr(header, &spec);
        for integrity in integrities() {
            let bytes = emit(&repr, &integrity);
            for bit in flip_positions(bytes.len()) {
                let mut damaged = bytes.clone();
                damaged[bit / 8] ^= 1 << (bit % 8);
                prop_assert!(
                    parse_datagram(&damaged, &integrity).is_err(),
                    "bit {} of {} flipped and accepted ({:?})", bit, bytes.len(), integrity
                );
            }
        }
    }

    #[test]
    fn encrypted_datagrams_round_trip_and_refuse_every_flipped_bit(header in header(), spec in spec()) {
        let repr = repr(header, &spec);
        let ring = fuzzing::fuzz_ring();
        let integrity = Integrity::Encrypted(ring.clone());
        let bytes = emit(&repr, &integrity);
        let mut ciphers = CipherCache::new(Some(ring));
        let mut plain = Vec::new();
        let opened = open_datagram(&bytes, &integrity, &mut ciphers, &mut plain);
        prop_assert_eq!(opened.as_ref(), Ok(&repr));
        for bit in flip_positions(bytes.len()) {
            let mut damaged = bytes.clone();
            damaged[bit / 8] ^= 1 << (bit % 8);
            let mut plain = Vec::new();
            prop_assert!(
                open_datagram(&damaged, &integrity, &mut ciphers, &mut plain).is_err(),
                "bit {} of {} flipped and opened", bit, bytes.len()
            );
        }
        fuzzing::open(&bytes);
    }

    #[test]
    fn open_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..400)) {
        fuzzing::open(&data);
    }

    #[test]
    fn bundle_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::bundle(&data);
    }

    #[test]
    fn wire_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..400)) {
        fuzzing::wire(&data);
    }

    #[test]
    fn records_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::records(&data);
    }

    #[test]
    fn kafka_record_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..600)) {
        fuzzing::kafka_record(&data);
    }

    #[test]
    fn kafka_records_round_trip_through_a_stream(records in prop::collection::vec(kafka_record(), 0..12)) {
        let mut stream = Vec::new();
        for r in &records {
            r.as_record().emit(&mut stream).unwrap();
        }
        let mut back = Vec::new();
        let mut at = 0;
        while let Some((r, used)) = KafkaRecord::parse_prefix(&stream[at..]).unwrap() {
            back.push(r);
            at += used;
        }
        prop_assert_eq!(at, stream.len());
        let want: Vec<KafkaRecord<'_>> = records.iter().map(OwnedKafkaRecord::as_record).collect();
        prop_assert_eq!(back, want);
    }

    #[test]
    fn records_round_trip(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..300), 0..20), pad in 0usize..4) {
        let mut block = Vec::new();
        for p in &payloads {
            diodon_proto::records::push_record(&mut block, p).unwrap();
        }
        block.extend(std::iter::repeat_n(0u8, pad));
        let back: Vec<Vec<u8>> = diodon_proto::BlockRecords::new(&block).map(|r| r.unwrap().to_vec()).collect();
        prop_assert_eq!(back, payloads);
    }

    #[test]
    fn fec_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..64)) {
        fuzzing::fec(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn receiver_fuzz_function_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..1000)) {
        fuzzing::receiver(&data);
    }
}

/// A fuzz target's name and function.
type Target = (&'static str, fn(&[u8]));

/// The committed fuzz seeds stay valid inputs (and pass every check).
#[test]
fn fuzz_seeds_pass() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds");
    let targets: [Target; 6] = [
        ("wire", fuzzing::wire),
        ("open", fuzzing::open),
        ("records", fuzzing::records),
        ("receiver", fuzzing::receiver),
        ("fec", fuzzing::fec),
        ("kafka_record", fuzzing::kafka_record),
    ];
    for (target, run) in targets {
        let Ok(dir) = std::fs::read_dir(format!("{root}/{target}")) else {
            continue;
        };
        for entry in dir.flatten() {
            let bytes = std::fs::read(entry.path()).expect("readable seed");
            run(&bytes);
        }
    }
}

// ---------------------------------------------------------------------------
// Regressions found by fuzzing.

fn datagram(seq: u64, body: Body<'_>) -> Vec<u8> {
    let header = Header {
        session: SessionId(7),
        seq,
        channel: ChannelId(1),
        timestamp_ms: 0,
        lifetime_ms: 2000,
    };
    emit(&DatagramRepr { header, body }, &Integrity::Crc32c)
}

/// A channel-open whose size flag says "unknown" must carry size 0
/// (PROTOCOL.md §channel-open); otherwise two encodings parse the same.
#[test]
fn open_with_size_but_no_size_flag_is_rejected() {
    let mut bytes = datagram(1, Body::Open(ChannelMeta::stream("x")));
    bytes[32 + 11] = 5;
    let covered = bytes.len() - 4;
    let crc = crc_fast::crc32_iscsi(&bytes[..covered]);
    bytes[covered..].copy_from_slice(&crc.to_be_bytes());
    assert!(parse_datagram(&bytes, &Integrity::Crc32c).is_err());
    fuzzing::wire(&bytes);
}

/// The open flags each belong to one kind (PROTOCOL.md § 5.3): aligned
/// records (bit 1) to `Datagrams`, the sync extension (bit 2) to `File`.
/// Any other combination, the two together included, is malformed, and
/// the sender refuses to open it.
#[test]
fn open_flags_on_the_wrong_kind_are_rejected() {
    use diodon_proto::wire::{WireError, OPEN_ALIGNED, OPEN_SYNC};
    let sync = SyncInfo {
        first_seen_unix_ms: 1,
        pass: 1,
        digest: None,
        block_bytes: 1024,
    };
    let synced = ChannelMeta {
        sync: Some(sync),
        ..ChannelMeta::file("f", 1)
    };
    // (meta, kind byte, extra flags, expected reason)
    let cases = [
        (
            synced.clone(),
            2,
            0,
            "sync information outside a file channel",
        ),
        (
            synced.clone(),
            3,
            0,
            "sync information outside a file channel",
        ),
        (
            synced.clone(),
            4,
            0,
            "sync information outside a file channel",
        ),
        (
            synced.clone(),
            1,
            OPEN_ALIGNED,
            "aligned records outside a datagram channel",
        ),
        (
            synced,
            3,
            OPEN_ALIGNED,
            "sync information outside a file channel",
        ),
        (
            ChannelMeta::packets("p"),
            1,
            0,
            "aligned records outside a datagram channel",
        ),
        (
            ChannelMeta::packets("p"),
            4,
            0,
            "aligned records outside a datagram channel",
        ),
    ];
    for (meta, kind, extra, why) in cases {
        let mut bytes = datagram(1, Body::Open(meta));
        bytes[32] = kind;
        bytes[33] |= extra;
        let covered = bytes.len() - 4;
        let crc = crc_fast::crc32_iscsi(&bytes[..covered]);
        bytes[covered..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            parse_datagram(&bytes, &Integrity::Crc32c),
            Err(WireError::Malformed {
                kind: "channel-open",
                what: why
            }),
            "kind {kind}, flags {:#04x}",
            bytes[33]
        );
        assert_ne!(bytes[33] & (OPEN_ALIGNED | OPEN_SYNC), 0);
        fuzzing::wire(&bytes);
    }
    let mut tx = diodon_proto::Sender::new(
        diodon_proto::SenderConfig::default(),
        SessionId(1),
        diodon_proto::Timestamp::ZERO,
    )
    .unwrap();
    let stream_with_sync = ChannelMeta {
        sync: Some(sync),
        ..ChannelMeta::stream("s")
    };
    let file_aligned = ChannelMeta {
        aligned: true,
        ..ChannelMeta::file("f", 1)
    };
    for meta in [stream_with_sync, file_aligned] {
        assert!(matches!(
            tx.open_channel(meta),
            Err(diodon_proto::SendError::BadMeta(_))
        ));
    }
}

/// Symbols of a block whose (forged) code the erasure coder does not
/// support (k = 5, m = 65530: k + m fits the wire, the coder refuses) must
/// not corrupt the buffered-bytes accounting.
#[test]
fn unsupported_code_keeps_buffer_accounting() {
    use diodon_proto::{Receiver, ReceiverConfig, Timestamp};
    let mut rx = Receiver::new(ReceiverConfig::default(), Timestamp::ZERO);
    rx.handle_datagram(
        Timestamp::ZERO,
        &datagram(0, Body::Open(ChannelMeta::stream("x"))),
    );
    let payload = [7u8; 8];
    for (seq, index) in (1..).zip([0u16, 5, 6, 7, 8, 1, 2, 3, 4]) {
        let sym = SymbolRepr {
            block: 0,
            index,
            k: 5,
            m: 65_530,
            tail_len: 8,
            group_pos: 0,
            group_len: 1,
            payload: &payload,
        };
        let body = if index < 5 {
            Body::Data(sym)
        } else {
            Body::Repair(sym)
        };
        rx.handle_datagram(Timestamp::ZERO, &datagram(seq, body));
    }
    assert_eq!(rx.buffered_bytes(), 0);
}

/// Blocks buffered beyond the trailer's block count must be released when
/// the channel completes.
#[test]
fn blocks_beyond_the_trailer_are_released() {
    use diodon_proto::{Receiver, ReceiverConfig, Timestamp};
    let mut rx = Receiver::new(ReceiverConfig::default(), Timestamp::ZERO);
    let payload = b"abcd";
    let sym = |block| SymbolRepr {
        block,
        index: 0,
        k: 1,
        m: 0,
        tail_len: 4,
        group_pos: 0,
        group_len: 1,
        payload,
    };
    let now = Timestamp::ZERO;
    rx.handle_datagram(now, &datagram(1, Body::Data(sym(3))));
    rx.handle_datagram(now, &datagram(2, Body::Open(ChannelMeta::stream("x"))));
    rx.handle_datagram(now, &datagram(3, Body::Data(sym(0))));
    let trailer = TrailerRepr {
        total_len: 4,
        total_blocks: 1,
        status: TrailerStatus::Complete,
        digest: *blake3::hash(payload).as_bytes(),
    };
    rx.handle_datagram(now, &datagram(4, Body::Trailer(trailer)));
    assert_eq!(rx.open_channels(), 0);
    assert_eq!(rx.buffered_bytes(), 0, "buffered bytes leaked");
}
