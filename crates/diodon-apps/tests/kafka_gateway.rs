//! A Kafka topic across the one-way pipelines, in process: the Kafka
//! source (`SendInput::Kafka`) consumes topic `src` (3 partitions) of a
//! real broker as a group, the sender carries its segments over loopback
//! UDP to the receiver, whose Kafka sink (`RecvOutput::Kafka`) produces
//! them into `far-src` of the same broker. The far topic must hold exactly
//! the source's records per partition, in order, once each; the group's
//! committed offsets must be at the end (commits once sent); a second
//! sender run in the same group carries only the new records, and nothing
//! is duplicated. A second test sinks into a broker of its own and stops
//! it for 10 s mid-stream: the records wait in the sink's producer and
//! arrive once each when it is back. A third carries a topic written in
//! transactions (each commit marker, and an aborted transaction, leave
//! offsets without a record) in two passes: no gap may be counted, every
//! offset without a record is counted as such, every second copy is
//! skipped. Others stop the far broker past the sink's hold (a stall said,
//! exactly the lost offsets counted as gaps), stop the near broker for 5 s
//! (the sender goes on), and run two senders of one group over two links
//! (the partitions split and handed over, no record twice). Needs root and
//! namespaces; skips without them, fails under `CI=true`. (The lossy diode with two brokers
//! is the binary's test.)
//!
//! ```text
//!  produce ─► src/0..2 ─► run_send(Kafka) ══UDP 127.0.0.1══► run_recv(Kafka) ─► far-src/0..2 ─► compare
//! ```

use diodon_apps::gateway::{run_recv, run_send, RecvJob, RecvOutput, SendInput, SendJob};
use diodon_apps::kafka::{KafkaSinkOptions, KafkaSourceOptions, DEFAULT_HOLD_BYTES, SOURCE_HEADER};
use diodon_apps::{RecvOptions, SendOptions};
use diodon_io::{netns, UdpConfig};
use diodon_proto::{Rate, ReceiverConfig, SenderConfig};
use diodon_testkit::kafka::{block_on, require_kafka, KafkaBroker};
use diodon_testkit::Namespace;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 3;
const PORT: u16 = 47_611;

#[test]
fn a_topic_crosses_the_pipelines_once_per_record_and_resumes_after_a_restart() {
    with_one_broker(
        "a_topic_crosses_the_pipelines_once_per_record_and_resumes_after_a_restart",
        "dk-gw",
        run,
    );
}

#[test]
fn a_transactional_topic_crosses_in_two_passes_without_a_false_gap() {
    with_one_broker(
        "a_transactional_topic_crosses_in_two_passes_without_a_false_gap",
        "dk-txn",
        run_transactional,
    );
}

#[test]
fn the_far_broker_down_past_the_hold_loses_only_counted_offsets() {
    if !require_kafka("the_far_broker_down_past_the_hold_loses_only_counted_offsets") {
        return;
    }
    with_two_brokers("dk-hold", Broker::Far, run_past_hold);
}

#[test]
fn the_near_broker_restarting_mid_stream_stops_nothing() {
    if !require_kafka("the_near_broker_restarting_mid_stream_stops_nothing") {
        return;
    }
    with_two_brokers("dk-near", Broker::Near, run_near_restart);
}

/// 600 records flow, the near (source) broker stops for 5 s and comes
/// back, 600 more are produced: the sender must go on (its consumer
/// reconnects; refused commits are covered by later ones), and the far
/// topic must hold all 1,200 once each, in order.
fn run_near_restart(
    near: &str,
    far: &str,
    near_broker: &std::sync::Mutex<KafkaBroker>,
) -> Result<(), String> {
    create_topics(near, &["src"])?;
    create_topics(far, &["far-src"])?;
    produce(near, 0, 600)?;
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(
        far,
        (Duration::from_secs(60), DEFAULT_HOLD_BYTES),
        &recv_stop,
    );
    let send_stop = Arc::new(AtomicBool::new(false));
    let sender = start_sender(near, "diodon-near", (1, 256 << 10), &send_stop);
    wait_far(far, 600, 60)?;
    near_broker.lock().map_err(|_| "lock")?.stop();
    std::thread::sleep(Duration::from_secs(5));
    near_broker.lock().map_err(|_| "lock")?.start_again();
    if sender.is_finished() {
        let s = sender.join().map_err(|_| "sender panicked".to_string())?;
        return Err(format!(
            "the sender ended while the near broker was away: {s:?}"
        ));
    }
    produce(near, 600, 1_200)?;
    wait_far(far, 1_200, 120)?;
    send_stop.store(true, Ordering::Relaxed);
    let sent = sender.join().map_err(|_| "sender panicked".to_string())??;
    recv_stop.store(true, Ordering::Relaxed);
    let got = receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())??;
    let source = sent
        .kafka
        .ok_or("the sender's summary has no Kafka counters")?;
    let k = got
        .kafka
        .ok_or("the receiver's summary has no Kafka counters")?;
    eprintln!("source: {source:?}\nsink: {k:?}");
    if source.consume_errors == 0 {
        return Err(format!(
            "the consumer reported no error while its broker was away: {source:?}"
        ));
    }
    if (k.produced, k.failed, k.gaps) != (1_200, 0, 0) {
        return Err(format!(
            "sink counters {k:?}: want 1,200 produced, no failure, no gap"
        ));
    }
    compare(near, far)
}

