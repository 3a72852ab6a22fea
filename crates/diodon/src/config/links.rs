//! The links of a sender with one or several (`send`, `sync`): from the
//! flags (`--to` repeated, `--bind`) or the file (`[[link]]` tables, or
//! `to`), checked (never both forms in the file, no link twice).

use super::{FileConfig, LinkTable};
use crate::args::SendArgs;
use anyhow::{bail, Result};
use std::net::SocketAddr;

/// The links of a sender (`send`, `sync`): every `--to` (with `--bind`),
/// else the file's `[[link]]` tables, else its `to`. Empty when none is
/// given.
pub fn links(
    to: &[SocketAddr],
    bind: Option<SocketAddr>,
    f: &FileConfig,
) -> Result<Vec<LinkTable>> {
    let bind = bind.or(f.bind);
    let one = |to| LinkTable {
        to,
        bind,
        device: None,
    };
    let links: Vec<LinkTable> = if !to.is_empty() {
        to.iter().copied().map(one).collect()
    } else if f.link.is_empty() {
        f.to.into_iter().map(one).collect()
    } else if f.to.is_some() {
        bail!("the file gives both `to` and [[link]] tables: give one of them");
    } else {
        f.link
            .iter()
            .map(|l| LinkTable {
                bind: l.bind.or(bind),
                ..l.clone()
            })
            .collect()
    };
    let mut seen = std::collections::HashSet::new();
    if let Some(l) = links.iter().find(|l| !seen.insert(l.to)) {
        bail!("link {} is given twice", l.to);
    }
    Ok(links)
}

impl SendArgs {
    /// This command's links: see [`links`].
    pub fn links(&self, f: &FileConfig) -> Result<Vec<LinkTable>> {
        links(&self.to, self.bind, f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::FileConfig;
    use crate::args::{Cli, Command};
    use clap::Parser;

    #[test]
    fn links_come_from_repeated_to_or_link_tables() {
        let send = |argv: &[&str]| {
            let Command::Send(s) = Cli::parse_from([&["diodon", "send"], argv].concat()).cmd else {
                panic!("not send")
            };
            s
        };
        let file = |toml: &str| toml::from_str::<FileConfig>(toml).unwrap();
        let two = send(&["--to", "10.0.1.2:7700", "--to", "10.0.2.2:7700", "x"]);
        let links = two.links(&FileConfig::default()).unwrap();
        let to: Vec<String> = links.iter().map(|l| l.to.to_string()).collect();
        assert_eq!(to, ["10.0.1.2:7700", "10.0.2.2:7700"]);
        // The file's tables, each with its own bind and device; `bind` fills in.
        let tables = "bind = \"0.0.0.0:0\"\n\
                      [[link]]\nto = \"10.0.1.2:7700\"\ndevice = \"eth1\"\n\
                      [[link]]\nto = \"10.0.2.2:7700\"\nbind = \"10.0.2.1:0\"\n";
        let links = send(&["x"]).links(&file(tables)).unwrap();
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].device.as_deref(), Some("eth1"));
        assert_eq!(links[0].bind, Some("0.0.0.0:0".parse().unwrap()));
        assert_eq!(links[1].bind, Some("10.0.2.1:0".parse().unwrap()));
        // Flags win over the file.
        assert_eq!(two.links(&file(tables)).unwrap()[0].device, None);
        // Mistakes are named.
        let both = "to = \"10.0.1.2:7700\"\n[[link]]\nto = \"10.0.2.2:7700\"\n";
        let e = send(&["x"]).links(&file(both)).unwrap_err().to_string();
        assert!(e.contains("both `to` and [[link]]"), "{e}");
        let twice = send(&["--to", "10.0.1.2:7700", "--to", "10.0.1.2:7700", "x"]);
        let e = twice.links(&FileConfig::default()).unwrap_err().to_string();
        assert_eq!(e, "link 10.0.1.2:7700 is given twice");
        assert!(
            toml::from_str::<FileConfig>("[[link]]\nto = \"10.0.1.2:7700\"\nrate = 1\n").is_err()
        );
        assert!(send(&["x"])
            .links(&FileConfig::default())
            .unwrap()
            .is_empty());
    }
}
