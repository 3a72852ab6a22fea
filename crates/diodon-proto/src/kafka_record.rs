//! Kafka records in a channel (PROTOCOL.md § 5.7): the framing that carries
//! the records of one topic-partition across the diode, so the far side can
//! produce them again with their key, value, headers, timestamp and source
//! offset. The topic-partition is the channel's, so a record does not name
//! it. This module owns the format and nothing else: no Kafka client, no
//! socket; [`KafkaRecord::emit`] for the source, [`KafkaRecord::parse_prefix`]
//! for the sink (fuzzed: `fuzz/fuzz_targets/kafka_record.rs`).
//!
//! ```text
//!  channel bytes:  | record | record | record | ...   (records may span blocks)
//!
//!  record = length u32 (bytes after it) | source offset u64 | timestamp type u8
//!         | timestamp ms i64 | key: len u32 + bytes | value: len u32 + bytes
//!         | header count u32 | count × (name len u16 | name UTF-8 | len u32 + bytes)
//!  len 0xFFFF_FFFF = null (no key, a tombstone's value, a header without value),
//!  which is not the same as len 0 (empty bytes)
//! ```

use thiserror::Error;

/// Bytes of a record's length prefix.
pub const LENGTH_PREFIX: usize = 4;

/// The fewest bytes after the length prefix: offset, timestamp type and
/// value, null key, null value, no headers.
pub const MIN_RECORD_BODY: usize = 8 + 1 + 8 + 4 + 4 + 4;

/// The most bytes after the length prefix. A longer length is a forged or
/// corrupt record (a sink would otherwise buffer without bound); Kafka's
/// own default limit (`message.max.bytes`) is about 1 MiB.
pub const MAX_RECORD_BODY: usize = 64 << 20;

/// The length that stands for null bytes.
pub const NULL_LEN: u32 = u32::MAX;

/// Offsets of the fixed fields, counted from the first byte after the
/// length prefix.
mod field {
    pub const OFFSET: usize = 0;
    pub const TIMESTAMP_TYPE: usize = 8;
    pub const TIMESTAMP_MS: usize = 9;
    pub const KEY: usize = 17;
}

/// A record's timestamp as Kafka reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordTimestamp {
    /// The record carries none (on the wire: type 0, milliseconds -1).
    NotAvailable,
    /// Set by the producer, Unix ms (type 1).
    CreateTime(i64),
    /// Set by the broker when it appended the record, Unix ms (type 2).
    LogAppendTime(i64),
}

impl RecordTimestamp {
    fn to_wire(self) -> (u8, i64) {
        match self {
            RecordTimestamp::NotAvailable => (0, -1),
            RecordTimestamp::CreateTime(ms) => (1, ms),
            RecordTimestamp::LogAppendTime(ms) => (2, ms),
        }
    }

    fn from_wire(kind: u8, ms: i64) -> Result<Self, KafkaRecordError> {
        match kind {
            0 if ms == -1 => Ok(RecordTimestamp::NotAvailable),
            0 => Err(KafkaRecordError::TimestampWithoutType(ms)),
            1 => Ok(RecordTimestamp::CreateTime(ms)),
            2 => Ok(RecordTimestamp::LogAppendTime(ms)),
            other => Err(KafkaRecordError::UnknownTimestampType(other)),
        }
    }
}

/// One header of a record: a name (Kafka requires one, UTF-8) and bytes
/// that may be null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader<'a> {
    /// The header's name.
    pub name: &'a str,
    /// Its value; `None` is Kafka's null, distinct from empty.
    pub value: Option<&'a [u8]>,
}

/// One Kafka record of a topic-partition, borrowing its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord<'a> {
    /// Its offset in the source partition: the sink's key against
    /// duplicates and the measure of a gap.
    pub source_offset: u64,
    /// Its timestamp, with the type the source broker reported.
    pub timestamp: RecordTimestamp,
    /// Its key; `None` is null.
    pub key: Option<&'a [u8]>,
    /// Its value; `None` is null (a tombstone), distinct from empty.
    pub value: Option<&'a [u8]>,
    /// Its headers, in order (names may repeat, as in Kafka).
    pub headers: Vec<RecordHeader<'a>>,
}

