//! What names a Kafka topic-partition on the wire and on the far broker:
//! the channel label `kafka:TOPIC/PARTITION` (the source writes it, the
//! sink reads it) and the header `diodon-source` = `PARTITION/OFFSET`
//! that every record produced on the far side carries, so the sink can
//! tell, after a restart, the highest source offset it already produced.

use std::fmt;

/// The prefix of a Kafka channel's name.
pub const LABEL_PREFIX: &str = "kafka:";

/// The header every record produced on the far side carries: its source
/// partition and offset, `PARTITION/OFFSET` in ASCII decimal.
pub const SOURCE_HEADER: &str = "diodon-source";

/// The longest topic name Kafka accepts.
const MAX_TOPIC: usize = 249;

/// A Kafka channel's topic and partition, parsed from its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelLabel {
    /// The source topic.
    pub topic: String,
    /// The source partition.
    pub partition: i32,
}

impl ChannelLabel {
    /// Parses `kafka:TOPIC/PARTITION`; `None` for any other name, a topic
    /// Kafka would not accept (1–249 of `A-Z a-z 0-9 . _ -`) or a partition
    /// that is not a non-negative decimal number.
    pub fn parse(name: &str) -> Option<ChannelLabel> {
        let rest = name.strip_prefix(LABEL_PREFIX)?;
        let (topic, partition) = rest.rsplit_once('/')?;
        if !valid_topic(topic)
            || partition.is_empty()
            || !partition.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let partition = partition.parse::<i32>().ok()?;
        Some(ChannelLabel {
            topic: topic.to_owned(),
            partition,
        })
    }
}

impl fmt::Display for ChannelLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{LABEL_PREFIX}{}/{}", self.topic, self.partition)
    }
}

/// Whether Kafka accepts `topic` as a topic name.
pub fn valid_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= MAX_TOPIC
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The value of the [`SOURCE_HEADER`] of a record from `partition` at
/// `offset`.
pub fn source_header(partition: i32, offset: u64) -> String {
    format!("{partition}/{offset}")
}

/// Reads a [`SOURCE_HEADER`] value back: `(partition, offset)`.
pub fn parse_source_header(value: &[u8]) -> Option<(i32, u64)> {
    let text = std::str::from_utf8(value).ok()?;
    let (p, o) = text.split_once('/')?;
    Some((p.parse().ok()?, o.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_bad_names_are_refused() {
        let l = ChannelLabel::parse("kafka:orders.v2_x-y/11").unwrap();
        assert_eq!((l.topic.as_str(), l.partition), ("orders.v2_x-y", 11));
        assert_eq!(l.to_string(), "kafka:orders.v2_x-y/11");
        for bad in [
            "kafka:/1",
            "kafka:t/",
            "kafka:t/-1",
            "kafka:t/+1",
            "kafka:t/x",
            "kafka:a/b/1",
            "kafka:../1",
            "udp:t/1",
            "kafka:t/99999999999",
        ] {
            assert_eq!(ChannelLabel::parse(bad), None, "{bad}");
        }
        assert!(!valid_topic(&"t".repeat(250)));
    }

    #[test]
    fn the_source_header_reads_back() {
        let v = source_header(3, 18_446_744_073_709_551_000);
        assert_eq!(
            parse_source_header(v.as_bytes()),
            Some((3, 18_446_744_073_709_551_000))
        );
        assert_eq!(parse_source_header(b"3-4"), None);
        assert_eq!(parse_source_header(b"\xff/1"), None);
    }
}
