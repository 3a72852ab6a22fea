//! The link's integrity mode from the flags and the file: CRC32C, a keyed
//! MAC (AES-GMAC, or BLAKE3 with `--mac blake3`) or encryption.

use super::file::FileConfig;
use crate::args::{LinkArgs, MacArg};
use anyhow::{bail, Result};
use diodon_apps::key_file::read_keys;
use diodon_proto::Integrity;

/// The integrity mode (`--key-file`, `--encrypt`, `--mac`).
pub(super) fn integrity(a: &LinkArgs, f: &FileConfig) -> Result<Integrity> {
    let encrypt = a.encrypt || f.encrypt.unwrap_or(false);
    let mac = a.mac.or(f.mac);
    let integrity = match (a.key_file.as_ref().or(f.key_file.as_ref()), encrypt) {
        (Some(_), true) if mac.is_some() => bail!(
            "--mac chooses the MAC of a signed link; with --encrypt every datagram is authenticated by its cipher"
        ),
        (Some(p), true) => Integrity::Encrypted(read_keys(p)?),
        (Some(p), false) => match mac.unwrap_or(MacArg::AesGmac) {
            MacArg::AesGmac => Integrity::Gmac(read_keys(p)?),
            MacArg::Blake3 => Integrity::Keyed(read_keys(p)?),
        },
        (None, true) => bail!("--encrypt needs --key-file (the pre-shared key)"),
        (None, false) if mac.is_some() => bail!("--mac needs --key-file (the pre-shared key)"),
        (None, false) => Integrity::Crc32c,
    };
    Ok(integrity)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn from_file(toml: &str) -> Result<Integrity> {
        let f: FileConfig = toml::from_str(toml).expect("valid TOML");
        integrity(&LinkArgs::default(), &f)
    }

    #[test]
    fn a_signed_link_uses_aes_gmac_unless_told_blake3() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("one.key");
        std::fs::write(&key, "ab".repeat(32)).unwrap();
        let with =
            |key: &Path, rest: &str| format!("key-file = {:?}\n{rest}", key.to_str().unwrap());
        assert!(matches!(from_file(&with(&key, "")), Ok(Integrity::Gmac(_))));
        assert!(matches!(
            from_file(&with(&key, "mac = \"aes-gmac\"")),
            Ok(Integrity::Gmac(_))
        ));
        assert!(matches!(
            from_file(&with(&key, "mac = \"blake3\"")),
            Ok(Integrity::Keyed(_))
        ));
        let e = from_file("mac = \"blake3\"").unwrap_err().to_string();
        assert!(e.contains("--mac needs --key-file"), "{e}");
        let e = from_file(&with(&key, "encrypt = true\nmac = \"blake3\""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("with --encrypt every datagram is authenticated"),
            "{e}"
        );
        assert!(toml::from_str::<FileConfig>("mac = \"md5\"").is_err());
        let flags = LinkArgs {
            key_file: Some(key.clone()),
            mac: Some(MacArg::Blake3),
            ..LinkArgs::default()
        };
        let from_flags = integrity(&flags, &FileConfig::default());
        assert!(matches!(from_flags, Ok(Integrity::Keyed(_))));
    }
}
