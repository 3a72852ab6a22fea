//! The tap end to end, with real tools, in throwaway network namespaces
//! (root; skipped with a message otherwise, failed under `CI=true`):
//!
//! ```text
//!  tcpreplay ─► gen0 ══veth══ cap0 ─► diodon tap ─► enc0 ══veth══ encb ─┐ bridge br0
//!                                                  (static FDB) ┌─ agtAb ══ agtA ─► diodon agent ─► TAP tapA ─► tcpdump, softflowd ─► nfcapd ─► nfdump
//!                                                               └─ agtBb ══ agtB ─► diodon agent ─► pcap files
//!  across the diode: cap0 in the testbed's tx namespace ─► tap --to ══(1 %/2 % loss)══► recv --pcap-out
//! ```
//!
//! What each test proves: every frame the rules allow reaches the agent
//! its flow hashes to, byte for byte and in order, and no denied frame
//! appears anywhere (also not in a flow exporter's records); across the
//! diode every allowed frame arrives once and in order or its loss is
//! counted; a broken rule file is refused with its line and keeps the old
//! rules on reload, with no ring drop; an agent whose interface or output
//! disappears stops with an error; a tap and an agent restrict themselves
//! once their rings and outputs are open (the self-test hook
//! `DIODON_SANDBOX_SELFTEST` is refused a write, `/proc/PID/status` shows
//! the filter) and still carry every frame.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use diodon_filter::synth::{Synth, SynthL3};
use diodon_filter::{FlowKey, FlowMode, Headers, Mac, Rendezvous, RuleSet};
use diodon_io::pcap::{read_all, PcapWriter};
use diodon_io::sandbox::ProcStatus;
use diodon_testkit::selftest::{allowed, denied_with};
use diodon_testkit::{require_netns, run, Namespace};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");
static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Root, namespaces and the tools; skip (or fail under CI) otherwise.
fn ready(test: &str, tools: &[&str]) -> bool {
    require_netns(test) && diodon_testkit::require_tools(test, tools)
}

