//! The flags every side shares: the link (`LinkArgs`) and what the process
//! keeps once set up (`SandboxArgs`).

use clap::{Args, ValueEnum};
use serde::Deserialize;
use std::path::PathBuf;

/// The keyed MAC a sender signs with (PROTOCOL.md § 4).
#[derive(Debug, Clone, Copy, ValueEnum, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum MacArg {
    /// AES-GMAC under a key derived per session: AES-NI and carry-less
    /// multiply, 7–14× cheaper per datagram than BLAKE3.
    AesGmac,
    /// BLAKE3's keyed hash: what receivers before AES-GMAC take.
    Blake3,
}

/// Settings shared by both sides.
#[derive(Debug, Args, Default)]
pub struct LinkArgs {
    /// TOML file with the same keys as the long flags (`rate = "1gbit"`); flags win.
    #[arg(long, value_name = "FILE.toml")]
    pub config: Option<PathBuf>,
    /// Path MTU; the datagram size is derived from it (never fragments). Default 1500.
    #[arg(long)]
    pub mtu: Option<usize>,
    /// Link rate (`950mbit`, `1gbit`, `unlimited`). Sender: pacing; receiver:
    /// sizes the socket buffer. Default 950mbit.
    #[arg(long)]
    pub rate: Option<String>,
    /// Repair symbols in percent of source symbols. Default 10, or what
    /// `--expected-loss` chooses.
    #[arg(long)]
    pub repair: Option<u32>,
    /// Random loss of the link, in percent (e.g. `0.5`): picks the least
    /// repair that keeps a 1 GB file below a 10⁻⁶ chance of failing and
    /// repairs any burst of 64 datagrams, sizes short blocks for it, and
    /// says what it chose. Default: designed for 1 %, repair 10.
    #[arg(long, value_name = "PERCENT")]
    pub expected_loss: Option<f64>,
    /// Source symbols per FEC block. Default: the largest up to 256 the
    /// decoder handles without padding for the repair ratio (224 at 10 %).
    #[arg(long)]
    pub block: Option<u16>,
    /// Blocks whose symbols are interleaved. Default 4.
    #[arg(long)]
    pub interleave: Option<u8>,
    /// Pre-shared key: 32 raw bytes or 64 hex characters (keyed MAC instead
    /// of CRC32C), or the lines `current ID HEX` and `next ID HEX` for a
    /// key rollover. Read again on SIGHUP (`systemctl reload`).
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Encrypt every datagram (ChaCha20-Poly1305 with a key per session
    /// derived from --key-file) instead of only signing it. Both sides need
    /// it; a receiver with it refuses datagrams that are not encrypted.
    #[arg(long)]
    pub encrypt: bool,
    /// Sender, with --key-file and without --encrypt: the MAC it signs
    /// with. Default aes-gmac; `blake3` for a receiver of a version before
    /// AES-GMAC. A receiver with a key takes either.
    #[arg(long, value_enum, value_name = "MAC")]
    pub mac: Option<MacArg>,
    /// Sender, with a key file holding a `next` key: seal with
    /// the next key from this long after the start (`0s`: at once; `90s`,
    /// `30m`, `12h`, `7d`). The receiver opens both keys.
    #[arg(long, value_name = "DURATION")]
    pub next_key_after: Option<String>,
    /// Beacon interval in milliseconds. Default 250.
    #[arg(long, value_name = "MS")]
    pub beacon: Option<u64>,
    /// Δt in milliseconds (state is freed after 2Δt of silence). Default 2000.
    #[arg(long, value_name = "MS")]
    pub delta_t: Option<u64>,
    /// Bind the socket to this interface.
    #[arg(long)]
    pub device: Option<String>,
    /// Print the final summary as JSON on stdout (stderr with --stdout).
    #[arg(long)]
    pub json: bool,
}

/// What the process keeps once its sockets and outputs are open (`send`, `recv`,
/// `sync`, `tunnel send`, `tap`, `agent`).
#[derive(Debug, Args, Default)]
pub struct SandboxArgs {
    /// Once the socket and the outputs are open, run as this user and its
    /// group, keeping no capability (needs root to start).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Do not restrict the process once set up (no no-new-privileges, Landlock
    /// or seccomp filter); --user still applies.
    #[arg(long)]
    pub no_sandbox: bool,
}
