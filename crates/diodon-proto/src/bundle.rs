//! Sync bundles (PROTOCOL.md § 5.6): the bytes of a channel of kind
//! [`ChannelKind::Bundle`](crate::ChannelKind::Bundle) — many small files of
//! a mirrored tree in one channel, so each costs its bytes plus a 68-byte
//! header instead of a channel of its own (two control datagrams sent five
//! times each, and a short block's repair). This module owns the format:
//! [`push_entry`] for the sync sender, [`parse`] for the receiver, and
//! [`complete_entries`] for a bundle whose channel failed: the files that
//! arrived whole before the loss (both fuzzed: `fuzz/fuzz_targets/bundle.rs`).
//!
//! ```text
//!  entry = header (68 bytes) | name (UTF-8) | content (size bytes)
//!  header: name len u16 | pass u16 | mode u32 | size u64 | mtime s i64 | mtime ns u32
//!          | first seen ms u64 | BLAKE3-256 of the content [32]
//! ```

/// The label a bundle channel is announced under.
pub const BUNDLE_NAME: &str = ".diodon-bundle";
/// Bytes of an entry's fixed header.
pub const ENTRY_HEADER_LEN: usize = 68;
/// The largest bundle a receiver holds (bytes); a sender stays far below.
pub const MAX_BUNDLE_BYTES: u64 = 16 << 20;
/// The longest name of an entry (as in a channel-open, § 5.3).
pub const MAX_ENTRY_NAME: usize = 4096;

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// Its name, as a file channel would announce it (untrusted).
    pub name: &'a str,
    /// Which time this version is sent, from 1.
    pub pass: u16,
    /// Unix mode bits.
    pub mode: u32,
    /// mtime, seconds since the epoch.
    pub mtime_sec: i64,
    /// mtime, nanoseconds (< 10^9).
    pub mtime_nsec: u32,
    /// When the sender first saw this version, Unix ms.
    pub first_seen_unix_ms: u64,
    /// BLAKE3-256 of the content.
    pub digest: [u8; 32],
    /// The file's bytes.
    pub content: &'a [u8],
}

/// Why a bundle's bytes are not a bundle. The channel's own digest was
/// verified, so each of these means a sender that writes bundles wrongly
/// (or another format): the receiver applies none of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bundle entry {entry} at byte {offset}: {what}")]
pub struct BundleError {
    /// 1-based entry number.
    pub entry: usize,
    /// Where the entry starts in the bundle.
    pub offset: usize,
    /// What is wrong with it.
    pub what: &'static str,
}

impl BundleEntry<'_> {
    /// Bytes this entry takes in a bundle.
    pub fn encoded_len(&self) -> usize {
        ENTRY_HEADER_LEN + self.name.len() + self.content.len()
    }
}

/// Appends `e` to a bundle. The caller keeps names within
/// [`MAX_ENTRY_NAME`] and passes from 1 (a parser refuses others).
pub fn push_entry(out: &mut Vec<u8>, e: &BundleEntry<'_>) {
    let name_len = u16::try_from(e.name.len()).unwrap_or(u16::MAX);
    out.reserve(e.encoded_len());
    out.extend_from_slice(&name_len.to_be_bytes());
    out.extend_from_slice(&e.pass.to_be_bytes());
    out.extend_from_slice(&e.mode.to_be_bytes());
    out.extend_from_slice(&(e.content.len() as u64).to_be_bytes());
    out.extend_from_slice(&e.mtime_sec.to_be_bytes());
    out.extend_from_slice(&e.mtime_nsec.to_be_bytes());
    out.extend_from_slice(&e.first_seen_unix_ms.to_be_bytes());
    out.extend_from_slice(&e.digest);
    out.extend_from_slice(&e.name.as_bytes()[..usize::from(name_len)]);
    out.extend_from_slice(e.content);
}

fn be<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Every entry of a bundle, or the first thing wrong with it. Each
/// entry's content is checked against its digest here, so a caller never
/// sees bytes its header does not vouch for. An empty bundle is an error
/// (a sender never sends one).
pub fn parse(bytes: &[u8]) -> Result<Vec<BundleEntry<'_>>, BundleError> {
    let (entries, cut) = walk(bytes)?;
    if let Some(cut) = cut {
        return Err(cut);
    }
    if entries.is_empty() {
        return Err(BundleError {
            entry: 1,
            offset: 0,
            what: "empty bundle",
        });
    }
    Ok(entries)
}

