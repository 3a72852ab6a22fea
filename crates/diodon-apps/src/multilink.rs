//! Several links from one host (`send --to A --to B …`): which link a
//! channel takes, and each link's health. Every link is its own sender
//! core (its own session, pacing, socket and counters, `crate::send`);
//! one [`crate::SourceHandle`] spreads the sources' channels over them.
//!
//! ```text
//!  SourceHandle::open_keyed(meta, key) ─► pick(key, links up) ─► that link's queue ─► its core
//!  core thread, every 100 ms: BatchSender::path_state(receiver) ─► LinkWatch ─► LinkHealth.up
//!    down: its open channels aborted (a verdict, not a silent loss), new ones too,
//!          reported once; up again: reported, new channels come back (same hash)
//! ```
//!
//! **Stable hash.** A channel's name picks the link by rendezvous hashing:
//! each link scores BLAKE3(name, link number) and the highest score among
//! the links that are up wins. The same name takes the same link in every
//! run and process while the links are up; a link going down moves only
//! its own names, and they come back when it does.
//!
//! **Flows.** Channels opened with a key (the segments of one Kafka
//! partition) are a flow that must keep its order, and there are few of
//! them (six partitions over two links by hash alone split 4 : 2 two times
//! in three). [`Flows`] gives a new key its best-scoring link among those
//! up that carries fewer than its share of keys (rendezvous with bounded
//! load: six partitions split 3 : 3), and keeps it there: a key moves only
//! when its link goes down, never back while its segments may still be in
//! flight on the other (its far partition would lose its order); a link
//! that comes back takes new keys.

use diodon_io::BatchSender;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

diodon_counters::counters! {
    /// One link's health (a snapshot of [`LinkHealth`]), exported with the
    /// link's receiver address as a label.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
    pub struct LinkCounters in Diodon "link" {
        up: gauge Count "up" "1 while the link's interface is up and has a carrier, else 0.",
        down_events: counter Count "down_events" "Times the link went down.",
        aborted: counter Count "channels_aborted" "Channels aborted because their link went down (their sources see them fail).",
        turned_away: counter Count "channels_turned_away" "Channels that reached the link while it was down: aborted at once (their sources see them fail; a sync sends the file again).",
        datagrams: counter Count "datagrams" "Datagrams handed to the kernel on this link.",
        sent: counter Count "channels_sent" "Channels this link sent complete.",
        failed: counter Count "channels_failed" "Channels aborted or refused on this link (for any reason).",
    }
}

/// One link of a multi-link sender: where it goes and whether it is up
/// (written by its core thread, read by the sources' handle).
#[derive(Debug)]
pub struct LinkHealth {
    /// The link's receiver.
    pub dest: SocketAddr,
    up: AtomicBool,
    down_events: AtomicU64,
    aborted: AtomicU64,
    turned_away: AtomicU64,
    datagrams: AtomicU64,
    sent: AtomicU64,
    failed: AtomicU64,
    state: Mutex<String>,
}

impl LinkHealth {
    /// A link to `dest`, taken as up until its core looks.
    pub fn new(dest: SocketAddr) -> Arc<Self> {
        Arc::new(LinkHealth {
            dest,
            up: AtomicBool::new(true),
            down_events: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            turned_away: AtomicU64::new(0),
            datagrams: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            state: Mutex::new(String::new()),
        })
    }

