//! The floors of the house, checked on the manifests (`cargo metadata`):
//! each crate's normal (non-dev) dependencies within the workspace, followed
//! transitively, never reach a crate of a floor it must not know.
//!
//! ```text
//!  diodon (CLI) ─► diodon-apps ─► diodon-io ─► diodon-sansio, diodon-counters
//!                        │                       ▲
//!                        └──► diodon-proto, diodon-deltat (sans-IO cores) ┘
//!  diodon-lab ─► diodon-apps, diodon-sim      (the lab: its own binary)
//! ```
//!
//! - `diodon-io` knows no protocol (like quinn-udp): no core, no app, no lab.
//! - The cores do no IO: neither reaches `diodon-io` (or anything above it).
//! - `diodon-sansio` is the contract both sides share: it depends on nothing
//!   of ours; nor does `diodon-packet` (pure IP packet logic of the tunnel).
//! - `diodon-filter` (frame views, ACL classifier, flow keys) is pure like
//!   the cores: it reaches no IO, no protocol core and nothing above.
//! - The gateway binary links neither the lab nor the simulator.
//! - Test support (`diodon-testkit`) is a dev-dependency only.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Workspace crate → the workspace crates it depends on (normal kind).
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let ours: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().expect("name").to_owned();
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null()) // normal, not dev or build
                .filter_map(|d| d["name"].as_str())
                .filter(|d| ours.contains(*d))
                .map(str::to_owned)
                .collect();
            (name, deps)
        })
        .collect()
}

/// Every workspace crate `name` reaches through normal dependencies.
fn reach(graph: &BTreeMap<String, BTreeSet<String>>, name: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name.to_owned()];
    while let Some(n) = todo.pop() {
        for d in graph.get(&n).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn assert_reaches_none(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, banned: &[&str]) {
    assert!(graph.contains_key(from), "{from} is a workspace member");
    let reached = reach(graph, from);
    let bad: Vec<&&str> = banned.iter().filter(|b| reached.contains(**b)).collect();
    assert!(
        bad.is_empty(),
        "{from} depends on {bad:?} (it reaches {reached:?})"
    );
}

#[test]
fn the_io_crate_knows_no_protocol() {
    let g = workspace_graph();
    assert_reaches_none(
        &g,
        "diodon-io",
        &[
            "diodon-proto",
            "diodon-deltat",
            "diodon-sim",
            "diodon-apps",
            "diodon-lab",
            "diodon",
        ],
    );
}

#[test]
fn the_cores_do_no_io() {
    let g = workspace_graph();
    for core in ["diodon-proto", "diodon-deltat"] {
        assert_reaches_none(
            &g,
            core,
            &["diodon-io", "diodon-apps", "diodon-lab", "diodon"],
        );
    }
    assert_reaches_none(&g, "diodon-deltat", &["diodon-proto"]);
    assert!(
        reach(&g, "diodon-sansio").is_empty(),
        "diodon-sansio depends on nothing of ours"
    );
    assert!(
        reach(&g, "diodon-packet").is_empty(),
        "diodon-packet (pure packet logic) depends on nothing of ours"
    );
}

#[test]
fn the_filter_is_pure() {
    let g = workspace_graph();
    assert_reaches_none(
        &g,
        "diodon-filter",
        &[
            "diodon-io",
            "diodon-proto",
            "diodon-deltat",
            "diodon-sim",
            "diodon-apps",
            "diodon-lab",
            "diodon",
        ],
    );
}

#[test]
fn the_gateway_links_no_lab_and_no_simulator_and_no_test_support() {
    let g = workspace_graph();
    assert_reaches_none(
        &g,
        "diodon",
        &["diodon-lab", "diodon-sim", "diodon-testkit"],
    );
    for name in g.keys() {
        if name != "diodon-testkit" {
            assert_reaches_none(&g, name, &["diodon-testkit"]);
        }
    }
}
