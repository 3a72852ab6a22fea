//! Several links from one host: `diodon send --to A --to B` over two veth
//! links between two namespaces, one `diodon recv` per link, both writing
//! into one shared folder.
//!
//! ```text
//!  NAME-tx: diodon send --to 10.81.1.2 --to 10.81.2.2 ─ml-a═══ 10.81.1.2: recv ─┐
//!                                                     ─ml-b═══ 10.81.2.2: recv ─┴─► one out folder
//! ```
//!
//! Needs root and network namespaces: without them each test prints why
//! and passes, except under `CI=true`, where it fails. One at a time.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]
#![expect(clippy::disallowed_methods, reason = "a test waits on the wall clock")]

use diodon_testkit::Namespace;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
static LOCK: Mutex<()> = Mutex::new(());
const LINK_A: &str = "10.81.1.2:7700";
const LINK_B: &str = "10.81.2.2:7700";

/// Two namespaces joined by two veth links, `ml-a` (10.81.1.0/24) and
/// `ml-b` (10.81.2.0/24); a folder for sources and the shared output.
struct Bed {
    tx: Namespace,
    rx: Namespace,
    dir: PathBuf,
    _lock: MutexGuard<'static, ()>,
}

impl Bed {
    fn up(test: &str) -> Option<Bed> {
        let lock = LOCK
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !diodon_testkit::require_netns(test) {
            return None;
        }
        let id = std::process::id();
        let tx = Namespace::new(&format!("dml{id}-tx"));
        let rx = Namespace::new(&format!("dml{id}-rx"));
        for (dev, n) in [("ml-a", 1), ("ml-b", 2)] {
            let peer = format!("{dev}-r");
            let mac = |host: u8| format!("02:81:{n:02x}:00:00:{host:02x}");
            let (tx_mac, rx_mac) = (mac(1), mac(2));
            diodon_testkit::run(&[
                "ip",
                "link",
                "add",
                dev,
                "address",
                &tx_mac,
                "netns",
                tx.name(),
                "type",
                "veth",
                "peer",
                "name",
                &peer,
                "address",
                &rx_mac,
                "netns",
                rx.name(),
            ]);
            // A one-way link answers no ARP: the neighbours are static, as on
            // a real diode (a link that comes back then carries at once).
            for (ns, d, host, far, far_mac) in [
                (&tx, dev, 1, 2, &rx_mac),
                (&rx, peer.as_str(), 2, 1, &tx_mac),
            ] {
                let addr = format!("10.81.{n}.{host}/24");
                let far = format!("10.81.{n}.{far}");
                diodon_testkit::run(&["ip", "-n", ns.name(), "addr", "add", &addr, "dev", d]);
                diodon_testkit::run(&["ip", "-n", ns.name(), "link", "set", d, "up"]);
                diodon_testkit::run(&[
                    "ip",
                    "-n",
                    ns.name(),
                    "neigh",
                    "replace",
                    &far,
                    "lladdr",
                    far_mac,
                    "dev",
                    d,
                    "nud",
                    "permanent",
                ]);
            }
        }
        let dir = std::env::temp_dir().join(format!("diodon-multilink-{test}-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap();
        std::fs::create_dir_all(dir.join("out")).unwrap();
        Some(Bed {
            tx,
            rx,
            dir,
            _lock: lock,
        })
    }

    /// One receiver per link, both into `out`.
    fn receivers(&self) -> Vec<Child> {
        let out = self.dir.join("out");
        let out = out.to_str().unwrap();
        let rx = [LINK_A, LINK_B].map(|at| {
            spawn(
                &self.rx,
                &[
                    "recv", "--listen", at, "--out", out, "--rate", "200mbit", "--json",
                ],
            )
        });
        std::thread::sleep(Duration::from_millis(500));
        rx.into()
    }

    /// `n` files of `size` bytes under `src`, each with its own content.
    fn files(&self, n: usize, size: usize) -> BTreeMap<String, Vec<u8>> {
        (0..n)
            .map(|i| {
                let name = format!("f{i:03}.bin");
                let body: Vec<u8> = (0..size)
                    .map(|j| (j.wrapping_mul(31) ^ i.wrapping_mul(7919) ^ (j >> 9)) as u8)
                    .collect();
                std::fs::write(self.dir.join("src").join(&name), &body).unwrap();
                (name, body)
            })
            .collect()
    }

    /// `diodon send` of every source file over both links.
    fn sender(&self, rate: &str) -> Child {
        let src = self.dir.join("src");
        spawn(
            &self.tx,
            &[
                "send",
                "--to",
                LINK_A,
                "--to",
                LINK_B,
                "--rate",
                rate,
                "--json",
                src.to_str().unwrap(),
            ],
        )
    }
}

/// `diodon ARGS` in `ns`, its output piped.
fn spawn(ns: &Namespace, args: &[&str]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns.name(), BIN])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits for `child` (killed after 120 s), returns its JSON summary and
/// its stderr.
fn finish(child: Child, what: &str) -> (Value, String) {
    let (v, log, _) = finish_code(child, what);
    (v, log)
}

/// [`finish`], and the exit code.
fn finish_code(child: Child, what: &str) -> (Value, String, Option<i32>) {
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(100));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out: Output = child.wait_with_output().unwrap();
    let _ = killer.join();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    eprintln!("--- {what} (exit {:?}) ---\n{err}", out.status.code());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{what}: no JSON summary"));
    (serde_json::from_str(line).unwrap(), err, out.status.code())
}

