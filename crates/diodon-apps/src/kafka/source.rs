//! The Kafka source (`send --kafka`): consumes one topic, all its
//! partitions, as a member of a consumer group, and carries each
//! topic-partition in channels named `kafka:TOPIC/PARTITION` (kind
//! `Stream`), the records framed by `KafkaRecord::emit`. A partition's
//! records go into one channel (a *segment*) until it holds
//! `segment_bytes` or is `segment_age` old; then the segment ends and the
//! next record opens a new one, so a block the link loses fails one
//! segment, not the partition (the sink counts its offsets as a gap).
//!
//! ```text
//!  poll ─► record of P ─► segment of P (open on first record) ─► SourceHandle::data
//!             │ full or old: finish ─► awaiting[token] = (P, last offset + 1)
//!  on_sent (core thread) ─► notices ─► per P, the longest run of sent segments ─► commit
//! ```
//!
//! Offsets are committed only once a segment was handed to the link:
//! the sender core tells every channel's end through `SendOptions::on_sent`
//! ([`sent_channel`]), and the group's committed offset of a
//! partition moves to the end of the last segment before which every
//! segment was sent. A restarted source resumes there: what was sent but
//! not committed goes again, and the sink skips it (no duplicate). A
//! segment the core aborted or refused is never committed past; the
//! partition resumes before it at the next start. Each segment is sent
//! once (carousel passes are not built yet).

use super::label::{valid_topic, ChannelLabel};
use crate::send::{SentHook, SentNotice, SentStatus, SourceHandle};
use diodon_proto::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp};
use diodon_proto::ChannelMeta;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, Timestamp, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Framed bytes buffered per segment before they go to the sender's queue.
const FLUSH_BYTES: usize = 64 * 1024;

diodon_counters::counters! {
    /// What the Kafka source counted (a snapshot of [`KafkaSourceStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct KafkaSourceCounters in Diodon "kafka_source" {
        records: counter Count "records" "Records consumed and framed into channels.",
        bytes: counter Bytes "framed" "Framed record bytes handed to the sender.",
        segments: counter Count "segments" "Channels (segments of a topic-partition) opened.",
        committed: counter Count "commits" "Offset commits after segments were handed to the link.",
        unsent: counter Count "unsent_segments" "Segments the sender aborted or refused: their offsets stay uncommitted.",
    }
}

/// Live counters of the Kafka source.
#[derive(Debug, Default)]
pub struct KafkaSourceStats {
    /// Records consumed.
    pub records: AtomicU64,
    /// Framed bytes handed on.
    pub bytes: AtomicU64,
    /// Segments opened.
    pub segments: AtomicU64,
    /// Offset commits.
    pub committed: AtomicU64,
    /// Segments not sent.
    pub unsent: AtomicU64,
}

impl KafkaSourceStats {
    /// The counters now.
    pub fn snapshot(&self) -> KafkaSourceCounters {
        KafkaSourceCounters {
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            segments: self.segments.load(Ordering::Relaxed),
            committed: self.committed.load(Ordering::Relaxed),
            unsent: self.unsent.load(Ordering::Relaxed),
        }
    }
}

/// How to run the Kafka source.
#[derive(Debug, Clone)]
pub struct KafkaSourceOptions {
    /// The source cluster's bootstrap servers (`host:port,…`).
    pub brokers: String,
    /// The topic to carry (all its partitions).
    pub topic: String,
    /// The consumer group (its committed offsets are where a restart
    /// resumes; several senders in one group share the partitions).
    pub group: String,
    /// A segment ends once it holds this many framed bytes.
    pub segment_bytes: usize,
    /// A segment ends once it is this old.
    pub segment_age: Duration,
    /// How long to wait for the brokers' first answer and, at the end, for
    /// the last segments to be sent.
    pub timeout: Duration,
}

/// One open segment of a partition.
struct Segment {
    token: u64,
    buf: Vec<u8>,
    framed: usize,
    next: i64,
    opened: Instant,
}

/// A finished segment waiting to be sent: its partition, the offset after
/// its last record, and whether it was sent.
struct Awaiting {
    partition: i32,
    next: i64,
    sent: Option<bool>,
}

/// The Kafka source (module doc). Give the hook of [`sent_channel`] to the
/// sender, create the source with [`KafkaSource::connect`] (inside the
/// namespace that reaches the brokers) and its receiving end, then
/// [`KafkaSource::serve`].
pub struct KafkaSource {
    opts: KafkaSourceOptions,
    consumer: BaseConsumer,
    notices: Receiver<SentNotice>,
}

