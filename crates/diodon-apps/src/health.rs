//! Link health on the receiving side: whether the link is up, how long
//! since the last valid datagram, which sender session is current and since
//! when, and the alarms an operator is told about. An alarm is one WARN line
//! (a sentence), one count in its counter (`diodon_link_alarms_*_total`) and
//! an entry in the recent-alarms list the status shows.
//!
//! ```text
//!  decoder thread: every loop  HealthMonitor::observe(now, wall, core stats)
//!                  every event HealthMonitor::on_event(event)
//!        │ raises                                       │ writes
//!        ▼                                              ▼
//!  tracing::warn!(sentence)                 LinkHealth (atomics + recent alarms)
//!                                           ◄── metrics (/metrics, /counters), summary
//! ```
//!
//! The alarms: the link silent longer than `silence_alarm` (the sender
//! beacons while it runs, idle or not, so silence means the link or the
//! sender is down) and up again; a sender restart (a new session that cut
//! the old one's channels short; a new session after a finished one is only
//! a notice); a
//! configuration mismatch; datagrams that fail their MAC (a wrong key) or
//! their CRC32C (corruption); a channel failed.

use diodon_proto::{Event, FailReason, Mismatch, ReceiverStats, SessionId, Timestamp};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How many recent alarms the status keeps (older ones are only counted).
pub const RECENT_ALARMS: usize = 64;

/// Datagrams failing their check, with none accepted, within one
/// observation window that make an integrity alarm (a few corrupted
/// datagrams among good ones are counted, not alarmed).
const CHECK_FAILURES_FOR_ALARM: u64 = 8;

/// The window over which failed checks are weighed against accepted datagrams.
const CHECK_WINDOW: Duration = Duration::from_secs(1);

/// After an overrun alarm, this long without a new kernel drop ends the
/// episode: the next drop raises a new alarm (a receiver that keeps
/// falling behind is reported once per episode, not once per batch).
const OVERRUN_QUIET: Duration = Duration::from_secs(10);

/// What an alarm is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlarmKind {
    /// No valid datagram for longer than the silence threshold.
    LinkSilent,
    /// Valid datagrams again after `LinkSilent` (a notice, not counted as an alarm).
    LinkUp,
    /// A new sender session replaced the current one while channels of the
    /// old one were unfinished (they failed).
    SenderRestarted,
    /// A new sender session after the old one had finished its channels
    /// (the next one-shot `diodon send`): a notice, not counted as an alarm.
    NewSession,
    /// The sender's settings do not match this receiver's.
    ConfigMismatch,
    /// Datagrams fail their MAC: the keys differ.
    WrongKey,
    /// Datagrams fail their CRC32C: corrupted on the link.
    Corruption,
    /// A channel failed.
    ChannelFailed,
    /// The kernel dropped datagrams on the receiving socket: its buffer was
    /// full because this receiver did not keep up with the link.
    ReceiverOverrun,
}

/// One alarm as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Alarm {
    /// When, Unix milliseconds.
    pub at_unix_ms: u64,
    /// What about.
    pub kind: AlarmKind,
    /// The sentence logged.
    pub message: String,
}

diodon_counters::counters! {
    /// The link as the receiver sees it, and its alarms.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct LinkHealthCounters in Diodon "link" {
        up: gauge Count "up" "1 while valid datagrams arrive, 0 once none arrived for the silence threshold (and before the first).",
        since_last_datagram: gauge Seconds "since_last_datagram" "Seconds since the last valid datagram (since the start before the first).",
        session_started: gauge Seconds "session_started" "When the current sender session was first heard, Unix seconds (0: none yet).",
        alarms_silent: counter Count "alarms_silent" "Times the link went silent for longer than the threshold.",
        alarms_sender_restarted: counter Count "alarms_sender_restarted" "Times a new sender session replaced one whose channels were unfinished (they failed).",
        alarms_config_mismatch: counter Count "alarms_config_mismatch" "Configuration mismatches between sender and receiver.",
        alarms_wrong_key: counter Count "alarms_wrong_key" "Episodes of datagrams failing their MAC with none accepted (the keys differ).",
        alarms_corruption: counter Count "alarms_corruption" "Episodes of datagrams failing their CRC32C with none accepted.",
        alarms_channel_failed: counter Count "alarms_channel_failed" "Channels failed.",
        alarms_receiver_overrun: counter Count "alarms_receiver_overrun" "Episodes of the kernel dropping datagrams on the receiving socket (its buffer full: this receiver did not keep up with the link).",
    }
}

