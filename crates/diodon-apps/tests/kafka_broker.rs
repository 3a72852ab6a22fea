//! A real Kafka broker (`scripts/kafka.sh`, in a namespace) and the client
//! the Kafka source and sink build on (`rdkafka`, ARCHITECTURE.md "The
//! Kafka client"): what the idempotent producer writes comes back to a
//! consumer group exactly as written — key, value (null and empty apart),
//! headers in order with a repeated name, the producer's timestamp, one
//! offset after the other — and the group's committed offset is where a
//! restarted source would resume. The records read are then framed with
//! the wire codec (`diodon_proto::kafka_record`) into one channel's bytes,
//! read back from them and produced into a second topic, which must read
//! the same: the codec keeps everything the client exposes. Needs root and
//! namespaces (the broker runs in one); skips without them, fails under
//! `CI=true`.
//!
//! ```text
//!  produce ─► diodon-smoke ─► group ─► emit ─► channel bytes ─► parse_prefix
//!                                                                   │
//!            compare ◄─ group ◄─ diodon-smoke-far ◄─ idempotent producer
//! ```

use diodon_io::netns;
use diodon_proto::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp};
use diodon_testkit::kafka::{require_kafka, KafkaBroker};
use diodon_testkit::Namespace;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, Timestamp, TopicPartitionList};
use std::time::{Duration, Instant};

const TOPIC: &str = "diodon-smoke";
const FAR_TOPIC: &str = "diodon-smoke-far";
const CREATED_MS: i64 = 1_795_000_000_000;

/// One record as the consumer sees it, owned, for comparison.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    created_ms: Option<i64>,
}

#[test]
fn records_round_trip_through_a_real_broker_with_rdkafka() {
    if !require_kafka("records_round_trip_through_a_real_broker_with_rdkafka") {
        return;
    }
    let ns = Namespace::new(&format!("dk-smoke-{}", std::process::id()));
    let broker = KafkaBroker::start(&ns, "127.0.0.1:9092".parse().expect("address"));
    let bootstrap = broker.bootstrap().to_string();
    // The client's threads start from this thread, inside the namespace.
    let outcome = netns::spawn_in(ns.name(), move || produce_then_consume(&bootstrap))
        .expect("spawn a thread in the namespace")
        .join();
    match outcome {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => panic!("{e}\n--- broker log (tail):\n{}", broker.log_tail()),
        Ok(Err(e)) => panic!("entering the namespace: {e}"),
        Err(panic) => {
            eprintln!("--- broker log (tail):\n{}", broker.log_tail());
            std::panic::resume_unwind(panic)
        }
    }
}

impl Seen {
    fn of(m: &OwnedMessage) -> Seen {
        Seen {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m.headers().map_or_else(Vec::new, |h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            }),
            created_ms: match m.timestamp() {
                Timestamp::CreateTime(ms) => Some(ms),
                Timestamp::LogAppendTime(_) | Timestamp::NotAvailable => None,
            },
        }
    }
}

/// Produces three records, reads them back in a group, commits; carries
/// them through the wire codec into the far topic and reads that.
fn produce_then_consume(bootstrap: &str) -> Result<(), String> {
    produce(bootstrap)?;
    let consumer = group_consumer(bootstrap, "diodon-smoke")?;
    let read = consume(&consumer, TOPIC, 3)?;
    let seen: Vec<Seen> = read.iter().map(Seen::of).collect();
    let want = expected();
    if seen != want {
        return Err(format!("consumed {seen:#?}\nwanted {want:#?}"));
    }
    // The group commits "next to read": a restarted consumer resumes at 3.
    consumer
        .commit_consumer_state(CommitMode::Sync)
        .map_err(|e| format!("commit: {e}"))?;
    let mut partition = TopicPartitionList::new();
    partition.add_partition(TOPIC, 0);
    let committed = consumer
        .committed_offsets(partition, Duration::from_secs(30))
        .map_err(|e| format!("committed offsets: {e}"))?;
    let offset = committed.find_partition(TOPIC, 0).map(|p| p.offset());
    if offset != Some(Offset::Offset(3)) {
        return Err(format!("committed offset {offset:?}, wanted 3"));
    }

    let mut channel = Vec::new();
    for m in &read {
        frame(m, &mut channel)?;
    }
    replay(bootstrap, &channel)?;
    let far = consume(
        &group_consumer(bootstrap, "diodon-smoke-far")?,
        FAR_TOPIC,
        3,
    )?;
    let far: Vec<Seen> = far.iter().map(Seen::of).collect();
    if far != want {
        return Err(format!("far topic read {far:#?}\nwanted {want:#?}"));
    }
    Ok(())
}

fn group_consumer(bootstrap: &str, group: &str) -> Result<BaseConsumer, String> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))
}

