//! Fuzzing entry points for the one-way core: one plain function per parser
//! or state machine, taking arbitrary bytes and asserting invariants. They
//! must never panic except on a violated invariant (a bug). The `fuzz/`
//! cargo-fuzz targets and the stable property tests
//! (`tests/fuzz_props.rs`) both call them, so every crash a fuzzer finds is
//! reproducible with `cargo test`.
//!
//! ```text
//!   fuzz bytes ──► wire()      parse_datagram ─► emit ─► parse (same repr, same bytes)
//!              ──► open()      open_datagram as is | sealed with the ring ─► opens,
//!                              re-seals to the same bytes | one flipped bit ─► refused
//!              ──► receiver()  ops: genuine Sender traffic | raw | resealed | forged
//!                              symbols / controls | replays | time ─► Receiver
//!                              ─► stats identity, verdict and delivery invariants
//!              ──► fec()       k, m, L, erasures ─► encode ─► erase ≤ m ─► decode == source
//!              ──► bundle()    bundle::parse ─► entries ─► push_entry (same bytes)
//!              ──► kafka_record()  parse_prefix stream ─► records ─► emit (same bytes)
//! ```
//!
//! Not a stable API: hidden from the docs, for the fuzz targets and tests
//! only, and compiled only with the `fuzzing` feature (enabled by
//! `fuzz/Cargo.toml` and by this crate's dev-dependency on itself).

use crate::block_coding::BlockCoding;
use crate::blocks::BlockSet;
use crate::crypto::{CipherCache, KeyRing, Secret, SessionCipher, SessionMac};
use crate::fec::{ErasureCode, FecError, ReedSolomon};
use crate::receiver::{Event, Receiver, ReceiverConfig};
use crate::sender::{Sender, SenderConfig};
use crate::types::{ChannelId, Rate, RepairRatio, SessionId, SymbolSize};
use crate::wire::{
    open_datagram, parse_datagram, BeaconRepr, Body, ChannelEntry, ChannelKind, ChannelMeta,
    ChannelState, DatagramRepr, Header, Integrity, Packet, Sealer, SymbolRepr, SyncInfo,
    TrailerRepr, TrailerStatus, WireError, CRC_TAG_LEN, FLAG_AES_GMAC, FLAG_ENCRYPTED, FLAG_KEYED,
    HEADER_LEN, MAC_TAG_LEN, VERSION,
};
use diodon_sansio::Timestamp;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// The pre-shared key of the keyed integrity mode in every fuzz function.
pub const FUZZ_KEY: [u8; 32] = *b"diodon fuzzing key, not a secret";

/// The next key of the ring in [`open`] (key id 1; the current is
/// [`FUZZ_KEY`] with id 0).
pub const FUZZ_NEXT_KEY: [u8; 32] = *b"diodon fuzzing next key, public!";

/// The key ring of the encrypted mode in [`open`].
pub fn fuzz_ring() -> KeyRing {
    KeyRing::new(
        (0, Secret::new(FUZZ_KEY)),
        Some((1, Secret::new(FUZZ_NEXT_KEY))),
    )
    .expect("two ids, two keys")
}

/// Session id of the genuine sender in [`receiver`].
pub const GENUINE_SESSION: SessionId = SessionId(0x0123_4567_89AB_CDEF);

// ---------------------------------------------------------------------------
// records

/// Reads `data` as one delivered block of an aligned record channel and as
/// an unaligned record stream. Never panics; every record read lies inside
/// the input; re-framing the records read (then zero padding) reads back the
/// same records, and the stream splitter agrees with the block reader on a
/// block without padding or error.
pub fn records(data: &[u8]) {
    use crate::records::{push_record, split_stream, BlockRecords, RECORD_HEADER};
    let mut read: Vec<&[u8]> = Vec::new();
    let mut used = 0;
    let mut it = BlockRecords::new(data);
    let mut failed = false;
    for r in it.by_ref() {
        match r {
            Ok(p) => {
                assert!(!p.is_empty(), "an empty record is padding, never a record");
                used += RECORD_HEADER + p.len();
                read.push(p);
            }
            Err(_) => failed = true,
        }
    }
    assert!(used <= data.len(), "records read past the block");
    assert!(it.next().is_none(), "the reader ends for good");
    let mut again = Vec::new();
    for p in &read {
        push_record(&mut again, p).expect("a record read fits a record");
    }
    let framed = again.len();
    again.extend_from_slice(&[0; 3]);
    let back: Vec<&[u8]> = BlockRecords::new(&again)
        .map(|r| r.expect("re-framed records read back"))
        .collect();
    assert_eq!(back, read, "round trip");
    let mut streamed = Vec::new();
    let consumed = split_stream::<()>(&again[..framed], |r| {
        streamed.push(r.to_vec());
        Ok(())
    })
    .unwrap_or(0);
    assert_eq!(consumed, framed);
    assert_eq!(streamed.len(), read.len());
    let _ = failed;
}

// ---------------------------------------------------------------------------
// wire

/// Parses `data` as a datagram with CRC32C and with the keyed MAC, both as
/// given and after re-sealing it (fixing version, flags, body length and tag
/// so the body parsers are reached). Whatever parses must re-emit to the same
/// bytes and parse back to the same representation.
pub fn wire(data: &[u8]) {
    for integrity in [
        Integrity::Crc32c,
        Integrity::mac(FUZZ_KEY),
        Integrity::Gmac(KeyRing::single(FUZZ_KEY)),
    ] {
        check_datagram(data, &integrity);
        if let Some(sealed) = reseal(data, &integrity) {
            check_datagram(&sealed, &integrity);
        }
    }
}