fn exec(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

fn sh(ns: &str, line: &str) {
    run(&["ip", "netns", "exec", ns, "sh", "-c", line]);
}

/// A veth pair inside `ns`, up, without IPv6 chatter, GRO off on both ends.
fn veth(ns: &str, a: &str, b: &str, mtu: u32) {
    run(&[
        "ip", "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b,
    ]);
    for i in [a, b] {
        sh(ns, &format!("sysctl -qw net.ipv6.conf.{i}.disable_ipv6=1; ip link set {i} mtu {mtu} up; ethtool -K {i} gro off >/dev/null 2>&1 || true"));
    }
}

fn mac_of(ns: &str, iface: &str) -> Mac {
    let out = exec(ns, "cat")
        .arg(format!("/sys/class/net/{iface}/address"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::create(path, 65_535).unwrap();
    for (i, f) in frames.iter().enumerate() {
        w.write(
            1_700_000_000_000_000_000 + i as u64 * 50_000,
            f.len() as u32,
            f,
        )
        .unwrap();
    }
    w.finish().unwrap();
}

fn replay(ns: &str, iface: &str, pcap: &Path, pps: u32) {
    let out = exec(ns, "tcpreplay")
        .args(["-q", "-i", iface, "--pps", &pps.to_string()])
        .arg(pcap)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !text.contains("Failed packets:          [1-9]"),
        "tcpreplay: {text}"
    );
}

/// A background process, stopped with SIGINT (by its pid) when asked.
struct Proc(Option<Child>);

impl Proc {
    fn spawn(mut c: Command) -> Proc {
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Proc(Some(child))
    }

    fn signal(&self, sig: &str) {
        if let Some(c) = &self.0 {
            let _ = Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status();
        }
    }

    fn stop(self) -> Output {
        self.stop_with("-INT")
    }

    fn stop_with(mut self, sig: &str) -> Output {
        self.signal(sig);
        self.0.take().unwrap().wait_with_output().unwrap()
    }

    fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = Command::new("kill")
                .args(["-KILL", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

/// The JSON summary a command printed last on stdout.
fn summary(out: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| {
        panic!("{what}: no JSON summary ({e}); stdout {stdout} stderr {stderr}")
    })
}

fn u(v: &Value, path: &str) -> u64 {
    path.split('.')
        .fold(v, |v, k| &v[k])
        .as_u64()
        .unwrap_or_else(|| panic!("{path} missing in {v}"))
}

const RULES: &str = "\
# denied: one network both ways, one IPv6 prefix both ways, broken IP
deny src 10.66.0.0/16
deny dst 10.66.0.0/16
deny ip6 dst 2001:db8:dead::/48
deny ip6 src 2001:db8:dead::/48
deny malformed
allow nonip
default allow
";

/// A mixed trace: TCP/UDP flows both ways (some VLAN-tagged, some QinQ),
/// fragments, IPv6 with extension headers, ICMP, ARP, broken IPv4 headers,
/// and flows the rules deny.
fn mixed_trace() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut flows = Vec::new();
    for f in 0..48u32 {
        let denied = f % 6 == 5;
        let a = if denied {
            [10, 66, 1, f as u8]
        } else {
            [10, 1, (f % 4) as u8, f as u8 + 1]
        };
        let b = [192, 0, 2, (f % 7) as u8 + 1];
        let mut s = Synth::udp4(
            a,
            b,
            20_000 + f as u16,
            [53, 80, 443, 5353][f as usize % 4],
            0,
        );
        s.proto = if f % 2 == 0 { 6 } else { 17 };
        s.vlans = match f % 8 {
            3 => vec![100],
            7 => vec![200, 300],
            _ => vec![],
        };
        flows.push(s);
    }
    for f in 0..8u8 {
        let dst = if f % 4 == 3 {
            [
                0x20, 0x01, 0x0d, 0xb8, 0xde, 0xad, 0, 0, 0, 0, 0, 0, 0, 0, 0, f,
            ]
        } else {
            [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, f]
        };
        let mut s = Synth::udp4([0; 4], [0; 4], 40_000 + u16::from(f), 443, 0);
        s.l3 = SynthL3::V6 {
            src: [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, f],
            dst,
            ext: f % 3,
        };
        s.proto = if f % 2 == 0 { 6 } else { 17 };
        flows.push(s);
    }
    for i in 0..3000u64 {
        let s = &flows[(i * 5 % flows.len() as u64) as usize];
        let mut s = s.clone();
        s.payload = 20 + (i as usize * 13) % 1300;
        s.tag = i;
        if (i / 7) % 2 == 1 {
            // The answer: addresses, ports and MACs swapped.
            std::mem::swap(&mut s.src_mac, &mut s.dst_mac);
            s.ports = (s.ports.1, s.ports.0);
            s.l3 = match s.l3 {
                SynthL3::V4 { src, dst } => SynthL3::V4 { src: dst, dst: src },
                SynthL3::V6 { src, dst, ext } => SynthL3::V6 {
                    src: dst,
                    dst: src,
                    ext,
                },
                other @ SynthL3::Raw(_) => other,
            };
        }
        if i % 50 == 7 {
            s.frag = Some(((i % 3) as u16 * 100, i % 3 == 0));
        }
        out.push(s.emit());
        if i % 97 == 0 {
            let mut arp = Synth::udp4([0; 4], [0; 4], 0, 0, 28);
            arp.l3 = SynthL3::Raw(0x0806);
            arp.dst_mac = Mac([0xff; 6]);
            out.push(arp.emit());
        }
        if i % 211 == 0 {
            let mut bad = Synth::udp4([10, 1, 0, 1], [192, 0, 2, 1], 1, 2, 40).emit();
            bad[14] = 0x43; // IHL 3: malformed
            out.push(bad);
        }
    }
    out
}

/// Which agent each allowed frame belongs to, in trace order.
fn expected(frames: &[Vec<u8>], rules: &str, agents: &[&str]) -> (Vec<Vec<Vec<u8>>>, usize) {
    let set = RuleSet::parse(rules).unwrap();
    let rv = Rendezvous::new(agents);
    let mut per = vec![Vec::new(); agents.len()];
    let mut denied = 0;
    for f in frames {
        let h = Headers::parse(f).unwrap();
        if set.first_match(&h).1 == diodon_filter::Action::Deny {
            denied += 1;
            continue;
        }
        per[rv.pick(FlowKey::of(&h, FlowMode::FiveTuple).hash())].push(f.clone());
    }
    (per, denied)
}

fn pcap_frames(files: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut files = files.to_vec();
    files.sort();
    files
        .iter()
        .flat_map(|f| read_all(f).unwrap())
        .map(|r| r.data)
        .collect()
}

fn pcaps_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn allowed_frames_reach_their_agent_byte_for_byte_and_denied_ones_nowhere() {
    let _l = lock();
    if !ready(
        "allowed_frames_reach_their_agent_byte_for_byte_and_denied_ones_nowhere",
        &[
            "tcpreplay",
            "tcpdump",
            "softflowd",
            "softflowctl",
            "nfcapd",
            "nfdump",
            "bridge",
        ],
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap1-{}", std::process::id()));
    let n = ns.name();
    let dir = tempfile::tempdir().unwrap();
    veth(n, "gen0", "cap0", 1500);
    veth(n, "enc0", "encb", 1600);
    veth(n, "agtA", "agtAb", 1600);
    veth(n, "agtB", "agtBb", 1600);
    sh(n, "ip link add br0 mtu 1600 type bridge && sysctl -qw net.ipv6.conf.br0.disable_ipv6=1 && ip link set br0 up && for p in encb agtAb agtBb; do ip link set $p master br0; done");
    let (ma, mb) = (mac_of(n, "agtA"), mac_of(n, "agtB"));
    sh(n, &format!("bridge fdb add {ma} dev agtAb master static; bridge fdb add {mb} dev agtBb master static"));
    let frames = mixed_trace();
    let trace = dir.path().join("trace.pcap");
    write_pcap(&trace, &frames);
    let rules = dir.path().join("rules.acl");
    std::fs::write(&rules, RULES).unwrap();
    let (want, denied) = expected(&frames, RULES, &["ids-a", "ids-b"]);
    assert!(
        want[0].len() > 500 && want[1].len() > 500 && denied > 300,
        "a trace that tests something: {} {} {denied}",
        want[0].len(),
        want[1].len()
    );

    let flows = dir.path().join("flows");
    std::fs::create_dir_all(&flows).unwrap();
    let mut agent_a = exec(n, BIN);
    // Marked frames only: the bridge and the kernel add frames of their own
    // (IGMP reports) that a pass-through agent would hand on too.
    agent_a.args([
        "agent",
        "--if",
        "agtA",
        "--tap-out",
        "tapA",
        "--marked-only",
        "--json",
    ]);
    let agent_a = Proc::spawn(agent_a);
    let mut agent_b = exec(n, BIN);
    agent_b
        .args([
            "agent",
            "--if",
            "agtB",
            "--marked-only",
            "--json",
            "--pcap-out",
        ])
        .arg(dir.path().join("b"));
    let agent_b = Proc::spawn(agent_b);
    std::thread::sleep(Duration::from_millis(500));
    let mut dump = exec(n, "tcpdump");
    dump.args(["-i", "tapA", "-Q", "in", "-s", "0", "-U", "-w"])
        .arg(dir.path().join("tapA.pcap"));
    let dump = Proc::spawn(dump);
    let mut nfcapd = exec(n, "nfcapd");
    nfcapd
        .args(["-b", "127.0.0.1", "-p", "9995", "-w"])
        .arg(&flows);
    let nfcapd = Proc::spawn(nfcapd);
    let mut softflowd = exec(n, "softflowd");
    softflowd
        .args(["-d", "-i", "tapA", "-n", "127.0.0.1:9995", "-v", "9", "-c"])
        .arg(dir.path().join("softflowd.ctl"));
    let softflowd = Proc::spawn(softflowd);
    let mut tap = exec(n, BIN);
    tap.args([
        "tap",
        "--if",
        "cap0",
        "--encap-if",
        "enc0",
        "--json",
        "--rules",
    ])
    .arg(&rules)
    .args([
        "--agent",
        &format!("ids-a={ma}"),
        "--agent",
        &format!("ids-b={mb}"),
    ]);
    let tap = Proc::spawn(tap);
    std::thread::sleep(Duration::from_millis(1500));

    replay(n, "gen0", &trace, 20_000);
    std::thread::sleep(Duration::from_secs(1));
    let tap = tap.stop();
    std::thread::sleep(Duration::from_millis(500));
    // The readers of tapA first (SIGTERM: softflowd exports every flow),
    // then the agents (tapA goes with agent A).
    let _ = dump.stop();
    let ctl = dir.path().join("softflowd.ctl");
    let ctl = ctl.to_str().unwrap();
    sh(n, &format!("softflowctl -c {ctl} expire-all"));
    std::thread::sleep(Duration::from_millis(500));
    sh(n, &format!("softflowctl -c {ctl} shutdown"));
    let sf = softflowd.wait();
    std::thread::sleep(Duration::from_millis(500));
    let nf = nfcapd.stop_with("-TERM");
    let (a, b) = (agent_a.stop(), agent_b.stop());

    let (ts, sa, sb) = (
        summary(&tap, "tap"),
        summary(&a, "agent A"),
        summary(&b, "agent B"),
    );
    assert_eq!(u(&ts, "counters.captured"), frames.len() as u64, "{ts}");
    assert_eq!(u(&ts, "counters.ring_drops"), 0);
    assert_eq!(u(&ts, "counters.denied"), denied as u64);
    assert_eq!(
        u(&ts, "counters.encap_sent"),
        (want[0].len() + want[1].len()) as u64
    );
    assert_eq!(
        u(&sa, "counters.decapsulated"),
        want[0].len() as u64,
        "{sa}"
    );
    assert_eq!(
        u(&sb, "counters.decapsulated"),
        want[1].len() as u64,
        "{sb}"
    );
    let malformed_line = 6;
    let hits = ts["rule_hits"].as_array().unwrap();
    assert!(
        hits.iter()
            .any(|h| h["line"] == malformed_line && h["frames"].as_u64() > Some(0)),
        "{hits:?}"
    );

    // Agent B's pcap files and agent A's TAP (as tcpdump saw it): exactly
    // the allowed frames of their flows, in order, byte for byte.
    let got_b = pcap_frames(&pcaps_in(&dir.path().join("b")));
    let extra: Vec<String> = got_b
        .iter()
        .filter(|f| !want[1].contains(f))
        .map(|f| format!("{:02x?}", &f[..f.len().min(40)]))
        .collect();
    assert_eq!(
        got_b.len(),
        want[1].len(),
        "frames not expected at B: {extra:?}\n{ts}\n{sb}"
    );
    assert!(
        got_b == want[1],
        "agent B's frames differ from the allowed ones"
    );
    let got_a = pcap_frames(&[dir.path().join("tapA.pcap")]);
    assert_eq!(got_a.len(), want[0].len(), "frames on tapA");
    assert!(
        got_a == want[0],
        "tapA's frames differ from the allowed ones"
    );
    let denied_set: BTreeSet<&Vec<u8>> = frames
        .iter()
        .filter(|f| !want[0].contains(f) && !want[1].contains(f))
        .collect();
    assert!(got_a.iter().chain(&got_b).all(|f| !denied_set.contains(f)));

    // The flow exporter on tapA saw the allowed flows of agent A and no denied one.
    let out = exec(n, "nfdump")
        .args(["-q", "-6", "-o", "fmt:%sa %da %pr"])
        .arg("-R")
        .arg(&flows)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nfdump: {text} {} / softflowd {:?} nfcapd {:?}",
        String::from_utf8_lossy(&out.stderr),
        sf.status,
        nf.status
    );
    let seen: BTreeSet<String> = text
        .lines()
        .flat_map(|l| {
            l.split_whitespace()
                .take(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        !seen.is_empty(),
        "softflowd exported no flow: {}",
        String::from_utf8_lossy(&sf.stderr)
    );
    assert!(
        !seen
            .iter()
            .any(|a| a.starts_with("10.66.") || a.starts_with("2001:db8:dead")),
        "a denied flow was exported: {seen:?}"
    );
    let mut want_addrs = BTreeSet::new();
    for f in &want[0] {
        let h = Headers::parse(f).unwrap();
        if let diodon_filter::L3::V4 { src, .. } = h.l3 {
            if h.vlan.is_none() && !h.is_fragment() {
                want_addrs.insert(std::net::Ipv4Addr::from(src).to_string());
            }
        }
    }
    let missing: Vec<&String> = want_addrs.iter().filter(|a| !seen.contains(*a)).collect();
    let listing: Vec<String> = std::fs::read_dir(&flows)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        missing.is_empty(),
        "flows of agent A missing from nfdump: {missing:?} (saw {seen:?}; files {listing:?}; softflowd {} {}; nfcapd {} {})",
        String::from_utf8_lossy(&sf.stdout),
        String::from_utf8_lossy(&sf.stderr),
        String::from_utf8_lossy(&nf.stdout),
        String::from_utf8_lossy(&nf.stderr)
    );
}

/// Frames per agent from a receiver's `--pcap-out` folder.
fn per_agent_files(dir: &Path, agents: usize) -> Vec<Vec<Vec<u8>>> {
    (0..agents)
        .map(|i| {
            let files: Vec<PathBuf> = pcaps_in(dir)
                .into_iter()
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&format!("agent-{i}-")))
                })
                .collect();
            pcap_frames(&files)
        })
        .collect()
}

