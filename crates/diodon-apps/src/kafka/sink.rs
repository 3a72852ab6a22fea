//! The Kafka sink (`recv --kafka`): the delivered bytes of each Kafka
//! channel are parsed into records (`KafkaRecord::parse_prefix`; a record
//! may span deliveries) and produced with the idempotent producer into the
//! same topic name (after an optional prefix) and the same partition
//! number, each with a `diodon-source: PARTITION/OFFSET` header.
//!
//! ```text
//!  Opened ─► target (prefix + topic, partition) known? ─ no ─► read its last record's
//!                                                             diodon-source header ─► next
//!  Data ─► pending ─► parse_prefix ─► offset < next: skipped (a duplicate: a pass, a restart)
//!                                     offset > next: the part the channel vouches for (from its
//!                                       label's FROM, or its previous record, on) counted as
//!                                       offsets without a record; the rest a gap, counted and logged
//!                                     produced ─► next = offset + 1
//!  Complete ─► flush ─► verdict (failed deliveries, a record cut off: Failed)
//! ```
//!
//! A partition's channels (the source's segments) are produced in the
//! order the sender opened them: the bytes of a later one wait until the
//! earlier one ends (its tail may arrive after the next one's start).
//!
//! A channel its sender cut short (a restart, an abort, a session that
//! expired) was not sent whole, so the source committed nothing from it
//! on and sends its records again: the later channels of that session for
//! the partition are dropped instead of produced past the hole.
//!
//! Never a duplicate: per target partition the sink knows the highest
//! source offset it produced (read back from the far broker when it first
//! sees the partition, then kept), and records at or below it are skipped
//! and counted. Never a silent gap: source offsets that never arrive (a
//! failed channel, a lost block) show up as a jump and are counted and
//! logged with their range. A compacted or transactional source topic has
//! offsets without records: a channel's bytes arrive without a hole, so a
//! jump between two of its records, or between its label's `FROM` and its
//! first record, is such an offset, counted apart and never a gap.
//! Backpressure: a full producer queue blocks the writer thread, which
//! blocks the decoder; nothing inside is dropped.

use super::label::{parse_source_header, source_header, ChannelLabel, SOURCE_HEADER};
use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::sink_error::{Refusal, SinkFailure};
use diodon_proto::kafka_record::{KafkaRecord, RecordTimestamp};
use diodon_proto::{ChannelKind, ChannelMeta, FailReason};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

diodon_counters::counters! {
    /// What the Kafka sink counted (a snapshot of [`KafkaSinkStats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct KafkaSinkCounters in Diodon "kafka_sink" {
        produced: counter Count "records_produced" "Records handed to the far broker's producer.",
        delivered: counter Count "records_delivered" "Records the far broker acknowledged.",
        bytes: counter Bytes "value" "Key and value bytes of the records produced.",
        duplicates: counter Count "records_skipped" "Records skipped because a record with that source offset or a later one was already produced (a repeated pass, a restart).",
        gaps: counter Count "gaps" "Jumps in a partition's source offsets: records that never arrived.",
        gap_records: counter Count "gap_offsets" "Source offsets inside those jumps.",
        failed: counter Count "delivery_failures" "Records the far broker did not acknowledge.",
        no_record: counter Count "offsets_without_record" "Source offsets that held no record (a compacted topic, transaction markers): passed over, not gaps.",
        stalls: counter Count "hold_stalls" "Times the records held for the far brokers stayed at their bound (hold_bytes) for 5 s: the receiver stopped reading the link meanwhile.",
    }
}

/// Live counters of the Kafka sink; [`KafkaSinkStats::snapshot`] reads
/// them as declared counters.
#[derive(Debug, Default)]
pub struct KafkaSinkStats {
    /// Records handed to the producer.
    pub produced: AtomicU64,
    /// Records acknowledged by the far broker.
    pub delivered: AtomicU64,
    /// Key and value bytes produced.
    pub bytes: AtomicU64,
    /// Records skipped as already produced.
    pub duplicates: AtomicU64,
    /// Jumps in source offsets.
    pub gaps: AtomicU64,
    /// Source offsets inside those jumps.
    pub gap_records: AtomicU64,
    /// Records the far broker did not acknowledge.
    pub failed: AtomicU64,
    /// Source offsets without a record.
    pub no_record: AtomicU64,
    /// Stalls at the hold bound.
    pub stalls: AtomicU64,
}