/// Why bytes are not a Kafka record, or a record cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KafkaRecordError {
    /// The length prefix announces fewer bytes than the smallest record.
    #[error("record length {0} is below the minimum {MIN_RECORD_BODY}")]
    TooShort(u32),
    /// The length prefix (or, when framing, the record) is above the limit.
    #[error("record length {0} exceeds {MAX_RECORD_BODY}")]
    TooLarge(u64),
    /// The bytes end before the record the length prefix announces.
    #[error("record of {need} bytes, only {have} present")]
    Truncated {
        /// Bytes the record takes, prefix included.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// A timestamp type other than 0, 1 or 2.
    #[error("unknown timestamp type {0}")]
    UnknownTimestampType(u8),
    /// Timestamp type 0 (none) with milliseconds other than -1.
    #[error("timestamp type 0 (none) with milliseconds {0} instead of -1")]
    TimestampWithoutType(i64),
    /// A field runs past the end its record's length gives.
    #[error("{field} runs past the end of the record")]
    FieldPastEnd {
        /// Which field: "key", "value", "header count", "header N name", …
        field: String,
    },
    /// A header name that is not UTF-8.
    #[error("header {0} name is not UTF-8")]
    HeaderNameNotUtf8(usize),
    /// Bytes left inside the record after its last header.
    #[error("{0} bytes after the last header")]
    TrailingBytes(usize),
    /// Framing: a key, value or header value of 2^32 - 1 bytes or more.
    #[error("{field} of {len} bytes cannot be framed")]
    FieldTooLarge {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// Framing: a header name longer than 65535 bytes.
    #[error("header name of {0} bytes exceeds 65535")]
    HeaderNameTooLong(usize),
}

impl<'a> KafkaRecord<'a> {
    /// Bytes this record takes in a channel, length prefix included.
    pub fn encoded_len(&self) -> usize {
        let opt = |b: Option<&[u8]>| 4 + b.map_or(0, <[u8]>::len);
        LENGTH_PREFIX
            + MIN_RECORD_BODY
            + self.key.map_or(0, <[u8]>::len)
            + self.value.map_or(0, <[u8]>::len)
            + self
                .headers
                .iter()
                .map(|h| 2 + h.name.len() + opt(h.value))
                .sum::<usize>()
    }

    /// Appends the framed record to `out`; on an error nothing is appended.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), KafkaRecordError> {
        let body = self.encoded_len() - LENGTH_PREFIX;
        if body > MAX_RECORD_BODY {
            return Err(KafkaRecordError::TooLarge(body as u64));
        }
        for h in &self.headers {
            if h.name.len() > usize::from(u16::MAX) {
                return Err(KafkaRecordError::HeaderNameTooLong(h.name.len()));
            }
        }
        let count =
            u32::try_from(self.headers.len()).map_err(|_| KafkaRecordError::FieldTooLarge {
                field: "header count",
                len: self.headers.len(),
            })?;
        // Every field is below MAX_RECORD_BODY, so each length fits a u32
        // below NULL_LEN.
        let (ts_type, ts_ms) = self.timestamp.to_wire();
        out.reserve(body + LENGTH_PREFIX);
        out.extend_from_slice(&(body as u32).to_be_bytes());
        out.extend_from_slice(&self.source_offset.to_be_bytes());
        out.push(ts_type);
        out.extend_from_slice(&ts_ms.to_be_bytes());
        push_nullable(out, self.key);
        push_nullable(out, self.value);
        out.extend_from_slice(&count.to_be_bytes());
        for h in &self.headers {
            out.extend_from_slice(&(h.name.len() as u16).to_be_bytes());
            out.extend_from_slice(h.name.as_bytes());
            push_nullable(out, h.value);
        }
        Ok(())
    }

    /// Reads the record at the front of `buf`: `Ok(None)` when `buf` holds
    /// only the start of one (read again with more bytes), else the record
    /// and the bytes it took. An error means the bytes are not a record;
    /// a stream cannot be read past it.
    pub fn parse_prefix(buf: &'a [u8]) -> Result<Option<(Self, usize)>, KafkaRecordError> {
        let Some(prefix) = buf.get(..LENGTH_PREFIX) else {
            return Ok(None);
        };
        let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let body_len = len as usize;
        if body_len < MIN_RECORD_BODY {
            return Err(KafkaRecordError::TooShort(len));
        }
        if body_len > MAX_RECORD_BODY {
            return Err(KafkaRecordError::TooLarge(u64::from(len)));
        }
        let end = LENGTH_PREFIX + body_len;
        let Some(body) = buf.get(LENGTH_PREFIX..end) else {
            return Ok(None);
        };
        Ok(Some((Self::parse_body(body)?, end)))
    }

    /// Reads exactly one record that fills `bytes`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, KafkaRecordError> {
        match Self::parse_prefix(bytes)? {
            Some((record, used)) if used == bytes.len() => Ok(record),
            Some((_, used)) => Err(KafkaRecordError::TrailingBytes(bytes.len() - used)),
            None => Err(KafkaRecordError::Truncated {
                need: bytes.get(..LENGTH_PREFIX).map_or(LENGTH_PREFIX, |p| {
                    LENGTH_PREFIX + u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize
                }),
                have: bytes.len(),
            }),
        }
    }

    fn parse_body(body: &'a [u8]) -> Result<Self, KafkaRecordError> {
        // The caller checked body.len() >= MIN_RECORD_BODY: the fixed
        // fields are present.
        let source_offset = u64::from_be_bytes(array(body, field::OFFSET));
        let timestamp = RecordTimestamp::from_wire(
            body[field::TIMESTAMP_TYPE],
            i64::from_be_bytes(array(body, field::TIMESTAMP_MS)),
        )?;
        let mut cursor = Cursor {
            body,
            at: field::KEY,
        };
        let key = cursor.nullable(|| "key".into())?;
        let value = cursor.nullable(|| "value".into())?;
        let count = cursor.u32(|| "header count".into())? as usize;
        // Each header takes at least 6 bytes: a forged count cannot make
        // the vector larger than the record.
        let mut headers = Vec::with_capacity(count.min(cursor.left() / 6));
        for index in 0..count {
            let name_len = usize::from(cursor.u16(|| format!("header {index} name length"))?);
            let name = cursor.take(name_len, || format!("header {index} name"))?;
            let name = std::str::from_utf8(name)
                .map_err(|_| KafkaRecordError::HeaderNameNotUtf8(index))?;
            let value = cursor.nullable(|| format!("header {index} value"))?;
            headers.push(RecordHeader { name, value });
        }
        if cursor.left() > 0 {
            return Err(KafkaRecordError::TrailingBytes(cursor.left()));
        }
        Ok(KafkaRecord {
            source_offset,
            timestamp,
            key,
            value,
            headers,
        })
    }
}

