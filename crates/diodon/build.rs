//! Names the commit the binary was built from, for `diodon --version`:
//! `DIODON_COMMIT` when set (a package built from a source tarball), else
//! `git describe` of the checkout (with `-dirty` for uncommitted changes),
//! else "unknown commit".

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=DIODON_COMMIT");
    // Rebuild when HEAD moves or the index changes (a commit, a checkout).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let dir = PathBuf::from(dir);
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={}", dir.join(f).display());
        }
        if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
            let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
                .map_or(dir.clone(), PathBuf::from);
            println!("cargo:rerun-if-changed={}", common.join(head_ref).display());
        }
    }
    let commit = std::env::var("DIODON_COMMIT")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| git(&["describe", "--always", "--dirty", "--abbrev=12"]))
        .map_or_else(|| "unknown commit".to_owned(), |c| format!("commit {c}"));
    println!(
        "cargo:rustc-env=DIODON_VERSION={} ({commit})",
        env!("CARGO_PKG_VERSION")
    );
}