/// The live link state, shared with the metrics and the status.
#[derive(Debug, Default)]
pub struct LinkHealth {
    up: AtomicBool,
    last_valid_unix_ms: AtomicU64,
    started_unix_ms: AtomicU64,
    session: AtomicU64,
    session_started_unix_ms: AtomicU64,
    alarms: [AtomicU64; 7],
    recent: Mutex<VecDeque<Alarm>>,
}

/// The link state at one moment, for the status and the summary.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkStatus {
    /// Valid datagrams are arriving.
    pub up: bool,
    /// The last valid datagram, Unix ms (none yet: `None`).
    pub last_datagram_unix_ms: Option<u64>,
    /// The current sender session, hex.
    pub session: Option<String>,
    /// When it was first heard, Unix ms.
    pub session_started_unix_ms: Option<u64>,
    /// The most recent alarms, oldest first.
    pub recent_alarms: Vec<Alarm>,
}

impl LinkHealth {
    fn count_index(kind: AlarmKind) -> Option<usize> {
        match kind {
            AlarmKind::LinkSilent => Some(0),
            AlarmKind::SenderRestarted => Some(1),
            AlarmKind::ConfigMismatch => Some(2),
            AlarmKind::WrongKey => Some(3),
            AlarmKind::Corruption => Some(4),
            AlarmKind::ChannelFailed => Some(5),
            AlarmKind::ReceiverOverrun => Some(6),
            AlarmKind::LinkUp | AlarmKind::NewSession => None,
        }
    }

    /// Counters now; `now_unix_ms` gives the age of the last datagram.
    pub fn counters(&self, now_unix_ms: u64) -> LinkHealthCounters {
        let a = |i: usize| self.alarms[i].load(Ordering::Relaxed);
        let last = self.last_valid_unix_ms.load(Ordering::Relaxed);
        let since = if last == 0 {
            self.started_unix_ms.load(Ordering::Relaxed)
        } else {
            last
        };
        LinkHealthCounters {
            up: u64::from(self.up.load(Ordering::Relaxed)),
            since_last_datagram: now_unix_ms.saturating_sub(since) / 1000,
            session_started: self.session_started_unix_ms.load(Ordering::Relaxed) / 1000,
            alarms_silent: a(0),
            alarms_sender_restarted: a(1),
            alarms_config_mismatch: a(2),
            alarms_wrong_key: a(3),
            alarms_corruption: a(4),
            alarms_channel_failed: a(5),
            alarms_receiver_overrun: a(6),
        }
    }

    /// The state and the recent alarms.
    pub fn status(&self) -> LinkStatus {
        let nonzero = |v: u64| (v != 0).then_some(v);
        let session = self.session.load(Ordering::Relaxed);
        LinkStatus {
            up: self.up.load(Ordering::Relaxed),
            last_datagram_unix_ms: nonzero(self.last_valid_unix_ms.load(Ordering::Relaxed)),
            session: (session != 0).then(|| SessionId(session).to_string()),
            session_started_unix_ms: nonzero(self.session_started_unix_ms.load(Ordering::Relaxed)),
            recent_alarms: self
                .recent
                .lock()
                .map(|r| r.iter().cloned().collect())
                .unwrap_or_default(),
        }
    }

    /// Counts, logs and lists an alarm.
    fn raise(&self, at_unix_ms: u64, kind: AlarmKind, message: String) {
        self.record(at_unix_ms, kind, message, true);
    }

    fn record(&self, at_unix_ms: u64, kind: AlarmKind, message: String, log: bool) {
        if let Some(i) = Self::count_index(kind) {
            self.alarms[i].fetch_add(1, Ordering::Relaxed);
            if log {
                tracing::warn!(alarm = ?kind, "{message}");
            }
        } else if log {
            tracing::info!(notice = ?kind, "{message}");
        }
        if let Ok(mut r) = self.recent.lock() {
            if r.len() == RECENT_ALARMS {
                r.pop_front();
            }
            r.push_back(Alarm {
                at_unix_ms,
                kind,
                message,
            });
        }
    }
}

