//! The receiver's dashboard in a real headless browser (Debian's
//! `chromium`): after a transfer over loopback the page, rendered by its
//! own script from `/api/status`, shows the same numbers as the document;
//! a hostile file name is shown as text, never as markup; the page loads
//! nothing from anywhere else. A screenshot is kept as a test artefact
//! (`target/tmp/dashboard.png`). The HTTP surface: 404 for other paths,
//! 405 for other methods, the status only on a receiver.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");

/// Status line and body of one request.
fn http(addr: &str, method: &str, path: &str) -> (String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

fn wait_for(addr: &str) {
    for _ in 0..100 {
        if TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on {addr}");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The text of the element with `id` in a serialised DOM.
fn by_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in the page"));
    let rest = &dom[start..];
    let open = rest.find('>').unwrap() + 1;
    let close = rest[open..].find('<').unwrap();
    &rest[open..open + close]
}

fn number(text: &str) -> u64 {
    text.replace(',', "")
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

fn chromium(args: &[&str], url: &str) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,1000",
            // Let the page's script fetch and render before the dump.
            "--virtual-time-budget=4000",
        ])
        .args(args)
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A receiver with `--metrics` that got a plain file and one with a
/// hostile name, then stayed idle long enough for a history sample and the
/// silence alarm. Returns what keeps it alive and its metrics address.
fn receiver_after_a_transfer(hostile: &str) -> (tempfile::TempDir, KillOnDrop, String) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("plain.bin"), vec![3u8; 2_000_000]).unwrap();
    std::fs::write(src.join(hostile), b"not markup").unwrap();
    let (data, metrics) = (
        diodon_testkit::free_udp().to_string(),
        diodon_testkit::free_tcp().to_string(),
    );
    let rx = KillOnDrop(
        Command::new(BIN)
            .args(["recv", "--listen", &data, "--metrics", &metrics])
            .args(["--alarm-silence", "1", "--out"])
            .arg(dir.path().join("out"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&metrics);
    let st = Command::new(BIN)
        .args(["send", "--to", &data, "--rate", "50mbit"])
        .arg(src.join("plain.bin"))
        .arg(src.join(hostile))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // Idle long enough for a history sample and the silence alarm.
    std::thread::sleep(Duration::from_millis(2500));
    (dir, rx, metrics)
}

/// A screenshot of the page, kept under the target folder.
fn screenshot(url: &str) {
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", shot.display())], url);
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "screenshot"
    );
    eprintln!("dashboard screenshot: {}", shot.display());
}

#[test]
fn the_dashboard_shows_what_the_status_says() {
    if !diodon_testkit::require_tools("the_dashboard_shows_what_the_status_says", &["chromium"]) {
        return;
    }
    let hostile = "<img id=injected src=x onerror=alert(1)>.txt";
    let (_dir, rx, metrics) = receiver_after_a_transfer(hostile);
    let url = format!("http://{metrics}/");
    let points_before = {
        let v: Value = serde_json::from_str(&http(&metrics, "GET", "/api/status").1).unwrap();
        v["history"].as_array().unwrap().len()
    };
    let dom = chromium(&["--dump-dom"], &url);
    let (line, body) = http(&metrics, "GET", "/api/status");
    assert!(line.contains("200"), "{line}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert!(
        dom.contains("data-loaded="),
        "the script never rendered: {dom}"
    );

    let t = &status["totals"];
    for (id, field) in [
        ("total-datagrams", "datagrams"),
        ("total-accepted", "accepted"),
        ("total-missing", "missing"),
        ("total-bytes", "bytes_delivered"),
        ("total-complete", "channels_complete"),
        ("total-failed", "channels_failed"),
        ("total-socket-drops", "socket_dropped_packets"),
    ] {
        assert_eq!(
            number(by_id(&dom, id)),
            t[field].as_u64().unwrap(),
            "#{id} vs totals.{field}"
        );
    }
    assert_eq!(t["channels_complete"], 2, "{status:#}");
    assert_eq!(t["bytes_delivered"], 2_000_000 + 10);
    assert_eq!(
        by_id(&dom, "link-state"),
        "down",
        "silent after the transfer"
    );
    assert_eq!(status["link"]["up"], false);
    assert_eq!(
        number(by_id(&dom, "alarm-silent")),
        status["link_counters"]["alarms_silent"].as_u64().unwrap()
    );
    assert_eq!(status["link_counters"]["alarms_silent"], 1);
    assert_eq!(
        by_id(&dom, "session"),
        status["link"]["session"].as_str().unwrap()
    );
    assert_eq!(
        dom.matches("data-verdict=\"verified\"").count(),
        status["recent"].as_array().unwrap().len()
    );
    assert!(
        !status["history"].as_array().unwrap().is_empty(),
        "a second of history"
    );
    // One point per second of history (which grows while the page loads).
    let points_after = status["history"].as_array().unwrap().len();
    let shown = number(
        dom.split("id=\"chart-throughput\"")
            .nth(1)
            .and_then(|r| r.split("data-points=\"").nth(1))
            .and_then(|r| r.split('"').next())
            .unwrap(),
    ) as usize;
    assert!(
        (points_before..=points_after).contains(&shown),
        "chart points {shown}, history {points_before}..={points_after}"
    );
    // The hostile name is text in the table, not an element of the page.
    assert!(!dom.contains("id=\"injected\""), "markup from a file name");
    assert!(
        dom.contains("&lt;img id=injected src=x onerror=alert(1)&gt;.txt"),
        "{dom}"
    );
    // Everything comes from the receiver itself.
    let page = http(&metrics, "GET", "/").1;
    for outside in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
        "fetch(\"http",
    ] {
        assert!(!page.contains(outside), "the page refers to {outside}");
    }

    screenshot(&url);
    assert!(http(&metrics, "GET", "/nothing-here").0.contains("404"));
    assert!(http(&metrics, "POST", "/api/status").0.contains("405"));
    drop(rx);
}

#[test]
fn a_sender_serves_no_status_or_dashboard() {
    let (data, metrics) = (
        diodon_testkit::free_udp().to_string(),
        diodon_testkit::free_tcp().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    std::fs::write(&file, vec![0u8; 1_000_000]).unwrap();
    let _tx = KillOnDrop(
        Command::new(BIN)
            .args([
                "send",
                "--to",
                &data,
                "--rate",
                "1mbit",
                "--metrics",
                &metrics,
            ])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&metrics);
    let (line, body) = http(&metrics, "GET", "/api/status");
    assert!(
        line.contains("404") && body.contains("diodon recv"),
        "{line} {body}"
    );
    assert!(http(&metrics, "GET", "/").0.contains("404"));
    assert!(http(&metrics, "GET", "/metrics").0.contains("200"));
}
