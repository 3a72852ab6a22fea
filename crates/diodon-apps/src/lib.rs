//! Diodon's applications: the drivers that run the sans-IO cores on real
//! sockets (the one-way pipelines, the Delta-t driver), what they carry
//! (files, a pipe, TCP streams, UDP flows, Delta-t transfers), and the typed
//! reports every front end shares.
//!
//! ```text
//!  SENDER                                                      (send.rs)
//!  source threads ──SourceMsg──► bounded queue ──► core thread ──► BatchSender
//!  (files, stdin, TCP conns)     (blocks producers)   Sender + pacing   sendmsg+GSO
//!
//!  RECEIVER                                                    (recv.rs)
//!  net thread ──NetBatch──► bounded ──► decoder thread ──SinkEvent──► bounded ──► writer thread
//!  recvmmsg+GRO only         queue      Receiver core                 queue       Sink (files,
//!        ▲                                    ▲                                    stdout, TCP)
//!        └── recycled buffers ◄───────────────┘◄──────── channel failures ─────────┘
//! ```
//!
//! Every queue is bounded and blocks its producer: nothing inside the
//! pipeline is dropped. The only loss points are the link and the kernel's
//! socket buffer, and both are counted.
//!
//! Modules: [`send`] and [`recv`] (the one-way pipelines), [`deltat`] (the
//! Delta-t driver and file exchange), [`gateway`] (one run of a side, front
//! to back), [`report`] (summaries, exit codes), [`link`] (link settings), [`key_file`] (the pre-shared key file, read again on SIGHUP),
//! [`outcome`] (channel keys and verdicts), [`names`] (channel-name
//! sanitizer), [`outdir`] (directories under the output folder, never
//! through a symlink), [`sink_error`] (why a sink refuses or gives up a channel),
//! [`fec_kernel`] (the CPU's GFNI multiply-add handed to the codec),
//! [`files`] (file source and the staging/verify/rename sink),
//! [`quarantine`] (the bounded folder where failed files leave a record),
//! [`mirror`] (a sync receiver: files already present, manifests, the
//! deleted folder, availability time, the audit log),
//! [`multilink`] (several links from one host: the stable hash that spreads
//! channels, each link's health), [`stream`] (stdin/stdout and TCP), [`sync`] (directory-tree sync: `SQLite`
//! state, streaming scan, carousel passes, deletions, outbox), [`udp_flow`]
//! (UDP flows as datagram channels), [`kafka`] (Kafka topic-partitions
//! across the diode: the sink that produces them again), [`tunnel`] (the one-way IP tunnel: TUN
//! in, TUN out),
//! [`tap`] (mirrored traffic: capture, ACL filter, flow-preserving spread
//! over agents, encapsulated or across the diode), [`agent`] (a tap's far
//! end on its local segment), [`packet_sink`] (the receiver's packet
//! channels put back in order), [`frames_out`] (where delivered frames go:
//! TAP, pcap, a socket), [`metrics`] (the counters over HTTP: Prometheus and
//! JSON),
//! [`health`] (the receiver's link state and alarms), [`status`] (its
//! history, channels in flight and last verdicts for `/api/status`),
//! [`guard`] (the nftables one-way guard of a diode host, run through
//! [`nft`]), [`sandbox`] (what `recv` and `send` may still do once set up:
//! the policy `diodon_io::sandbox` applies), [`stats`] (every measuring point of one host: kernel MIBs, link,
//! guard and a running Diodon's counters, with deltas).

pub mod agent;
pub mod deltat;
pub mod fec_kernel;
pub mod files;
pub mod frames_out;
pub mod gateway;
pub mod guard;
pub mod health;
pub mod held;
pub mod kafka;
pub mod key_file;
pub mod link;
pub mod metrics;
pub mod mirror;
pub mod multilink;
pub mod names;
pub mod nft;
pub mod outcome;
pub mod outdir;
pub mod packet_sink;
pub mod quarantine;
pub mod recv;
pub mod report;
pub mod sandbox;
pub mod send;
pub mod sink_error;
pub mod stats;
pub mod status;
pub mod stream;
pub mod sync;
pub mod tap;
pub mod tunnel;
pub mod udp_flow;

pub use recv::{
    run_receiver, ChannelKey, ChannelOutcome, RecvOptions, RecvProgress, RecvReport, Sink,
    SinkError, SinkEvent, Verdict,
};
pub use send::{
    run_sender, SendOptions, SendProgress, SendReport, SentChannel, SentStatus, SourceHandle,
    SourceMsg,
};
pub use sink_error::{FileOp, Refusal, SinkFailure};

/// Errors that end a pipeline (as opposed to failing one channel).
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Socket setup or IO failed.
    #[error("UDP: {0}")]
    Udp(#[from] diodon_io::UdpError),
    /// The core refused the configuration.
    #[error("configuration: {0}")]
    Config(#[from] diodon_proto::ConfigError),
    /// A pipeline thread could not be started or panicked.
    #[error("thread {0} failed")]
    Thread(&'static str),
    /// Output directory or other local IO problem.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