/// Watches the receiver core and raises alarms into a [`LinkHealth`].
/// Owned by the decoder thread; time comes in as arguments.
#[derive(Debug)]
pub struct HealthMonitor {
    silence_alarm: Duration,
    /// What failed checks with nothing accepted mean: `WrongKey` when
    /// datagrams carry a MAC, `Corruption` under CRC32C.
    check_alarm: AlarmKind,
    /// Monotonic time of the last valid datagram (or of the start).
    last_valid: Timestamp,
    accepted: u64,
    silent: bool,
    /// Channels the core failed because a new session replaced theirs.
    restart_failures: u64,
    window_start: Timestamp,
    window_bad: u64,
    window_accepted: u64,
    bad_check: u64,
    integrity_alarmed: bool,
    /// The socket's kernel drops seen so far.
    socket_drops: u64,
    /// When the kernel last dropped, while an overrun episode lasts.
    overrun_since: Option<Timestamp>,
}

impl HealthMonitor {
    /// A monitor starting at `now` (`wall_ms`: the same moment, Unix ms).
    /// `keyed`: datagrams carry a MAC or an AEAD tag (a failed check is then
    /// a wrong key).
    pub fn new(
        health: &LinkHealth,
        silence_alarm: Duration,
        keyed: bool,
        now: Timestamp,
        wall_ms: u64,
    ) -> Self {
        health.started_unix_ms.store(wall_ms, Ordering::Relaxed);
        HealthMonitor {
            silence_alarm,
            check_alarm: if keyed {
                AlarmKind::WrongKey
            } else {
                AlarmKind::Corruption
            },
            last_valid: now,
            accepted: 0,
            silent: false,
            restart_failures: 0,
            window_start: now,
            window_bad: 0,
            window_accepted: 0,
            bad_check: 0,
            integrity_alarmed: false,
            socket_drops: 0,
            overrun_since: None,
        }
    }

    /// Looks at the core's counters at `now`: valid datagrams since the last
    /// call keep the link up; none for `silence_alarm` raise `LinkSilent`;
    /// failed checks with nothing accepted raise `WrongKey`/`Corruption`.
    pub fn observe(
        &mut self,
        health: &LinkHealth,
        now: Timestamp,
        wall_ms: u64,
        stats: &ReceiverStats,
    ) {
        let accepted = stats.accepted.saturating_sub(self.accepted);
        self.accepted = stats.accepted;
        let bad = stats.bad_check.saturating_sub(self.bad_check);
        self.bad_check = stats.bad_check;
        if accepted > 0 {
            let quiet_for = now.saturating_duration_since(self.last_valid);
            self.last_valid = now;
            health.last_valid_unix_ms.store(wall_ms, Ordering::Relaxed);
            health.up.store(true, Ordering::Relaxed);
            self.integrity_alarmed = false;
            if self.silent {
                self.silent = false;
                health.raise(
                    wall_ms,
                    AlarmKind::LinkUp,
                    format!(
                        "link up again: valid datagrams after {:.1} s of silence",
                        quiet_for.as_secs_f64()
                    ),
                );
            }
        } else if !self.silent
            && now.saturating_duration_since(self.last_valid) >= self.silence_alarm
        {
            self.silent = true;
            health.up.store(false, Ordering::Relaxed);
            let message = if self.accepted > 0 {
                format!(
                    "link silent: no valid datagram for {} s (the sender beacons while it runs: \
                     the link or the sender is down)",
                    self.silence_alarm.as_secs()
                )
            } else {
                format!(
                    "link silent: no valid datagram since the start {} s ago (is a sender \
                     running, and sending to this address?)",
                    self.silence_alarm.as_secs()
                )
            };
            health.raise(wall_ms, AlarmKind::LinkSilent, message);
        }
        self.window_bad += bad;
        self.window_accepted += accepted;
        if now.saturating_duration_since(self.window_start) >= CHECK_WINDOW {
            let (bad, ok) = (self.window_bad, self.window_accepted);
            self.window_start = now;
            self.window_bad = 0;
            self.window_accepted = 0;
            if bad >= CHECK_FAILURES_FOR_ALARM && ok == 0 && !self.integrity_alarmed {
                self.integrity_alarmed = true;
                let kind = self.check_alarm;
                let message = if kind == AlarmKind::WrongKey {
                    format!(
                        "wrong key: {bad} datagrams in the last second failed their MAC or did not \
                         decrypt, and none passed (the sender's key or key id differs from this \
                         receiver's --key-file)"
                    )
                } else {
                    format!(
                        "{bad} datagrams in the last second failed their CRC32C and none passed \
                         (corrupted on the link, or a sender with a key: give this receiver the key)"
                    )
                };
                health.raise(wall_ms, kind, message);
            }
        }
    }

