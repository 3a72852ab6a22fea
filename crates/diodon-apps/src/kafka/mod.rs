//! Kafka across the diode (issue 22): each topic-partition of the source
//! cluster travels in channels of its own, named `kafka:TOPIC/PARTITION`,
//! whose bytes are Kafka records framed by `diodon_proto::kafka_record`
//! (PROTOCOL.md § 5.7); the receiving side produces them again into the
//! same topic name (an optional prefix) and the same partition number.
//!
//! ```text
//!  sending side (send --kafka):
//!  group consumer ─► record of P ─► segment channel kafka:T/P (emit) ─► sender core ══► link
//!        ▲                                                                  │ on_sent
//!        └──────────── commit offset after the last segment sent ◄──────────┘
//!
//!  receiving side (recv --kafka):
//!  decoder ─SinkEvent─► KafkaSink ─ parse_prefix ─► dedup by source offset ─► idempotent producer
//!                        (per channel:           (per target partition:       (topic = prefix + topic,
//!                         partial record kept)    skip ≤ highest produced,     same partition,
//!                                                 gap counted + logged)        header diodon-source)
//! ```
//!
//! This module owns the Kafka side of Diodon and nothing of the protocol:
//! [`label`] (the channel name and the source header, one place),
//! [`source`] (the sending side's consumer group, segments, commits once
//! sent), [`sink`] (the receiving side's producer). The Kafka client is
//! `rdkafka` (ARCHITECTURE.md, "The Kafka client").

pub mod label;
pub mod sink;
pub mod source;

pub use label::{ChannelLabel, SOURCE_HEADER};
pub use sink::{
    KafkaSink, KafkaSinkCounters, KafkaSinkOptions, KafkaSinkStats, DEFAULT_HOLD_BYTES,
};
pub use source::{KafkaSource, KafkaSourceCounters, KafkaSourceOptions, KafkaSourceStats};