/// `got` is `want` with some frames left out, in order, none twice.
fn in_order_subsequence(got: &[Vec<u8>], want: &[Vec<u8>]) -> bool {
    let mut it = want.iter();
    got.iter().all(|g| it.any(|w| w == g))
}

struct Testbed(String);

impl Testbed {
    fn up(loss: &str) -> Testbed {
        let name = format!("dtp{}", std::process::id());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh");
        let out = Command::new("bash")
            .arg(&script)
            .args(["up", "--loss", loss])
            .env("DIODON_TB", &name)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "testbed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Testbed(name)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/testbed.sh");
        let _ = Command::new("bash")
            .arg(&script)
            .arg("down")
            .env("DIODON_TB", &self.0)
            .output();
    }
}

/// One tap → diode → recv run; returns (tap summary, recv summary, frames per agent).
fn across(
    tb: &Testbed,
    trace: &Path,
    repair: &str,
    out: &Path,
) -> (Value, Value, Vec<Vec<Vec<u8>>>) {
    let (tx, rx) = (format!("{}-tx", tb.0), format!("{}-rx", tb.0));
    let mut recv = exec(&rx, BIN);
    recv.args([
        "recv",
        "--listen",
        "10.77.0.2:7700",
        "--rate",
        "300mbit",
        "--once",
        "--json",
        "--pcap-out",
    ])
    .arg(out);
    let recv = Proc::spawn(recv);
    std::thread::sleep(Duration::from_millis(300));
    let mut tap = exec(&tx, BIN);
    tap.args([
        "tap",
        "--if",
        "cap0",
        "--agent",
        "a",
        "--agent",
        "b",
        "--agent",
        "c",
        "--to",
        "10.77.0.2:7700",
        "--rate",
        "300mbit",
        "--repair",
        repair,
        "--segment-ms",
        "200",
        "--json",
    ]);
    let tap = Proc::spawn(tap);
    std::thread::sleep(Duration::from_secs(1));
    replay(&tx, "gen0", trace, 20_000);
    std::thread::sleep(Duration::from_millis(500));
    let tap = tap.stop();
    let recv = recv.wait();
    let (ts, rs) = (summary(&tap, "tap"), summary(&recv, "recv"));
    (ts, rs, per_agent_files(out, 3))
}