/// The hook for `SendOptions::on_sent` and the receiving end a
/// [`KafkaSource`] reads: which channels went out (the hook never blocks
/// the core).
pub fn sent_channel() -> (SentHook, Receiver<SentNotice>) {
    let (tx, rx) = mpsc::channel::<SentNotice>();
    let tx = Mutex::new(tx);
    let hook = SentHook(Arc::new(move |n| {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(n);
        }
    }));
    (hook, rx)
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("brokers", &self.opts.brokers)
            .field("topic", &self.opts.topic)
            .finish_non_exhaustive()
    }
}

impl KafkaSource {
    /// Creates the group consumer and checks that the brokers answer and
    /// the topic exists: an `Err` is one sentence naming what is wrong.
    pub fn connect(
        opts: KafkaSourceOptions,
        notices: Receiver<SentNotice>,
    ) -> Result<KafkaSource, String> {
        if !valid_topic(&opts.topic) {
            return Err(format!("{:?} is not a Kafka topic name", opts.topic));
        }
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &opts.brokers)
            .set("group.id", &opts.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false")
            // A sender that died leaves the group after 10 s (Kafka's
            // default is 45 s), so a restarted one resumes that soon.
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "3000")
            .create()
            .map_err(|e| format!("Kafka consumer for {}: {e}", opts.brokers))?;
        let meta = consumer
            .fetch_metadata(Some(&opts.topic), opts.timeout)
            .map_err(|e| {
                format!(
                    "Kafka brokers {} did not answer within {} s: {e}",
                    opts.brokers,
                    opts.timeout.as_secs()
                )
            })?;
        let known = meta
            .topics()
            .iter()
            .any(|t| t.name() == opts.topic && t.error().is_none() && !t.partitions().is_empty());
        if !known {
            return Err(format!(
                "topic {} does not exist on Kafka brokers {}",
                opts.topic, opts.brokers
            ));
        }
        consumer
            .subscribe(&[&opts.topic])
            .map_err(|e| format!("subscribing to {}: {e}", opts.topic))?;
        Ok(KafkaSource {
            opts,
            consumer,
            notices,
        })
    }

    /// Consumes until `stop`, then ends every segment, waits (up to the
    /// timeout) until they were sent and commits. An `Err` is a consumer
    /// error or a closed sender pipeline.
    #[expect(
        clippy::disallowed_methods,
        reason = "segment ages and the end's deadline"
    )]
    pub fn serve(
        &self,
        handle: &SourceHandle,
        stop: &AtomicBool,
        stats: &KafkaSourceStats,
    ) -> Result<(), String> {
        let closed = |_| "the sender pipeline has stopped".to_owned();
        let mut open: HashMap<i32, Segment> = HashMap::new();
        let mut awaiting: HashMap<u64, Awaiting> = HashMap::new();
        let mut order: HashMap<i32, VecDeque<u64>> = HashMap::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(polled) = self.consumer.poll(Duration::from_millis(20)) {
                let m = polled.map_err(|e| format!("consuming {}: {e}", self.opts.topic))?;
                let partition = m.partition();
                let seg = match open.entry(partition) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => {
                        let label = ChannelLabel {
                            topic: self.opts.topic.clone(),
                            partition,
                        };
                        let token = handle
                            .open(ChannelMeta::stream(label.to_string()))
                            .map_err(closed)?;
                        stats.segments.fetch_add(1, Ordering::Relaxed);
                        e.insert(Segment {
                            token,
                            buf: Vec::with_capacity(FLUSH_BYTES * 2),
                            framed: 0,
                            next: m.offset(),
                            opened: Instant::now(),
                        })
                    }
                };
                let before = seg.buf.len();
                frame(&m, &mut seg.buf)?;
                seg.framed += seg.buf.len() - before;
                seg.next = m.offset() + 1;
                stats.records.fetch_add(1, Ordering::Relaxed);
                stats
                    .bytes
                    .fetch_add((seg.buf.len() - before) as u64, Ordering::Relaxed);
                if seg.buf.len() >= FLUSH_BYTES {
                    handle
                        .data(seg.token, std::mem::take(&mut seg.buf))
                        .map_err(closed)?;
                }
            }
            // Segments that are full or old end; idle ones hand on their bytes.
            let now = Instant::now();
            let ended: Vec<i32> = open
                .iter()
                .filter(|(_, s)| {
                    s.framed >= self.opts.segment_bytes
                        || now.duration_since(s.opened) >= self.opts.segment_age
                })
                .map(|(p, _)| *p)
                .collect();
            for p in ended {
                if let Some(s) = open.remove(&p) {
                    end_segment(handle, s, p, &mut awaiting, &mut order)?;
                }
            }
            self.commit_sent(&mut awaiting, &mut order, stats)?;
        }
        for (p, s) in open.drain() {
            end_segment(handle, s, p, &mut awaiting, &mut order)?;
        }
        let deadline = Instant::now() + self.opts.timeout;
        while !awaiting.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            self.commit_sent(&mut awaiting, &mut order, stats)?;
        }
        if !awaiting.is_empty() {
            tracing::warn!(
                segments = awaiting.len(),
                "Kafka source: segments not yet sent at the end; their offsets stay uncommitted"
            );
        }
        Ok(())
    }

    /// Reads the sender's notices and commits, per partition, the offset
    /// after the longest run of sent segments.
    fn commit_sent(
        &self,
        awaiting: &mut HashMap<u64, Awaiting>,
        order: &mut HashMap<i32, VecDeque<u64>>,
        stats: &KafkaSourceStats,
    ) -> Result<(), String> {
        let mut any = false;
        while let Ok(n) = self.notices.try_recv() {
            if let Some(a) = awaiting.get_mut(&n.token) {
                let sent = n.status == SentStatus::Sent;
                if !sent {
                    stats.unsent.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(partition = a.partition, status = %n.status, "Kafka segment not sent: the partition's offsets stay before it");
                }
                a.sent = Some(sent);
                any = true;
            }
        }
        if !any {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (p, queue) in order.iter_mut() {
            let mut to = None;
            while let Some(t) = queue.front() {
                match awaiting.get(t).map(|a| (a.sent, a.next)) {
                    Some((Some(true), next)) => {
                        to = Some(next);
                        awaiting.remove(t);
                        queue.pop_front();
                    }
                    _ => break,
                }
            }
            if let Some(next) = to {
                tpl.add_partition_offset(&self.opts.topic, *p, Offset::Offset(next))
                    .map_err(|e| format!("{}/{p}: {e}", self.opts.topic))?;
            }
        }
        if tpl.count() > 0 {
            self.consumer
                .commit(&tpl, CommitMode::Sync)
                .map_err(|e| format!("committing offsets of {}: {e}", self.opts.topic))?;
            stats.committed.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Hands a segment's last bytes on and ends its channel.
fn end_segment(
    handle: &SourceHandle,
    s: Segment,
    partition: i32,
    awaiting: &mut HashMap<u64, Awaiting>,
    order: &mut HashMap<i32, VecDeque<u64>>,
) -> Result<(), String> {
    let closed = |_| "the sender pipeline has stopped".to_owned();
    awaiting.insert(
        s.token,
        Awaiting {
            partition,
            next: s.next,
            sent: None,
        },
    );
    order.entry(partition).or_default().push_back(s.token);
    if !s.buf.is_empty() {
        handle.data(s.token, s.buf).map_err(closed)?;
    }
    handle.finish(s.token).map_err(closed)
}

/// Appends `m` to a segment's bytes (PROTOCOL.md § 5.7).
fn frame(m: &impl Message, out: &mut Vec<u8>) -> Result<(), String> {
    let headers = m.headers().map_or_else(Vec::new, |h| {
        h.iter()
            .map(|h| RecordHeader {
                name: h.key,
                value: h.value,
            })
            .collect()
    });
    KafkaRecord {
        source_offset: u64::try_from(m.offset())
            .map_err(|e| format!("offset {}: {e}", m.offset()))?,
        timestamp: match m.timestamp() {
            Timestamp::NotAvailable => RecordTimestamp::NotAvailable,
            Timestamp::CreateTime(ms) => RecordTimestamp::CreateTime(ms),
            Timestamp::LogAppendTime(ms) => RecordTimestamp::LogAppendTime(ms),
        },
        key: m.key(),
        value: m.payload(),
        headers,
    }
    .emit(out)
    .map_err(|e| {
        format!(
            "framing {}/{} offset {}: {e}",
            m.topic(),
            m.partition(),
            m.offset()
        )
    })
}