    /// Looks at the receiving socket's kernel drops at `now` (`total`: all
    /// so far; `rcvbuf`: the buffer the kernel granted, bytes). New drops
    /// start an overrun episode with one alarm; [`OVERRUN_QUIET`] without
    /// a drop ends it.
    pub fn observe_socket(
        &mut self,
        health: &LinkHealth,
        now: Timestamp,
        wall_ms: u64,
        total: u64,
        rcvbuf: usize,
    ) {
        let new = total.saturating_sub(self.socket_drops);
        self.socket_drops = self.socket_drops.max(total);
        if new == 0 {
            if self
                .overrun_since
                .is_some_and(|t| now.saturating_duration_since(t) >= OVERRUN_QUIET)
            {
                self.overrun_since = None;
            }
            return;
        }
        let ongoing = self.overrun_since.replace(now).is_some();
        if !ongoing {
            let packets = if new == 1 { "packet" } else { "packets" };
            health.raise(
                wall_ms,
                AlarmKind::ReceiverOverrun,
                format!(
                    "receiver overrun: the kernel dropped {new} {packets} on this receiver's socket \
                     ({total} in all) because its receive buffer ({rcvbuf} bytes) was full: this \
                     receiver does not keep up with the link. Repair symbols cover such losses \
                     only while they last; pace the sender below this receiver's rate \
                     (send --rate), or give the receiver a larger --rcvbuf or a faster core"
                ),
            );
        }
    }

    /// Raises what a core event means for the operator.
    pub fn on_event(&mut self, health: &LinkHealth, wall_ms: u64, event: &Event) {
        match event {
            Event::SessionStarted { session } => {
                health.session.store(session.0, Ordering::Relaxed);
                health
                    .session_started_unix_ms
                    .store(wall_ms, Ordering::Relaxed);
            }
            Event::SessionRestarted { old, new } => {
                health.session.store(new.0, Ordering::Relaxed);
                health
                    .session_started_unix_ms
                    .store(wall_ms, Ordering::Relaxed);
                let failed = std::mem::take(&mut self.restart_failures);
                if failed > 0 {
                    health.raise(
                        wall_ms,
                        AlarmKind::SenderRestarted,
                        format!(
                            "sender restarted: session {new} replaced {old}, whose {failed} \
                             unfinished channel(s) failed"
                        ),
                    );
                } else {
                    health.raise(
                        wall_ms,
                        AlarmKind::NewSession,
                        format!(
                            "new sender session {new} (session {old} had finished its channels)"
                        ),
                    );
                }
            }
            Event::ConfigMismatch(m) => health.raise(
                wall_ms,
                AlarmKind::ConfigMismatch,
                format!("configuration mismatch: {}", describe(m)),
            ),
            // The writer logs a failed channel with its name and where its
            // bytes went; here it is counted and listed, not logged twice.
            Event::ChannelFailed { channel, reason } => {
                if *reason == FailReason::SenderRestarted {
                    self.restart_failures += 1;
                }
                health.record(
                    wall_ms,
                    AlarmKind::ChannelFailed,
                    format!("channel {channel} failed: {reason}"),
                    false,
                );
            }
            _ => {}
        }
    }
}

