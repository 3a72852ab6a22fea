//! No import loop between the modules of any crate of the workspace
//! (DESIGN.md: one concern, one owner; a loop means two modules share a
//! concern neither owns). Fails naming every loop with the references
//! that make it; the fix is a leaf module for what both use, or an
//! inverted dependency.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use diodon_archcheck::{workspace_roots, ModuleGraph};

fn workspace() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("workspace root")
}

fn graphs() -> Vec<ModuleGraph> {
    let roots = workspace_roots(&workspace()).expect("workspace readable");
    assert!(
        roots.len() >= 8,
        "found only {} crate roots under crates/",
        roots.len()
    );
    roots
        .iter()
        .map(|(name, root)| {
            ModuleGraph::from_root(name, root).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect()
}

#[test]
fn no_crate_has_an_import_loop() {
    let mut report = String::new();
    for g in graphs() {
        for cycle in g.cycles() {
            let _ = write!(report, "\n{}: {cycle}", g.name);
        }
    }
    assert!(report.is_empty(), "import loops between modules:{report}");
}

#[test]
fn every_crate_has_a_module_graph() {
    let graphs = graphs();
    let deltat = graphs
        .iter()
        .find(|g| g.name == "diodon-deltat")
        .expect("diodon-deltat is a member");
    assert!(deltat
        .dependencies("crate::endpoint")
        .contains(&"crate::conn".to_string()));
}