/// The entries that lie wholly in `prefix`, the first bytes of a bundle
/// whose channel failed (delivery stops at its first lost block): every
/// entry before the one the loss cut, each content checked against its
/// digest as in [`parse`]. The entry the prefix ends in is left out, and
/// so is everything after. Anything malformed before the cut is an error
/// (a sender that writes bundles wrongly): then nothing of it is used.
pub fn complete_entries(prefix: &[u8]) -> Result<Vec<BundleEntry<'_>>, BundleError> {
    walk(prefix).map(|(entries, _cut)| entries)
}

/// The entries of `bytes` from the start, and where the bytes end inside
/// an entry (if they do); the first malformed entry is the error.
fn walk(bytes: &[u8]) -> Result<(Vec<BundleEntry<'_>>, Option<BundleError>), BundleError> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match next_entry(bytes, at, entries.len() + 1) {
            Next::Entry(e, len) => {
                entries.push(e);
                at += len;
            }
            Next::Cut(what) => {
                let cut = BundleError {
                    entry: entries.len() + 1,
                    offset: at,
                    what,
                };
                return Ok((entries, Some(cut)));
            }
            Next::Bad(e) => return Err(e),
        }
    }
    Ok((entries, None))
}

/// What [`next_entry`] found at an offset.
enum Next<'a> {
    /// A whole entry and the bytes it takes.
    Entry(BundleEntry<'a>, usize),
    /// The bytes end inside the entry's header, name or content.
    Cut(&'static str),
    /// The entry is malformed.
    Bad(BundleError),
}

/// The entry starting at `at` (entry number `n`, from 1).
fn next_entry(bytes: &[u8], at: usize, n: usize) -> Next<'_> {
    let bad = |what| {
        Next::Bad(BundleError {
            entry: n,
            offset: at,
            what,
        })
    };
    let rest = &bytes[at..];
    if rest.len() < ENTRY_HEADER_LEN {
        return Next::Cut("shorter than an entry header");
    }
    let name_len = usize::from(u16::from_be_bytes(be(rest, 0)));
    let pass = u16::from_be_bytes(be(rest, 2));
    let mode = u32::from_be_bytes(be(rest, 4));
    let size = u64::from_be_bytes(be(rest, 8));
    let mtime_sec = i64::from_be_bytes(be(rest, 16));
    let mtime_nsec = u32::from_be_bytes(be(rest, 24));
    let first_seen_unix_ms = u64::from_be_bytes(be(rest, 28));
    let digest: [u8; 32] = be(rest, 36);
    if name_len == 0 || name_len > MAX_ENTRY_NAME {
        return bad("name length is 0 or above 4096");
    }
    if pass == 0 {
        return bad("pass 0");
    }
    if mtime_nsec >= 1_000_000_000 {
        return bad("mtime nanoseconds out of range");
    }
    if size > MAX_BUNDLE_BYTES {
        return bad("content larger than a bundle");
    }
    let body = &rest[ENTRY_HEADER_LEN..];
    let Some(end) = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_add(name_len))
        .filter(|&e| e <= body.len())
    else {
        return Next::Cut("name and content run past the end");
    };
    let Ok(name) = std::str::from_utf8(&body[..name_len]) else {
        return bad("name is not UTF-8");
    };
    let content = &body[name_len..end];
    if blake3::hash(content).as_bytes() != &digest {
        return bad("content does not match its digest");
    }
    Next::Entry(
        BundleEntry {
            name,
            pass,
            mode,
            mtime_sec,
            mtime_nsec,
            first_seen_unix_ms,
            digest,
            content,
        },
        ENTRY_HEADER_LEN + end,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(name: &'a str, content: &'a [u8]) -> BundleEntry<'a> {
        BundleEntry {
            name,
            pass: 2,
            mode: 0o640,
            mtime_sec: -5,
            mtime_nsec: 999_999_999,
            first_seen_unix_ms: 1_795_000_000_123,
            digest: *blake3::hash(content).as_bytes(),
            content,
        }
    }

    fn bundle(entries: &[BundleEntry<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for e in entries {
            push_entry(&mut out, e);
        }
        out
    }

    #[test]
    fn entries_round_trip_with_empty_and_binary_contents() {
        let big: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
        let want = vec![
            entry("a/b.txt", b"hello"),
            entry("a/empty", b""),
            entry("a/\u{e9}t\u{e9}/big", &big),
        ];
        let bytes = bundle(&want);
        assert_eq!(
            bytes.len(),
            want.iter().map(BundleEntry::encoded_len).sum::<usize>()
        );
        assert_eq!(parse(&bytes).expect("parses"), want);
    }

    #[test]
    fn the_layout_is_the_one_protocol_md_gives() {
        let bytes = bundle(&[entry("x", b"ab")]);
        assert_eq!(&bytes[0..2], &[0, 1], "name length");
        assert_eq!(&bytes[2..4], &[0, 2], "pass");
        assert_eq!(&bytes[4..8], &0o640u32.to_be_bytes(), "mode");
        assert_eq!(&bytes[8..16], &2u64.to_be_bytes(), "size");
        assert_eq!(&bytes[16..24], &(-5i64).to_be_bytes(), "mtime s");
        assert_eq!(&bytes[24..28], &999_999_999u32.to_be_bytes(), "mtime ns");
        assert_eq!(&bytes[28..36], &1_795_000_000_123u64.to_be_bytes());
        assert_eq!(&bytes[36..68], blake3::hash(b"ab").as_bytes());
        assert_eq!(&bytes[68..], b"xab");
    }

    #[test]
    fn every_defect_is_named_with_its_entry() {
        let good = bundle(&[entry("a", b"1"), entry("b", b"22")]);
        let second = ENTRY_HEADER_LEN + 2;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "empty bundle"),
            (good[..good.len() - 1].to_vec(), "run past the end"),
            (good[..second + 10].to_vec(), "shorter than an entry header"),
            (
                {
                    let mut b = good.clone();
                    b[second + 3] = 0; // pass 0
                    b
                },
                "pass 0",
            ),
            (
                {
                    let mut b = good.clone();
                    *b.last_mut().unwrap() ^= 1;
                    b
                },
                "does not match its digest",
            ),
            (
                {
                    let mut b = good.clone();
                    b[second + ENTRY_HEADER_LEN] = 0xff;
                    b
                },
                "not UTF-8",
            ),
            (
                {
                    let mut b = good.clone();
                    b[second..second + 2].copy_from_slice(&0u16.to_be_bytes());
                    b
                },
                "name length",
            ),
            (
                {
                    let mut b = good.clone();
                    b[second + 8..second + 16].copy_from_slice(&u64::MAX.to_be_bytes());
                    b
                },
                "larger than a bundle",
            ),
        ];
        for (bytes, what) in cases {
            let e = parse(&bytes).expect_err(what);
            assert!(e.to_string().contains(what), "{e} should say {what}");
            if !bytes.is_empty() && bytes.len() > second {
                assert_eq!(e.entry, 2, "{e}");
                assert_eq!(e.offset, second, "{e}");
            }
        }
    }

    #[test]
    fn a_cut_bundle_gives_the_entries_before_the_cut_at_every_length() {
        let big: Vec<u8> = (0..5_000u32).map(|i| (i * 13) as u8).collect();
        let want = vec![
            entry("one", b"first"),
            entry("two", b""),
            entry("three", &big),
            entry("four", b"last"),
        ];
        let bytes = bundle(&want);
        let mut ends = Vec::new();
        let mut end = 0;
        for e in &want {
            end += e.encoded_len();
            ends.push(end);
        }
        for cut in 0..=bytes.len() {
            let got = complete_entries(&bytes[..cut]).expect("well-formed up to the cut");
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            assert_eq!(got, want[..whole], "cut at {cut}");
        }
    }

    #[test]
    fn a_cut_bundle_with_a_defect_before_the_cut_gives_nothing() {
        let mut bytes = bundle(&[entry("a", b"1"), entry("b", b"22"), entry("c", b"333")]);
        let second = ENTRY_HEADER_LEN + 2;
        bytes[second + ENTRY_HEADER_LEN + 1] ^= 1; // b's content
        let cut = &bytes[..bytes.len() - 1];
        let e = complete_entries(cut).expect_err("entry 2 is wrong");
        assert_eq!((e.entry, e.offset), (2, second));
        assert!(e.to_string().contains("does not match its digest"), "{e}");
        // A size no bundle holds is a defect, not a cut.
        let mut bytes = bundle(&[entry("a", b"1"), entry("b", b"22")]);
        bytes[second + 8..second + 16].copy_from_slice(&(MAX_BUNDLE_BYTES + 1).to_be_bytes());
        let e = complete_entries(&bytes).expect_err("entry 2 claims too much");
        assert!(e.to_string().contains("larger than a bundle"), "{e}");
    }
}