/// A mismatch in a sentence an operator can act on.
pub fn describe(m: &Mismatch) -> String {
    match m {
        Mismatch::Version(v) => format!(
            "datagrams of protocol version {v} arrive; this receiver speaks version {} \
             (run the same Diodon version on both sides)",
            diodon_proto::wire::VERSION
        ),
        Mismatch::Integrity {
            datagram_keyed: true,
        } => "the sender signs its datagrams with a key and this receiver has none \
              (give it the same --key-file)"
            .to_owned(),
        Mismatch::Integrity {
            datagram_keyed: false,
        } => "the sender sends without a key and this receiver expects one \
              (give the sender the same --key-file, or remove it here)"
            .to_owned(),
        Mismatch::Encryption {
            datagram_encrypted: true,
        } => "the sender encrypts its datagrams and this receiver expects them signed only \
              (give it --encrypt too)"
            .to_owned(),
        Mismatch::Encryption {
            datagram_encrypted: false,
        } => "the sender signs its datagrams without encrypting them and this receiver \
              requires encryption (give the sender --encrypt, or remove it here)"
            .to_owned(),
        Mismatch::SymbolTooLarge(size) => format!(
            "the sender's symbols are {size} bytes, more than this receiver accepts \
             (its --mtu is larger than this receiver's: use the same --mtu on both sides)"
        ),
        Mismatch::DeltaT {
            sender_ms,
            receiver_ms,
        } => format!(
            "the sender announces a Δt of {sender_ms} ms, longer than this receiver's {receiver_ms} ms \
             (its state would be freed too early: raise --delta-t here to at least the sender's)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_micros(ms * 1000)
    }

    fn stats(accepted: u64, bad_check: u64) -> ReceiverStats {
        ReceiverStats {
            accepted,
            bad_check,
            ..ReceiverStats::default()
        }
    }

    #[test]
    fn kernel_drops_raise_one_overrun_alarm_per_episode() {
        let h = LinkHealth::default();
        let mut m = HealthMonitor::new(&h, Duration::from_secs(5), false, at(0), 1_000_000);
        m.observe_socket(&h, at(100), 1_000_100, 0, 1 << 20);
        assert_eq!(h.counters(1_000_100).alarms_receiver_overrun, 0);
        // Drops in several batches of one episode: one alarm.
        m.observe_socket(&h, at(200), 1_000_200, 40, 1 << 20);
        m.observe_socket(&h, at(300), 1_000_300, 90, 1 << 20);
        m.observe_socket(&h, at(9_000), 1_009_000, 90, 1 << 20);
        m.observe_socket(&h, at(9_100), 1_009_100, 95, 1 << 20);
        assert_eq!(h.counters(1_009_100).alarms_receiver_overrun, 1);
        let st = h.status();
        let alarm = &st.recent_alarms[0];
        assert_eq!(alarm.kind, AlarmKind::ReceiverOverrun);
        assert!(
            alarm.message.contains("dropped 40 packets")
                && alarm.message.contains("1048576 bytes")
                && alarm.message.contains("--rate"),
            "{}",
            alarm.message
        );
        // Ten quiet seconds end the episode; the next drop is a new alarm.
        m.observe_socket(&h, at(19_100), 1_019_100, 95, 1 << 20);
        m.observe_socket(&h, at(19_200), 1_019_200, 96, 1 << 20);
        assert_eq!(h.counters(1_019_200).alarms_receiver_overrun, 2);
        assert!(h.status().recent_alarms[1]
            .message
            .contains("dropped 1 packet on"));
    }

    #[test]
    fn silence_raises_one_alarm_per_episode_and_a_notice_when_it_ends() {
        let h = LinkHealth::default();
        let mut m = HealthMonitor::new(&h, Duration::from_secs(2), false, at(0), 1_000_000);
        m.observe(&h, at(100), 1_000_100, &stats(5, 0));
        assert_eq!(h.counters(1_000_100).up, 1);
        m.observe(&h, at(2_000), 1_002_000, &stats(5, 0));
        assert_eq!(h.counters(1_002_000).alarms_silent, 0, "1.9 s is not 2 s");
        m.observe(&h, at(2_100), 1_002_100, &stats(5, 0));
        m.observe(&h, at(9_000), 1_009_000, &stats(5, 0));
        let s = h.counters(1_009_000);
        assert_eq!((s.up, s.alarms_silent, s.since_last_datagram), (0, 1, 8));
        m.observe(&h, at(9_100), 1_009_100, &stats(6, 0));
        let st = h.status();
        assert!(st.up);
        let kinds: Vec<AlarmKind> = st.recent_alarms.iter().map(|a| a.kind).collect();
        assert_eq!(kinds, [AlarmKind::LinkSilent, AlarmKind::LinkUp]);
        assert!(st.recent_alarms[1].message.contains("9.0 s of silence"));
    }

    #[test]
    fn failed_macs_with_nothing_accepted_are_a_wrong_key_once() {
        let h = LinkHealth::default();
        let mut m = HealthMonitor::new(&h, Duration::from_secs(60), true, at(0), 0);
        m.observe(&h, at(500), 500, &stats(0, 40));
        m.observe(&h, at(1_000), 1_000, &stats(0, 80));
        m.observe(&h, at(2_000), 2_000, &stats(0, 160));
        let s = h.counters(2_000);
        assert_eq!((s.alarms_wrong_key, s.alarms_corruption), (1, 0));
        let msg = &h.status().recent_alarms[0].message;
        assert!(msg.starts_with("wrong key: 80 datagrams"), "{msg}");
        // Good datagrams end the episode; a new one alarms again.
        m.observe(&h, at(2_500), 2_500, &stats(10, 160));
        m.observe(&h, at(3_100), 3_100, &stats(10, 170));
        m.observe(&h, at(4_200), 4_200, &stats(10, 200));
        assert_eq!(h.counters(4_200).alarms_wrong_key, 2);
    }

    #[test]
    fn a_few_corrupted_datagrams_among_good_ones_are_no_alarm() {
        let h = LinkHealth::default();
        let mut m = HealthMonitor::new(&h, Duration::from_secs(60), false, at(0), 0);
        m.observe(&h, at(1_000), 1_000, &stats(1_000, 50));
        m.observe(&h, at(2_000), 2_000, &stats(2_000, 100));
        assert_eq!(h.counters(2_000).alarms_corruption, 0);
    }

    #[test]
    fn events_become_sentences_not_debug_values() {
        let h = LinkHealth::default();
        let mut m = HealthMonitor::new(&h, Duration::from_secs(60), false, at(0), 0);
        m.on_event(
            &h,
            10,
            &Event::ConfigMismatch(Mismatch::Integrity {
                datagram_keyed: true,
            }),
        );
        m.on_event(
            &h,
            20,
            &Event::SessionStarted {
                session: SessionId(0xabc),
            },
        );
        m.on_event(
            &h,
            25,
            &Event::ChannelFailed {
                channel: diodon_proto::ChannelId(1),
                reason: FailReason::SenderRestarted,
            },
        );
        m.on_event(
            &h,
            30,
            &Event::SessionRestarted {
                old: SessionId(0xabc),
                new: SessionId(0xdef),
            },
        );
        // The next session after a finished one is a notice, not an alarm.
        m.on_event(
            &h,
            40,
            &Event::SessionRestarted {
                old: SessionId(0xdef),
                new: SessionId(0x123),
            },
        );
        let st = h.status();
        assert_eq!(st.session_started_unix_ms, Some(40));
        let kinds: Vec<AlarmKind> = st.recent_alarms.iter().map(|a| a.kind).collect();
        assert_eq!(
            kinds,
            [
                AlarmKind::ConfigMismatch,
                AlarmKind::ChannelFailed,
                AlarmKind::SenderRestarted,
                AlarmKind::NewSession
            ]
        );
        assert!(st.recent_alarms[2].message.contains("whose 1 unfinished"));
        for a in &st.recent_alarms {
            assert!(
                !a.message.contains('{') && !a.message.contains("datagram_keyed"),
                "{}",
                a.message
            );
        }
        assert!(st.recent_alarms[0].message.contains("--key-file"));
        let s = h.counters(30);
        assert_eq!(
            (s.alarms_config_mismatch, s.alarms_sender_restarted),
            (1, 1)
        );
    }

    #[test]
    fn the_recent_list_is_bounded() {
        let h = LinkHealth::default();
        for i in 0..(RECENT_ALARMS as u64 + 10) {
            h.raise(i, AlarmKind::ChannelFailed, format!("channel {i} failed"));
        }
        let st = h.status();
        assert_eq!(st.recent_alarms.len(), RECENT_ALARMS);
        assert_eq!(st.recent_alarms[0].at_unix_ms, 10);
        assert_eq!(
            h.counters(0).alarms_channel_failed,
            RECENT_ALARMS as u64 + 10
        );
    }
}
