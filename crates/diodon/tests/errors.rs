//! A run that cannot go on says why in one sentence, each cause once: the
//! real binary in a network namespace with no route (loopback only), where
//! the first `sendmsg` fails with "Network is unreachable". (Before, the
//! error chain printed the OS error three times and the send failure
//! twice.)

use diodon_testkit::{require_netns, Namespace};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_diodon");

#[test]
fn an_unreachable_destination_is_one_sentence_naming_each_cause_once() {
    if !require_netns("an_unreachable_destination_is_one_sentence_naming_each_cause_once") {
        return;
    }
    let ns = Namespace::new(&format!("dk-err-{}", std::process::id()));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.txt");
    std::fs::write(&file, b"hello").unwrap();
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            BIN,
            "send",
            "--to",
            "10.1.1.1:7700",
        ])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "an I/O error: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("diodon: UDP: send to 10.1.1.1:7700 failed after 0 datagrams: "),
        "{stderr}"
    );
    assert_eq!(last.matches("os error 101").count(), 1, "{last}");
    assert_eq!(last.matches("failed after").count(), 1, "{last}");
}