/// Appends `m` to a channel's bytes as the Kafka source frames it.
fn frame(m: &OwnedMessage, channel: &mut Vec<u8>) -> Result<(), String> {
    let record = KafkaRecord {
        source_offset: u64::try_from(m.offset()).map_err(|e| format!("offset: {e}"))?,
        timestamp: match m.timestamp() {
            Timestamp::NotAvailable => RecordTimestamp::NotAvailable,
            Timestamp::CreateTime(ms) => RecordTimestamp::CreateTime(ms),
            Timestamp::LogAppendTime(ms) => RecordTimestamp::LogAppendTime(ms),
        },
        key: m.key(),
        value: m.payload(),
        headers: m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| RecordHeader {
                    name: h.key,
                    value: h.value,
                })
                .collect()
        }),
    };
    record
        .emit(channel)
        .map_err(|e| format!("framing offset {}: {e}", m.offset()))
}

/// Reads a channel's bytes back into records and produces each into the
/// far topic, as the Kafka sink does (in order, idempotent producer).
fn replay(bootstrap: &str, channel: &[u8]) -> Result<(), String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .map_err(|e| format!("far producer: {e}"))?;
    let mut at = 0;
    while let Some((record, used)) =
        KafkaRecord::parse_prefix(&channel[at..]).map_err(|e| format!("channel at {at}: {e}"))?
    {
        let headers = record.headers.iter().fold(OwnedHeaders::new(), |h, r| {
            h.insert(Header {
                key: r.name,
                value: r.value,
            })
        });
        let mut out = BaseRecord::<[u8], [u8]>::to(FAR_TOPIC).headers(headers);
        out.key = record.key;
        out.payload = record.value;
        if let RecordTimestamp::CreateTime(ms) = record.timestamp {
            out = out.timestamp(ms);
        }
        producer
            .send(out)
            .map_err(|(e, _)| format!("far send of offset {}: {e}", record.source_offset))?;
        at += used;
    }
    if at != channel.len() {
        return Err(format!("{} bytes left in the channel", channel.len() - at));
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| format!("far flush: {e}"))
}

/// Three records: key, value and headers (a repeated name, an empty and
/// a null value); no key and an empty value; a key and a null value.
fn produce(bootstrap: &str) -> Result<(), String> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "trace",
            value: Some(&b"a"[..]),
        })
        .insert(Header {
            key: "trace",
            value: Some(&b"b"[..]),
        })
        .insert(Header {
            key: "empty",
            value: Some(&b""[..]),
        })
        .insert(Header::<&[u8]> {
            key: "null",
            value: None,
        });
    producer
        .send(
            BaseRecord::to(TOPIC)
                .key(&b"k1"[..])
                .payload(&b"v1"[..])
                .headers(headers)
                .timestamp(CREATED_MS),
        )
        .map_err(|(e, _)| format!("send 1: {e}"))?;
    producer
        .send(
            BaseRecord::<(), [u8]>::to(TOPIC)
                .payload(&b""[..])
                .timestamp(CREATED_MS + 1),
        )
        .map_err(|(e, _)| format!("send 2: {e}"))?;
    producer
        .send(
            BaseRecord::<[u8], ()>::to(TOPIC)
                .key(&b"gone"[..])
                .timestamp(CREATED_MS + 2),
        )
        .map_err(|(e, _)| format!("send 3: {e}"))?;
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| format!("flush: {e}"))
}

/// The first `count` records of `topic` the group's consumer reads,
/// within 60 s.
#[expect(
    clippy::disallowed_methods,
    reason = "the test's own deadline for the consumer"
)]
fn consume(
    consumer: &BaseConsumer,
    topic: &str,
    count: usize,
) -> Result<Vec<OwnedMessage>, String> {
    consumer
        .subscribe(&[topic])
        .map_err(|e| format!("subscribe: {e}"))?;
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen.len() < count {
        if Instant::now() > deadline {
            return Err(format!(
                "60 s and only {} of {count} records of {topic}: {seen:?}",
                seen.len()
            ));
        }
        // None also means "an event that was not a record": poll again.
        let Some(polled) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = polled.map_err(|e| format!("poll: {e}"))?;
        if m.partition() != 0 {
            return Err(format!("record on partition {}", m.partition()));
        }
        seen.push(m.detach());
    }
    Ok(seen)
}

/// What [`produce`] wrote, as a consumer must see it.
fn expected() -> Vec<Seen> {
    vec![
        Seen {
            offset: 0,
            key: Some(b"k1".to_vec()),
            value: Some(b"v1".to_vec()),
            headers: vec![
                ("trace".into(), Some(b"a".to_vec())),
                ("trace".into(), Some(b"b".to_vec())),
                ("empty".into(), Some(Vec::new())),
                ("null".into(), None),
            ],
            created_ms: Some(CREATED_MS),
        },
        Seen {
            offset: 1,
            key: None,
            value: Some(Vec::new()),
            headers: Vec::new(),
            created_ms: Some(CREATED_MS + 1),
        },
        Seen {
            offset: 2,
            key: Some(b"gone".to_vec()),
            value: None,
            headers: Vec::new(),
            created_ms: Some(CREATED_MS + 2),
        },
    ]
}