impl KafkaSinkStats {
    /// The counters now.
    pub fn snapshot(&self) -> KafkaSinkCounters {
        KafkaSinkCounters {
            produced: self.produced.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            gaps: self.gaps.load(Ordering::Relaxed),
            gap_records: self.gap_records.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            no_record: self.no_record.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
        }
    }
}

/// The default of [`KafkaSinkOptions::hold_bytes`]: 256 MiB.
pub const DEFAULT_HOLD_BYTES: usize = 256 << 20;

/// How to run the Kafka sink.
#[derive(Debug, Clone)]
pub struct KafkaSinkOptions {
    /// The far cluster's bootstrap servers (`host:port,…`).
    pub brokers: String,
    /// Put in front of every source topic's name.
    pub topic_prefix: String,
    /// Bytes of records held in memory until the far brokers acknowledge
    /// them, at most (the producer's queue). At the bound the sink waits,
    /// so the receiver stops reading the link; what the link then loses
    /// is counted as gaps.
    pub hold_bytes: usize,
    /// How long to wait for a broker's answer (metadata, the last record
    /// of a partition, the flush at a channel's end).
    pub timeout: Duration,
}

/// The producer's context: counts acknowledgements and failures.
struct Delivery {
    stats: Arc<KafkaSinkStats>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, (): ()) {
        match result {
            Ok(_) => {
                self.stats.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, m)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                let source = m
                    .headers()
                    .and_then(|h| {
                        h.iter()
                            .find(|h| h.key == SOURCE_HEADER)
                            .and_then(|h| h.value)
                    })
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                tracing::error!(
                    topic = m.topic(),
                    partition = m.partition(),
                    source,
                    "Kafka delivery failed: {e}"
                );
            }
        }
    }
}

/// One open Kafka channel.
struct Open {
    name: String,
    target: (String, i32),
    pending: Vec<u8>,
    bytes: u64,
    failed_before: u64,
    /// The source offset from which the channel holds every record of the
    /// partition: its label's `FROM`, then the offset after each record.
    vouched: Option<u64>,
    /// Records parsed so far.
    records: u64,
    /// Its trailer arrived (its verdict was given) while an earlier
    /// channel of the partition was still open.
    done: bool,
}

/// One target partition: the next source offset expected (highest
/// produced + 1; `None` when nothing was ever produced there) and its open
/// channels in the order the sender opened them. Only the first produces;
/// the bytes of later ones wait (a segment's tail may arrive after the
/// next segment's start), so records are produced in source order.
struct Partition {
    next: Option<u64>,
    order: VecDeque<ChannelKey>,
}

/// Produces the records of Kafka channels into the far cluster (module
/// doc). Create it with [`KafkaSink::connect`] inside the network
/// namespace that reaches the brokers.
pub struct KafkaSink {
    opts: KafkaSinkOptions,
    producer: BaseProducer<Delivery>,
    channels: HashMap<ChannelKey, Open>,
    /// Per target partition: where it stands, its channels in order.
    parts: HashMap<(String, i32), Partition>,
    /// Channels dropped behind one their sender cut short (by name).
    discarded: HashMap<ChannelKey, String>,
    stats: Arc<KafkaSinkStats>,
}

impl std::fmt::Debug for KafkaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSink")
            .field("brokers", &self.opts.brokers)
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