#[test]
fn across_the_diode_every_allowed_frame_arrives_once_in_order_or_is_counted() {
    let _l = lock();
    if !ready(
        "across_the_diode_every_allowed_frame_arrives_once_in_order_or_is_counted",
        &["tcpreplay", "nft"],
    ) {
        return;
    }
    let tb = Testbed::up("2");
    let tx = format!("{}-tx", tb.0);
    veth(&tx, "gen0", "cap0", 1500);
    let dir = tempfile::tempdir().unwrap();
    let frames: Vec<Vec<u8>> = mixed_trace().into_iter().cycle().take(12_000).collect();
    let trace = dir.path().join("trace.pcap");
    write_pcap(&trace, &frames);
    let (want, _) = expected(&frames, "default allow\n", &["a", "b", "c"]);
    let mut lost_without_repair = 0;
    for (repair, out) in [("25", "fec"), ("0", "nofec")] {
        let out = dir.path().join(out);
        let (ts, rs, got) = across(&tb, &trace, repair, &out);
        assert_eq!(u(&ts, "counters.captured"), frames.len() as u64, "{ts}");
        let agents = rs["packet_agents"].as_array().unwrap();
        for (i, w) in want.iter().enumerate() {
            let sent = ts["agents"][i]["counters"]["records"].as_u64().unwrap();
            assert_eq!(sent, w.len() as u64, "agent {i}: records sent");
            let a = agents
                .iter()
                .find(|a| a["agent"] == i)
                .unwrap_or_else(|| panic!("agent {i} in {rs}"));
            let (delivered, lost) = (
                a["delivered"].as_u64().unwrap(),
                a["lost"].as_u64().unwrap(),
            );
            assert_eq!(delivered + lost, sent, "repair {repair}, agent {i}: delivered {delivered} + lost {lost} != sent {sent}\n{rs}");
            assert_eq!(
                got[i].len() as u64,
                delivered,
                "agent {i}: frames in the files"
            );
            assert!(
                in_order_subsequence(&got[i], w),
                "repair {repair}, agent {i}: frames out of order, twice, or not sent"
            );
            if repair == "25" {
                assert_eq!(lost, 0, "25 % repair covers 2 % loss: {rs}");
            } else {
                lost_without_repair += lost;
            }
        }
    }
    assert!(
        lost_without_repair > 0,
        "2 % loss without repair lost nothing: the gap accounting went untested"
    );
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_broken_rule_file_is_refused_with_its_line_and_reloads_keep_the_rules_in_force() {
    let _l = lock();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.acl");
    std::fs::write(&bad, "deny src 10.0.0.1\ndeny src 10.0.0.300\n").unwrap();
    let out = Command::new(BIN)
        .args([
            "tap",
            "--if",
            "lo",
            "--agent",
            "a=02:00:00:00:00:01",
            "--encap-if",
            "lo",
            "--rules",
        ])
        .arg(&bad)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("line 2: '10.0.0.300' is not a valid IP address"),
        "{err}"
    );

    if !ready(
        "a_broken_rule_file_is_refused_with_its_line_and_reloads_keep_the_rules_in_force",
        &["tcpreplay"],
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap3-{}", std::process::id()));
    let n = ns.name();
    veth(n, "gen0", "cap0", 1500);
    veth(n, "enc0", "agt0", 1600);
    let rules = dir.path().join("rules.acl");
    std::fs::write(&rules, "deny src 10.66.0.0/16\ndefault allow\n").unwrap();
    let frames: Vec<Vec<u8>> = (0..4000u32)
        .map(|i| {
            Synth::udp4(
                [10, 1 + (i % 2) as u8, 0, 1],
                [192, 0, 2, 1],
                1000 + (i % 100) as u16,
                53,
                200,
            )
            .emit()
        })
        .collect();
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &frames);
    let ma = mac_of(n, "agt0");
    let mut tap = exec(n, BIN);
    tap.args([
        "tap",
        "--if",
        "cap0",
        "--encap-if",
        "enc0",
        "--json",
        "--agent",
        &format!("a={ma}"),
        "--rules",
    ])
    .arg(&rules);
    let tap = Proc::spawn(tap);
    std::thread::sleep(Duration::from_secs(1));
    // Traffic during the reloads: 4000 frames at 2000/s, twice.
    let replayer = {
        let (n, trace) = (n.to_owned(), trace.clone());
        std::thread::spawn(move || {
            replay(&n, "gen0", &trace, 2000);
            replay(&n, "gen0", &trace, 2000);
        })
    };
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(
        &rules,
        "deny src 10.2.0.0/16\ndefault allow\ndeny sorce 10.1.0.0/16\n",
    )
    .unwrap();
    tap.signal("-HUP");
    std::thread::sleep(Duration::from_millis(700));
    std::fs::write(&rules, "deny src 10.2.0.0/16\ndefault allow\n").unwrap();
    tap.signal("-HUP");
    replayer.join().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let out = tap.stop();
    let ts = summary(&out, "tap");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("rules not reloaded") && err.contains("line 3: unknown field 'sorce'"),
        "{err}"
    );
    assert_eq!(u(&ts, "counters.captured"), 8000, "{ts}");
    assert_eq!(
        u(&ts, "counters.ring_drops"),
        0,
        "a reload must not drop frames"
    );
    assert_eq!(
        u(&ts, "counters.reloads"),
        2,
        "the first load and the good reload"
    );
    assert_eq!(u(&ts, "counters.reload_errors"), 1);
    // The new rule (line 1 again, now 10.2/16) denied frames once it was in
    // force; before that nothing of this trace was denied.
    let denied = u(&ts, "counters.denied");
    assert!(
        denied > 0 && denied < 4000,
        "denied {denied}: only after the good reload"
    );
    assert_eq!(denied + u(&ts, "counters.allowed"), 8000);
}

