//! The file sink on a real, small filesystem (a tmpfs of a few MB that the
//! test mounts and unmounts): a file that cannot fit is refused before its
//! first byte, a file that fills the disk while it is written frees its
//! space, and in every case the next file that fits is delivered.
//!
//! ```text
//!  TempDir ─► mount -t tmpfs -o size=8m ─► FileSink(out) ◄─ SinkEvents (no network)
//!     └──── umount on drop (also when the test panics)
//! ```
//!
//! Mounting needs root: without it each test prints why and passes, except
//! under `CI=true`, where it fails. The tests run one at a time (a shared
//! lock): a fork by a neighbour test (`mount`) would hold our files open
//! for an instant, and a removed file frees its space only when closed.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_apps::files::{
    FileSink, FileSinkOptions, QuarantineBytes, QuarantineLimits, QUARANTINE, RESERVE_FROM, STAGING,
};
use diodon_apps::{ChannelKey, ChannelOutcome, Sink, SinkEvent, Verdict};
use diodon_proto::{ChannelId, ChannelMeta, FailReason, SessionId};
use diodon_testkit::{require_root, SmallFs};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

const MIB: usize = 1 << 20;
static LOCK: Mutex<()> = Mutex::new(());

/// A tmpfs mounted on a fresh temporary directory, with the lock that
/// keeps these tests apart; unmounted on drop.
struct Tmpfs {
    fs: SmallFs,
    _lock: MutexGuard<'static, ()>,
}

impl Tmpfs {
    /// Mounts a tmpfs of `mib` MiB, or returns `None` (skip) without root.
    fn mount(mib: u64) -> Option<Tmpfs> {
        let lock = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !require_root("full_disk") {
            return None;
        }
        Some(Tmpfs {
            fs: SmallFs::mount(mib),
            _lock: lock,
        })
    }
}

fn key(c: u32) -> ChannelKey {
    ChannelKey {
        session: SessionId(0x5EED),
        channel: ChannelId(c),
    }
}

fn sink(out: &Path) -> FileSink {
    let opts = FileSinkOptions {
        fsync: false,
        ..FileSinkOptions::default()
    };
    FileSink::new(out, &opts, Arc::default()).unwrap()
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

/// Sends `data` as one channel through `sink` and returns its outcome.
fn deliver(sink: &mut FileSink, k: ChannelKey, name: &str, data: &[u8]) -> ChannelOutcome {
    sink.handle(SinkEvent::Opened {
        key: k,
        meta: ChannelMeta::file(name, data.len() as u64),
    })
    .unwrap();
    write_at(sink, k, 0, data);
    complete(sink, k, data)
}

/// Writes `data` at `offset` of channel `k`, 256 KiB at a time.
fn write_at(sink: &mut FileSink, k: ChannelKey, offset: usize, data: &[u8]) {
    for (i, chunk) in data.chunks(256 * 1024).enumerate() {
        sink.handle(SinkEvent::Data {
            key: k,
            offset: (offset + i * 256 * 1024) as u64,
            data: chunk.to_vec(),
        })
        .unwrap();
    }
}

/// The core's verdict that channel `k`, holding `data`, is complete.
fn complete(sink: &mut FileSink, k: ChannelKey, data: &[u8]) -> ChannelOutcome {
    sink.handle(SinkEvent::Complete {
        key: k,
        bytes: data.len() as u64,
        digest: *blake3::hash(data).as_bytes(),
    })
    .unwrap()
    .unwrap()
}

/// The core's verdict on a channel the sink gave up.
fn fail(sink: &mut FileSink, k: ChannelKey, why: diodon_apps::SinkFailure) -> ChannelOutcome {
    sink.handle(SinkEvent::Failed {
        key: k,
        reason: FailReason::Rejected(why.into()),
    })
    .unwrap()
    .unwrap()
}

fn reason_of(o: &ChannelOutcome) -> &str {
    match &o.verdict {
        Verdict::Failed { reason } => reason,
        Verdict::Verified { .. } => panic!("expected a failure: {o:?}"),
    }
}

/// (data bytes, reason files and their sizes) in the quarantine.
fn quarantine(out: &Path) -> (u64, Vec<(String, u64)>) {
    let mut data = 0;
    let mut reasons = Vec::new();
    for e in fs::read_dir(out.join(QUARANTINE)).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let len = e.metadata().unwrap().len();
        if name.ends_with(".reason") {
            reasons.push((name, len));
        } else {
            data += len;
        }
    }
    (data, reasons)
}

fn staging_is_empty(out: &Path) -> bool {
    fs::read_dir(out.join(STAGING)).unwrap().next().is_none()
}