impl KafkaSink {
    /// Creates the idempotent producer and checks that the brokers answer
    /// within the timeout: an `Err` is one sentence naming the brokers.
    pub fn connect(
        opts: KafkaSinkOptions,
        stats: Arc<KafkaSinkStats>,
    ) -> Result<KafkaSink, String> {
        let producer: BaseProducer<Delivery> = ClientConfig::new()
            .set("bootstrap.servers", &opts.brokers)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "0")
            .set(
                "queue.buffering.max.kbytes",
                (opts.hold_bytes / 1024).clamp(1, 2_097_151).to_string(),
            )
            .set("queue.buffering.max.messages", "2000000")
            .set("allow.auto.create.topics", "false")
            .create_with_context(Delivery {
                stats: Arc::clone(&stats),
            })
            .map_err(|e| format!("Kafka producer for {}: {e}", opts.brokers))?;
        producer
            .client()
            .fetch_metadata(None, opts.timeout)
            .map_err(|e| {
                format!(
                    "Kafka brokers {} did not answer within {} s: {e}",
                    opts.brokers,
                    opts.timeout.as_secs()
                )
            })?;
        Ok(KafkaSink {
            opts,
            producer,
            channels: HashMap::new(),
            parts: HashMap::new(),
            discarded: HashMap::new(),
            stats,
        })
    }

    /// The next source offset expected in `(topic, partition)` of the far
    /// cluster: one after the `diodon-source` offset of its last record.
    fn resume_point(&self, topic: &str, partition: i32) -> Result<Option<u64>, String> {
        let meta = self
            .producer
            .client()
            .fetch_metadata(Some(topic), self.opts.timeout)
            .map_err(|e| format!("metadata of far topic {topic}: {e}"))?;
        let Some(t) = meta.topics().iter().find(|t| t.name() == topic) else {
            return Err(format!("far topic {topic} does not exist"));
        };
        if let Some(e) = t.error() {
            return Err(format!(
                "far topic {topic} is not usable ({}): create it with at least {} partitions",
                RDKafkaErrorCode::from(e),
                partition + 1
            ));
        }
        if !t.partitions().iter().any(|p| p.id() == partition) {
            return Err(format!(
                "far topic {topic} has {} partitions, no partition {partition}: create it with at least {}",
                t.partitions().len(),
                partition + 1
            ));
        }
        let (low, high) = self
            .producer
            .client()
            .fetch_watermarks(topic, partition, self.opts.timeout)
            .map_err(|e| format!("offsets of far {topic}/{partition}: {e}"))?;
        if high <= low {
            return Ok(None);
        }
        self.last_source_offset(topic, partition, high - 1)
            .map(|o| Some(o + 1))
    }

    /// Reads the record at `offset` of the far partition and returns the
    /// source offset its `diodon-source` header names.
    #[expect(
        clippy::disallowed_methods,
        reason = "a deadline for the broker's answer"
    )]
    fn last_source_offset(&self, topic: &str, partition: i32, offset: i64) -> Result<u64, String> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.opts.brokers)
            .set("group.id", "diodon-sink-resume")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .create()
            .map_err(|e| format!("Kafka consumer for {}: {e}", self.opts.brokers))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(|e| format!("{topic}/{partition}: {e}"))?;
        consumer
            .assign(&tpl)
            .map_err(|e| format!("{topic}/{partition}: {e}"))?;
        let deadline = std::time::Instant::now() + self.opts.timeout;
        while std::time::Instant::now() < deadline {
            let Some(polled) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let m = polled.map_err(|e| format!("reading far {topic}/{partition}: {e}"))?;
            if m.offset() != offset {
                continue;
            }
            let header = m.headers().and_then(|h| {
                h.iter()
                    .filter(|h| h.key == SOURCE_HEADER)
                    .last()
                    .and_then(|h| h.value)
            });
            return header.and_then(parse_source_header).map(|(_, o)| o).ok_or_else(|| {
                format!(
                    "the last record of far {topic}/{partition} (offset {offset}) has no {SOURCE_HEADER} header: \
                     it was not produced by Diodon, so the sink cannot tell what it already holds"
                )
            });
        }
        Err(format!(
            "the last record of far {topic}/{partition} (offset {offset}) did not arrive within {} s",
            self.opts.timeout.as_secs()
        ))
    }

    /// The next source offset of `target` once the far partition is read
    /// again: `n`, or more when another receiver produced records there
    /// since this sink last looked (each link has its own receiver). A far
    /// cluster that does not answer leaves `n` (the jump counts as a gap).
    fn produced_elsewhere(&self, target: &(String, i32), n: u64) -> u64 {
        match self.resume_point(&target.0, target.1) {
            Ok(Some(far)) if far > n => {
                tracing::info!(
                    topic = target.0,
                    partition = target.1,
                    "far {}/{}: source offsets {n}..{far} were produced through another link",
                    target.0,
                    target.1
                );
                far
            }
            Ok(_) => n,
            Err(e) => {
                tracing::warn!("reading far {}/{} again: {e}", target.0, target.1);
                n
            }
        }
    }

    /// Parses the complete records in `open.pending` and produces those
    /// not yet produced.
    fn drain(&mut self, key: ChannelKey, open: &mut Open) -> Result<(), String> {
        let mut at = 0;
        let result = loop {
            let record = match KafkaRecord::parse_prefix(&open.pending[at..]) {
                Ok(Some((record, used))) => {
                    at += used;
                    record
                }
                Ok(None) => break Ok(()),
                Err(e) => {
                    break Err(format!(
                        "malformed record at channel byte {}: {e}",
                        open.bytes - (open.pending.len() - at) as u64
                    ))
                }
            };
            let offset = record.source_offset;
            let first = open.records == 0;
            open.records += 1;
            let vouched = open.vouched.replace(offset.saturating_add(1));
            let mut next = self.parts.get(&open.target).and_then(|p| p.next);
            if let Some(n) = next.filter(|&n| first && offset > n) {
                if vouched.map_or(offset, |v| v.clamp(n, offset)) > n {
                    // A jump at a segment's start: the partition may have
                    // crossed another link meanwhile (a link down, a
                    // rebalance), whose receiver produced those offsets.
                    next = Some(self.produced_elsewhere(&open.target, n));
                }
            }
            if let Some(n) = next {
                if offset < n {
                    self.stats.duplicates.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                if offset > n {
                    // From `vouched` on the channel holds every record, so
                    // the offsets between it and this record held none.
                    let gap_end = vouched.map_or(offset, |v| v.clamp(n, offset));
                    self.stats
                        .no_record
                        .fetch_add(offset - gap_end, Ordering::Relaxed);
                    if gap_end > n {
                        self.stats.gaps.fetch_add(1, Ordering::Relaxed);
                        self.stats
                            .gap_records
                            .fetch_add(gap_end - n, Ordering::Relaxed);
                        tracing::warn!(
                            channel = %key.channel.0,
                            topic = open.target.0,
                            partition = open.target.1,
                            first = n,
                            last = gap_end - 1,
                            "Kafka gap: source offsets {n}..={} never arrived",
                            gap_end - 1
                        );
                    }
                }
            }
            self.parts
                .entry(open.target.clone())
                .or_insert(Partition {
                    next: None,
                    order: VecDeque::new(),
                })
                .next = Some(offset + 1);
            if let Err(e) = self.produce(&open.target, &record) {
                break Err(e);
            }
            let len = record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len);
            self.stats.produced.fetch_add(1, Ordering::Relaxed);
            self.stats.bytes.fetch_add(len as u64, Ordering::Relaxed);
        };
        open.pending.drain(..at);
        self.producer.poll(Duration::ZERO);
        result
    }

    /// A channel failed: the next one of its partition goes on, or, when
    /// its sender cut it short, the rest of that session's are dropped.
    fn failed(&mut self, key: ChannelKey, reason: &FailReason) -> ChannelOutcome {
        let (name, bytes) = match self.channels.remove(&key) {
            Some(o) => {
                if self.is_head(&o.target, key) {
                    if interrupted(reason) {
                        self.discard_rest(&o.target, key);
                    }
                    self.advance(&o.target);
                } else if let Some(p) = self.parts.get_mut(&o.target) {
                    p.order.retain(|k| *k != key);
                }
                (o.name, o.bytes)
            }
            None => match self.discarded.remove(&key) {
                Some(name) => (name, 0),
                None => (String::new(), 0),
            },
        };
        tracing::warn!(channel = %key.channel.0, name, "Kafka channel failed ({reason})");
        ChannelOutcome::new(
            key,
            name,
            bytes,
            &self.opts.brokers,
            Verdict::Failed {
                reason: reason.to_string(),
            },
        )
    }

    /// The first channel of `target`, `head`, was cut short by its sender
    /// (a restart, an abort, a vanished session): the sender did not send
    /// it whole, so it committed no offset from it on, and its next run
    /// sends those records again. The later channels of the same session
    /// for the partition are dropped (their records come again too) rather
    /// than produced past a hole the next run would fill.
    fn discard_rest(&mut self, target: &(String, i32), head: ChannelKey) {
        let Some(p) = self.parts.get_mut(target) else {
            return;
        };
        let later: Vec<ChannelKey> = p
            .order
            .iter()
            .copied()
            .filter(|k| k.session == head.session && *k != head)
            .collect();
        p.order.retain(|k| k.session != head.session || *k == head);
        for k in later {
            if let Some(o) = self.channels.remove(&k) {
                tracing::warn!(channel = %k.channel.0, name = o.name, "{DISCARDED}");
                self.discarded.insert(k, o.name);
            }
        }
    }

    /// Whether `key` is the first open channel of its partition.
    fn is_head(&self, target: &(String, i32), key: ChannelKey) -> bool {
        self.parts
            .get(target)
            .is_some_and(|p| p.order.front() == Some(&key))
    }

    /// The first channel of `target` ended: the next ones produce what
    /// they hold, and those whose verdict was already given are done.
    fn advance(&mut self, target: &(String, i32)) {
        loop {
            let Some(key) = self.parts.get_mut(target).and_then(|p| {
                p.order.pop_front();
                p.order.front().copied()
            }) else {
                return;
            };
            let Some(mut open) = self.channels.remove(&key) else {
                continue;
            };
            if let Err(e) = self.drain(key, &mut open) {
                tracing::error!(channel = %key.channel.0, name = open.name, "Kafka channel given up: {e}");
                continue;
            }
            if !open.done {
                self.channels.insert(key, open);
                return;
            }
            if !open.pending.is_empty() {
                tracing::error!(channel = %key.channel.0, name = open.name, left = open.pending.len(), "Kafka channel ends inside a record");
            }
        }
    }

    /// A channel's end: flush, then its verdict. A channel behind an
    /// earlier one of its partition is verified (its digest matched) and
    /// its records wait for their turn.
    fn complete(
        &mut self,
        key: ChannelKey,
        bytes: u64,
        digest: [u8; 32],
    ) -> Option<ChannelOutcome> {
        let mut open = self.channels.remove(&key)?;
        if !self.is_head(&open.target, key) {
            open.done = true;
            let name = open.name.clone();
            self.channels.insert(key, open);
            let verdict = Verdict::Verified {
                blake3: hex::encode(digest),
            };
            return Some(ChannelOutcome::new(
                key,
                name,
                bytes,
                &self.opts.brokers,
                verdict,
            ));
        }
        let target = open.target.clone();
        self.advance(&target);
        let flushed = self.flush_held();
        let failed = self.stats.failed.load(Ordering::Relaxed) - open.failed_before;
        let verdict = if !open.pending.is_empty() {
            Verdict::Failed {
                reason: format!(
                    "channel ends inside a record ({} bytes left)",
                    open.pending.len()
                ),
            }
        } else if let Err(e) = flushed {
            Verdict::Failed {
                reason: format!(
                    "far broker did not acknowledge within {} s: {e}",
                    self.opts.timeout.as_secs()
                ),
            }
        } else if failed > 0 {
            Verdict::Failed {
                reason: format!("{failed} records not acknowledged by the far broker"),
            }
        } else {
            Verdict::Verified {
                blake3: hex::encode(digest),
            }
        };
        Some(ChannelOutcome::new(
            key,
            open.name,
            bytes,
            &self.opts.brokers,
            verdict,
        ))
    }

    fn fail(key: ChannelKey, why: String) -> SinkError {
        SinkError {
            key,
            why: SinkFailure::Kafka(why),
        }
    }
}

