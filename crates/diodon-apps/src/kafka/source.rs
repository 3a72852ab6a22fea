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
//! **Several senders, one group.** Senders in one consumer group share
//! the partitions, each over its own link. When a rebalance takes
//! partitions away, the consumer's context hands them over before the
//! new owner starts: their open segments end, every copy is sent (up to
//! the timeout) and their offsets are committed, so the next owner starts
//! exactly where this one stopped and no record crosses two links.
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
use std::sync::mpsc::Receiver;
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

/// The consumer's context: the source's whole state, so that a
/// rebalance can hand over what it takes away (the callback runs inside
/// `poll` on the serving thread; the lock is never held across `poll`).
struct Assignments {
    opts: KafkaSourceOptions,
    run: Mutex<Running>,
}

impl ClientContext for Assignments {}

impl ConsumerContext for Assignments {
    /// Partitions a rebalance takes away are handed over clean: their open
    /// segments end, and once every copy was sent (up to the timeout)
    /// their offsets are committed, so the member that gets them next
    /// starts where this one stopped (nothing sent twice over two links).
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(tpl) = rebalance else {
            return;
        };
        let partitions: Vec<i32> = tpl
            .elements()
            .iter()
            .map(rdkafka::topic_partition_list::TopicPartitionListElem::partition)
            .collect();
        if let Ok(mut run) = self.run.lock() {
            if let Err(e) = run.hand_over(consumer, &self.opts, &partitions) {
                tracing::warn!(
                    topic = self.opts.topic,
                    "Kafka source: handing partitions over: {e}"
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

/// What the serving source works with: its segments, the sender's
/// notices, and (while serving) the sender's queue and the counters.
struct Running {
    segs: Segments,
    notices: Receiver<SentNotice>,
    handle: Option<SourceHandle>,
    stats: Arc<KafkaSourceStats>,
}

/// The Kafka source (module doc). Give the hook of [`sent_channel`] to the
/// sender, create the source with [`KafkaSource::connect`] (inside the
/// namespace that reaches the brokers) and its receiving end, then
/// [`KafkaSource::serve`].
pub struct KafkaSource {
    consumer: BaseConsumer<Assignments>,
}

/// The hook for `SendOptions::on_sent` and the receiving end a
/// [`KafkaSource`] reads: which channels went out (the hook never blocks
/// the core).
pub fn sent_channel() -> (SentHook, Receiver<SentNotice>) {
    crate::send::notices(false)
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opts = &self.consumer.context().opts;
        f.debug_struct("KafkaSource")
            .field("brokers", &opts.brokers)
            .field("topic", &opts.topic)
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
        let mut config = ClientConfig::new();
        config
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
            .set("heartbeat.interval.ms", "3000");
        let brokers = opts.brokers.clone();
        let consumer: BaseConsumer<Assignments> = config
            .create_with_context(Assignments {
                opts,
                run: Mutex::new(Running {
                    segs: Segments::default(),
                    notices,
                    handle: None,
                    stats: Arc::default(),
                }),
            })
            .map_err(|e| format!("Kafka consumer for {brokers}: {e}"))?;
        let opts = &consumer.context().opts;
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
        Ok(KafkaSource { consumer })
    }

    /// The state, locked (never across `poll`: a rebalance locks it).
    fn running(&self) -> Result<std::sync::MutexGuard<'_, Running>, String> {
        self.consumer
            .context()
            .run
            .lock()
            .map_err(|_| "the Kafka source's state is poisoned".to_owned())
    }

    /// Consumes until `stop`, then ends every segment, waits (up to the
    /// timeout) until they were sent and commits. An `Err` is a closed
    /// sender pipeline; consumer errors are said and outlived.
    #[expect(
        clippy::disallowed_methods,
        reason = "segment ages and the end's deadline"
    )]
    pub fn serve(
        &self,
        handle: &SourceHandle,
        stop: &AtomicBool,
        stats: &Arc<KafkaSourceStats>,
    ) -> Result<(), String> {
        let opts = &self.consumer.context().opts;
        {
            let mut run = self.running()?;
            run.handle = Some(handle.clone());
            run.stats = Arc::clone(stats);
        }
        let mut last_warning: Option<Instant> = None;
        let served = (|| {
            while !stop.load(Ordering::Relaxed) {
                let polled = self.consumer.poll(Duration::from_millis(20));
                let mut run = self.running()?;
                match polled {
                    Some(Ok(m)) => run.add(&self.consumer, opts, &m)?,
                    // The client reconnects by itself (a broker restarting,
                    // a partition's leader moving): said at most every 10 s.
                    Some(Err(e)) => {
                        stats.consume_errors.fetch_add(1, Ordering::Relaxed);
                        if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                            last_warning = Some(Instant::now());
                            tracing::warn!(
                                topic = opts.topic,
                                "consuming {} from the Kafka brokers {}: {e}; trying on",
                                opts.topic,
                                opts.brokers
                            );
                        }
                    }
                    None => {}
                }
                run.end_due(opts)?;
                run.commit_sent(&self.consumer, opts)?;
            }
            let mut run = self.running()?;
            let all: Vec<i32> = run.segs.open.keys().copied().collect();
            run.end_partitions(opts, &all)?;
            let deadline = Instant::now() + opts.timeout;
            while !run.segs.awaiting.is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                run.commit_sent(&self.consumer, opts)?;
            }
            if !run.segs.awaiting.is_empty() {
                tracing::warn!(
                    segments = run.segs.awaiting.len(),
                    "Kafka source: segments not yet sent at the end; their offsets stay uncommitted"
                );
            }
            Ok(())
        })();
        // The sender's pipeline ends only once every handle is dropped.
        if let Ok(mut run) = self.consumer.context().run.lock() {
            run.handle = None;
        }
        served
    }
}