/// Parses one datagram and checks the round trip and the view's accessors.
fn check_datagram(datagram: &[u8], integrity: &Integrity) {
    if let Ok(packet) = Packet::new_checked(datagram) {
        // After check_len no accessor may panic.
        let _ = (
            packet.version(),
            packet.type_byte(),
            packet.session_id(),
            packet.seq(),
        );
        let _ = (
            packet.channel_id(),
            packet.timestamp_ms(),
            packet.lifetime_ms(),
        );
        let _ = (
            packet.body().len(),
            packet.tag().len(),
            packet.verify(integrity),
        );
    }
    let Ok(repr) = parse_datagram(datagram, integrity) else {
        return;
    };
    // A keyed receiver takes either MAC; the datagram is re-emitted with
    // the one it carries.
    let gmac = Packet::new_unchecked(datagram).is_gmac();
    let integrity = &match integrity.key_ring() {
        Some(ring) if !integrity.is_encrypted() && gmac => Integrity::Gmac(ring.clone()),
        Some(ring) if !integrity.is_encrypted() => Integrity::Keyed(ring.clone()),
        _ => integrity.clone(),
    };
    let len = repr.buffer_len(integrity);
    assert_eq!(
        len,
        datagram.len(),
        "buffer_len disagrees with the parsed datagram"
    );
    let mut out = vec![0u8; len];
    assert_eq!(repr.emit(&mut out, integrity), len, "emit length");
    assert_eq!(
        out, datagram,
        "re-emitting a parsed datagram changed its bytes ({integrity:?}): the parser accepts a non-canonical encoding"
    );
    let again = parse_datagram(&out, integrity);
    assert_eq!(
        again.as_ref(),
        Ok(&repr),
        "re-emitted datagram parses differently"
    );
}

/// `data` with a valid header frame and tag for `integrity`: version 1, the
/// integrity flag, body length = what is left, tag recomputed.
fn reseal(data: &[u8], integrity: &Integrity) -> Option<Vec<u8>> {
    let tag_len = integrity.tag_len();
    let body_len = data.len().checked_sub(HEADER_LEN + tag_len)?;
    let body_len = u16::try_from(body_len).ok()?;
    let mut out = data.to_vec();
    out[0] = VERSION;
    let flags = match integrity {
        Integrity::Gmac(_) => FLAG_KEYED | FLAG_AES_GMAC,
        _ if integrity.is_keyed() => FLAG_KEYED,
        _ => 0,
    };
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out[30..32].copy_from_slice(&body_len.to_be_bytes());
    seal(&mut out, integrity);
    Some(out)
}

/// Recomputes the tag over everything before it.
fn seal(datagram: &mut [u8], integrity: &Integrity) {
    let covered = datagram.len() - integrity.tag_len();
    let (content, tag) = datagram.split_at_mut(covered);
    match integrity {
        Integrity::Crc32c => tag.copy_from_slice(&crc_fast::crc32_iscsi(content).to_be_bytes()),
        Integrity::Keyed(ring) => {
            let key = ring.current_key().bytes();
            tag.copy_from_slice(&blake3::keyed_hash(key, content).as_bytes()[..MAC_TAG_LEN]);
        }
        Integrity::Gmac(ring) => {
            let header = Packet::new_unchecked(&*content);
            let mac =
                SessionMac::derive(ring.current_key(), header.session_id().0, ring.current_id());
            tag.copy_from_slice(&mac.tag(header.seq(), &[content]));
        }
        Integrity::Encrypted(_) => unreachable!("wire() seals with CRC32C or a MAC only"),
    }
}

// ---------------------------------------------------------------------------
// open (the decrypt path)

/// Opens `data` as an encrypted datagram with [`fuzz_ring`], as it is
/// (whatever opens must re-seal to the same bytes), then sealed with the
/// ring's key that its flag bit 0 picks (version, flags, body length fixed,
/// body encrypted): that must open unless its body is malformed, re-seal to
/// the same bytes, and refuse any one flipped bit (position from the data).
pub fn open(data: &[u8]) {
    let ring = fuzz_ring();
    let integrity = Integrity::Encrypted(ring.clone());
    let mut ciphers = CipherCache::new(Some(ring.clone()));
    let mut plain = Vec::new();
    if let Ok(repr) = open_datagram(data, &integrity, &mut ciphers, &mut plain) {
        check_reseal(&repr, data, &ring);
    }
    let Some(sealed) = seal_encrypted(data, &ring) else {
        return;
    };
    let mut plain = Vec::new();
    match open_datagram(&sealed, &integrity, &mut ciphers, &mut plain) {
        Ok(repr) => check_reseal(&repr, &sealed, &ring),
        Err(e) => assert!(
            matches!(e, WireError::UnknownType(_) | WireError::Malformed { .. }),
            "a datagram sealed with the ring's key must open: {e}"
        ),
    }
    let bits = sealed.len() * 8;
    let pick = data
        .iter()
        .fold(data.len(), |a, &b| a.wrapping_mul(31) ^ usize::from(b));
    let bit = pick % bits;
    let mut damaged = sealed;
    damaged[bit / 8] ^= 1 << (bit % 8);
    let mut plain = Vec::new();
    assert!(
        open_datagram(&damaged, &integrity, &mut ciphers, &mut plain).is_err(),
        "bit {bit} of an encrypted datagram flipped and it still opened"
    );
}

