//! The sync manifest (PROTOCOL.md § 5.5): what a channel of kind
//! `Manifest` carries — JSON Lines of deletions and renames — written by the
//! sync sender and read by the file sink. One type for both sides, so the
//! two cannot disagree.
//!
//! ```text
//!  sender: Tombstone rows ─► Record::Delete | Record::Rename ─► JSON Lines ─► channel bytes
//!  receiver: channel bytes (verified) ─► parse() ─► records ─► apply (files.rs)
//! ```

use serde::{Deserialize, Serialize};

/// The label a manifest channel is announced under.
pub const MANIFEST_NAME: &str = ".diodon-manifest";
/// The largest manifest a receiver holds (bytes); larger ones are refused.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// Records a sender puts in one manifest.
pub const MAX_RECORDS: usize = 10_000;

/// One line of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// `delete` or `rename`.
    pub op: Op,
    /// The old name (renames only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The file's name (the new name for a rename).
    pub path: String,
    /// Size of the version deleted or renamed.
    pub size: u64,
    /// Its mtime, seconds.
    pub mtime_sec: i64,
    /// Its mtime, nanoseconds.
    pub mtime_nsec: u32,
    /// When the sender saw it happen, Unix ms.
    pub first_seen_ms: i64,
    /// Which time this record is sent, from 1.
    pub pass: u32,
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// The file is gone.
    Delete,
    /// The file now lives at `path`.
    Rename,
}

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A line is not a record.
    #[error("manifest line {line}: {source}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },
}

impl Record {
    /// Appends the record as one JSON line.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

/// Reads every record; records with an unknown `op` are an error of their
/// line (the whole manifest is refused: it is verified bytes from the
/// sender, so a bad line means a sender this receiver does not understand).
pub fn parse(bytes: &[u8]) -> Result<Vec<Record>, ManifestError> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| {
            serde_json::from_slice(l).map_err(|source| ManifestError::Line {
                line: i + 1,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_as_json_lines() {
        let recs = vec![
            Record {
                op: Op::Delete,
                from: None,
                path: "a/b".into(),
                size: 3,
                mtime_sec: 5,
                mtime_nsec: 6,
                first_seen_ms: 7,
                pass: 1,
            },
            Record {
                op: Op::Rename,
                from: Some("a/c".into()),
                path: "a/d".into(),
                size: 1,
                mtime_sec: -1,
                mtime_nsec: 0,
                first_seen_ms: 8,
                pass: 2,
            },
        ];
        let mut bytes = Vec::new();
        for r in &recs {
            r.write_line(&mut bytes);
        }
        let text = String::from_utf8(bytes.clone()).expect("utf-8");
        assert!(
            text.starts_with("{\"op\":\"delete\",\"path\":\"a/b\""),
            "{text}"
        );
        assert_eq!(parse(&bytes).expect("parse"), recs);
        assert!(parse(b"{\"op\":\"chmod\"}\n").is_err());
    }
}