    /// Whether new channels may take this link.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Why the link was last seen down (empty while it never was).
    pub fn last_down(&self) -> String {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The counters now.
    pub fn snapshot(&self) -> LinkCounters {
        LinkCounters {
            up: u64::from(self.is_up()),
            down_events: self.down_events.load(Ordering::Relaxed),
            aborted: self.aborted.load(Ordering::Relaxed),
            turned_away: self.turned_away.load(Ordering::Relaxed),
            datagrams: self.datagrams.load(Ordering::Relaxed),
            sent: self.sent.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_aborted(&self, n: u64) {
        self.aborted.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn count_turned_away(&self) {
        self.turned_away.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_ended(&self, sent: bool) {
        let c = if sent { &self.sent } else { &self.failed };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A channel counted sent is lost after all (it ended just before the
    /// link was seen down).
    pub(crate) fn count_recalled(&self) {
        let _ = self
            .sent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.aborted.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_datagrams(&self, n: u64) {
        self.datagrams.fetch_add(n, Ordering::Relaxed);
    }
}

/// The link `key` takes among `links` links, of which `is_up` tells
/// which are up: the highest rendezvous score among the links that are
/// up, or among all when none is (their cores refuse the channel, so it
/// fails visibly).
pub fn pick(key: &[u8], links: usize, is_up: impl Fn(usize) -> bool) -> usize {
    let best = |only_up: bool| {
        (0..links)
            .filter(|&i| !only_up || is_up(i))
            .max_by_key(|&i| score(key, i))
    };
    best(true).or_else(|| best(false)).unwrap_or(0)
}

/// The links of keyed flows (module doc): sticky, at most their share per
/// link when they were placed.
#[derive(Debug, Default)]
pub(crate) struct Flows {
    of: HashMap<Vec<u8>, usize>,
    per_link: Vec<usize>,
}

impl Flows {
    /// The link of flow `key` among `links` links, of which `is_up` tells
    /// which are up.
    pub(crate) fn pick(
        &mut self,
        key: &[u8],
        links: usize,
        is_up: impl Fn(usize) -> bool,
    ) -> usize {
        self.per_link.resize(links, 0);
        if let Some(&at) = self.of.get(key) {
            if is_up(at) {
                return at;
            }
            self.per_link[at] = self.per_link[at].saturating_sub(1);
        }
        let mut up: Vec<usize> = (0..links).filter(|&i| is_up(i)).collect();
        if up.is_empty() {
            // None is up: the hash picks, and that core turns it away.
            return pick(key, links, |_| false);
        }
        up.sort_by_key(|&i| std::cmp::Reverse(score(key, i)));
        let placed: usize = up.iter().map(|&i| self.per_link[i]).sum();
        let share = (placed + 1).div_ceil(up.len());
        let at = up
            .iter()
            .copied()
            .find(|&i| self.per_link[i] < share)
            .unwrap_or(up[0]);
        self.per_link[at] += 1;
        self.of.insert(key.to_vec(), at);
        at
    }
}

/// The rendezvous score of `key` on link number `link`.
fn score(key: &[u8], link: usize) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(&(link as u64).to_le_bytes());
    h.update(key);
    let out = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&out.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// What a link's core learned when it looked at its path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The link went down: abort what is open on it.
    Down(String),
    /// It is up again.
    Up,
}

/// Looks a link must be seen up after a failed send before it counts as
/// up again (about a second at the core's 100 ms).
const LOOKS_AFTER_FAILED_SEND: u32 = 10;

/// A core thread's view of its link: looks at the path to the receiver
/// (the route's interface and its flags) and tells a change once.
#[derive(Debug)]
pub(crate) struct LinkWatch {
    pub(crate) health: Arc<LinkHealth>,
    device: Option<String>,
    /// Good looks still needed after a failed send.
    settle: u32,
}

impl LinkWatch {
    pub(crate) fn new(health: Arc<LinkHealth>, device: Option<String>) -> Self {
        LinkWatch {
            health,
            device,
            settle: 0,
        }
    }

    /// Looks at the path now, through the link's socket.
    pub(crate) fn look(&mut self, udp: &BatchSender) -> Option<Change> {
        let state = udp.path_state(self.health.dest.ip(), self.device.as_deref());
        if state.is_up() && self.settle > 0 {
            self.settle -= 1;
            return None;
        }
        self.seen(state.is_up(), || state.to_string())
    }

    /// A send to the receiver failed with a path error (network or host
    /// unreachable, interface down): the link is down whatever its flags
    /// say, for a second at least.
    pub(crate) fn send_failed(&mut self, why: &str) -> Option<Change> {
        self.settle = LOOKS_AFTER_FAILED_SEND;
        self.seen(false, || why.to_owned())
    }

    fn seen(&self, up: bool, why: impl FnOnce() -> String) -> Option<Change> {
        let was_up = self.health.up.swap(up, Ordering::Relaxed);
        match (was_up, up) {
            (true, false) => {
                self.health.down_events.fetch_add(1, Ordering::Relaxed);
                let why = why();
                if let Ok(mut s) = self.health.state.lock() {
                    s.clone_from(&why);
                }
                Some(Change::Down(why))
            }
            (false, true) => Some(Change::Up),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(n: usize) -> Vec<Arc<LinkHealth>> {
        (0..n)
            .map(|i| LinkHealth::new(SocketAddr::from(([127, 0, 0, 1], 4000 + i as u16))))
            .collect()
    }

    fn pick_of(key: &str, l: &[Arc<LinkHealth>]) -> usize {
        pick(key.as_bytes(), l.len(), |i| l[i].is_up())
    }

    #[test]
    fn keys_spread_evenly_and_stay_put() {
        let l = links(2);
        let keys: Vec<String> = (0..1000).map(|i| format!("kafka:src/{i}")).collect();
        let first: Vec<usize> = keys.iter().map(|k| pick_of(k, &l)).collect();
        let on_zero = first.iter().filter(|&&i| i == 0).count();
        assert!(
            (400..=600).contains(&on_zero),
            "{on_zero} of 1000 on link 0"
        );
        let again: Vec<usize> = keys.iter().map(|k| pick_of(k, &l)).collect();
        assert_eq!(first, again, "the same key takes the same link");
        // Fixed across versions and processes: the hash is BLAKE3.
        assert_eq!(score(b"kafka:src/0", 0), score(b"kafka:src/0", 0));
    }

    #[test]
    fn a_down_link_moves_only_its_keys_and_gets_them_back() {
        let l = links(3);
        let keys: Vec<String> = (0..300).map(|i| format!("file-{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| pick_of(k, &l)).collect();
        l[1].up.store(false, Ordering::Relaxed);
        for (k, &b) in keys.iter().zip(&before) {
            let now = pick_of(k, &l);
            assert_ne!(now, 1, "{k} took the down link");
            if b != 1 {
                assert_eq!(now, b, "{k} moved although its link stayed up");
            }
        }
        l[1].up.store(true, Ordering::Relaxed);
        let after: Vec<usize> = keys.iter().map(|k| pick_of(k, &l)).collect();
        assert_eq!(before, after);
        for h in &l {
            h.up.store(false, Ordering::Relaxed);
        }
        assert_eq!(
            pick_of("file-1", &l),
            before[1],
            "all down: the hash still picks"
        );
    }

    #[test]
    fn flows_split_evenly_keep_their_link_and_move_only_when_it_is_down() {
        let l = links(2);
        let up = |i: usize| l[i].is_up();
        let mut flows = Flows::default();
        let keys: Vec<String> = (0..6).map(|p| format!("src/{p}")).collect();
        let first: Vec<usize> = keys
            .iter()
            .map(|k| flows.pick(k.as_bytes(), 2, up))
            .collect();
        assert_eq!(first.iter().filter(|&&i| i == 0).count(), 3, "{first:?}");
        // Sticky: asked again, each keeps its link.
        for (k, &at) in keys.iter().zip(&first) {
            assert_eq!(flows.pick(k.as_bytes(), 2, up), at);
        }
        // Link 1 down: its flows move to link 0; link 0's stay.
        l[1].up.store(false, Ordering::Relaxed);
        let down: Vec<usize> = keys
            .iter()
            .map(|k| flows.pick(k.as_bytes(), 2, up))
            .collect();
        assert_eq!(down, [0; 6]);
        // Back up: nobody moves back (their segments may be in flight on
        // link 0); a new flow takes link 1, which has room.
        l[1].up.store(true, Ordering::Relaxed);
        let after: Vec<usize> = keys
            .iter()
            .map(|k| flows.pick(k.as_bytes(), 2, up))
            .collect();
        assert_eq!(after, [0; 6]);
        assert_eq!(flows.pick(b"src/6", 2, up), 1);
        assert_eq!(flows.pick(b"src/7", 2, up), 1);
    }

    #[test]
    fn a_watch_tells_each_change_once() {
        let l = links(1);
        let udp = BatchSender::open(&diodon_io::UdpConfig::new(
            "127.0.0.1:0".parse().expect("address"),
        ))
        .expect("a socket");
        let mut w = LinkWatch::new(Arc::clone(&l[0]), Some("dd-nosuch0".into()));
        assert_eq!(
            w.look(&udp),
            Some(Change::Down("interface dd-nosuch0 is gone".into()))
        );
        assert_eq!(w.look(&udp), None);
        assert_eq!(l[0].snapshot().down_events, 1);
        assert_eq!(l[0].snapshot().up, 0);
        assert_eq!(l[0].last_down(), "interface dd-nosuch0 is gone");
        let mut lo = LinkWatch::new(Arc::clone(&l[0]), None);
        assert_eq!(lo.look(&udp), Some(Change::Up));
        assert!(l[0].is_up());
        assert_eq!(
            lo.send_failed("Network is unreachable"),
            Some(Change::Down("Network is unreachable".into()))
        );
        assert_eq!(l[0].snapshot().down_events, 2);
        // Up again only after a second of good looks.
        for _ in 0..LOOKS_AFTER_FAILED_SEND {
            assert_eq!(lo.look(&udp), None);
        }
        assert_eq!(lo.look(&udp), Some(Change::Up));
    }
}