impl Running {
    /// The sender's queue (set while serving).
    fn handle(&self) -> Result<&SourceHandle, String> {
        self.handle
            .as_ref()
            .ok_or_else(|| "the Kafka source is not serving".to_owned())
    }

    /// Frames `m` into its partition's open segment (opening one first).
    #[expect(clippy::disallowed_methods, reason = "a segment's age starts")]
    fn add(
        &mut self,
        consumer: &BaseConsumer<Assignments>,
        opts: &KafkaSourceOptions,
        m: &impl Message,
    ) -> Result<(), String> {
        let partition = m.partition();
        if !self.segs.open.contains_key(&partition) {
            let from = match self.segs.position.get(&partition) {
                Some(&at) => Some(at),
                None => resumed_at(consumer, opts, partition),
            }
            .map(|at| at.min(m.offset()))
            .and_then(|at| u64::try_from(at).ok());
            let label = ChannelLabel {
                topic: opts.topic.clone(),
                partition,
                from,
            };
            let token = self
                .handle()?
                .open_keyed(ChannelMeta::stream(label.to_string()), &label.link_key())
                .map_err(closed)?;
            self.stats.segments.fetch_add(1, Ordering::Relaxed);
            self.segs.open.insert(
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
        let Some(seg) = self.segs.open.get_mut(&partition) else {
            return Ok(());
        };
        let before = seg.buf.len();
        frame(m, &mut seg.buf)?;
        let added = seg.buf.len() - before;
        if opts.passes > 1 {
            seg.whole.extend_from_slice(&seg.buf[before..]);
        }
        seg.framed += added;
        seg.next = m.offset() + 1;
        self.segs.position.insert(partition, seg.next);
        self.stats.records.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes.fetch_add(added as u64, Ordering::Relaxed);
        if seg.buf.len() >= FLUSH_BYTES {
            let bytes = std::mem::take(&mut seg.buf);
            let token = seg.token;
            self.handle()?.data(token, bytes).map_err(closed)?;
        }
        Ok(())
    }

    /// Ends the segments that are full or old.
    #[expect(clippy::disallowed_methods, reason = "segment ages")]
    fn end_due(&mut self, opts: &KafkaSourceOptions) -> Result<(), String> {
        let now = Instant::now();
        let due: Vec<i32> = self
            .segs
            .open
            .iter()
            .filter(|(_, s)| {
                s.framed >= opts.segment_bytes || now.duration_since(s.opened) >= opts.segment_age
            })
            .map(|(p, _)| *p)
            .collect();
        self.end_partitions(opts, &due)
    }

    /// Ends the open segments of `partitions`: their last bytes, their
    /// channel's end, then their further copies.
    fn end_partitions(
        &mut self,
        opts: &KafkaSourceOptions,
        partitions: &[i32],
    ) -> Result<(), String> {
        for p in partitions {
            let Some(s) = self.segs.open.remove(p) else {
                continue;
            };
            self.segs.awaiting.insert(
                s.token,
                Awaiting {
                    partition: *p,
                    next: s.next,
                    left: opts.passes,
                    unsent: false,
                },
            );
            self.segs.order.entry(*p).or_default().push_back(s.token);
            let handle = self.handle()?.clone();
            if !s.buf.is_empty() {
                handle.data(s.token, s.buf).map_err(closed)?;
            }
            handle.finish(s.token).map_err(closed)?;
            let (name, key) = (s.label.to_string(), s.label.link_key());
            for _ in 1..opts.passes {
                let copy = handle
                    .open_keyed(ChannelMeta::stream(name.clone()), &key)
                    .map_err(closed)?;
                self.segs.copy_of.insert(copy, s.token);
                self.stats.repeats.fetch_add(1, Ordering::Relaxed);
                handle.data_and_finish(copy, &s.whole).map_err(closed)?;
            }
        }
        Ok(())
    }

    /// Hands `partitions` over at a rebalance: their segments end, every
    /// copy is sent (waiting up to the timeout), their offsets committed,
    /// and their positions forgotten (asked again if they come back).
    #[expect(clippy::disallowed_methods, reason = "the hand-over's deadline")]
    fn hand_over(
        &mut self,
        consumer: &BaseConsumer<Assignments>,
        opts: &KafkaSourceOptions,
        partitions: &[i32],
    ) -> Result<(), String> {
        for p in partitions {
            self.segs.position.remove(p);
        }
        if self.handle.is_none() {
            return Ok(());
        }
        self.end_partitions(opts, partitions)?;
        let pending = |segs: &Segments| {
            partitions
                .iter()
                .any(|p| segs.order.get(p).is_some_and(|q| !q.is_empty()))
        };
        let deadline = Instant::now() + opts.timeout;
        self.commit_sent(consumer, opts)?;
        while pending(&self.segs) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            self.commit_sent(consumer, opts)?;
        }
        if pending(&self.segs) {
            tracing::warn!(
                topic = opts.topic,
                "Kafka source: segments of partitions taken away were not all sent within {} s; \
                 their next owner sends those records again (the receiver skips what it has)",
                opts.timeout.as_secs()
            );
        }
        for p in partitions {
            if let Some(q) = self.segs.order.remove(p) {
                for t in q {
                    self.segs.awaiting.remove(&t);
                }
            }
        }
        self.segs
            .copy_of
            .retain(|_, t| self.segs.awaiting.contains_key(t));
        Ok(())
    }

    /// Reads the sender's notices and commits, per partition, the offset
    /// after the longest run of segments whose every copy was sent.
    fn commit_sent(
        &mut self,
        consumer: &BaseConsumer<Assignments>,
        opts: &KafkaSourceOptions,
    ) -> Result<(), String> {
        let segs = &mut self.segs;
        let stats = &self.stats;
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
                tpl.add_partition_offset(&opts.topic, *p, Offset::Offset(next))
                    .map_err(|e| format!("{}/{p}: {e}", opts.topic))?;
            }
        }
        if tpl.count() > 0 {
            // A refused commit (the group rebalancing, a broker away) is
            // not fatal: the next one of the partition covers it, and
            // until then a restart sends those records again (the
            // receiver skips them).
            match consumer.commit(&tpl, CommitMode::Sync) {
                Ok(()) => {
                    stats.committed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    stats.commit_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        topic = opts.topic,
                        "the Kafka brokers refused an offset commit of {} ({e}); the next commit covers it",
                        opts.topic
                    );
                }
            }
        }
        Ok(())
    }
}

/// Where the consumer started reading `partition` in this assignment:
/// the group's committed offset, or the partition's first offset when the
/// group has none. `None` when the brokers do not say (the segment then
/// claims nothing about offsets before its first record).
fn resumed_at(
    consumer: &BaseConsumer<Assignments>,
    opts: &KafkaSourceOptions,
    partition: i32,
) -> Option<i64> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&opts.topic, partition);
    let committed = consumer
        .committed_offsets(tpl, opts.timeout)
        .ok()
        .and_then(|t| t.find_partition(&opts.topic, partition).map(|e| e.offset()));
    match committed {
        Some(Offset::Offset(at)) => Some(at),
        _ => consumer
            .fetch_watermarks(&opts.topic, partition, opts.timeout)
            .ok()
            .map(|(low, _)| low),
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