/// Sealing `repr` again with the ring's key of its key id gives `datagram`.
fn check_reseal(repr: &DatagramRepr<'_>, datagram: &[u8], ring: &KeyRing) {
    let id = Packet::new_unchecked(datagram).key_id();
    let key = ring
        .key(id)
        .expect("it opened, so the ring holds its key id");
    let sealer = Sealer::Aead(SessionCipher::derive(key, repr.header.session.0, id));
    let mut out = vec![0u8; datagram.len()];
    assert_eq!(
        repr.emit_sealed(&mut out, &sealer),
        datagram.len(),
        "length"
    );
    assert_eq!(out, datagram, "an opened datagram re-seals to other bytes");
}

/// `data` framed and sealed as an encrypted datagram with `ring`'s key id
/// 0 or 1 (flag bit 0 of `data`).
fn seal_encrypted(data: &[u8], ring: &KeyRing) -> Option<Vec<u8>> {
    let body_len = data.len().checked_sub(HEADER_LEN + MAC_TAG_LEN)?;
    let body_len16 = u16::try_from(body_len).ok()?;
    let id = data[3] & 1;
    let mut out = data.to_vec();
    out[0] = VERSION;
    let flags = FLAG_KEYED | FLAG_ENCRYPTED | (u16::from(id) << 8);
    out[2..4].copy_from_slice(&flags.to_be_bytes());
    out[30..32].copy_from_slice(&body_len16.to_be_bytes());
    let packet = Packet::new_checked(&out[..]).ok()?;
    let (session, seq) = (packet.session_id().0, packet.seq());
    let cipher = SessionCipher::derive(ring.key(id)?, session, id);
    let (header, rest) = out.split_at_mut(HEADER_LEN);
    let (body, tag) = rest.split_at_mut(body_len);
    tag.copy_from_slice(&cipher.seal(seq, header, body));
    Some(out)
}

// ---------------------------------------------------------------------------
// fec

/// Derives a code from the first bytes (k, m, shard length, erasures), fills
/// a block from the rest, encodes it, erases symbols and decodes: with at
/// most `m` erasures the source must come back bit-exact; with more the
/// decoder must say `NotEnough`, never return garbage. A codec given a
/// sum kernel encodes and decodes the same.
pub fn fec(data: &[u8]) {
    let mut input = Input::new(data);
    let k = 1 + usize::from(input.byte() % 64);
    let m = usize::from(input.byte() % 33);
    let shard_len = 2 * (1 + usize::from(input.byte() % 48));
    let erase_bits = input.u64();
    let seed = input.rest();
    let source: Vec<u8> = (0..k * shard_len)
        .map(|i| seed.get(i % seed.len().max(1)).copied().unwrap_or(0) ^ (i as u8).wrapping_mul(31))
        .collect();
    let mut rs = ReedSolomon::new();
    let mut repair = vec![0u8; m * shard_len];
    if let Err(e) = rs.encode(k, m, shard_len, &source, &mut repair) {
        assert!(
            !ReedSolomon::supports(k, m),
            "supported code refused to encode: {e}"
        );
        return;
    }
    // Erase symbols by the bits of `erase_bits` (cycled over k + m).
    let erased: Vec<bool> = (0..k + m)
        .map(|i| erase_bits >> (i % 64) & 1 == 1)
        .collect();
    let lost = erased.iter().filter(|e| **e).count();
    let mut damaged = source.clone();
    let present: Vec<bool> = erased[..k].iter().map(|e| !e).collect();
    for (i, shard) in damaged.chunks_exact_mut(shard_len).enumerate() {
        if erased[i] {
            shard.fill(0xA5);
        }
    }
    let kept: Vec<(usize, &[u8])> = repair
        .chunks_exact(shard_len)
        .enumerate()
        .filter(|(r, _)| !erased[k + r])
        .collect();
    // Reuse the codec (the reset path) for a second, different encode first.
    let mut scratch = vec![0u8; shard_len];
    rs.encode(1, 1, shard_len, &source[..shard_len], &mut scratch)
        .expect("a (1, 1) code is always supported");
    // The same encode and decode with a driver's kernel (by its
    // definition): the same repair bytes, the same verdict and, on
    // success, the same bytes restored. One codec per thread: preparing a
    // kernel's factors takes a few milliseconds.
    thread_local! {
        static WITH_KERNEL: std::cell::RefCell<ReedSolomon> = std::cell::RefCell::new({
            let mut rs = ReedSolomon::new();
            rs.use_kernel(std::sync::Arc::new(crate::fec::ReferenceKernel));
            rs
        });
    }
    let mut damaged_too = damaged.clone();
    let result_too = WITH_KERNEL.with_borrow_mut(|with_kernel| {
        let mut repair_too = vec![0u8; m * shard_len];
        with_kernel
            .encode(k, m, shard_len, &source, &mut repair_too)
            .expect("the kernel encodes what the library encodes");
        assert!(
            repair_too == repair,
            "k={k} m={m} L={shard_len}: the kernel's repair bytes"
        );
        with_kernel.decode(k, m, shard_len, &mut damaged_too, &present, &kept)
    });
    let result = rs.decode(k, m, shard_len, &mut damaged, &present, &kept);
    assert_eq!(
        result, result_too,
        "k={k} m={m} lost={lost}: the kernel's verdict"
    );
    if result.is_ok() {
        assert!(
            damaged == damaged_too,
            "k={k} m={m} lost={lost}: the kernel's bytes"
        );
    }
    if lost <= m {
        assert_eq!(result, Ok(()), "k={k} m={m} L={shard_len} lost={lost}");
        assert!(
            damaged == source,
            "decoded block differs: k={k} m={m} L={shard_len} lost={lost}"
        );
    } else {
        let have = k + m - lost;
        assert_eq!(
            result,
            Err(FecError::NotEnough { have, need: k }),
            "k={k} m={m} lost={lost}"
        );
    }
}

// ---------------------------------------------------------------------------
// receiver

