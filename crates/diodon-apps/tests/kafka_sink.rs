//! The Kafka sink (`diodon_apps::kafka::KafkaSink`) against a real broker
//! (`scripts/kafka.sh` in a namespace): records framed as the source frames
//! them arrive in channels cut at odd byte boundaries and are produced into
//! the prefixed topic, same partition, in order, each with its
//! `diodon-source` header; a second channel overlapping the first produces
//! only what is new, source offsets below a channel's `FROM` that never
//! arrived are a counted gap, a jump inside a channel is an offset without
//! a record (counted apart), a channel
//! cut inside a record fails, and a restarted sink (a new process) reads
//! the far partition's last record and duplicates nothing. Bad input is
//! one clear sentence: an unreachable broker, a far topic that does not
//! exist, a partition it lacks, a far partition holding foreign records.
//! Needs root and namespaces; skips without them, fails under `CI=true`.
//!
//! ```text
//!  emit ─► chunks ─► SinkEvent::Data ─► KafkaSink ─► far-src/1 ─► consume ─► compare
//! ```

use diodon_apps::kafka::label::parse_source_header;
use diodon_apps::kafka::{KafkaSink, KafkaSinkOptions, KafkaSinkStats, SOURCE_HEADER};
use diodon_apps::{ChannelKey, Sink, SinkEvent, Verdict};
use diodon_io::netns;
use diodon_proto::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp};
use diodon_proto::{ChannelId, ChannelKind, ChannelMeta, SessionId};
use diodon_testkit::kafka::{block_on, require_kafka, KafkaBroker};
use diodon_testkit::Namespace;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "far-";