#[test]
fn two_senders_in_one_group_split_the_partitions_over_two_links() {
    with_one_broker(
        "two_senders_in_one_group_split_the_partitions_over_two_links",
        "dk-two",
        run_two_links,
    );
}

/// Sender A carries `src` alone over link A; sender B joins its group
/// over link B mid-stream, and records keep coming for 10 s. Segments
/// last 3 s, so A holds open segments when the group rebalances. The
/// group splits the partitions; A hands over what it gives up (its
/// segments of those partitions ended, sent and committed before B
/// starts), so neither
/// receiver skips a record, both senders carry records, and the far topic
/// holds every record once, in order.
#[expect(clippy::disallowed_methods, reason = "the test's own deadlines")]
fn run_two_links(bootstrap: &str) -> Result<(), String> {
    create_topics(bootstrap, &["src", "far-src"])?;
    produce(bootstrap, 0, 600)?;
    let hold = (Duration::from_secs(30), DEFAULT_HOLD_BYTES);
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receivers = [
        start_receiver_on(PORT + 2, bootstrap, hold, &recv_stop),
        start_receiver_on(PORT + 3, bootstrap, hold, &recv_stop),
    ];
    let send_stop = Arc::new(AtomicBool::new(false));
    let a = start_sender_to(
        PORT + 2,
        bootstrap,
        "diodon-two",
        (1, 1 << 20, 3_000),
        &send_stop,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while far_count(bootstrap)? < 200 {
        if Instant::now() > deadline {
            return Err("60 s and sender A carried fewer than 200 records".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let b = start_sender_to(
        PORT + 3,
        bootstrap,
        "diodon-two",
        (1, 1 << 20, 3_000),
        &send_stop,
    );
    // A live topic: 1,200 more records over 10 s, while the group rebalances.
    for batch in 0..10 {
        produce(bootstrap, 600 + batch * 120, 600 + (batch + 1) * 120)?;
        std::thread::sleep(Duration::from_secs(1));
    }
    let total = 1_800;
    let deadline = Instant::now() + Duration::from_secs(60);
    while far_count(bootstrap)? < total {
        if Instant::now() > deadline {
            return Err(format!(
                "60 s and the far topic holds {} of {total}",
                far_count(bootstrap)?
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    send_stop.store(true, Ordering::Relaxed);
    let mut carried = Vec::new();
    for s in [a, b] {
        let s = s.join().map_err(|_| "sender panicked".to_string())??;
        carried.push(s.kafka.ok_or("a sender's summary has no Kafka counters")?);
    }
    recv_stop.store(true, Ordering::Relaxed);
    let mut sinks = Vec::new();
    for r in receivers {
        let r = r.join().map_err(|_| "receiver panicked".to_string())??;
        sinks.push(
            r.kafka
                .ok_or("a receiver's summary has no Kafka counters")?,
        );
    }
    eprintln!("senders: {carried:?}\nreceivers: {sinks:?}");
    if carried.iter().any(|c| c.records == 0) {
        return Err(format!("a sender carried nothing: {carried:?}"));
    }
    let produced: u64 = sinks.iter().map(|k| k.produced).sum();
    let skipped: u64 = sinks.iter().map(|k| k.duplicates).sum();
    if produced != total as u64 || skipped != 0 || sinks.iter().any(|k| k.failed != 0) {
        return Err(format!(
            "receivers {sinks:?}: want {total} records produced between them, none skipped \
             (a clean hand-over sends nothing twice), no failure"
        ));
    }
    compare(bootstrap, bootstrap)
}

#[test]
fn one_sender_spreads_the_partitions_over_two_links() {
    with_one_broker(
        "one_sender_spreads_the_partitions_over_two_links",
        "dk-ml",
        run_one_sender_two_links,
    );
}

/// One sender, `--to` twice: the partitions spread evenly over both
/// links (two and one, whatever their hashes), each link its own session
/// and receiver, both receivers producing into one far topic. Every record
/// arrives once, in order.
fn run_one_sender_two_links(bootstrap: &str) -> Result<(), String> {
    create_topics(bootstrap, &["src", "far-src"])?;
    produce(bootstrap, 0, 900)?;
    let hold = (Duration::from_secs(30), DEFAULT_HOLD_BYTES);
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receivers = [
        start_receiver_on(PORT + 4, bootstrap, hold, &recv_stop),
        start_receiver_on(PORT + 5, bootstrap, hold, &recv_stop),
    ];
    let send_stop = Arc::new(AtomicBool::new(false));
    let (brokers, stop) = (bootstrap.to_owned(), Arc::clone(&send_stop));
    let sender = std::thread::spawn(move || {
        let second = send_options(PORT + 5);
        run_send(
            SendJob {
                opts: send_options(PORT + 4),
                input: SendInput::Kafka(KafkaSourceOptions {
                    brokers,
                    topic: "src".into(),
                    group: "diodon-ml".into(),
                    segment_bytes: 256 << 10,
                    segment_age: Duration::from_millis(300),
                    passes: 1,
                    timeout: Duration::from_secs(30),
                }),
                metrics: None,
                stop,
                more_links: vec![diodon_apps::gateway::LinkTarget {
                    dest: second.dest,
                    udp: second.udp,
                    config: second.config,
                }],
            },
            |_| {},
        )
        .map_err(|e| e.to_string())
    });
    wait_far(bootstrap, 900, 60)?;
    std::thread::sleep(Duration::from_secs(1));
    send_stop.store(true, Ordering::Relaxed);
    let sent = sender.join().map_err(|_| "sender panicked".to_string())??;
    recv_stop.store(true, Ordering::Relaxed);
    let mut sinks = Vec::new();
    for r in receivers {
        let r = r.join().map_err(|_| "receiver panicked".to_string())??;
        sinks.push(
            r.kafka
                .ok_or("a receiver's summary has no Kafka counters")?,
        );
    }
    eprintln!(
        "links: {:?}
receivers: {sinks:?}",
        sent.links
    );
    if sent.links.len() != 2 || sent.links.iter().any(|l| l.bytes == 0) {
        return Err(format!("both links carry segments: {:?}", sent.links));
    }
    // Three partitions of 300 records each: two on one link, one on the
    // other, whatever their hashes.
    let mut split: Vec<u64> = sinks.iter().map(|k| k.produced).collect();
    split.sort_unstable();
    if split != [300, 600] {
        return Err(format!(
            "the partitions split 2 : 1 over the links (600 and 300 records): {sinks:?}"
        ));
    }
    let produced: u64 = sinks.iter().map(|k| k.produced).sum();
    let gaps: u64 = sinks.iter().map(|k| k.gaps).sum();
    if produced != 900 || gaps != 0 || sinks.iter().any(|k| k.failed != 0) {
        return Err(format!(
            "receivers {sinks:?}: want 900 records produced between them, no gap, no failure"
        ));
    }
    compare(bootstrap, bootstrap)
}

/// Records of the bulk phase of [`run_past_hold`], 25 KB each.
const BULK: u32 = 8_000;

/// A receiver holding at most 1 MiB for the far brokers: 300 records
/// flow, the far broker stops, 200 MB are carried while it is down (far
/// more than the hold and the socket and queue buffers), it comes back
/// 12 s later; once the receiver caught up, 30 more records follow. The sink must have said that it
/// stalled, every far record must be the source's record at its offset,
/// in order, once, and the source records missing on the far side must be
/// exactly the offsets the sink counted as gaps.
#[expect(clippy::disallowed_methods, reason = "the test's own deadlines")]
fn run_past_hold(
    near: &str,
    far: &str,
    far_broker: &std::sync::Mutex<KafkaBroker>,
) -> Result<(), String> {
    create_topics(near, &["src"])?;
    create_topics(far, &["far-src"])?;
    produce(near, 0, 300)?;
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(far, (Duration::from_secs(60), 1 << 20), &recv_stop);
    let send_stop = Arc::new(AtomicBool::new(false));
    let sender = start_sender(near, "diodon-hold", (1, 256 << 10), &send_stop);
    wait_far(far, 300, 60)?;
    far_broker.lock().map_err(|_| "lock")?.stop();
    let down = Instant::now();
    produce_bulk(near, 300, BULK)?;
    std::thread::sleep(Duration::from_secs(12).saturating_sub(down.elapsed()));
    far_broker.lock().map_err(|_| "lock")?.start_again();
    // The receiver catches up with what the link kept (the far topic is
    // quiet for 10 s). Then a tail of 30 records shows the sink where
    // every partition stands: once each partition's last record is on the
    // far side, everything before it was produced or counted. (A tail the
    // link lost whole would show nothing: no later record reveals it.)
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut since) = (usize::MAX, Instant::now());
    while since.elapsed() < Duration::from_secs(10) {
        let have = far_count(far).unwrap_or(0);
        if have != last {
            (last, since) = (have, Instant::now());
        }
        if Instant::now() > deadline {
            return Err("the far topic did not settle within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let total = 300 + BULK + 30;
    produce(near, 300 + BULK, total)?;
    let deadline = Instant::now() + Duration::from_secs(150);
    for p in 0..PARTITIONS {
        let last = u64::try_from(count_in(total, p) - 1).expect("offset");
        while far_last_source_offset(far, p)? != Some(last) {
            if Instant::now() > deadline {
                return Err(format!("150 s and far {p} lacks source offset {last}"));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let far_total = far_count(far)?;
    send_stop.store(true, Ordering::Relaxed);
    sender.join().map_err(|_| "sender panicked".to_string())??;
    recv_stop.store(true, Ordering::Relaxed);
    let got = receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())??;
    let k = got
        .kafka
        .ok_or("the receiver's summary has no Kafka counters")?;
    eprintln!("sink: {k:?}; {far_total} of {total} records on the far side");
    let mut far_seen = 0;
    for p in 0..PARTITIONS {
        let src = read_records(near, "src", p, count_in(total, p))?;
        let far_part = read_partition(far, "far-src", p)?;
        let mut at = 0;
        for (i, (fk, fv, fh)) in far_part.iter().enumerate() {
            let mut fh = fh.clone();
            let header = fh.pop().and_then(|(_, v)| v).unwrap_or_default();
            let (_, offset) = diodon_apps::kafka::label::parse_source_header(&header)
                .ok_or(format!("far {p}/{i}: no source header"))?;
            // The source records are in offset order: find this one after
            // the previous match (in order, once each).
            while at < src.len() && src[at].0 < offset {
                at += 1;
            }
            match src.get(at) {
                Some((o, (k, v, h))) if *o == offset && (k, v, &fh) == (fk, fv, h) => at += 1,
                _ => {
                    return Err(format!(
                        "far {p}/{i} (source offset {offset}) is no source record in order"
                    ))
                }
            }
        }
        far_seen += far_part.len();
    }
    let missing = u64::try_from(total as usize - far_seen).expect("count");
    if far_seen != far_total || k.failed != 0 || k.stalls == 0 || k.gaps == 0 {
        return Err(format!(
            "sink {k:?}: want a stall reported, gaps, no failure; far side read {far_seen} of {far_total}"
        ));
    }
    if k.gap_records != missing {
        return Err(format!(
            "{missing} source records never reached the far side, the sink counted {} offsets in gaps",
            k.gap_records
        ));
    }
    Ok(())
}

/// The source offset (header) of the last record of `far-src`/`p`.
#[expect(clippy::disallowed_methods, reason = "the test's own deadline")]
fn far_last_source_offset(bootstrap: &str, p: i32) -> Result<Option<u64>, String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "diodon-gw-check")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let Ok((_, high)) = c.fetch_watermarks("far-src", p, Duration::from_secs(10)) else {
        return Ok(None);
    };
    if high == 0 {
        return Ok(None);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset("far-src", p, Offset::Offset(high - 1))
        .map_err(|e| e.to_string())?;
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(Ok(m)) = c.poll(Duration::from_millis(500)) {
            let source = m.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == SOURCE_HEADER)
                    .and_then(|h| h.value)
                    .and_then(diodon_apps::kafka::label::parse_source_header)
            });
            return Ok(source.map(|(_, o)| o));
        }
    }
    Ok(None)
}

/// Records `from..from + n` into `src` (partition `i % 3`), 25 KB each.
fn produce_bulk(bootstrap: &str, from: u32, n: u32) -> Result<(), String> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    for i in from..from + n {
        let value = vec![u8::try_from(i % 251).expect("byte"); 25_000];
        let key = format!("k{i}");
        let partition = i32::try_from(i).expect("i") % PARTITIONS;
        let mut rec = BaseRecord::to("src")
            .partition(partition)
            .key(key.as_bytes())
            .payload(&value)
            .headers(OwnedHeaders::new().insert(Header {
                key: "n",
                value: Some(key.as_bytes()),
            }));
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    p.poll(Duration::from_millis(50));
                }
            }
        }
    }
    p.flush(Duration::from_secs(60))
        .map_err(|e| format!("flush: {e}"))
}

/// Records of `0..total` that `produce`/`produce_bulk` put in partition `p`.
fn count_in(total: u32, p: i32) -> usize {
    (0..total)
        .filter(|i| i32::try_from(*i).expect("i") % PARTITIONS == p)
        .count()
}

/// Visible records per partition of the transactional run.
const TXN_RECORDS: usize = 300;

/// 900 records in committed transactions of 12 (4 per partition) and one
/// aborted transaction in the middle, carried in two passes with small
/// segments (many begin right after a commit marker, so their label's
/// `FROM` must cover it): the far topic holds the committed records once each, in
/// order, with their source offsets; the sink counts no gap and exactly
/// the source's offsets without a record between records as such; every
/// record's second copy was skipped; the group committed each partition
/// up to its last record.
#[expect(clippy::disallowed_methods, reason = "the test's own deadlines")]
fn run_transactional(bootstrap: &str) -> Result<(), String> {
    create_topics(bootstrap, &["src", "far-src"])?;
    produce_transactions(bootstrap)?;
    let total = TXN_RECORDS * usize::try_from(PARTITIONS).expect("partitions");
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(
        bootstrap,
        (Duration::from_secs(30), DEFAULT_HOLD_BYTES),
        &recv_stop,
    );
    let send_stop = Arc::new(AtomicBool::new(false));
    let sender = start_sender(bootstrap, "diodon-txn", (2, 16 << 10), &send_stop);
    let deadline = Instant::now() + Duration::from_secs(60);
    while far_count(bootstrap)? < total {
        if Instant::now() > deadline || sender.is_finished() {
            send_stop.store(true, Ordering::Relaxed);
            let s = sender.join().map_err(|_| "sender panicked".to_string())?;
            return Err(format!(
                "the far topic holds {} of {total}; sender: {s:?}",
                far_count(bootstrap)?
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Let the second copies of the last segments arrive.
    std::thread::sleep(Duration::from_secs(2));
    send_stop.store(true, Ordering::Relaxed);
    let sent = sender.join().map_err(|_| "sender panicked".to_string())??;
    recv_stop.store(true, Ordering::Relaxed);
    let got = receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())??;
    let source = sent
        .kafka
        .ok_or("the sender's summary has no Kafka counters")?;
    let sink = got
        .kafka
        .ok_or("the receiver's summary has no Kafka counters")?;
    eprintln!("source: {source:?}\nsink: {sink:?}");
    let mut without_record = 0;
    let mut ends = Vec::new();
    for p in 0..PARTITIONS {
        let src = read_records(bootstrap, "src", p, TXN_RECORDS)?;
        let far = read_records(bootstrap, "far-src", p, TXN_RECORDS)?;
        for (i, ((offset, (k, v, h)), (_, (fk, fv, fh)))) in src.iter().zip(&far).enumerate() {
            let mut fh = fh.clone();
            let header = fh.pop();
            let want = Some((
                SOURCE_HEADER.to_owned(),
                Some(format!("{p}/{offset}").into_bytes()),
            ));
            if header != want || (k, v, h) != (fk, fv, &fh) {
                return Err(format!(
                    "partition {p} record {i} (source offset {offset}) differs on the far side"
                ));
            }
        }
        let last = src.last().map_or(0, |(o, _)| *o);
        without_record += last + 1 - u64::try_from(src.len()).expect("count");
        ends.push(i64::try_from(last + 1).expect("offset"));
    }
    let committed = committed_of(bootstrap, "diodon-txn")?;
    let want_sink = (
        total as u64,
        total as u64,
        0,
        0,
        total as u64,
        without_record,
    );
    let have_sink = (
        sink.produced,
        sink.delivered,
        sink.failed,
        sink.gaps,
        sink.duplicates,
        sink.no_record,
    );
    if have_sink != want_sink {
        return Err(format!(
            "sink (produced, acknowledged, failed, gaps, skipped, offsets without a record) = \
             {have_sink:?}, want {want_sink:?}"
        ));
    }
    if source.repeats != source.segments || source.segments < 60 || source.unsent != 0 {
        return Err(format!(
            "source: {source:?}: want as many repeated copies as segments (several per partition)"
        ));
    }
    if committed != ends {
        return Err(format!(
            "committed offsets {committed:?}, the partitions' last records end at {ends:?}"
        ));
    }
    Ok(())
}

/// Records into `src` in transactions: 12 per committed transaction (4 per
/// partition, each partition's records then one commit marker), one
/// aborted transaction of 6 after the 40th; `TXN_RECORDS` committed per
/// partition.
fn produce_transactions(bootstrap: &str) -> Result<(), String> {
    let t = Duration::from_secs(30);
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("transactional.id", "diodon-test-txn")
        .create()
        .map_err(|e| format!("transactional producer: {e}"))?;
    p.init_transactions(t)
        .map_err(|e| format!("init transactions: {e}"))?;
    let send = |i: usize, aborted: bool| -> Result<(), String> {
        let size = if i.is_multiple_of(97) {
            100_000
        } else {
            10 + (i * 37) % 3_000
        };
        let value = vec![u8::try_from(i % 251).expect("byte"); size];
        let key = format!("{}{i}", if aborted { "aborted" } else { "k" });
        let partition = i32::try_from(i).expect("i") % PARTITIONS;
        let rec = BaseRecord::to("src")
            .partition(partition)
            .key(key.as_bytes())
            .payload(&value)
            .headers(OwnedHeaders::new().insert(Header {
                key: "n",
                value: Some(key.as_bytes()),
            }));
        p.send(rec).map_err(|(e, _)| format!("send {i}: {e}"))
    };
    let per_txn = 12;
    let committed = TXN_RECORDS * usize::try_from(PARTITIONS).expect("partitions");
    for txn in 0..committed / per_txn {
        p.begin_transaction().map_err(|e| format!("begin: {e}"))?;
        for i in txn * per_txn..(txn + 1) * per_txn {
            send(i, false)?;
        }
        p.commit_transaction(t)
            .map_err(|e| format!("commit: {e}"))?;
        if txn == 40 {
            p.begin_transaction().map_err(|e| format!("begin: {e}"))?;
            for i in 0..6 {
                send(i, true)?;
            }
            p.flush(t).map_err(|e| format!("flush: {e}"))?;
            p.abort_transaction(t).map_err(|e| format!("abort: {e}"))?;
        }
    }
    Ok(())
}

/// The first `n` records of `topic`/`partition` a committed-only consumer
/// reads, with their offsets.
#[expect(clippy::disallowed_methods, reason = "the test's own deadline")]
fn read_records(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    n: usize,
) -> Result<Vec<(u64, Rec)>, String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "diodon-gw-check")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.len() < n {
        if Instant::now() > deadline {
            return Err(format!(
                "read {} of {n} records of {topic}/{partition}",
                out.len()
            ));
        }
        let Some(m) = c.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = m.map_err(|e| format!("poll: {e}"))?;
        let headers = m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        out.push((
            u64::try_from(m.offset()).map_err(|e| e.to_string())?,
            (
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                headers,
            ),
        ));
    }
    Ok(out)
}

/// Which broker of [`with_two_brokers`] the test stops and starts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Broker {
    Near,
    Far,
}

/// A namespace (`prefix`-PID) with one broker (`127.0.0.1:9092`), both
/// sides' topics on it; `run(bootstrap)` runs inside it, and a failure
/// shows the broker's log tail. Skips (or fails under `CI=true`) without
/// Kafka.
fn with_one_broker(test: &str, prefix: &str, run: fn(&str) -> Result<(), String>) {
    if !require_kafka(test) {
        return;
    }
    let ns = Namespace::new(&format!("{prefix}-{}", std::process::id()));
    let broker = KafkaBroker::start(&ns, "127.0.0.1:9092".parse().expect("address"));
    let bootstrap = broker.bootstrap().to_string();
    in_namespace(&ns, move || run(&bootstrap), "broker", || broker.log_tail());
}

/// A namespace with a near broker (`127.0.0.1:9092`) and a far one
/// (`:9192`); `run(near, far, broker)` runs inside it with `which` broker
/// in its hands (to stop and start), whose log tail a failure shows.
fn with_two_brokers(
    prefix: &str,
    which: Broker,
    run: fn(&str, &str, &std::sync::Mutex<KafkaBroker>) -> Result<(), String>,
) {
    let ns = Namespace::new(&format!("{prefix}-{}", std::process::id()));
    let near = KafkaBroker::start(&ns, "127.0.0.1:9092".parse().expect("address"));
    let far = KafkaBroker::start(&ns, "127.0.0.1:9192".parse().expect("address"));
    let (near_at, far_at) = (near.bootstrap().to_string(), far.bootstrap().to_string());
    let (held, other) = match which {
        Broker::Near => (near, far),
        Broker::Far => (far, near),
    };
    let held = Arc::new(std::sync::Mutex::new(held));
    let held_in = Arc::clone(&held);
    let what = if which == Broker::Near {
        "near broker"
    } else {
        "far broker"
    };
    in_namespace(
        &ns,
        move || run(&near_at, &far_at, &held_in),
        what,
        || held.lock().map(|b| b.log_tail()).unwrap_or_default(),
    );
    drop(other);
}

/// Runs `test` on a thread inside `ns` (where the brokers listen); a
/// failure panics with its sentence and the tail of the broker's log
/// (`what`: which broker).
fn in_namespace(
    ns: &Namespace,
    test: impl FnOnce() -> Result<(), String> + Send + 'static,
    what: &str,
    log_tail: impl Fn() -> String,
) {
    match netns::spawn_in(ns.name(), test)
        .expect("spawn a thread in the namespace")
        .join()
    {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => panic!("{e}\n--- {what} log (tail):\n{}", log_tail()),
        Ok(Err(e)) => panic!("entering the namespace: {e}"),
        Err(panic) => {
            eprintln!("--- {what} log (tail):\n{}", log_tail());
            std::panic::resume_unwind(panic)
        }
    }
}

/// Waits until `far-src` on `far` holds at least `n` records, `secs` at most.
#[expect(clippy::disallowed_methods, reason = "the test's own deadline")]
fn wait_far(far: &str, n: usize, secs: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let have = far_count(far).unwrap_or(0);
        if have >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{secs} s and the far topic holds {have} of {n}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

type Rec = (
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(String, Option<Vec<u8>>)>,
);

#[expect(clippy::disallowed_methods, reason = "the test's own deadlines")]
fn run(bootstrap: &str) -> Result<(), String> {
    create_topics(bootstrap, &["src", "far-src"])?;
    produce(bootstrap, 0, 600)?;

    let recv_stop = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(
        bootstrap,
        (Duration::from_secs(30), DEFAULT_HOLD_BYTES),
        &recv_stop,
    );

    for (run, total) in [(1, 600), (2, 900)] {
        if run == 2 {
            produce(bootstrap, 600, 900)?;
        }
        let send_stop = Arc::new(AtomicBool::new(false));
        let sender = start_sender(bootstrap, "diodon-gw", (1, 256 << 10), &send_stop);
        let deadline = Instant::now() + Duration::from_secs(60);
        while far_count(bootstrap)? < total {
            if Instant::now() > deadline || sender.is_finished() {
                send_stop.store(true, Ordering::Relaxed);
                let s = sender.join().map_err(|_| "sender panicked".to_string())?;
                return Err(format!(
                    "run {run}: far topic holds {} of {total}; sender: {s:?}",
                    far_count(bootstrap)?
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        send_stop.store(true, Ordering::Relaxed);
        let summary = sender.join().map_err(|_| "sender panicked".to_string())??;
        if summary.exit() != diodon_apps::report::Exit::Success {
            return Err(format!("run {run}: sender summary {}", summary.text()));
        }
        let committed = committed(bootstrap)?;
        if committed.iter().sum::<i64>() != i64::try_from(total).expect("total") {
            return Err(format!(
                "run {run}: committed offsets {committed:?}, {total} records"
            ));
        }
    }
    recv_stop.store(true, Ordering::Relaxed);
    receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())??;

    compare(bootstrap, bootstrap)
}

#[test]
fn the_far_broker_down_for_10_s_delays_records_and_loses_or_repeats_none() {
    if !require_kafka("the_far_broker_down_for_10_s_delays_records_and_loses_or_repeats_none") {
        return;
    }
    with_two_brokers("dk-down", Broker::Far, run_far_down);
}

/// 600 records flow, the far broker stops, 600 more are produced at the
/// source and carried while it is down, it comes back 10 s later: the far
/// topic must hold all 1,200 once each, in order, and the sink's summary
/// must count no failure and no gap.
#[expect(clippy::disallowed_methods, reason = "the test's own deadlines")]
fn run_far_down(
    near: &str,
    far: &str,
    far_broker: &std::sync::Mutex<KafkaBroker>,
) -> Result<(), String> {
    create_topics(near, &["src"])?;
    create_topics(far, &["far-src"])?;
    produce(near, 0, 600)?;
    let recv_stop = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(
        far,
        (Duration::from_secs(60), DEFAULT_HOLD_BYTES),
        &recv_stop,
    );
    let send_stop = Arc::new(AtomicBool::new(false));
    let sender = start_sender(near, "diodon-down", (1, 256 << 10), &send_stop);
    wait_far(far, 100, 60)?;
    far_broker.lock().map_err(|_| "lock")?.stop();
    let down = Instant::now();
    produce(near, 600, 1_200)?;
    std::thread::sleep(Duration::from_secs(10).saturating_sub(down.elapsed()));
    far_broker.lock().map_err(|_| "lock")?.start_again();
    wait_far(far, 1_200, 90)?;
    send_stop.store(true, Ordering::Relaxed);
    let sent = sender.join().map_err(|_| "sender panicked".to_string())??;
    if sent.exit() != diodon_apps::report::Exit::Success {
        return Err(format!("sender summary {}", sent.text()));
    }
    recv_stop.store(true, Ordering::Relaxed);
    let got = receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())??;
    let k = got
        .kafka
        .ok_or("the receiver's summary has no Kafka counters")?;
    eprintln!("sink: {k:?}");
    if (k.produced, k.delivered, k.failed, k.gaps) != (1_200, 1_200, 0, 0) {
        return Err(format!(
            "sink counters {k:?}: want 1,200 produced and acknowledged, no failure, no gap"
        ));
    }
    compare(near, far)
}

/// Per partition: the far records are the source's, in order, each with
/// its source header last.
fn compare(near: &str, far: &str) -> Result<(), String> {
    for p in 0..PARTITIONS {
        let src = read_partition(near, "src", p)?;
        let far = read_partition(far, "far-src", p)?;
        let far_plain: Vec<Rec> = far
            .iter()
            .enumerate()
            .map(|(i, (k, v, h))| {
                let mut h = h.clone();
                let last = h.pop();
                let want = Some((
                    SOURCE_HEADER.to_owned(),
                    Some(format!("{p}/{i}").into_bytes()),
                ));
                assert_eq!(last, want, "partition {p} far record {i}: source header");
                (k.clone(), v.clone(), h)
            })
            .collect();
        if src != far_plain {
            return Err(format!(
                "partition {p}: {} source records, {} far records, or they differ",
                src.len(),
                far.len()
            ));
        }
    }
    Ok(())
}

type Summary<T> = std::thread::JoinHandle<Result<T, String>>;

/// A receiver whose Kafka sink produces into `brokers` (`far-` topics),
/// on a thread, until `stop`.
fn start_receiver(
    brokers: &str,
    (timeout, hold_bytes): (Duration, usize),
    stop: &Arc<AtomicBool>,
) -> Summary<diodon_apps::report::RecvSummary> {
    start_receiver_on(PORT, brokers, (timeout, hold_bytes), stop)
}

/// [`start_receiver`] listening on `port`.
fn start_receiver_on(
    port: u16,
    brokers: &str,
    (timeout, hold_bytes): (Duration, usize),
    stop: &Arc<AtomicBool>,
) -> Summary<diodon_apps::report::RecvSummary> {
    let (brokers, stop) = (brokers.to_owned(), Arc::clone(stop));
    std::thread::spawn(move || {
        run_recv(
            RecvJob {
                opts: recv_options(port),
                output: RecvOutput::Kafka(KafkaSinkOptions {
                    brokers,
                    topic_prefix: "far-".into(),
                    hold_bytes,
                    timeout,
                }),
                metrics: None,
                stop,
            },
            |_| {},
        )
        .map_err(|e| e.to_string())
    })
}

/// A sender consuming `src` of `brokers` as `group`, each segment of up
/// to `segment_bytes` sent `passes` times, on a thread, until `stop`.
fn start_sender(
    brokers: &str,
    group: &str,
    (passes, segment_bytes): (u32, usize),
    stop: &Arc<AtomicBool>,
) -> Summary<diodon_apps::report::SendSummary> {
    start_sender_to(PORT, brokers, group, (passes, segment_bytes, 300), stop)
}

/// [`start_sender`] sending to the receiver on `port`, segments ending at
/// `segment_ms` of age.
fn start_sender_to(
    port: u16,
    brokers: &str,
    group: &str,
    (passes, segment_bytes, segment_ms): (u32, usize, u64),
    stop: &Arc<AtomicBool>,
) -> Summary<diodon_apps::report::SendSummary> {
    let (brokers, group, stop) = (brokers.to_owned(), group.to_owned(), Arc::clone(stop));
    std::thread::spawn(move || {
        run_send(
            SendJob {
                opts: send_options(port),
                input: SendInput::Kafka(KafkaSourceOptions {
                    brokers,
                    topic: "src".into(),
                    group,
                    segment_bytes,
                    segment_age: Duration::from_millis(segment_ms),
                    passes,
                    timeout: Duration::from_secs(30),
                }),
                metrics: None,
                stop,
                more_links: Vec::new(),
            },
            |_| {},
        )
        .map_err(|e| e.to_string())
    })
}

fn send_options(port: u16) -> SendOptions {
    SendOptions {
        config: SenderConfig {
            rate: Rate::bits_per_sec(400_000_000),
            ..SenderConfig::default()
        },
        dest: format!("127.0.0.1:{port}").parse().expect("address"),
        udp: UdpConfig::new("127.0.0.1:0".parse().expect("address")),
        queue_chunks: 32,
        linger: Duration::from_millis(300),
        on_sent: None,
        keys: None,
    }
}

fn recv_options(port: u16) -> RecvOptions {
    let mut udp = UdpConfig::new(format!("127.0.0.1:{port}").parse().expect("address"));
    udp.rcvbuf = Some(16 << 20);
    RecvOptions {
        config: ReceiverConfig::default(),
        udp,
        queue_batches: diodon_apps::recv::NET_QUEUE_BATCHES,
        event_queue: 256,
        once: false,
        expect_channels: None,
        silence_alarm: Duration::from_secs(30),
        give_up_after: None,
        list_channels: 16,
        keys: None,
    }
}

/// Records `from..to` into `src`, round robin over the partitions, sizes
/// from 10 B to 100 KB, keys and headers.
fn produce(bootstrap: &str, from: u32, to: u32) -> Result<(), String> {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .map_err(|e| format!("producer: {e}"))?;
    for i in from..to {
        let size = if i % 50 == 0 {
            100_000
        } else {
            10 + (i as usize * 37) % 3_000
        };
        let value = vec![u8::try_from(i % 251).expect("byte"); size];
        let key = format!("k{i}");
        let headers = OwnedHeaders::new().insert(Header {
            key: "n",
            value: Some(key.as_bytes()),
        });
        let partition = i32::try_from(i).expect("i") % PARTITIONS;
        let mut rec = BaseRecord::to("src")
            .partition(partition)
            .key(key.as_bytes())
            .payload(&value)
            .headers(headers);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, back)) => {
                    rec = back;
                    p.poll(Duration::from_millis(50));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30))
        .map_err(|e| format!("flush: {e}"))
}

fn far_count(bootstrap: &str) -> Result<usize, String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut n = 0;
    for p in 0..PARTITIONS {
        let (low, high) = c
            .fetch_watermarks("far-src", p, Duration::from_secs(10))
            .map_err(|e| format!("watermarks: {e}"))?;
        n += usize::try_from(high - low).expect("count");
    }
    Ok(n)
}

fn committed(bootstrap: &str) -> Result<Vec<i64>, String> {
    committed_of(bootstrap, "diodon-gw")
}

/// The offsets `group` committed for `src`, per partition (-1: none).
fn committed_of(bootstrap: &str, group: &str) -> Result<Vec<i64>, String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition("src", p);
    }
    let got = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .map_err(|e| format!("committed: {e}"))?;
    Ok(got
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        })
        .collect())
}