/// Drives a [`Receiver`] with a script read from `data`: genuine traffic
/// from a [`Sender`] (in order, reordered, thinned or corrupted), raw and
/// re-sealed bytes, forged symbols, opens, trailers and beacons, replays,
/// and virtual time. After every step it checks the receiver's invariants:
///
/// - every datagram is counted exactly once:
///   `datagrams == accepted + invalid() + stale_session + duplicates + too_old + expired`;
/// - `channels_complete <= channels_opened`; nothing is buffered when no
///   channel is open;
/// - per session and channel, `ChannelData` offsets are contiguous (on a
///   block-stable sync channel they may skip ahead over lost or held
///   blocks, never back), nothing follows a verdict and there is at most
///   one verdict; a complete channel's bytes hash to its digest, and
///   without forged input equal what the sender wrote; `ChannelPartial`
///   comes only just before the channel's failure, `ChannelAssembled` only
///   for a channel the application held blocks of;
/// - `handle_timeout` is idempotent and `poll_timeout` lies after `now`.
pub fn receiver(data: &[u8]) {
    let mut h = RxHarness::new();
    let mut input = Input::new(data);
    while !input.is_empty() {
        match input.byte() % 9 {
            0 => h.genuine(&mut input),
            8 => h.hold(&mut input),
            1 => h.sender_app(&mut input),
            2 => h.advance(&mut input),
            3 => {
                let len = usize::from(input.byte());
                let raw = input.take(len).to_vec();
                h.feed(raw, true);
            }
            4 => h.resealed(&mut input),
            5 => h.forged_symbol(&mut input),
            6 => h.forged_control(&mut input),
            _ => h.replay(&mut input),
        }
    }
    // Let every timer run out: each channel gets its verdict.
    h.now += Duration::from_secs(10);
    h.timeout();
}

/// State of one [`receiver`] run.
struct RxHarness {
    now: Timestamp,
    sender: Sender,
    sender_open: Vec<ChannelId>,
    written: HashMap<ChannelId, Vec<u8>>,
    finished: HashSet<ChannelId>,
    receiver: Receiver,
    /// Recent datagrams fed, with whether they were forged.
    history: Vec<(Vec<u8>, bool)>,
    forged_any: bool,
    fed: u64,
    session: Option<SessionId>,
    delivered: HashMap<ChannelId, Vec<u8>>,
    opened: HashSet<ChannelId>,
    ended: HashSet<ChannelId>,
    /// Channels opened with sync information (block-stable).
    stable: HashSet<ChannelId>,
    /// Channels `hold_blocks` marked blocks of.
    held: HashSet<ChannelId>,
    /// The channel whose `ChannelPartial` was the last event.
    partial: Option<ChannelId>,
    /// Whole blocks encoded by the application: as the sender codes them,
    /// and with another repair count (the sender encodes those again).
    codings: [BlockCoding; 2],
}

const HISTORY: usize = 32;

impl RxHarness {
    fn new() -> Self {
        let sender_config = SenderConfig {
            symbol_size: SymbolSize::new(64).expect("valid constant"),
            block_symbols: 4,
            repair: RepairRatio::percent(50).expect("valid constant"),
            interleave_depth: 2,
            rate: Rate::UNLIMITED,
            lifetime: Duration::from_secs(2),
            delta_t: Duration::from_millis(500),
            beacon_interval: Duration::from_millis(50),
            control_copies: 2,
            control_spacing: 4,
            buffer_limit: 4096,
            flush_delay: Duration::from_millis(5),
            ..SenderConfig::default()
        };
        let receiver_config = ReceiverConfig {
            integrity: Integrity::Crc32c,
            delta_t: Duration::from_millis(500),
            silence_timeout: Duration::from_millis(100),
            reorder_grace: Duration::from_millis(10),
            enforce_lifetime: true,
            max_channels: 6,
            max_buffered_bytes: 16 << 10,
            max_symbol_size: 512,
        };
        let foreign = SenderConfig {
            repair: RepairRatio::percent(25).expect("valid constant"),
            ..sender_config.clone()
        };
        let codings = [sender_config.block_coding(None), foreign.block_coding(None)];
        RxHarness {
            now: Timestamp::ZERO,
            codings,
            sender: Sender::new(sender_config, GENUINE_SESSION, Timestamp::ZERO)
                .expect("valid sender configuration"),
            sender_open: Vec::new(),
            written: HashMap::new(),
            finished: HashSet::new(),
            receiver: Receiver::new(receiver_config, Timestamp::ZERO),
            history: Vec::new(),
            forged_any: false,
            fed: 0,
            session: None,
            delivered: HashMap::new(),
            opened: HashSet::new(),
            ended: HashSet::new(),
            stable: HashSet::new(),
            held: HashSet::new(),
            partial: None,
        }
    }

    /// The application says it holds some blocks of an open channel (of
    /// this sender's geometry, or another one).
    fn hold(&mut self, input: &mut Input<'_>) {
        let mut open: Vec<ChannelId> = self.opened.difference(&self.ended).copied().collect();
        open.sort();
        let pick = usize::from(input.byte());
        let Some(&channel) = open.get(pick % open.len().max(1)) else {
            return;
        };
        let block_bytes = if input.byte().trailing_zeros() >= 3 {
            u32::from(input.u16())
        } else {
            self.sender.config().block_bytes() as u32
        };
        let total = u64::from(input.byte() % 16);
        let Ok(mut set) = BlockSet::new(block_bytes, total) else {
            return;
        };
        let bits = input.u16();
        for b in 0..total {
            if bits & (1 << b) != 0 {
                set.insert(b);
            }
        }
        if let Ok(n) = self.receiver.hold_blocks(channel, &set) {
            if n > 0 {
                self.held.insert(channel);
            }
        }
        self.check();
    }