#[test]
fn the_kafka_sink_produces_each_record_once_in_order_and_counts_gaps() {
    if !require_kafka("the_kafka_sink_produces_each_record_once_in_order_and_counts_gaps") {
        return;
    }
    let ns = Namespace::new(&format!("dk-sink-{}", std::process::id()));
    let broker = KafkaBroker::start(&ns, "127.0.0.1:9092".parse().expect("address"));
    let bootstrap = broker.bootstrap().to_string();
    let outcome = netns::spawn_in(ns.name(), move || run(&bootstrap))
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

fn run(bootstrap: &str) -> Result<(), String> {
    create_topic(bootstrap, "far-src", 3)?;
    let opts = KafkaSinkOptions {
        brokers: bootstrap.to_owned(),
        topic_prefix: PREFIX.to_owned(),
        hold_bytes: diodon_apps::kafka::DEFAULT_HOLD_BYTES,
        timeout: Duration::from_secs(30),
    };
    let records = records(170);

    // First run: 0..100, then 50..150 (50 duplicates), then a channel
    // read on from 160 (a gap of 150..=159) holding 160..166 and 167..170
    // (offset 166 held no record: inside a channel, never a gap), then a
    // channel cut inside a record.
    let stats = Arc::new(KafkaSinkStats::default());
    let mut sink = KafkaSink::connect(opts.clone(), Arc::clone(&stats))?;
    let v = deliver(&mut sink, 1, "kafka:src/1", &frame(&records[..100]), 0)?;
    expect_verified(&v, "first channel")?;
    expect_verified(
        &deliver(&mut sink, 2, "kafka:src/1@50", &frame(&records[50..150]), 0)?,
        "second channel",
    )?;
    let mut third = frame(&records[160..166]);
    third.extend_from_slice(&frame(&records[167..170]));
    expect_verified(
        &deliver(&mut sink, 3, "kafka:src/1@160", &third, 0)?,
        "third channel",
    )?;
    let cut = frame(&records[165..168]);
    let v = deliver(&mut sink, 4, "kafka:src/1", &cut[..cut.len() - 3], 0)?;
    if !matches!(&v, Verdict::Failed { reason } if reason.contains("inside a record")) {
        return Err(format!("a channel cut inside a record: {v:?}"));
    }
    let s = stats.snapshot();
    let counted = (
        s.produced,
        s.duplicates,
        s.gaps,
        s.gap_records,
        s.no_record,
        s.failed,
    );
    if counted != (159, 50 + 2, 1, 10, 1, 0) {
        return Err(format!("first run counted {s:?}"));
    }
    drop(sink);

    // A restarted sink: everything again, nothing produced.
    let stats = Arc::new(KafkaSinkStats::default());
    let mut sink = KafkaSink::connect(opts.clone(), Arc::clone(&stats))?;
    expect_verified(
        &deliver(&mut sink, 1, "kafka:src/1", &frame(&records), 0)?,
        "replay",
    )?;
    let s = stats.snapshot();
    if (s.produced, s.duplicates, s.gaps) != (0, 170, 0) {
        return Err(format!("the restarted sink counted {s:?}"));
    }

    // The far partition: 0..150, 160..166 and 167..170, once each, in order.
    let far = read_partition(bootstrap, "far-src", 1)?;
    let want: Vec<u64> = (0..150).chain(160..166).chain(167..170).collect();
    let got: Vec<u64> = far.iter().map(|r| r.0).collect();
    if got != want {
        return Err(format!("far source offsets {got:?}"));
    }
    for (offset, key, value, headers) in &far {
        let r = &records[usize::try_from(*offset).expect("offset")];
        let want_headers: Vec<(String, Option<Vec<u8>>)> = r
            .headers
            .iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .chain([(
                SOURCE_HEADER.to_owned(),
                Some(format!("1/{offset}").into_bytes()),
            )])
            .collect();
        if key != &r.key || value != &r.value || headers != &want_headers {
            return Err(format!("far record of source offset {offset} differs"));
        }
    }

    // Bad input: one sentence each.
    expect_open_error(&mut sink, "kafka:nosuch/0", "far topic far-nosuch")?;
    expect_open_error(&mut sink, "kafka:src/5", "has 3 partitions, no partition 5")?;
    produce_foreign(bootstrap, "far-src", 2)?;
    expect_open_error(&mut sink, "kafka:src/2", "has no diodon-source header")?;
    drop(sink);
    let unreachable = KafkaSinkOptions {
        brokers: "127.0.0.1:1".into(),
        timeout: Duration::from_secs(3),
        ..opts
    };
    match KafkaSink::connect(unreachable, Arc::new(KafkaSinkStats::default())) {
        Err(e) if e.contains("127.0.0.1:1 did not answer") => {}
        Err(e) => return Err(format!("unreachable broker said: {e}")),
        Ok(_) => return Err("an unreachable broker was accepted".into()),
    }
    let datagrams = ChannelMeta {
        kind: ChannelKind::Datagrams,
        ..ChannelMeta::stream("kafka:src/1")
    };
    if KafkaSink::admit(&datagrams).is_ok()
        || KafkaSink::admit(&ChannelMeta::stream("tcp:x")).is_ok()
    {
        return Err("the sink admitted a channel that is not Kafka".into());
    }
    Ok(())
}

/// One source record, owned.
struct Rec {
    offset: u64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<OwnedHeader>,
}

struct OwnedHeader {
    name: String,
    value: Option<Vec<u8>>,
}

/// `n` records, offsets 0.., of sizes from 0 to ~100 KB, some with null
/// keys, values or header values.
fn records(n: u64) -> Vec<Rec> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|offset| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let size = usize::try_from((x >> 33) % if offset % 10 == 0 { 100_000 } else { 2_000 })
                .expect("size");
            let fill = u8::try_from(offset % 251).expect("byte");
            Rec {
                offset,
                key: (offset % 7 != 0).then(|| format!("key-{offset}").into_bytes()),
                value: (offset % 13 != 5).then(|| vec![fill; size]),
                headers: (0..offset % 3)
                    .map(|i| OwnedHeader {
                        name: format!("h{i}"),
                        value: (i != 1).then(|| vec![fill; usize::try_from(i).expect("i")]),
                    })
                    .collect(),
            }
        })
        .collect()
}