/// Why a channel behind a cut-short one was dropped.
const DISCARDED: &str =
    "dropped: an earlier channel of its partition was cut short by its sender, whose next run sends these records again";

/// Whether the sender itself ended the channel before sending it whole
/// (so it committed no offset from it on).
fn interrupted(reason: &FailReason) -> bool {
    matches!(
        reason,
        FailReason::SenderRestarted | FailReason::SenderAborted | FailReason::SessionExpired
    )
}

/// How long the hold may stay full before the sink says so.
const STALL_WARNING: Duration = Duration::from_secs(5);

impl KafkaSink {
    /// Hands one record to the producer, waiting while the hold is full;
    /// a wait of [`STALL_WARNING`] or more is counted and reported once.
    #[expect(clippy::disallowed_methods, reason = "how long the hold stays full")]
    fn produce(&self, target: &(String, i32), record: &KafkaRecord<'_>) -> Result<(), String> {
        let mut out = Some(outgoing(target, record));
        let mut full_since = None;
        let mut warned = false;
        while let Some(rec) = out.take() {
            match self.producer.send(rec) {
                Ok(()) => {}
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    out = Some(back);
                    let since = *full_since.get_or_insert_with(std::time::Instant::now);
                    if !warned && since.elapsed() >= STALL_WARNING {
                        warned = true;
                        self.report_stall();
                    }
                    self.producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => {
                    return Err(format!(
                        "producing source offset {} into {}/{}: {e}",
                        record.source_offset, target.0, target.1
                    ))
                }
            }
        }
        if let (true, Some(since)) = (warned, full_since) {
            self.report_resumed(since.elapsed());
        }
        Ok(())
    }