    /// Up to 8 datagrams from the sender, with a fate: delivered in order,
    /// reversed, every other one dropped, or the first one corrupted.
    fn genuine(&mut self, input: &mut Input<'_>) {
        let count = 1 + usize::from(input.byte() % 8);
        let fate = input.byte();
        let mut batch = Vec::new();
        let mut buf = vec![0u8; self.sender.config().datagram_len()];
        for _ in 0..count {
            self.sender.handle_timeout(self.now);
            let Some(t) = self.sender.poll_transmit(self.now, 1, &mut buf) else {
                break;
            };
            batch.push(buf[..t.size].to_vec());
        }
        match fate % 4 {
            1 => batch.reverse(),
            2 => batch = batch.into_iter().step_by(2).collect(),
            3 => {
                if let Some(first) = batch.first_mut() {
                    let at = usize::from(input.byte()) % first.len();
                    first[at] ^= input.byte() | 1;
                }
            }
            _ => {}
        }
        for datagram in batch {
            self.feed(datagram, false);
        }
    }

    /// The sender's application: open, write, finish or abort a channel.
    fn sender_app(&mut self, input: &mut Input<'_>) {
        let pick = usize::from(input.byte());
        let channel =
            (!self.sender_open.is_empty()).then(|| self.sender_open[pick % self.sender_open.len()]);
        match (input.byte() % 4, channel) {
            (0, _) | (_, None) => {
                let name_len = usize::from(input.byte() % 16);
                let name = String::from_utf8_lossy(input.take(name_len)).into_owned();
                let meta = if pick & 1 == 0 {
                    ChannelMeta::stream(name)
                } else if pick & 2 == 0 {
                    ChannelMeta::file(name, 0)
                } else {
                    ChannelMeta {
                        size: None,
                        sync: Some(SyncInfo {
                            first_seen_unix_ms: 0,
                            pass: 1,
                            digest: None,
                            block_bytes: 0,
                        }),
                        ..ChannelMeta::file(name, 0)
                    }
                };
                if let Ok(id) = self.sender.open_channel(meta) {
                    self.sender_open.push(id);
                    self.written.insert(id, Vec::new());
                }
            }
            (1, Some(id)) if pick >= 0xF0 => self.write_whole_block(input, id, pick),
            (1, Some(id)) => {
                let len = usize::from(input.byte());
                let bytes = input.take(len).to_vec();
                if let Ok(n) = self.sender.write(self.now, id, &bytes) {
                    self.written
                        .entry(id)
                        .or_default()
                        .extend_from_slice(&bytes[..n]);
                }
            }
            (2, Some(id)) => {
                if self.sender.finish(self.now, id).is_ok() {
                    self.finished.insert(id);
                }
                self.sender_open.retain(|c| *c != id);
            }
            (_, Some(id)) => {
                let _ = self.sender.abort(self.now, id);
                self.sender_open.retain(|c| *c != id);
            }
        }
    }

    /// Hands a whole block over: as it is (`write_block`) or encoded by
    /// one of the harness's codings (`write_encoded_block`).
    fn write_whole_block(&mut self, input: &mut Input<'_>, id: ChannelId, pick: usize) {
        let block_bytes = self.sender.config().block_bytes();
        let mut bytes = input.take(block_bytes).to_vec();
        bytes.resize(block_bytes, 0xA5);
        let taken = match pick % 3 {
            0 => self.sender.write_block(self.now, id, bytes.clone()),
            c => match self.codings[c - 1].encode(bytes.clone(), Vec::new()) {
                Ok(block) => self
                    .sender
                    .write_encoded_block(self.now, id, block)
                    .map(|back| back.map(crate::FullBlock::into_parts).map(|(d, _)| d)),
                Err(_) => unreachable!("a whole block of the sender's geometry"),
            },
        };
        if let Ok(None) = taken {
            self.written
                .entry(id)
                .or_default()
                .extend_from_slice(&bytes);
        }
    }

    /// Moves virtual time forward by 0..=255 ms (or 10× that) and runs timers.
    fn advance(&mut self, input: &mut Input<'_>) {
        let b = input.byte();
        let step = u64::from(b >> 1) * if b & 1 == 1 { 10 } else { 1 };
        self.now += Duration::from_millis(step);
        self.sender.handle_timeout(self.now);
        self.timeout();
    }

    /// Arbitrary bytes framed and sealed as a valid datagram, optionally
    /// with the genuine session id and a nearby sequence number.
    fn resealed(&mut self, input: &mut Input<'_>) {
        let mode = input.byte();
        let len = HEADER_LEN + CRC_TAG_LEN + usize::from(input.byte());
        let mut raw = input.take(len).to_vec();
        raw.resize(len, 0);
        if mode & 1 == 1 {
            raw[4..12].copy_from_slice(&GENUINE_SESSION.0.to_be_bytes());
            raw[12..20].copy_from_slice(&self.forged_seq(mode).to_be_bytes());
            raw[24..28].copy_from_slice(&(self.now.as_millis() as u32).to_be_bytes());
        }
        if let Some(sealed) = reseal(&raw, &Integrity::Crc32c) {
            self.feed(sealed, true);
        }
    }

