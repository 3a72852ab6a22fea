//! The gateway binary links no measuring lab: no plotting library, no
//! trial harness (they ship as the `diodon-lab` binary). Checked on the
//! built executable itself, so a dependency that sneaks back in by any path
//! (a feature, a transitive crate) fails here.
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