    /// Waits until the far brokers acknowledged every record held, up to
    /// the timeout; a wait of [`STALL_WARNING`] or more is counted and
    /// reported once, as a full hold is. (The client's own `flush` waits
    /// in steps of 100 ms, which would cap the sink at ten channels a
    /// second; this polls in steps of 2 ms.)
    #[expect(clippy::disallowed_methods, reason = "how long the flush waits")]
    fn flush_held(&self) -> Result<(), KafkaError> {
        let start = std::time::Instant::now();
        let mut warned = false;
        // Sends what lingers now, without waiting.
        let _ = self.producer.flush(Duration::ZERO);
        loop {
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                if warned {
                    self.report_resumed(start.elapsed());
                }
                return Ok(());
            }
            if start.elapsed() >= self.opts.timeout {
                return Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut));
            }
            if !warned && start.elapsed() >= STALL_WARNING {
                warned = true;
                self.report_stall();
            }
            self.producer.poll(Duration::from_millis(2));
        }
    }

    /// Counts and reports that the far brokers took nothing for
    /// [`STALL_WARNING`] while records were held.
    fn report_stall(&self) {
        self.stats.stalls.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            brokers = self.opts.brokers,
            held = self.producer.in_flight_count(),
            "the far Kafka brokers {} have acknowledged nothing for {} s while records wait (hold {} MiB): \
             the receiver stops reading the link until they do; what the link loses meanwhile is counted as gaps",
            self.opts.brokers,
            STALL_WARNING.as_secs(),
            self.opts.hold_bytes >> 20
        );
    }

    /// Reports the end of a stall.
    fn report_resumed(&self, after: Duration) {
        tracing::info!(
            brokers = self.opts.brokers,
            "the far Kafka brokers take records again after {:.0} s",
            after.as_secs_f64()
        );
    }
}