fn push_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.extend_from_slice(&NULL_LEN.to_be_bytes()),
        Some(b) => {
            out.extend_from_slice(&(b.len() as u32).to_be_bytes());
            out.extend_from_slice(b);
        }
    }
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

/// Reads the variable part of a record body, naming the field that runs
/// past its end.
struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.body.len() - self.at
    }

    fn take(
        &mut self,
        n: usize,
        field: impl FnOnce() -> String,
    ) -> Result<&'a [u8], KafkaRecordError> {
        if n > self.left() {
            return Err(KafkaRecordError::FieldPastEnd { field: field() });
        }
        let bytes = &self.body[self.at..self.at + n];
        self.at += n;
        Ok(bytes)
    }

    fn u16(&mut self, field: impl FnOnce() -> String) -> Result<u16, KafkaRecordError> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: impl FnOnce() -> String) -> Result<u32, KafkaRecordError> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn nullable(
        &mut self,
        field: impl Fn() -> String,
    ) -> Result<Option<&'a [u8]>, KafkaRecordError> {
        match self.u32(&field)? {
            NULL_LEN => Ok(None),
            len => self.take(len as usize, field).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> KafkaRecord<'static> {
        KafkaRecord {
            source_offset: 42,
            timestamp: RecordTimestamp::CreateTime(1_795_000_000_123),
            key: Some(b"k"),
            value: Some(b""),
            headers: vec![
                RecordHeader {
                    name: "trace",
                    value: Some(b"\x00\x01"),
                },
                RecordHeader {
                    name: "",
                    value: None,
                },
            ],
        }
    }

    fn framed(r: &KafkaRecord<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        r.emit(&mut out).expect("frames");
        out
    }

    #[test]
    fn the_layout_is_the_one_protocol_md_gives() {
        let bytes = framed(&sample());
        let mut want = Vec::new();
        want.extend_from_slice(&49u32.to_be_bytes());
        want.extend_from_slice(&42u64.to_be_bytes());
        want.push(1);
        want.extend_from_slice(&1_795_000_000_123i64.to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 1, b'k']); // key "k"
        want.extend_from_slice(&[0, 0, 0, 0]); // empty value
        want.extend_from_slice(&[0, 0, 0, 2]); // two headers
        want.extend_from_slice(&[0, 5]);
        want.extend_from_slice(b"trace");
        want.extend_from_slice(&[0, 0, 0, 2, 0, 1]);
        want.extend_from_slice(&[0, 0, 0xff, 0xff, 0xff, 0xff]); // "" = null
        assert_eq!(bytes, want);
        assert_eq!(bytes.len(), sample().encoded_len());
    }

    #[test]
    fn null_and_empty_stay_apart_and_records_split_from_a_stream() {
        let tombstone = KafkaRecord {
            source_offset: u64::MAX,
            timestamp: RecordTimestamp::NotAvailable,
            key: Some(b""),
            value: None,
            headers: Vec::new(),
        };
        let appended = KafkaRecord {
            timestamp: RecordTimestamp::LogAppendTime(-7),
            key: None,
            ..sample()
        };
        let mut stream = framed(&sample());
        stream.extend(framed(&tombstone));
        stream.extend(framed(&appended));
        let mut got = Vec::new();
        let mut at = 0;
        while let Some((r, used)) = KafkaRecord::parse_prefix(&stream[at..]).expect("valid") {
            got.push(r);
            at += used;
        }
        assert_eq!(at, stream.len());
        assert_eq!(got, vec![sample(), tombstone, appended]);
        // A record cut anywhere reads as "need more", never as an error.
        for cut in 0..stream.len() - 1 {
            let first = sample().encoded_len();
            if cut < first {
                assert_eq!(KafkaRecord::parse_prefix(&stream[..cut]), Ok(None), "{cut}");
            }
        }
    }

    #[test]
    fn every_defect_is_named() {
        let good = framed(&sample());
        let with = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        let cases: Vec<(Vec<u8>, KafkaRecordError)> = vec![
            (with(0, &3u32.to_be_bytes()), KafkaRecordError::TooShort(3)),
            (
                with(0, &u32::MAX.to_be_bytes()),
                KafkaRecordError::TooLarge(u64::from(u32::MAX)),
            ),
            (with(12, &[3]), KafkaRecordError::UnknownTimestampType(3)),
            (
                with(12, &[0]),
                KafkaRecordError::TimestampWithoutType(1_795_000_000_123),
            ),
            (
                with(21, &[0, 0, 1, 0]),
                KafkaRecordError::FieldPastEnd {
                    field: "key".into(),
                },
            ),
            (
                with(30, &[0, 0, 0, 3]),
                KafkaRecordError::FieldPastEnd {
                    field: "header 2 name length".into(),
                },
            ),
            (with(36, &[0xff]), KafkaRecordError::HeaderNameNotUtf8(0)),
            (with(30, &[0, 0, 0, 1]), KafkaRecordError::TrailingBytes(6)),
            (
                good[..good.len() - 1].to_vec(),
                KafkaRecordError::Truncated {
                    need: good.len(),
                    have: good.len() - 1,
                },
            ),
        ];
        for (bytes, want) in cases {
            assert_eq!(KafkaRecord::parse(&bytes), Err(want.clone()), "{want}");
        }
        let mut long = good.clone();
        long.push(0);
        assert_eq!(
            KafkaRecord::parse(&long),
            Err(KafkaRecordError::TrailingBytes(1))
        );
    }

    #[test]
    fn framing_refuses_what_the_format_cannot_hold() {
        let name = "n".repeat(70_000);
        let r = KafkaRecord {
            headers: vec![RecordHeader {
                name: &name,
                value: None,
            }],
            ..sample()
        };
        let mut out = vec![9];
        assert_eq!(
            r.emit(&mut out),
            Err(KafkaRecordError::HeaderNameTooLong(70_000))
        );
        let big = vec![0u8; MAX_RECORD_BODY];
        let r = KafkaRecord {
            value: Some(&big),
            ..sample()
        };
        assert!(matches!(
            r.emit(&mut out),
            Err(KafkaRecordError::TooLarge(_))
        ));
        assert_eq!(out, vec![9], "nothing appended on an error");
    }
}
