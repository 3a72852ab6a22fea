//! What the Debian package installs, checked with the tools an operator's
//! system uses on it: the systemd units pass `systemd-analyze verify` (every
//! directive known, the binary and the man pages they name present) and
//! `systemd-analyze security` rates them at most "OK"; the man pages and
//! shell completions are generated from the CLI definition and cover every
//! subcommand; the example configurations are accepted by the binary; and
//! `--version` names the commit.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DIODON: &str = env!("CARGO_BIN_EXE_diodon");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn units() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("packaging/systemd"))
        .expect("packaging/systemd")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "service"))
        .collect();
    v.sort();
    assert!(v.len() >= 2, "units: {v:?}");
    v
}

/// Man pages generated into `dir/man1`.
fn man_pages(dir: &Path) -> Vec<String> {
    let out = Command::new(DIODON)
        .arg("man")
        .arg(dir.join("man1"))
        .output()
        .expect("diodon man");
    assert!(out.status.success(), "{out:?}");
    let mut names: Vec<String> = std::fs::read_dir(dir.join("man1"))
        .expect("man1")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A unit copied under an instance name, its `ExecStart` pointing at the
/// binary this test built.
fn instance(unit: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(unit).expect("unit");
    assert!(
        text.contains("ExecStart=/usr/bin/diodon "),
        "{}",
        unit.display()
    );
    let name = unit
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .replace("@.service", "@demo.service");
    let path = dir.join(name);
    std::fs::write(&path, text.replace("/usr/bin/diodon", DIODON)).expect("write unit");
    path
}

#[test]
fn every_subcommand_has_a_man_page_and_a_completion() {
    let dir = tempfile::tempdir().expect("tmp");
    let pages = man_pages(dir.path());
    for want in [
        "diodon.1",
        "diodon-send.1",
        "diodon-recv.1",
        "diodon-tunnel-send.1",
        "diodon-tap.1",
        "diodon-agent.1",
        "diodon-guard.1",
        "diodon-stats.1",
        "diodon-deltat-send.1",
        "diodon-completions.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} missing: {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p == "diodon-man.1"),
        "the hidden generator has no page"
    );
    let recv = std::fs::read_to_string(dir.path().join("man1/diodon-recv.1")).expect("page");
    assert!(recv.contains("quarantine") && recv.contains(".SH OPTIONS"));

    let out = Command::new(DIODON)
        .args(["completions", "bash"])
        .output()
        .expect("completions");
    assert!(out.status.success());
    let script = dir.path().join("diodon.bash");
    std::fs::write(&script, &out.stdout).expect("write");
    let text = String::from_utf8_lossy(&out.stdout);
    for word in ["recv", "tunnel", "--quarantine-bytes", "--udp-listen"] {
        assert!(text.contains(word), "bash completion lacks {word}");
    }
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .expect("bash");
    assert!(syntax.status.success(), "{syntax:?}");
    let bad = Command::new(DIODON)
        .args(["completions", "tcsh"])
        .output()
        .expect("completions");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn the_version_names_the_commit() {
    let out = Command::new(DIODON)
        .arg("--version")
        .output()
        .expect("version");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("diodon {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let in_git = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repo())
        .output()
        .ok()
        .filter(|o| o.status.success());
    if let Some(head) = in_git {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert!(text.contains(&head), "{text} does not name HEAD {head}");
    }
}

#[test]
fn the_units_verify_and_are_rated_ok_by_systemd() {
    if !diodon_testkit::require_tools(
        "the_units_verify_and_are_rated_ok_by_systemd",
        &["systemd-analyze", "man"],
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    man_pages(dir.path());
    for unit in units() {
        let copy = instance(&unit, dir.path());
        // MANPATH: the `man:` pages the unit documents must exist.
        let verify = Command::new("systemd-analyze")
            .args(["verify", "--man=yes"])
            .arg(&copy)
            .env("MANPATH", dir.path())
            .output()
            .expect("systemd-analyze verify");
        let stderr = String::from_utf8_lossy(&verify.stderr);
        assert!(
            verify.status.success() && stderr.trim().is_empty(),
            "{}: {stderr}",
            unit.display()
        );
        let security = Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--no-pager"])
            .arg(&copy)
            .output()
            .expect("systemd-analyze security");
        let text = String::from_utf8_lossy(&security.stdout);
        let level: f64 = text
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no exposure level in: {text}"));
        eprintln!("{}: exposure {level}", unit.display());
        assert!(
            level <= 2.0,
            "{}: exposure {level} (at most 2.0, \"OK\"):\n{text}",
            unit.display()
        );
        // What the unit gives the process: no more root than the socket needs.
        let unit_text = std::fs::read_to_string(&unit).expect("unit");
        for must in [
            "DynamicUser=yes",
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "CapabilityBoundingSet=CAP_NET_ADMIN",
            "RestrictAddressFamilies=",
        ] {
            assert!(unit_text.contains(must), "{}: no {must}", unit.display());
        }
    }
}

/// Runs `diodon SIDE --config FILE` for a moment: a configuration it
/// refuses ends it at once with exit 2; one it accepts keeps it running.
#[expect(clippy::disallowed_methods, reason = "test harness deadline")]
fn runs_with(side: &str, config: &Path) -> Result<(), String> {
    let mut child = Command::new(DIODON)
        .args([side, "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = child.wait_with_output().expect("output");
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
    Ok(())
}

#[test]
fn the_example_configurations_are_accepted_and_a_typo_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let out = dir.path().join("in");
    let share = dir.path().join("share");
    std::fs::create_dir(&share).expect("share");
    std::fs::write(share.join("a.txt"), b"a").expect("file");
    for (side, file) in [
        ("recv", "recv.toml.example"),
        ("send", "send.toml.example"),
        ("sync", "sync.toml.example"),
    ] {
        let text =
            std::fs::read_to_string(repo().join("packaging/etc").join(file)).expect("example");
        // The same file on loopback, with ports and folders of this test.
        let local = text
            .replace("10.77.0.2:7700", "127.0.0.1:47711")
            .replace("/var/lib/diodon/NAME/in", out.to_str().expect("utf-8"))
            .replace("127.0.0.1:9978", "127.0.0.1:0")
            .replace("127.0.0.1:9977", "127.0.0.1:0")
            .replace("127.0.0.1:5514", "127.0.0.1:0")
            .replace("127.0.0.1:9979", "127.0.0.1:0")
            .replace("/srv/share", share.to_str().expect("utf-8"))
            .replace(
                "/var/lib/diodon/NAME/sync.sqlite",
                dir.path().join("sync.sqlite").to_str().expect("utf-8"),
            );
        let path = dir.path().join(file);
        std::fs::write(&path, &local).expect("write");
        if let Err(e) = runs_with(side, &path) {
            panic!("{file} refused: {e}");
        }
        let typo = dir.path().join(format!("typo-{file}"));
        std::fs::write(&typo, local.replacen("mtu = ", "mut = ", 1)).expect("write");
        let e = runs_with(side, &typo).expect_err("a misspelt key must stop it");
        assert!(e.contains("exit status: 2") && e.contains("mut"), "{e}");
    }
}