#[test]
fn a_file_announcing_more_than_the_disk_is_refused_before_its_first_byte() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let big = key(1);
    let refused = sink
        .handle(SinkEvent::Opened {
            key: big,
            meta: ChannelMeta::file("big.bin", 64 * MIB as u64),
        })
        .expect_err("a 64 MiB file cannot fit on an 8 MiB disk: refused on opening");
    assert!(
        refused.why.to_string().contains("output disk full"),
        "{refused}"
    );
    assert!(
        staging_is_empty(&out),
        "refused before any byte was written"
    );
    // Blocks the decoder forwarded before the refusal reached the core.
    sink.handle(SinkEvent::Data {
        key: big,
        offset: 0,
        data: vec![7; MIB],
    })
    .unwrap();
    assert!(staging_is_empty(&out));
    let failed = fail(&mut sink, big, refused.why);
    assert!(
        reason_of(&failed).contains("output disk full"),
        "{failed:?}"
    );
    let (data, reasons) = quarantine(&out);
    assert_eq!(data, 0, "no bytes of the refused file are kept");
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].1 > 0, "the reason record is not empty");

    let small = bytes(3 * MIB, 1);
    let ok = deliver(&mut sink, key(2), "small.bin", &small);
    assert!(matches!(ok.verdict, Verdict::Verified { .. }), "{ok:?}");
    assert_eq!(fs::read(out.join("small.bin")).unwrap(), small);
}

#[test]
fn a_stream_that_fills_the_disk_frees_its_space_and_the_next_file_is_delivered() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let stream = key(1);
    sink.handle(SinkEvent::Opened {
        key: stream,
        meta: ChannelMeta {
            size: None,
            ..ChannelMeta::file("stream.bin", 0)
        },
    })
    .unwrap();
    let mut failure = None;
    for i in 0..16 {
        if let Err(e) = sink.handle(SinkEvent::Data {
            key: stream,
            offset: (i * MIB) as u64,
            data: bytes(MIB, 2),
        }) {
            failure = Some(e);
            break;
        }
    }
    let failure = failure.expect("16 MiB cannot fit on an 8 MiB disk");
    assert!(
        failure.why.to_string().contains("output disk full"),
        "{failure}"
    );
    assert!(
        staging_is_empty(&out),
        "the partial bytes are removed when the write fails"
    );
    let failed = fail(&mut sink, stream, failure.why);
    assert!(
        reason_of(&failed).contains("output disk full"),
        "{failed:?}"
    );
    let (data, reasons) = quarantine(&out);
    assert_eq!(data, 0, "the quarantine does not keep the partial's bytes");
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].1 > 0, "the reason record is not empty");
    let text = fs::read_to_string(out.join(QUARANTINE).join(&reasons[0].0)).unwrap();
    assert!(text.contains("stream.bin"), "{text}");

    let small = bytes(5 * MIB, 3);
    let ok = deliver(&mut sink, key(2), "small.bin", &small);
    assert!(matches!(ok.verdict, Verdict::Verified { .. }), "{ok:?}");
    assert_eq!(fs::read(out.join("small.bin")).unwrap(), small);
}

#[test]
fn a_small_file_overtaken_by_other_writes_frees_its_space_and_the_next_file_is_delivered() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let a = key(1);
    let size = 900 * 1024;
    assert!(
        size < RESERVE_FROM,
        "a file too small to have its room reserved"
    );
    sink.handle(SinkEvent::Opened {
        key: a,
        meta: ChannelMeta::file("a.bin", size),
    })
    .expect("900 KiB fits on an empty 8 MiB disk");
    sink.handle(SinkEvent::Data {
        key: a,
        offset: 0,
        data: bytes(MIB / 2, 4),
    })
    .unwrap();
    // Someone else fills the disk up to its last 256 KiB.
    let other = tmp.fs.path().join("other-writer");
    let free = diodon_io::fs::space(tmp.fs.path()).unwrap().available;
    fs::write(&other, vec![1u8; (free - 256 * 1024) as usize]).unwrap();
    let failure = sink
        .handle(SinkEvent::Data {
            key: a,
            offset: (MIB / 2) as u64,
            data: bytes(size as usize - MIB / 2, 4),
        })
        .expect_err("the disk filled up under a.bin");
    assert!(staging_is_empty(&out), "a.bin's partial is removed at once");
    let failed = fail(&mut sink, a, failure.why);
    assert!(
        reason_of(&failed).contains("output disk full"),
        "{failed:?}"
    );
    let (data, reasons) = quarantine(&out);
    assert_eq!(data, 0);
    assert!(reasons.iter().all(|r| r.1 > 0), "{reasons:?}");

    // The other writer gives 3 MiB back: the next file that fits arrives.
    fs::File::options()
        .write(true)
        .open(&other)
        .unwrap()
        .set_len(free - 256 * 1024 - 3 * MIB as u64)
        .unwrap();
    let small = bytes(3 * MIB / 2, 5);
    let ok = deliver(&mut sink, key(2), "small.bin", &small);
    assert!(matches!(ok.verdict, Verdict::Verified { .. }), "{ok:?}");
    assert_eq!(fs::read(out.join("small.bin")).unwrap(), small);
}