fn frame(records: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        KafkaRecord {
            source_offset: r.offset,
            timestamp: RecordTimestamp::CreateTime(
                1_795_000_000_000 + i64::try_from(r.offset).expect("ms"),
            ),
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: r
                .headers
                .iter()
                .map(|h| RecordHeader {
                    name: &h.name,
                    value: h.value.as_deref(),
                })
                .collect(),
        }
        .emit(&mut out)
        .expect("frame");
    }
    out
}

/// One channel through the sink: opened, `bytes` in odd pieces, complete.
fn deliver(
    sink: &mut KafkaSink,
    channel: u32,
    name: &str,
    bytes: &[u8],
    session: u64,
) -> Result<Verdict, String> {
    let key = ChannelKey {
        session: SessionId(session + 1),
        channel: ChannelId(channel),
    };
    let meta = ChannelMeta::stream(name);
    KafkaSink::admit(&meta).map_err(|e| format!("admit {name}: {e}"))?;
    sink.handle(SinkEvent::Opened { key, meta })
        .map_err(|e| format!("open {name}: {e}"))?;
    let mut offset = 0u64;
    for piece in bytes.chunks(7_777) {
        sink.handle(SinkEvent::Data {
            key,
            offset,
            data: piece.to_vec(),
        })
        .map_err(|e| format!("data of {name}: {e}"))?;
        offset += piece.len() as u64;
    }
    let out = sink
        .handle(SinkEvent::Complete {
            key,
            bytes: offset,
            digest: [0; 32],
        })
        .map_err(|e| format!("complete {name}: {e}"))?
        .ok_or_else(|| format!("no outcome for {name}"))?;
    Ok(out.verdict)
}

fn expect_verified(v: &Verdict, what: &str) -> Result<(), String> {
    match v {
        Verdict::Verified { .. } => Ok(()),
        other @ Verdict::Failed { .. } => Err(format!("{what}: {other:?}")),
    }
}

fn expect_open_error(sink: &mut KafkaSink, name: &str, text: &str) -> Result<(), String> {
    let key = ChannelKey {
        session: SessionId(9),
        channel: ChannelId(9),
    };
    match sink.handle(SinkEvent::Opened {
        key,
        meta: ChannelMeta::stream(name),
    }) {
        Err(e) if e.to_string().contains(text) => Ok(()),
        Err(e) => Err(format!("opening {name} said {e}, wanted {text:?}")),
        Ok(_) => Err(format!("opening {name} was accepted")),
    }
}

type FarRecord = (
    u64,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

/// Every record of `topic`/`partition`, by its source header's offset.
#[expect(clippy::disallowed_methods, reason = "the test's own deadline")]
fn read_partition(bootstrap: &str, topic: &str, partition: i32) -> Result<Vec<FarRecord>, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "diodon-sink-test")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let (_, high) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(30))
        .map_err(|e| format!("watermarks: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while i64::try_from(out.len()).expect("count") < high {
        if Instant::now() > deadline {
            return Err(format!("read {} of {high} far records", out.len()));
        }
        let Some(m) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = m.map_err(|e| format!("poll: {e}"))?;
        let headers: Vec<(String, Option<Vec<u8>>)> = m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        let source = headers
            .iter()
            .rfind(|h| h.0 == SOURCE_HEADER)
            .and_then(|h| h.1.as_deref())
            .and_then(parse_source_header)
            .ok_or_else(|| format!("far offset {} has no source header", m.offset()))?;
        out.push((
            source.1,
            m.key().map(<[u8]>::to_vec),
            m.payload().map(<[u8]>::to_vec),
            headers,
        ));
    }
    Ok(out)
}

fn produce_foreign(bootstrap: &str, topic: &str, partition: i32) -> Result<(), String> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    p.send(
        BaseRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .payload(&b"not ours"[..]),
    )
    .map_err(|(e, _)| format!("send: {e}"))?;
    p.flush(Duration::from_secs(30))
        .map_err(|e| format!("flush: {e}"))
}

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("admin: {e}"))?;
    let results = block_on(admin.create_topics(
        &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))
    .map_err(|e| format!("create {topic}: {e}"))?;
    for r in results {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    Ok(())
}
