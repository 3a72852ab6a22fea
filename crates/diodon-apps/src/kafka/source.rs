//! The Kafka source (`send --kafka`): consumes one topic, all its
//! partitions, as a member of a consumer group, and carries each
//! topic-partition in channels named `kafka:TOPIC/PARTITION@FROM` (kind
//! `Stream`), the records framed by `KafkaRecord::emit`. A partition's
//! records go into one channel (a *segment*) until it holds
//! `segment_bytes` or is `segment_age` old; then the segment ends and the
//! next record opens a new one, so a block the link loses fails one
//! segment, not the partition.
//!
//! ```text
//!  poll ─► record of P ─► segment of P (open on first record) ─► SourceHandle::data
//!             │ full or old: finish, then passes − 1 copies ─► awaiting[token] = (P, last offset + 1)
//!  on_sent (core thread) ─► notices ─► per P, the longest run of segments sent passes times ─► commit
//! ```
//!
//! **Passes.** Each segment goes to the link `passes` times: the copies
//! are channels of their own with the same label, opened right after the
//! segment ends, so the sink meets them before the partition's next
//! segment and a copy fills what the link lost of an earlier one (the
//! sink skips what it already produced).
//!
//! **Commits.** Offsets are committed only once every copy of a segment
//! was handed to the link: the sender core tells every channel's end
//! through `SendOptions::on_sent` ([`sent_channel`]), and the group's
//! committed offset of a partition moves to the end of the last segment
//! before which every segment was sent. A restarted source resumes there:
//! what was sent but not committed goes again, and the sink skips it (no
//! duplicate). A segment the core aborted or refused is never committed
//! past; the partition resumes before it at the next start.
//!
//! **`FROM`.** Each segment names the offset the consumer read the
//! partition on from without a break: the end of the partition's previous
//! segment, or, for the first segment after an assignment, the group's
//! committed offset (the partition's start when none). The sink treats
//! offsets between `FROM` and the records, and between two records of a
//! channel, as offsets the source never held (a compacted topic, a
//! transaction's markers), not as gaps.

use super::label::{valid_topic, ChannelLabel};
use crate::send::{SentHook, SentNotice, SentStatus, SourceHandle};
use diodon_proto::kafka_record::{KafkaRecord, RecordHeader, RecordTimestamp};
use diodon_proto::ChannelMeta;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientContext, Offset, Timestamp, TopicPartitionList};
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
        bytes: counter Bytes "framed" "Framed record bytes handed to the sender (first pass).",
        segments: counter Count "segments" "Channels (segments of a topic-partition) opened, first pass.",
        committed: counter Count "commits" "Offset commits after segments were handed to the link.",
        unsent: counter Count "unsent_segments" "Segment copies the sender aborted or refused: their offsets stay uncommitted.",
        repeats: counter Count "repeated_segments" "Further copies of segments (passes after the first).",
        commit_failures: counter Count "commit_failures" "Offset commits the brokers refused (a rebalance, a broker away): the next commit covers them.",
        consume_errors: counter Count "consume_errors" "Errors the consumer reported (a broker away); it reconnects by itself.",
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
    /// Segment copies not sent.
    pub unsent: AtomicU64,
    /// Copies after the first pass.
    pub repeats: AtomicU64,
    /// Commits refused.
    pub commit_failures: AtomicU64,
    /// Consumer errors.
    pub consume_errors: AtomicU64,
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
            repeats: self.repeats.load(Ordering::Relaxed),
            commit_failures: self.commit_failures.load(Ordering::Relaxed),
            consume_errors: self.consume_errors.load(Ordering::Relaxed),
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
    /// Times each segment goes to the link (1 or more).
    pub passes: u32,
    /// How long to wait for the brokers' first answer and, at the end, for
    /// the last segments to be sent.
    pub timeout: Duration,
}

/// One open segment of a partition.
struct Segment {
    token: u64,
    label: ChannelLabel,
    buf: Vec<u8>,
    /// Every byte of the segment, kept for the copies (passes > 1 only).
    whole: Vec<u8>,
    framed: usize,
    next: i64,
    opened: Instant,
}

/// A finished segment waiting to be sent: its partition, the offset after
/// its last record, the copies not yet reported, and whether one failed.
struct Awaiting {
    partition: i32,
    next: i64,
    left: u32,
    unsent: bool,
}

/// The consumer's context: notes the partitions a rebalance took away, so
/// their next segment asks where consumption resumed.
#[derive(Default)]
struct Assignments {
    revoked: Mutex<Vec<i32>>,
}

impl ClientContext for Assignments {}

impl ConsumerContext for Assignments {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            if let Ok(mut revoked) = self.revoked.lock() {
                revoked.extend(
                    tpl.elements()
                        .iter()
                        .map(rdkafka::topic_partition_list::TopicPartitionListElem::partition),
                );
            }
        }
    }
}