#[test]
fn an_agent_whose_interface_or_output_disappears_stops_with_an_error() {
    let _l = lock();
    if !ready(
        "an_agent_whose_interface_or_output_disappears_stops_with_an_error",
        &["tcpreplay"],
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap4-{}", std::process::id()));
    let n = ns.name();
    let dir = tempfile::tempdir().unwrap();
    veth(n, "enc0", "agt0", 1600);
    veth(n, "enc1", "agt1", 1600);
    // The interface goes away.
    let mut a0 = exec(n, BIN);
    a0.args(["agent", "--if", "agt0", "--json", "--pcap-out"])
        .arg(dir.path().join("a0"));
    let a0 = Proc::spawn(a0);
    std::thread::sleep(Duration::from_millis(500));
    run(&["ip", "-n", n, "link", "del", "agt0"]);
    let out = a0.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("capture on agt0") && err.contains("Network is down"),
        "{err}"
    );
    assert!(summary(&out, "agent 0")["error"].is_string());

    // The TAP output goes away while marked frames keep coming.
    let m1 = mac_of(n, "agt1");
    let frames: Vec<Vec<u8>> = (0..2000u32)
        .map(|i| {
            let inner =
                Synth::udp4([10, 0, 0, 1], [10, 0, 1, 1], 1000, (i % 100) as u16, 100).emit();
            let mut f = Vec::new();
            diodon_filter::wire::encapsulate(m1.0, [2, 0, 0, 0, 0, 9], 0xf1f0, &inner, &mut f);
            f
        })
        .collect();
    let trace = dir.path().join("marked.pcap");
    write_pcap(&trace, &frames);
    let unmarked: Vec<Vec<u8>> = (0..100u32)
        .map(|i| Synth::udp4([10, 0, 0, 2], [10, 0, 1, 1], 1000, i as u16, 100).emit())
        .collect();
    let plain = dir.path().join("plain.pcap");
    write_pcap(&plain, &unmarked);
    let mut a1 = exec(n, BIN);
    a1.args(["agent", "--if", "agt1", "--tap-out", "dtap1", "--json"]);
    let a1 = Proc::spawn(a1);
    std::thread::sleep(Duration::from_millis(500));
    replay(n, "enc1", &plain, 5000);
    replay(n, "enc1", &trace, 5000);
    std::thread::sleep(Duration::from_millis(300));
    run(&["ip", "-n", n, "link", "del", "dtap1"]);
    replay(n, "enc1", &trace, 5000);
    let out = a1.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("writing to TAP dtap1"), "{err}");
    let s = summary(&out, "agent 1");
    assert!(u(&s, "counters.delivered") >= 2100, "{s}");
    assert!(u(&s, "counters.decapsulated") >= 2000, "{s}");
    assert!(
        u(&s, "counters.unmarked_passed") >= 100,
        "unmarked frames pass unchanged: {s}"
    );
}