    /// A well-framed source or repair symbol with fuzzed fields.
    fn forged_symbol(&mut self, input: &mut Input<'_>) {
        let header = self.forged_header(input);
        let shape = input.byte();
        let small = |b: u8| u16::from(b % 8);
        // Small codes, or raw fields, or m at the edge of k + m <= 65535 (where
        // the erasure code stops supporting some combinations).
        let k = if shape & 1 == 1 {
            input.u16()
        } else {
            1 + small(input.byte())
        };
        let m = if shape & 2 == 2 {
            u16::MAX
                .saturating_sub(k)
                .saturating_sub(u16::from(input.byte()))
        } else {
            small(input.byte())
        };
        let index = if shape & 4 == 4 {
            k.saturating_add(small(input.byte()))
        } else {
            small(input.byte())
        };
        let block = u64::from(input.byte() % 8);
        let group_len = 1 + input.byte() % 3;
        let group_pos = (input.byte() % group_len).min(block as u8);
        let payload_len = usize::from(input.byte());
        let tail_len = if shape & 8 == 8 {
            input.u16()
        } else {
            payload_len.max(1) as u16
        };
        let fill = input.byte();
        let payload = vec![fill; payload_len];
        let symbol = SymbolRepr {
            block,
            index,
            k,
            m,
            tail_len,
            group_pos,
            group_len,
            payload: &payload,
        };
        let body = if index < k {
            Body::Data(symbol)
        } else {
            Body::Repair(symbol)
        };
        self.feed_repr(&DatagramRepr { header, body });
    }

    /// A forged channel-open, trailer or beacon.
    fn forged_control(&mut self, input: &mut Input<'_>) {
        let mut header = self.forged_header(input);
        let body = match input.byte() % 3 {
            0 => {
                let name_len = usize::from(input.byte() % 16);
                let name = String::from_utf8_lossy(input.take(name_len)).into_owned();
                let kind = [
                    ChannelKind::File,
                    ChannelKind::Stream,
                    ChannelKind::Datagrams,
                ][usize::from(input.byte() % 3)];
                Body::Open(ChannelMeta {
                    kind,
                    size: None,
                    mode: 0o600,
                    mtime_sec: 0,
                    mtime_nsec: 0,
                    aligned: kind == ChannelKind::Datagrams && input.byte() & 1 == 1,
                    name,
                    sync: (kind == ChannelKind::File && input.byte() & 1 == 1).then(|| SyncInfo {
                        first_seen_unix_ms: input.u64(),
                        pass: input.u16().max(1),
                        digest: (input.byte() & 1 == 1).then(|| [input.byte(); 32]),
                        block_bytes: u32::from(input.u16().max(1)),
                    }),
                })
            }
            1 => Body::Trailer(TrailerRepr {
                total_len: u64::from(input.u16()),
                total_blocks: u64::from(input.byte() % 8),
                status: if input.byte().trailing_zeros() >= 2 {
                    TrailerStatus::Aborted
                } else {
                    TrailerStatus::Complete
                },
                digest: if input.byte() & 1 == 0 {
                    *blake3::hash(&[]).as_bytes()
                } else {
                    [0; 32]
                },
            }),
            _ => {
                header.channel = ChannelId(0);
                let entries = usize::from(input.byte() % 5);
                let channels = (0..entries)
                    .map(|_| ChannelEntry {
                        channel: ChannelId(u32::from(input.byte() % 6)),
                        state: [
                            ChannelState::Open,
                            ChannelState::Finished,
                            ChannelState::Aborted,
                        ][usize::from(input.byte() % 3)],
                        blocks_sent: u64::from(input.byte() % 10),
                    })
                    .collect();
                Body::Beacon(BeaconRepr {
                    start_unix_ms: 0,
                    symbol_size: 2 * (1 + input.u16() / 2).min(32_000),
                    block_symbols: 1 + u16::from(input.byte()),
                    repair_symbols: u16::from(input.byte()),
                    interleave_depth: 1 + input.byte() % 4,
                    rate_bps: 0,
                    delta_t_ms: u32::from(input.u16()),
                    beacon_interval_ms: 50,
                    datagrams_sent: 0,
                    bytes_sent: 0,
                    channels,
                })
            }
        };
        self.feed_repr(&DatagramRepr { header, body });
    }

    /// Feeds a datagram fed earlier again.
    fn replay(&mut self, input: &mut Input<'_>) {
        let pick = usize::from(input.byte());
        if let Some((datagram, forged)) =
            self.history.get(pick % self.history.len().max(1)).cloned()
        {
            self.feed(datagram, forged);
        }
    }

    /// A header in the genuine session (or one of three others), on one of
    /// the first channels, near the genuine sequence numbers and clock.
    fn forged_header(&self, input: &mut Input<'_>) -> Header {
        let who = input.byte();
        let session = if who.trailing_zeros() >= 2 {
            SessionId(u64::from(1 + who % 3))
        } else {
            GENUINE_SESSION
        };
        Header {
            session,
            seq: self.forged_seq(input.byte()),
            channel: ChannelId(u32::from(input.byte() % 6)),
            timestamp_ms: (self.now.as_millis() as u32).wrapping_sub(u32::from(input.byte())),
            lifetime_ms: 2000,
        }
    }

    fn forged_seq(&self, b: u8) -> u64 {
        let base = self.sender.stats().datagrams_sent;
        match b % 4 {
            0 => base.saturating_sub(u64::from(b)),
            1 => base + 1_000 + u64::from(b),
            2 => u64::from(b) << 17,
            _ => base + u64::from(b % 16),
        }
    }

    fn feed_repr(&mut self, repr: &DatagramRepr<'_>) {
        let mut out = vec![0u8; repr.buffer_len(&Integrity::Crc32c)];
        repr.emit(&mut out, &Integrity::Crc32c);
        self.feed(out, true);
    }