#[expect(clippy::disallowed_methods, reason = "the test's own deadline")]
fn read_partition(bootstrap: &str, topic: &str, partition: i32) -> Result<Vec<Rec>, String> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "diodon-gw-check")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| format!("consumer: {e}"))?;
    let (_, high) = c
        .fetch_watermarks(topic, partition, Duration::from_secs(10))
        .map_err(|e| format!("watermarks: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .map_err(|e| e.to_string())?;
    c.assign(&tpl).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while i64::try_from(out.len()).expect("count") < high {
        if Instant::now() > deadline {
            return Err(format!(
                "read {} of {high} records of {topic}/{partition}",
                out.len()
            ));
        }
        let Some(m) = c.poll(Duration::from_millis(500)) else {
            continue;
        };
        let m = m.map_err(|e| format!("poll: {e}"))?;
        let headers = m.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        out.push((
            m.key().map(<[u8]>::to_vec),
            m.payload().map(<[u8]>::to_vec),
            headers,
        ));
    }
    Ok(out)
}

fn create_topics(bootstrap: &str, topics: &[&str]) -> Result<(), String> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .map_err(|e| format!("admin: {e}"))?;
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|t| NewTopic::new(t, PARTITIONS, TopicReplication::Fixed(1)))
        .collect();
    let results = block_on(admin.create_topics(
        &new,
        &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
    ))
    .map_err(|e| format!("create topics: {e}"))?;
    for r in results {
        r.map_err(|(t, e)| format!("create {t}: {e}"))?;
    }
    Ok(())
}