/// Bytes the staging file of the one open channel occupies on disk.
fn staged_blocks(out: &Path) -> u64 {
    let entries: Vec<_> = fs::read_dir(out.join(STAGING)).unwrap().collect();
    assert_eq!(entries.len(), 1, "one staging file");
    entries[0].as_ref().unwrap().metadata().unwrap().blocks() * 512
}

#[test]
fn a_large_file_keeps_the_room_it_reserved_when_another_writer_fills_the_disk() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let a = key(1);
    let data = bytes(5 * MIB, 6);
    sink.handle(SinkEvent::Opened {
        key: a,
        meta: ChannelMeta::file("a.bin", data.len() as u64),
    })
    .expect("5 MiB fits on an empty 8 MiB disk");
    assert!(
        staged_blocks(&out) >= data.len() as u64,
        "the announced size is on disk before the first byte"
    );
    let (head, tail) = data.split_at(2 * MIB);
    write_at(&mut sink, a, 0, head);
    // Someone else tries to take 5 MiB: only what a.bin did not reserve.
    let other = fs::write(tmp.fs.path().join("other-writer"), vec![1u8; 5 * MIB]);
    let full = other.expect_err("the disk has 3 MiB that a.bin did not reserve");
    assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
    // a.bin writes into the room it reserved.
    write_at(&mut sink, a, head.len(), tail);
    let ok = complete(&mut sink, a, &data);
    assert!(matches!(ok.verdict, Verdict::Verified { .. }), "{ok:?}");
    assert_eq!(fs::read(out.join("a.bin")).unwrap(), data);
}

#[test]
fn a_reserved_file_is_not_counted_twice_when_the_next_one_opens() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let a = bytes(3 * MIB, 7);
    sink.handle(SinkEvent::Opened {
        key: key(1),
        meta: ChannelMeta::file("a.bin", a.len() as u64),
    })
    .unwrap();
    // Past the second the sink trusts its own estimate: the filesystem is
    // asked, and its free space already lacks a.bin's reserved 3 MiB. With
    // a.bin counted again as still to come, 3.5 MiB would not fit.
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let b = bytes(7 * MIB / 2, 8);
    let b_out = deliver(&mut sink, key(2), "b.bin", &b);
    assert!(
        matches!(b_out.verdict, Verdict::Verified { .. }),
        "{b_out:?}"
    );
    write_at(&mut sink, key(1), 0, &a);
    let a_out = complete(&mut sink, key(1), &a);
    assert!(
        matches!(a_out.verdict, Verdict::Verified { .. }),
        "{a_out:?}"
    );
    assert_eq!(fs::read(out.join("a.bin")).unwrap(), a);
    assert_eq!(fs::read(out.join("b.bin")).unwrap(), b);
}

#[test]
fn a_failed_file_gives_back_its_reserved_room_and_the_quarantine_keeps_only_its_bytes() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let opts = FileSinkOptions {
        fsync: false,
        quarantine: QuarantineLimits {
            max_bytes: QuarantineBytes::Bytes(4 * MIB as u64),
            ..QuarantineLimits::default()
        },
        ..FileSinkOptions::default()
    };
    let mut sink = FileSink::new(&out, &opts, Arc::default()).unwrap();
    let a = key(1);
    sink.handle(SinkEvent::Opened {
        key: a,
        meta: ChannelMeta::file("a.bin", 6 * MIB as u64),
    })
    .unwrap();
    sink.handle(SinkEvent::Data {
        key: a,
        offset: 0,
        data: bytes(MIB, 9),
    })
    .unwrap();
    let before = diodon_io::fs::space(tmp.fs.path()).unwrap().available;
    assert!(
        before <= 2 * MIB as u64,
        "6 MiB reserved: {before} bytes free"
    );
    let failed = fail(&mut sink, a, diodon_apps::SinkFailure::NoStagingFile);
    assert!(reason_of(&failed).contains("no staging file"), "{failed:?}");
    let (data, _) = quarantine(&out);
    assert_eq!(data, MIB as u64, "the quarantine keeps the 1 MiB received");
    let kept: u64 = fs::read_dir(out.join(QUARANTINE))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum();
    assert!(kept < 2 * MIB as u64, "{kept} bytes on disk for 1 MiB kept");
    let after = diodon_io::fs::space(tmp.fs.path()).unwrap().available;
    assert!(
        after >= 6 * MIB as u64,
        "the 5 MiB reserved and not received are free again: {after}"
    );
}
