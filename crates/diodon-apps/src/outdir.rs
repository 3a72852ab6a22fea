//! Directories under the output folder, made one component at a time and
//! never through a symlink or anything else that is not a real directory,
//! so a hostile name cannot steer a write outside `--out`. The file sink
//! uses it to place a verified file, the mirror to apply a rename.

use crate::names::SafePath;
use crate::sink_error::SinkFailure;
use std::fs;
use std::io;
use std::path::Path;

/// Creates the directories above `rel` under `root`, one component at a
/// time, refusing to pass through anything that is not a real directory.
pub fn ensure_parent(root: &Path, rel: &SafePath) -> Result<(), SinkFailure> {
    ensure_dirs(root, rel.as_path().parent().unwrap_or(Path::new("")))
}

/// Creates `rel`'s directories under `root` one component at a time,
/// refusing to pass through anything that is not a real directory.
fn ensure_dirs(root: &Path, rel: &Path) -> Result<(), SinkFailure> {
    let mut at = root.to_owned();
    for c in rel.components() {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => return Err(SinkFailure::Symlink(at)),
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(SinkFailure::NotADirectory(at)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&at) {
                // Another receiver sharing the folder made it meanwhile
                // (never through a symlink: checked again).
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) => {}
                Err(e) => {
                    return Err(SinkFailure::Mkdir {
                        path: at,
                        source: e.into(),
                    })
                }
                Ok(()) => {}
            },
            Err(e) => {
                return Err(SinkFailure::Examine {
                    path: at,
                    source: e.into(),
                })
            }
        }
    }
    Ok(())
}