    fn feed(&mut self, datagram: Vec<u8>, forged: bool) {
        self.receiver.handle_datagram(self.now, &datagram);
        self.fed += 1;
        self.forged_any |= forged;
        if self.history.len() == HISTORY {
            self.history.remove(0);
        }
        self.history.push((datagram, forged));
        self.check();
    }

    /// Runs the receiver's timers twice at `now`: the second call must do nothing.
    fn timeout(&mut self) {
        self.receiver.handle_timeout(self.now);
        self.check();
        let before = self.receiver.stats();
        self.receiver.handle_timeout(self.now);
        assert!(
            self.receiver.poll_event().is_none(),
            "handle_timeout is not idempotent"
        );
        assert_eq!(
            self.receiver.stats(),
            before,
            "handle_timeout is not idempotent"
        );
        if let Some(next) = self.receiver.poll_timeout() {
            assert!(
                next > self.now,
                "poll_timeout {next:?} not after now {:?}: busy loop",
                self.now
            );
        }
    }

    /// Drains events and checks every invariant.
    fn check(&mut self) {
        self.receiver.check_timers();
        self.sender.check_timers();
        while let Some(event) = self.receiver.poll_event() {
            self.on_event(event);
        }
        let s = self.receiver.stats();
        assert_eq!(s.datagrams, self.fed, "datagrams counted");
        assert_eq!(
            s.datagrams,
            s.accepted + s.invalid() + s.stale_session + s.duplicates + s.too_old + s.expired,
            "datagram accounting identity broken: {s:?}"
        );
        assert!(
            s.channels_complete <= s.channels_opened,
            "complete without open: {s:?}"
        );
        if self.receiver.open_channels() == 0 {
            assert_eq!(
                self.receiver.buffered_bytes(),
                0,
                "buffered bytes with no channel open"
            );
        }
    }

    fn on_event(&mut self, event: Event) {
        if let Some(partial) = self.partial.take() {
            assert!(
                matches!(event, Event::ChannelFailed { channel, .. } if channel == partial),
                "{partial:?} partial not followed by its failure"
            );
        }
        match event {
            Event::SessionStarted { session } | Event::SessionRestarted { new: session, .. } => {
                self.new_session(Some(session));
            }
            Event::SessionExpired { .. } => self.new_session(None),
            Event::ChannelOpened { channel, meta } => {
                assert!(
                    !self.ended.contains(&channel),
                    "{channel:?} opened after its verdict"
                );
                assert!(self.opened.insert(channel), "{channel:?} opened twice");
                if meta.sync.is_some() {
                    self.stable.insert(channel);
                }
            }
            Event::ChannelData {
                channel,
                offset,
                data,
            } => {
                assert!(
                    !self.ended.contains(&channel),
                    "{channel:?} data after its verdict"
                );
                assert!(
                    self.opened.contains(&channel),
                    "{channel:?} data before its open"
                );
                let got = self.delivered.entry(channel).or_default();
                if self.stable.contains(&channel) {
                    assert!(offset >= got.len() as u64, "{channel:?} data went back");
                    got.resize(offset as usize, 0);
                } else {
                    assert_eq!(offset, got.len() as u64, "{channel:?} data not contiguous");
                }
                got.extend_from_slice(&data);
            }
            Event::ChannelComplete {
                channel,
                bytes,
                digest,
            } => self.on_complete(channel, bytes, digest),
            Event::ChannelGap { channel, count, .. } => {
                assert!(
                    !self.ended.contains(&channel) && self.opened.contains(&channel),
                    "{channel:?} gap outside its life"
                );
                assert!(count > 0, "{channel:?} empty gap");
            }
            Event::ChannelFailed { channel, .. } => {
                assert!(
                    self.ended.insert(channel),
                    "{channel:?} second verdict (failed)"
                );
            }
            Event::ChannelPartial { channel, held, .. } => {
                assert!(
                    self.stable.contains(&channel) && !self.ended.contains(&channel),
                    "{channel:?} partial outside a block-stable channel's life"
                );
                assert!(
                    held.total() == 0 || held.block_bytes() > 0,
                    "{channel:?} partial without a geometry"
                );
                self.partial = Some(channel);
            }
            Event::ChannelAssembled { channel, .. } => {
                assert!(
                    self.held.contains(&channel),
                    "{channel:?} assembled without held blocks"
                );
                assert!(
                    self.ended.insert(channel),
                    "{channel:?} second verdict (assembled)"
                );
            }
            Event::SessionParams { .. }
            | Event::ConfigMismatch(_)
            | Event::LinkSilent { .. }
            | Event::LinkResumed => {}
        }
    }

    /// A complete channel's bytes hash to its digest and, without forged
    /// input, equal what the sender wrote.
    fn on_complete(&mut self, channel: ChannelId, bytes: u64, digest: [u8; 32]) {
        assert!(
            self.ended.insert(channel),
            "{channel:?} second verdict (complete)"
        );
        let got = self.delivered.get(&channel).map_or(&[][..], Vec::as_slice);
        assert_eq!(
            bytes,
            got.len() as u64,
            "{channel:?} complete with a wrong length"
        );
        assert_eq!(*blake3::hash(got).as_bytes(), digest, "{channel:?} digest");
        if !self.forged_any && self.session == Some(GENUINE_SESSION) {
            let sent = self.written.get(&channel).map(Vec::as_slice);
            assert!(
                self.finished.contains(&channel),
                "{channel:?} complete but never finished"
            );
            assert_eq!(
                sent,
                Some(got),
                "{channel:?} complete with other bytes than sent"
            );
        }
    }

    fn new_session(&mut self, session: Option<SessionId>) {
        self.session = session;
        self.delivered.clear();
        self.opened.clear();
        self.ended.clear();
        self.stable.clear();
        self.held.clear();
    }
}

