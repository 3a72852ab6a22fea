//! The gateway binary links no measuring lab: no plotting library, no
//! trial harness (they ship as the `diodon-lab` binary). Checked on the
//! built executable itself, so a dependency that sneaks back in by any path
//! (a feature, a transitive crate) fails here. And the binary's sources stay
//! a thin front end: no file in `crates/diodon/src` over 300 lines (logic a
//! second front end would need belongs in a library crate).
//!
//! ```text
//!  target/…/diodon bytes ─► no "plotters" (crate paths, symbols, panic locations)
//!                        ─► no "diodon_lab" (the lab crate's symbols)
//! ```

fn mentions(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| w == &needle)
        .count()
}

#[test]
fn the_gateway_binary_links_no_plotting_and_no_lab() {
    let exe = env!("CARGO_BIN_EXE_diodon");
    let bytes = std::fs::read(exe).unwrap();
    assert!(bytes.len() > 1 << 20, "{exe} is not the gateway binary");
    // A crate linked in leaves its name in symbols and source paths.
    assert!(
        mentions(&bytes, b"tiny_http") > 0,
        "the check sees crate names"
    );
    for lab in [&b"plotters"[..], b"diodon_lab"] {
        let n = mentions(&bytes, lab);
        assert_eq!(
            n,
            0,
            "{exe} mentions {:?} {n} times: the gateway links the lab",
            String::from_utf8_lossy(lab)
        );
    }
}

/// Every `.rs` file below `dir`, recursively.
fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_of_the_binary_is_over_300_lines() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 10, "{files:?}");
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).expect("source").lines().count();
            (n > 300).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "move logic into a library crate: {long:?}");
}
