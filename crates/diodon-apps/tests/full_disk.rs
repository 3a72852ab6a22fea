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

use diodon_apps::files::{FileSink, FileSinkOptions, QUARANTINE, STAGING};
use diodon_apps::{ChannelKey, ChannelOutcome, Sink, SinkEvent, Verdict};
use diodon_proto::{ChannelId, ChannelMeta, FailReason, SessionId};
use diodon_testkit::{require_root, SmallFs};
use std::fs;
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
    for (i, chunk) in data.chunks(256 * 1024).enumerate() {
        sink.handle(SinkEvent::Data {
            key: k,
            offset: (i * 256 * 1024) as u64,
            data: chunk.to_vec(),
        })
        .unwrap();
    }
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
fn a_file_overtaken_by_other_writes_frees_its_space_and_the_next_file_is_delivered() {
    let Some(tmp) = Tmpfs::mount(8) else { return };
    let out = tmp.fs.path().join("out");
    let mut sink = sink(&out);
    let a = key(1);
    sink.handle(SinkEvent::Opened {
        key: a,
        meta: ChannelMeta::file("a.bin", 5 * MIB as u64),
    })
    .expect("5 MiB fits on an empty 8 MiB disk");
    let mut offset = 0;
    for _ in 0..2 {
        sink.handle(SinkEvent::Data {
            key: a,
            offset,
            data: bytes(MIB, 4),
        })
        .unwrap();
        offset += MIB as u64;
    }
    // Someone else fills most of the rest of the disk.
    fs::write(tmp.fs.path().join("other-writer"), vec![1u8; 5 * MIB]).unwrap();
    let mut failure = None;
    for _ in 0..3 {
        match sink.handle(SinkEvent::Data {
            key: a,
            offset,
            data: bytes(MIB, 4),
        }) {
            Ok(None) => offset += MIB as u64,
            Ok(Some(o)) => panic!("unexpected outcome {o:?}"),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let failure = failure.expect("the disk filled up under a.bin");
    assert!(staging_is_empty(&out), "a.bin's partial is removed at once");
    let failed = fail(&mut sink, a, failure.why);
    assert!(
        reason_of(&failed).contains("output disk full"),
        "{failed:?}"
    );
    let (data, reasons) = quarantine(&out);
    assert_eq!(data, 0);
    assert!(reasons.iter().all(|r| r.1 > 0), "{reasons:?}");

    let small = bytes(3 * MIB / 2, 5);
    let ok = deliver(&mut sink, key(2), "small.bin", &small);
    assert!(matches!(ok.verdict, Verdict::Verified { .. }), "{ok:?}");
    assert_eq!(fs::read(out.join("small.bin")).unwrap(), small);
}