/// The far record of `record`: its key, value, timestamp and headers, the
/// source header last, for `target`.
fn outgoing<'a>(
    target: &'a (String, i32),
    record: &'a KafkaRecord<'a>,
) -> BaseRecord<'a, [u8], [u8]> {
    let source = source_header(target.1, record.source_offset);
    let headers = record
        .headers
        .iter()
        .fold(
            OwnedHeaders::new_with_capacity(record.headers.len() + 1),
            |h, r| {
                h.insert(Header {
                    key: r.name,
                    value: r.value,
                })
            },
        )
        .insert(Header {
            key: SOURCE_HEADER,
            value: Some(source.as_bytes()),
        });
    let mut out = BaseRecord::<[u8], [u8]>::to(&target.0)
        .partition(target.1)
        .headers(headers);
    out.key = record.key;
    out.payload = record.value;
    match record.timestamp {
        RecordTimestamp::CreateTime(ms) | RecordTimestamp::LogAppendTime(ms) => {
            out = out.timestamp(ms);
        }
        RecordTimestamp::NotAvailable => {}
    }
    out
}

impl Sink for KafkaSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        if meta.kind == ChannelKind::Stream
            && !meta.aligned
            && ChannelLabel::parse(&meta.name).is_some()
        {
            Ok(())
        } else {
            Err(Refusal::NotKafka(meta.name.clone()))
        }
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        match event {
            SinkEvent::Opened { key, meta } => {
                let Some(label) = ChannelLabel::parse(&meta.name) else {
                    return Err(SinkError {
                        key,
                        why: SinkFailure::Refused(Refusal::NotKafka(meta.name)),
                    });
                };
                let target = (
                    format!("{}{}", self.opts.topic_prefix, label.topic),
                    label.partition,
                );
                if !self.parts.contains_key(&target) {
                    let next = self
                        .resume_point(&target.0, target.1)
                        .map_err(|e| Self::fail(key, e))?;
                    tracing::info!(
                        topic = target.0,
                        partition = target.1,
                        ?next,
                        "Kafka far partition resumed"
                    );
                    self.parts.insert(
                        target.clone(),
                        Partition {
                            next,
                            order: VecDeque::new(),
                        },
                    );
                }
                if let Some(p) = self.parts.get_mut(&target) {
                    // Channel ids grow within a session: an open that
                    // arrived late goes before the later channels.
                    let at = p
                        .order
                        .iter()
                        .position(|k| k.session == key.session && k.channel > key.channel)
                        .unwrap_or(p.order.len());
                    p.order.insert(at, key);
                }
                self.channels.insert(
                    key,
                    Open {
                        name: meta.name,
                        target,
                        pending: Vec::new(),
                        bytes: 0,
                        failed_before: self.stats.failed.load(Ordering::Relaxed),
                        vouched: label.from,
                        records: 0,
                        done: false,
                    },
                );
                Ok(None)
            }
            SinkEvent::Data { key, data, .. } => {
                let Some(mut open) = self.channels.remove(&key) else {
                    return Ok(None);
                };
                open.bytes += data.len() as u64;
                open.pending.extend_from_slice(&data);
                let r = if self.is_head(&open.target, key) {
                    self.drain(key, &mut open)
                } else {
                    Ok(())
                };
                self.channels.insert(key, open);
                r.map(|()| None).map_err(|e| Self::fail(key, e))
            }
            SinkEvent::Complete { key, bytes, .. } if self.discarded.contains_key(&key) => {
                let name = self.discarded.remove(&key).unwrap_or_default();
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &self.opts.brokers,
                    Verdict::Failed {
                        reason: DISCARDED.into(),
                    },
                )))
            }
            SinkEvent::Complete { key, bytes, digest } => Ok(self.complete(key, bytes, digest)),
            SinkEvent::Failed { key, reason } => Ok(Some(self.failed(key, &reason))),
            SinkEvent::Refused { .. }
            | SinkEvent::Gap { .. }
            | SinkEvent::Partial { .. }
            | SinkEvent::Assembled { .. } => Ok(None),
        }
    }
}

impl Drop for KafkaSink {
    fn drop(&mut self) {
        if let Err(e) = self.producer.flush(self.opts.timeout) {
            tracing::error!(
                brokers = self.opts.brokers,
                "Kafka sink: records not acknowledged at the end: {e}"
            );
        }
    }
}
