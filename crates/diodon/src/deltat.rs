//! `diodon deltat …`: the Delta-t file transfer and the thesis's echo
//! client/server, as flags. The work is `diodon_apps::deltat::transfer`;
//! this module turns flags into its options and prints what it returns: one
//! JSON line on stdout, a failure as one sentence on stderr with the
//! connection's counters below it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use diodon_apps::deltat::transfer::{self, TransferFailure, Transport, TransportOptions};
use diodon_apps::deltat::DEFAULT_PORT;
use diodon_apps::report::Exit;
use diodon_deltat::CongestionAlgorithm;

/// `diodon deltat`: reliable transfers over Delta-t (needs a return path).
#[derive(Debug, Args)]
pub struct DeltatArgs {
    /// What to do.
    #[command(subcommand)]
    pub cmd: DeltatCommand,
}

/// Delta-t subcommands.
#[derive(Debug, Subcommand)]
pub enum DeltatCommand {
    /// Send one file to a `deltat recv` and wait for its verdict.
    Send(SendArgs),
    /// Receive one file, verify its BLAKE3 digest, answer the verdict.
    Recv(RecvArgs),
    /// Echo server (`--listen`) or client (`--to`), as in the thesis.
    Echo(EchoArgs),
}

/// Options both sides share.
#[derive(Debug, Args, Clone)]
pub struct TransportArgs {
    /// Use Linux TCP instead of Delta-t (same framing; for comparisons).
    #[arg(long)]
    pub tcp: bool,
    /// Delta-t port (connections multiplex on one UDP socket).
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Path MTU: Delta-t segments carry MTU − IP − UDP − 20 bytes of data.
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
    /// Give up after this many seconds without completing.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Delta-t congestion control: `cubic` (as Linux TCP's default), `bbr`
    /// (model-based: random loss does not shrink the window; for lossy links),
    /// `newreno`, or `unlimited` (the thesis implementation: none).
    #[arg(long, value_enum, default_value_t = Congestion::Cubic)]
    pub congestion: Congestion,
    /// Delta-t receive buffer in bytes (the largest window advertised;
    /// above 65 535 the window field is scaled, up to 16 MiB).
    #[arg(long, default_value_t = 4 << 20)]
    pub recv_buffer: usize,
    /// With `--tcp`: the socket's TCP congestion control (`TCP_CONGESTION`,
    /// e.g. `cubic`, `bbr`); default: the kernel's. Root may pick any
    /// available algorithm, not only `net.ipv4.tcp_allowed_congestion_control`.
    #[arg(long)]
    pub tcp_congestion: Option<String>,
}

/// `--congestion` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Congestion {
    /// RFC 9438 CUBIC.
    Cubic,
    /// Model-based, after BBR v1.
    Bbr,
    /// RFC 5681 / 6582 `NewReno`.
    Newreno,
    /// No congestion control.
    Unlimited,
}

impl From<Congestion> for CongestionAlgorithm {
    fn from(c: Congestion) -> Self {
        match c {
            Congestion::Cubic => CongestionAlgorithm::Cubic,
            Congestion::Bbr => CongestionAlgorithm::Bbr,
            Congestion::Newreno => CongestionAlgorithm::NewReno,
            Congestion::Unlimited => CongestionAlgorithm::Unlimited,
        }
    }
}

impl TransportArgs {
    fn options(&self) -> TransportOptions {
        TransportOptions {
            transport: if self.tcp {
                Transport::Tcp
            } else {
                Transport::Deltat
            },
            port: self.port,
            mtu: self.mtu,
            congestion: self.congestion.into(),
            recv_buffer: self.recv_buffer,
            timeout: Duration::from_secs(self.timeout),
            tcp_congestion: self.tcp_congestion.clone(),
        }
    }
}

/// `deltat send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// File to send.
    pub file: PathBuf,
    /// Receiver address (UDP for Delta-t, TCP with `--tcp`).
    #[arg(long)]
    pub to: SocketAddr,
    /// Transport options.
    #[command(flatten)]
    pub t: TransportArgs,
}

/// `deltat recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// Address to listen on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Output file (written as FILE.part, renamed once verified), or an
    /// existing directory to write the sender's file name into.
    #[arg(long)]
    pub out: PathBuf,
    /// Transport options.
    #[command(flatten)]
    pub t: TransportArgs,
}

/// `deltat echo`.
#[derive(Debug, Args)]
pub struct EchoArgs {
    /// Server: listen here and echo every connection.
    #[arg(long, conflicts_with = "to", required_unless_present = "to")]
    pub listen: Option<SocketAddr>,
    /// Client: connect here, send `--count` messages of `--size` bytes, verify the echoes.
    #[arg(long)]
    pub to: Option<SocketAddr>,
    /// Client: messages.
    #[arg(long, default_value_t = 10)]
    pub count: u32,
    /// Client: bytes per message.
    #[arg(long, default_value_t = 1000)]
    pub size: usize,
    /// Transport options.
    #[command(flatten)]
    pub t: TransportArgs,
}

/// Runs `diodon deltat …`; returns the exit code.
pub fn run(args: &DeltatArgs) -> Exit {
    match &args.cmd {
        DeltatCommand::Send(a) => report(transfer::send_file(&a.file, a.to, &a.t.options())),
        DeltatCommand::Recv(a) => report(transfer::recv_file(a.listen, &a.out, &a.t.options())),
        DeltatCommand::Echo(a) => echo(a),
    }
}

/// Prints a transfer's outcome; returns its exit code.
fn report(outcome: Result<transfer::TransferSummary, TransferFailure>) -> Exit {
    match outcome {
        Ok(summary) => {
            print_json(&summary);
            if let Some(reason) = &summary.reason {
                eprintln!("diodon: {reason}");
            }
            summary.exit()
        }
        Err(failure) => fail(&failure),
    }
}

fn fail(failure: &TransferFailure) -> Exit {
    eprintln!("diodon: {}", failure.error);
    if let Some(c) = &failure.counters {
        eprint!("diodon: connection counters at the failure:\n{}", c.text());
    }
    failure.error.exit()
}

fn echo(a: &EchoArgs) -> Exit {
    let opts = a.t.options();
    if let Some(listen) = a.listen {
        return match transfer::echo_server(listen, &opts) {
            Ok(()) => Exit::Success,
            Err(e) => fail(&e.into()),
        };
    }
    let Some(to) = a.to else {
        eprintln!("diodon: give --listen or --to");
        return Exit::Config;
    };
    match transfer::echo_client(to, a.count, a.size, &opts) {
        Ok(summary) => {
            print_json(&summary);
            Exit::Success
        }
        Err(failure) => fail(&failure),
    }
}

fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string(value) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("diodon: cannot print the summary: {e}"),
    }
}