/// Frames the kernel passes to the tap but a full ring cannot hold are
/// counted, and the summary's pre-filter drop rate says so.
#[test]
fn ring_drops_are_counted_in_the_prefilter_drop_rate() {
    let _l = lock();
    if !ready(
        "ring_drops_are_counted_in_the_prefilter_drop_rate",
        &["tcpreplay"],
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap5-{}", std::process::id()));
    let n = ns.name();
    let dir = tempfile::tempdir().unwrap();
    veth(n, "gen0", "cap0", 1500);
    veth(n, "enc0", "agt0", 1600);
    let frames: Vec<Vec<u8>> = (0..30_000u32)
        .map(|i| Synth::udp4([10, 0, 0, 1], [10, 0, 1, 1], (i % 5000) as u16, 53, 1400).emit())
        .collect();
    let trace = dir.path().join("t.pcap");
    write_pcap(&trace, &frames);
    let ma = mac_of(n, "agt0");
    // Two 1 MiB blocks and an agents' segment that refuses nothing: the
    // ring overflows while the worker sends.
    let mut tap = exec(n, BIN);
    tap.args([
        "tap",
        "--if",
        "cap0",
        "--encap-if",
        "enc0",
        "--ring-mb",
        "2",
        "--json",
        "--agent",
        &format!("a={ma}"),
    ]);
    let tap = Proc::spawn(tap);
    std::thread::sleep(Duration::from_millis(800));
    let out = exec(n, "tcpreplay")
        .args(["-q", "-i", "gen0", "--topspeed"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::thread::sleep(Duration::from_millis(500));
    let ts = summary(&tap.stop(), "tap");
    let (captured, drops) = (u(&ts, "counters.captured"), u(&ts, "counters.ring_drops"));
    assert_eq!(
        captured + drops,
        30_000,
        "every frame processed or counted: {ts}"
    );
    if drops > 0 {
        let rate = ts["prefilter_drop_rate"].as_f64().unwrap();
        assert!((rate - drops as f64 / 30_000.0).abs() < 1e-9, "{ts}");
    }
    let mut per: BTreeMap<&str, u64> = BTreeMap::new();
    per.insert("captured", captured);
    per.insert("drops", drops);
    eprintln!("ring test: {per:?}");
}

/// Waits (up to 5 s) until `pid` runs under a seccomp filter; its status.
fn restricted(pid: u32) -> ProcStatus {
    let mut st = ProcStatus::read(pid).unwrap();
    for _ in 0..100 {
        if st.seccomp == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        st = ProcStatus::read(pid).unwrap();
    }
    st
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_sandboxed_tap_and_agent_are_refused_writes_and_still_carry_every_frame() {
    let _l = lock();
    if !ready(
        "a_sandboxed_tap_and_agent_are_refused_writes_and_still_carry_every_frame",
        &["tcpreplay"],
    ) {
        return;
    }
    let ns = Namespace::new(&format!("dd-tap6-{}", std::process::id()));
    let n = ns.name();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    veth(n, "gen0", "cap0", 1500);
    veth(n, "enc0", "agt0", 1600);
    let rules_dir = d.join("rules");
    std::fs::create_dir(&rules_dir).unwrap();
    let rules = rules_dir.join("tap.acl");
    std::fs::write(&rules, "deny src 10.66.0.0/16\ndefault allow\n").unwrap();
    let secret = d.join("secret");
    std::fs::write(&secret, "x").unwrap();
    let frames: Vec<Vec<u8>> = (0..2000u32)
        .map(|i| {
            Synth::udp4(
                [10, 1, 0, 1],
                [192, 0, 2, 1],
                1000 + (i % 50) as u16,
                53,
                100,
            )
            .emit()
        })
        .collect();
    let trace = d.join("t.pcap");
    write_pcap(&trace, &frames);
    let pcap_dir = d.join("pcap");
    let (agent_out, agent_in) = (d.join("agent-escaped"), pcap_dir.join("probe"));
    let mut agent = exec(n, BIN);
    agent
        .env(
            "DIODON_SANDBOX_SELFTEST",
            format!("write:{},write:{}", agent_out.display(), agent_in.display()),
        )
        .args([
            "agent",
            "--if",
            "agt0",
            "--marked-only",
            "--json",
            "--pcap-out",
        ])
        .arg(&pcap_dir);
    let agent = Proc::spawn(agent);
    let tap_out = d.join("tap-escaped");
    let ma = mac_of(n, "agt0");
    let mut tap = exec(n, BIN);
    tap.env(
        "DIODON_SANDBOX_SELFTEST",
        format!(
            "write:{},read:{},read:{}",
            tap_out.display(),
            secret.display(),
            rules.display()
        ),
    )
    .args([
        "tap",
        "--if",
        "cap0",
        "--encap-if",
        "enc0",
        "--json",
        "--agent",
        &format!("a={ma}"),
        "--rules",
    ])
    .arg(&rules);
    let tap = Proc::spawn(tap);
    for p in [&tap, &agent] {
        let st = restricted(p.0.as_ref().unwrap().id());
        assert!(st.no_new_privs, "NoNewPrivs: {st:?}");
        assert_eq!(st.seccomp, 2, "Seccomp: {st:?}");
        assert_eq!(st.cap_eff, 0, "CapEff: {st:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    replay(n, "gen0", &trace, 5000);
    // The rules replaced by a rename (a new inode), as editors do: the
    // reload still reads them.
    let new = rules_dir.join("tap.acl.new");
    std::fs::write(&new, "deny src 10.2.0.0/16\ndefault allow\n").unwrap();
    std::fs::rename(&new, &rules).unwrap();
    tap.signal("-HUP");
    std::thread::sleep(Duration::from_millis(500));
    replay(n, "gen0", &trace, 5000);
    std::thread::sleep(Duration::from_millis(500));
    let tap = tap.stop();
    std::thread::sleep(Duration::from_millis(300));
    let agent = agent.stop();
    let (ts, sa) = (summary(&tap, "tap"), summary(&agent, "agent"));
    let (tlog, alog) = (
        String::from_utf8_lossy(&tap.stderr),
        String::from_utf8_lossy(&agent.stderr),
    );
    // The tap writes nothing at all (seccomp: EPERM) and reads nothing
    // beside its rules (Landlock: EACCES).
    denied_with(&tlog, "write", &tap_out, libc::EPERM);
    denied_with(&tlog, "read", &secret, libc::EACCES);
    allowed(&tlog, "read", &rules);
    // The agent writes its pcap folder only (Landlock: EACCES elsewhere).
    denied_with(&alog, "write", &agent_out, libc::EACCES);
    allowed(&alog, "write", &agent_in);
    assert!(
        !tap_out.exists() && !agent_out.exists(),
        "a write went through"
    );
    // And both still work.
    assert_eq!(u(&ts, "counters.captured"), 4000, "{ts}");
    assert_eq!(u(&ts, "counters.reloads"), 2, "{ts}\n{tlog}");
    assert_eq!(u(&ts, "counters.reload_errors"), 0, "{ts}");
    assert_eq!(u(&ts, "counters.encap_sent"), 4000, "{ts}");
    assert_eq!(u(&sa, "counters.decapsulated"), 4000, "{sa}");
    let got = pcap_frames(&pcaps_in(&pcap_dir));
    assert_eq!(got.len(), 4000, "{sa}");
    assert!(
        got.iter()
            .zip(frames.iter().chain(&frames))
            .all(|(a, b)| a == b),
        "the agent's pcap holds the frames as captured, in order"
    );
}
