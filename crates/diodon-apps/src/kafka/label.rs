//! What names a Kafka topic-partition on the wire and on the far broker:
//! the channel label `kafka:TOPIC/PARTITION@FROM` (the source writes it, the
//! sink reads it; `FROM` is the offset the source consumed on from, so the
//! sink can tell offsets the source partition never held, after compaction
//! or transaction markers, from records the link lost) and the header `diodon-source` = `PARTITION/OFFSET`
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

/// A Kafka channel's topic, partition and starting offset, parsed from
/// its name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChannelLabel {
    /// The source topic.
    pub topic: String,
    /// The source partition.
    pub partition: i32,
    /// The offset from which the source consumed the partition without a
    /// break up to this channel's first record: the partition holds no
    /// record between `from` and that record, and none between two records
    /// of the channel. `None` (a label without `@FROM`) claims nothing.
    pub from: Option<u64>,
}

impl ChannelLabel {
    /// What picks the link of this channel when a sender drives several
    /// (`crate::multilink`): the topic-partition, so that every segment of
    /// a partition takes one link while it is up and the far side
    /// produces them in order.
    pub fn link_key(&self) -> Vec<u8> {
        format!("{}/{}", self.topic, self.partition).into_bytes()
    }

    /// Parses `kafka:TOPIC/PARTITION` or `kafka:TOPIC/PARTITION@FROM`;
    /// `None` for any other name, a topic Kafka would not accept (1–249 of
    /// `A-Z a-z 0-9 . _ -`) or a partition or offset that is not a
    /// non-negative decimal number.
    pub fn parse(name: &str) -> Option<ChannelLabel> {
        let rest = name.strip_prefix(LABEL_PREFIX)?;
        let (topic, tail) = rest.rsplit_once('/')?;
        let (partition, from) = match tail.split_once('@') {
            Some((p, f)) => (p, Some(decimal(f)?)),
            None => (tail, None),
        };
        if !valid_topic(topic) {
            return None;
        }
        Some(ChannelLabel {
            topic: topic.to_owned(),
            partition: i32::try_from(decimal(partition)?).ok()?,
            from,
        })
    }
}

/// A non-empty run of ASCII digits as a number (no sign, no spaces).
fn decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

impl fmt::Display for ChannelLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{LABEL_PREFIX}{}/{}", self.topic, self.partition)?;
        match self.from {
            Some(from) => write!(f, "@{from}"),
            None => Ok(()),
        }
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
        assert_eq!(
            (l.topic.as_str(), l.partition, l.from),
            ("orders.v2_x-y", 11, None)
        );
        assert_eq!(l.to_string(), "kafka:orders.v2_x-y/11");
        let l = ChannelLabel::parse("kafka:t/0@18446744073709551615").unwrap();
        assert_eq!((l.partition, l.from), (0, Some(u64::MAX)));
        assert_eq!(l.to_string(), "kafka:t/0@18446744073709551615");
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
            "kafka:t/1@",
            "kafka:t/@5",
            "kafka:t/1@-5",
            "kafka:t/1@5@6",
            "kafka:t/1@18446744073709551616",
            "kafka:t@1/1",
        ] {
            assert_eq!(ChannelLabel::parse(bad), None, "{bad}");
        }
        assert!(!valid_topic(&"t".repeat(250)));
    }

    proptest::proptest! {
        /// Any channel name from the wire: parsing never panics, and what
        /// parses prints back to the same name.
        #[test]
        fn any_name_parses_or_is_refused_and_round_trips(
            name in "(kafka:)?[a-z._@/0-9-]{0,24}",
        ) {
            if let Some(l) = ChannelLabel::parse(&name) {
                proptest::prop_assert_eq!(ChannelLabel::parse(&l.to_string()), Some(l.clone()));
                proptest::prop_assert!(valid_topic(&l.topic));
            }
        }

        #[test]
        fn any_label_round_trips(
            topic in "[A-Za-z0-9._-]{1,40}",
            partition in 0..=i32::MAX,
            from in proptest::option::of(proptest::num::u64::ANY),
        ) {
            proptest::prop_assume!(topic != "." && topic != "..");
            let l = ChannelLabel { topic, partition, from };
            proptest::prop_assert_eq!(ChannelLabel::parse(&l.to_string()), Some(l));
        }
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