/// Waits (up to 30 s) until `out` holds `n` delivered files: a receiver on
/// a loaded machine may still be verifying the last one when the sender
/// ends.
fn settle(out: &Path, n: usize) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        let have = delivered(out).len() + delivered_top(out);
        if have >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Regular files directly in `out` (a sync's files land there).
fn delivered_top(out: &Path) -> usize {
    std::fs::read_dir(out).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    })
}

/// Stops the receivers (SIGINT, by PID) and returns their summaries.
fn stop(receivers: Vec<Child>) -> Vec<Value> {
    for r in &receivers {
        let _ = Command::new("kill")
            .args(["-INT", &r.id().to_string()])
            .status();
    }
    receivers
        .into_iter()
        .enumerate()
        .map(|(i, r)| finish(r, &format!("receiver {i}")).0)
        .collect()
}

/// The regular files of `out/src` (where the receivers put `src/…`), by
/// name.
fn delivered(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let out = out.join("src");
    let Ok(dir) = std::fs::read_dir(&out) else {
        return BTreeMap::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .map(|n| {
            let body = std::fs::read(out.join(&n)).unwrap();
            (n, body)
        })
        .collect()
}

fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn files_spread_over_two_links_into_one_folder() {
    let Some(bed) = Bed::up("files_spread_over_two_links_into_one_folder") else {
        return;
    };
    let files = bed.files(40, 300_000);
    let rx = bed.receivers();
    let (sent, _) = finish(bed.sender("200mbit"), "sender");
    settle(&bed.dir.join("out"), files.len());
    let got = stop(rx);
    let links = sent["links"].as_array().expect("a summary per link");
    assert_eq!(links.len(), 2, "{sent}");
    assert_eq!(num(&sent, "channels_sent"), 40, "{sent}");
    assert_eq!(num(&sent, "channels_failed"), 0, "{sent}");
    for (l, to) in links.iter().zip([LINK_A, LINK_B]) {
        assert_eq!(l["to"], to);
        assert!(
            num(l, "channels_sent") >= 8,
            "a link carried few files: {l}"
        );
        assert_eq!(l["health"]["down_events"], 0, "{l}");
    }
    let sessions: Vec<&str> = links
        .iter()
        .map(|l| l["session"].as_str().unwrap())
        .collect();
    assert_ne!(sessions[0], sessions[1], "each link is its own session");
    for (r, l) in got.iter().zip(links) {
        assert_eq!(
            num(r, "channels_complete"),
            num(l, "channels_sent"),
            "each receiver verified what its link carried: {r}"
        );
    }
    assert_eq!(delivered(&bed.dir.join("out")), files);
}

/// Link B loses its carrier 1.5 s into an 8 s run and gets it back 1 s
/// later: the sender says both, the files in flight on B fail there and
/// go again over A, and every file arrives whole.
#[test]
fn a_link_that_goes_down_is_reported_and_the_rest_takes_the_other() {
    let Some(bed) = Bed::up("a_link_that_goes_down_is_reported_and_the_rest_takes_the_other")
    else {
        return;
    };
    // 100 files of 1 MB at 50 Mbit/s per link: about 8 s in all; the
    // source has handed the last file to a queue some 3 s before the end,
    // and a core whose input ended stops once idle, so B comes back well
    // before that.
    let files = bed.files(100, 1_000_000);
    let rx = bed.receivers();
    let tx = bed.sender("50mbit");
    std::thread::sleep(Duration::from_millis(1500));
    // The far end goes away (a diode or receiver powered off): the sender's
    // interface loses its carrier, and its sends still succeed into the
    // void, so only the core's look at the interface can tell.
    diodon_testkit::run(&["ip", "-n", bed.rx.name(), "link", "set", "ml-b-r", "down"]);
    std::thread::sleep(Duration::from_secs(1));
    diodon_testkit::run(&["ip", "-n", bed.rx.name(), "link", "set", "ml-b-r", "up"]);
    let (sent, log, code) = finish_code(tx, "sender");
    settle(&bed.dir.join("out"), files.len());
    let _ = stop(rx);
    let why = ["interface ml-b has no carrier"];
    let said = log
        .lines()
        .find(|l| l.contains(&format!("the link to {LINK_B} is down (")))
        .expect("the sender did not say that link B went down");
    assert!(why.iter().any(|w| said.contains(w)), "{said}");
    assert!(
        log.contains(&format!("the link to {LINK_B} is up again")),
        "the sender did not say that link B came back"
    );
    let links = sent["links"].as_array().expect("a summary per link");
    let (a, b) = (&links[0], &links[1]);
    assert_eq!(b["health"]["down_events"], 1, "{b}");
    assert_eq!(b["health"]["up"], 1, "back up at the end: {b}");
    let last = b["last_down"].as_str().unwrap_or_default();
    assert!(why.iter().any(|w| last.contains(w)), "{b}");
    assert_eq!(a["health"]["down_events"], 0, "{a}");
    assert!(
        num(b, "channels_sent") > 0,
        "link B carried files before: {b}"
    );
    assert!(
        num(a, "channels_sent") > 30,
        "link A took over the rest: {a}"
    );
    // The files in flight on B when it went down failed there and went
    // again over A: every file arrives whole, none is counted failed, and
    // the sender ends with success.
    let aborted: Vec<&Value> = sent["channels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "aborted")
        .collect();
    assert!(!aborted.is_empty(), "nothing was in flight on B: {sent}");
    assert_eq!(
        num(&sent, "channels_retried"),
        aborted.len() as u64,
        "{sent}"
    );
    assert_eq!(num(&sent, "channels_failed"), 0, "{sent}");
    assert_eq!(num(&sent, "channels_sent"), 100, "{sent}");
    assert_eq!(code, Some(0), "every file went out: the sender succeeds");
    let got = delivered(&bed.dir.join("out"));
    let wrong: Vec<&String> = files
        .iter()
        .filter(|(name, body)| got.get(*name) != Some(body))
        .map(|(name, _)| name)
        .collect();
    assert!(
        wrong.is_empty() && got.len() == files.len(),
        "missing or different: {wrong:?}; {} delivered",
        got.len()
    );
}

#[test]
fn a_sync_spreads_its_files_over_two_links() {
    let Some(bed) = Bed::up("a_sync_spreads_its_files_over_two_links") else {
        return;
    };
    // Big files in channels of their own, small ones in bundles.
    let mut files = bed.files(24, 200_000);
    for i in 0..40 {
        let name = format!("s{i:03}.txt");
        let body = format!("small file {i}\n").repeat(i + 1).into_bytes();
        std::fs::write(bed.dir.join("src").join(&name), &body).unwrap();
        files.insert(name, body);
    }
    let rx = bed.receivers();
    let db = bed.dir.join("sync.sqlite");
    let src = bed.dir.join("src");
    let sync = spawn(
        &bed.tx,
        &[
            "sync",
            src.to_str().unwrap(),
            "--to",
            LINK_A,
            "--to",
            LINK_B,
            "--state",
            db.to_str().unwrap(),
            "--once",
            "--passes",
            "1",
            "--settle",
            "0",
            "--rate",
            "200mbit",
            "--json",
        ],
    );
    let (summary, _) = finish(sync, "sync");
    std::thread::sleep(Duration::from_millis(500));
    settle(&bed.dir.join("out"), files.len());
    let got = stop(rx);
    let links = summary["send"]["links"]
        .as_array()
        .expect("a summary per link");
    assert_eq!(links.len(), 2, "{summary}");
    for l in links {
        assert!(num(l, "channels_sent") > 0, "a link carried nothing: {l}");
        assert_eq!(num(l, "channels_failed"), 0, "{l}");
    }
    for r in &got {
        assert!(
            num(r, "channels_complete") > 0,
            "a receiver got nothing: {r}"
        );
        assert_eq!(num(r, "channels_failed"), 0, "{r}");
    }
    let out = bed.dir.join("out");
    let mut delivered = BTreeMap::new();
    for name in files.keys() {
        if let Ok(body) =
            std::fs::read(out.join(name)).or_else(|_| std::fs::read(out.join("src").join(name)))
        {
            delivered.insert(name.clone(), body);
        }
    }
    assert_eq!(delivered, files, "every file, whole, in the shared folder");
}