// ---------------------------------------------------------------------------
// input

/// A cursor over fuzz bytes that yields zeros once exhausted.
struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn byte(&mut self) -> u8 {
        let (first, rest) = self
            .data
            .split_first()
            .map_or((0, &[][..]), |(b, r)| (*b, r));
        self.data = rest;
        first
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |acc, _| acc << 8 | u64::from(self.byte()))
    }

    /// Up to `n` bytes (fewer at the end).
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        taken
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }
}

/// A sync bundle's parser: whatever it accepts re-encodes to the same
/// bytes, every accepted entry's content matches its digest, and nothing
/// panics. What a cut bundle yields ([`complete_entries`]) re-encodes to
/// a prefix of the input, and for a bundle `parse` accepts it is all its
/// entries. A valid bundle built from the input is accepted too, and each
/// of its prefixes yields exactly the entries that end inside it.
///
/// [`complete_entries`]: crate::bundle::complete_entries
pub fn bundle(data: &[u8]) {
    use crate::bundle::{complete_entries, parse, push_entry, BundleEntry};
    let parsed = parse(data);
    if let Ok(entries) = &parsed {
        let mut again = Vec::new();
        for e in entries {
            assert_eq!(blake3::hash(e.content).as_bytes(), &e.digest);
            push_entry(&mut again, e);
        }
        assert_eq!(again, data, "a parsed bundle re-encodes to its bytes");
    }
    if let Ok(whole) = complete_entries(data) {
        let mut again = Vec::new();
        for e in &whole {
            assert_eq!(blake3::hash(e.content).as_bytes(), &e.digest);
            push_entry(&mut again, e);
        }
        assert!(
            data.starts_with(&again),
            "a cut bundle's entries are its first bytes"
        );
        if let Ok(entries) = &parsed {
            assert_eq!(&whole, entries, "a whole bundle is all its entries");
        }
    }
    let mut built = Vec::new();
    let mut want = 0;
    for (i, chunk) in data.chunks(37).enumerate() {
        let name = format!("f{i}");
        push_entry(
            &mut built,
            &BundleEntry {
                name: &name,
                pass: 1 + u16::from(chunk.first().copied().unwrap_or(0)),
                mode: 0o644,
                mtime_sec: i64::from(chunk.len() as u8) - 100,
                mtime_nsec: 0,
                first_seen_unix_ms: 7,
                digest: *blake3::hash(chunk).as_bytes(),
                content: chunk,
            },
        );
        want += 1;
    }
    if want > 0 {
        let got = parse(&built).expect("a bundle push_entry wrote parses");
        assert_eq!(got.len(), want);
        let cut = usize::from(data[0]) * built.len() / 255;
        let ends = got
            .iter()
            .scan(0, |end, e| {
                *end += e.encoded_len();
                Some(*end)
            })
            .filter(|&end| end <= cut)
            .count();
        let whole = complete_entries(&built[..cut]).expect("a cut bundle is well-formed");
        assert_eq!(whole, got[..ends], "the entries that end before the cut");
    }
}

/// A stream of framed Kafka records (`kafka_record`): whatever the reader
/// accepts lies inside the input and re-frames to exactly the bytes it was
/// read from; a prefix of an accepted stream reads as "need more", never as
/// an error; a record built from the input frames and reads back equal.
/// Never panics.
pub fn kafka_record(data: &[u8]) {
    use crate::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp, LENGTH_PREFIX};
    let mut at = 0;
    while let Ok(Some((record, used))) = KafkaRecord::parse_prefix(&data[at..]) {
        assert!(
            used >= LENGTH_PREFIX && at + used <= data.len(),
            "read inside the input"
        );
        assert_eq!(
            record.encoded_len(),
            used,
            "encoded_len agrees with the reader"
        );
        let mut again = Vec::new();
        record.emit(&mut again).expect("a record read frames again");
        assert_eq!(
            again,
            &data[at..at + used],
            "a record re-frames to its bytes"
        );
        for cut in [0, 1, LENGTH_PREFIX, used / 2, used - 1] {
            assert_eq!(
                KafkaRecord::parse_prefix(&again[..cut]),
                Ok(None),
                "a cut record asks for more"
            );
        }
        at += used;
    }
    // Build a record from the input itself: null/empty/non-empty fields
    // and headers chosen by its first bytes.
    let pick = |i: usize| data.get(i).copied().unwrap_or(0);
    let bytes = |i: usize| -> Option<&[u8]> {
        match pick(i) % 3 {
            0 => None,
            1 => Some(&[]),
            _ => Some(&data[data.len().min(i)..]),
        }
    };
    let names = ["", "trace-id", "\u{e9}t\u{e9}"];
    let headers = (0..usize::from(pick(0) % 4))
        .map(|h| RecordHeader {
            name: names[h % names.len()],
            value: bytes(h + 4),
        })
        .collect();
    let ms = i64::from_be_bytes(std::array::from_fn(|i| pick(i + 1)));
    let record = KafkaRecord {
        source_offset: u64::from_be_bytes(std::array::from_fn(|i| pick(i + 2))),
        timestamp: match pick(3) % 3 {
            0 => RecordTimestamp::NotAvailable,
            1 => RecordTimestamp::CreateTime(ms),
            _ => RecordTimestamp::LogAppendTime(ms),
        },
        key: bytes(1),
        value: bytes(2),
        headers,
    };
    let mut framed = Vec::new();
    record
        .emit(&mut framed)
        .expect("a record of the input frames");
    assert_eq!(framed.len(), record.encoded_len());
    assert_eq!(KafkaRecord::parse(&framed), Ok(record), "round trip");
}