/// The segments of every partition: open, finished and awaiting their
/// copies' notices, and where each partition's consumption stands.
#[derive(Default)]
struct Segments {
    open: HashMap<i32, Segment>,
    awaiting: HashMap<u64, Awaiting>,
    /// Copy token → the token of the segment it repeats.
    copy_of: HashMap<u64, u64>,
    /// Per partition, its segments in the order they were sent.
    order: HashMap<i32, VecDeque<u64>>,
    /// Per partition, the offset after the last record consumed in this
    /// assignment (the next segment's `FROM`).
    position: HashMap<i32, i64>,
}

/// The Kafka source (module doc). Give the hook of [`sent_channel`] to the
/// sender, create the source with [`KafkaSource::connect`] (inside the
/// namespace that reaches the brokers) and its receiving end, then
/// [`KafkaSource::serve`].
pub struct KafkaSource {
    opts: KafkaSourceOptions,
    consumer: BaseConsumer<Assignments>,
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

/// The sender pipeline's end as the source's error.
fn closed(_: crate::send::Closed) -> String {
    "the sender pipeline has stopped".to_owned()
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
        if opts.passes == 0 {
            return Err("Kafka source: passes must be at least 1".into());
        }
        let consumer: BaseConsumer<Assignments> = ClientConfig::new()
            .set("bootstrap.servers", &opts.brokers)
            .set("group.id", &opts.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // Records of aborted or open transactions never cross.
            .set("isolation.level", "read_committed")
            .set("allow.auto.create.topics", "false")
            // A sender that died leaves the group after 10 s (Kafka's
            // default is 45 s), so a restarted one resumes that soon.
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "3000")
            .create_with_context(Assignments::default())
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
        let mut segs = Segments::default();
        let mut last_warning: Option<Instant> = None;
        while !stop.load(Ordering::Relaxed) {
            match self.consumer.poll(Duration::from_millis(20)) {
                Some(Ok(m)) => {
                    self.forget_revoked(&mut segs);
                    self.add(&m, handle, &mut segs, stats)?;
                }
                // The client reconnects by itself (a broker restarting, a
                // partition's leader moving): said at most every 10 s.
                Some(Err(e)) => {
                    stats.consume_errors.fetch_add(1, Ordering::Relaxed);
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        last_warning = Some(Instant::now());
                        tracing::warn!(
                            topic = self.opts.topic,
                            "consuming {} from the Kafka brokers {}: {e}; trying on",
                            self.opts.topic,
                            self.opts.brokers
                        );
                    }
                }
                None => {}
            }
            // Segments that are full or old end.
            let now = Instant::now();
            let ended: Vec<i32> = segs
                .open
                .iter()
                .filter(|(_, s)| {
                    s.framed >= self.opts.segment_bytes
                        || now.duration_since(s.opened) >= self.opts.segment_age
                })
                .map(|(p, _)| *p)
                .collect();
            for p in ended {
                if let Some(s) = segs.open.remove(&p) {
                    self.end_segment(handle, s, p, &mut segs, stats)?;
                }
            }
            self.commit_sent(&mut segs, stats)?;
        }
        let last: Vec<(i32, Segment)> = segs.open.drain().collect();
        for (p, s) in last {
            self.end_segment(handle, s, p, &mut segs, stats)?;
        }
        let deadline = Instant::now() + self.opts.timeout;
        while !segs.awaiting.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            self.commit_sent(&mut segs, stats)?;
        }
        if !segs.awaiting.is_empty() {
            tracing::warn!(
                segments = segs.awaiting.len(),
                "Kafka source: segments not yet sent at the end; their offsets stay uncommitted"
            );
        }
        Ok(())
    }

    /// Partitions a rebalance took away resume, when they come back, where
    /// the group committed: their position is asked again.
    fn forget_revoked(&self, segs: &mut Segments) {
        let revoked = match self.consumer.context().revoked.lock() {
            Ok(mut r) => std::mem::take(&mut *r),
            Err(_) => return,
        };
        for p in revoked {
            segs.position.remove(&p);
        }
    }

    /// Frames `m` into its partition's open segment (opening one first).
    #[expect(clippy::disallowed_methods, reason = "a segment's age starts")]
    fn add(
        &self,
        m: &impl Message,
        handle: &SourceHandle,
        segs: &mut Segments,
        stats: &KafkaSourceStats,
    ) -> Result<(), String> {
        let partition = m.partition();
        if !segs.open.contains_key(&partition) {
            let from = match segs.position.get(&partition) {
                Some(&at) => Some(at),
                None => self.resumed_at(partition),
            }
            .map(|at| at.min(m.offset()))
            .and_then(|at| u64::try_from(at).ok());
            let label = ChannelLabel {
                topic: self.opts.topic.clone(),
                partition,
                from,
            };
            let token = handle
                .open(ChannelMeta::stream(label.to_string()))
                .map_err(closed)?;
            stats.segments.fetch_add(1, Ordering::Relaxed);
            segs.open.insert(
                partition,
                Segment {
                    token,
                    label,
                    buf: Vec::with_capacity(FLUSH_BYTES * 2),
                    whole: Vec::new(),
                    framed: 0,
                    next: m.offset(),
                    opened: Instant::now(),
                },
            );
        }
        let Some(seg) = segs.open.get_mut(&partition) else {
            return Ok(());
        };
        let before = seg.buf.len();
        frame(m, &mut seg.buf)?;
        let added = seg.buf.len() - before;
        if self.opts.passes > 1 {
            seg.whole.extend_from_slice(&seg.buf[before..]);
        }
        seg.framed += added;
        seg.next = m.offset() + 1;
        segs.position.insert(partition, seg.next);
        stats.records.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(added as u64, Ordering::Relaxed);
        if seg.buf.len() >= FLUSH_BYTES {
            handle
                .data(seg.token, std::mem::take(&mut seg.buf))
                .map_err(closed)?;
        }
        Ok(())
    }

    /// Where the consumer started reading `partition` in this assignment:
    /// the group's committed offset, or the partition's first offset when
    /// the group has none. `None` when the brokers do not say (the segment
    /// then claims nothing about offsets before its first record).
    fn resumed_at(&self, partition: i32) -> Option<i64> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&self.opts.topic, partition);
        let committed = self
            .consumer
            .committed_offsets(tpl, self.opts.timeout)
            .ok()
            .and_then(|t| {
                t.find_partition(&self.opts.topic, partition)
                    .map(|e| e.offset())
            });
        match committed {
            Some(Offset::Offset(at)) => Some(at),
            _ => self
                .consumer
                .fetch_watermarks(&self.opts.topic, partition, self.opts.timeout)
                .ok()
                .map(|(low, _)| low),
        }
    }

    /// Hands a segment's last bytes on, ends its channel and sends its
    /// further copies.
    fn end_segment(
        &self,
        handle: &SourceHandle,
        s: Segment,
        partition: i32,
        segs: &mut Segments,
        stats: &KafkaSourceStats,
    ) -> Result<(), String> {
        segs.awaiting.insert(
            s.token,
            Awaiting {
                partition,
                next: s.next,
                left: self.opts.passes,
                unsent: false,
            },
        );
        segs.order.entry(partition).or_default().push_back(s.token);
        if !s.buf.is_empty() {
            handle.data(s.token, s.buf).map_err(closed)?;
        }
        handle.finish(s.token).map_err(closed)?;
        let name = s.label.to_string();
        for _ in 1..self.opts.passes {
            let copy = handle
                .open(ChannelMeta::stream(name.clone()))
                .map_err(closed)?;
            segs.copy_of.insert(copy, s.token);
            stats.repeats.fetch_add(1, Ordering::Relaxed);
            handle.data_and_finish(copy, &s.whole).map_err(closed)?;
        }
        Ok(())
    }

    /// Reads the sender's notices and commits, per partition, the offset
    /// after the longest run of segments whose every copy was sent.
    fn commit_sent(&self, segs: &mut Segments, stats: &KafkaSourceStats) -> Result<(), String> {
        let mut any = false;
        while let Ok(n) = self.notices.try_recv() {
            let token = segs.copy_of.remove(&n.token).unwrap_or(n.token);
            if let Some(a) = segs.awaiting.get_mut(&token) {
                if n.status != SentStatus::Sent {
                    stats.unsent.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(partition = a.partition, status = %n.status, "Kafka segment not sent: the partition's offsets stay before it");
                    a.unsent = true;
                }
                a.left = a.left.saturating_sub(1);
                any = true;
            }
        }
        if !any {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for (p, queue) in &mut segs.order {
            let mut to = None;
            while let Some(t) = queue.front() {
                match segs.awaiting.get(t) {
                    Some(a) if a.left == 0 && !a.unsent => {
                        to = Some(a.next);
                        segs.awaiting.remove(t);
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
            // A refused commit (the group rebalancing, a broker away) is
            // not fatal: the next one of the partition covers it, and
            // until then a restart sends those records again (the
            // receiver skips them).
            match self.consumer.commit(&tpl, CommitMode::Sync) {
                Ok(()) => {
                    stats.committed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    stats.commit_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        topic = self.opts.topic,
                        "the Kafka brokers refused an offset commit of {} ({e}); the next commit covers it",
                        self.opts.topic
                    );
                }
            }
        }
        Ok(())
    }
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
