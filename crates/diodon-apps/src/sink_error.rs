//! Why a sink refuses a channel ([`Refusal`], decided on the decoder thread
//! by `Sink::admit`) or gives one up ([`SinkFailure`], on the writer
//! thread). Both are typed; both reach the core through
//! `Receiver::reject_channel` and come back in `FailReason::Rejected`, and
//! their text is what the verdict and the quarantine `.reason` file say.
//! A failure for lack of room on the output filesystem (`ENOSPC`,
//! `EDQUOT`, or an announced size that cannot fit) says `output disk full`
//! ([`SinkFailure::is_no_space`]): the file sink then frees the partial
//! bytes instead of keeping them.
//!
//! ```text
//!  decoder: admit(meta) ─ Err(Refusal) ─► reject_channel ─► SinkEvent::Refused
//!  writer:  handle(ev)  ─ Err(SinkError { why: SinkFailure }) ─► reject_channel
//! ```

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use diodon_proto::ChannelKind;

use crate::names::NameError;

/// `ENOSPC` or `EDQUOT`: no room left for the writer.
fn is_no_space_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Why a channel is not acceptable to a sink (name or kind).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The name is not a safe relative path.
    #[error("unsafe name: {0}")]
    UnsafeName(#[from] NameError),
    /// A datagram channel reached a sink for byte streams.
    #[error("a datagram channel (UDP flow) needs a --udp-forward receiver")]
    DatagramsNeedUdpForward,
    /// A sync manifest or bundle reached a sink that holds no mirrored tree.
    #[error("a sync {0} needs a receiver with --out DIR")]
    SyncNeedsOut(&'static str),
    /// A byte stream reached the UDP forwarder.
    #[error("--udp-forward takes only datagram channels, not {0:?}")]
    NotDatagrams(ChannelKind),
    /// A packet channel (IP tunnel) reached a sink that is not a TUN.
    #[error("a packet channel (IP tunnel) needs a --tun receiver")]
    PacketsNeedTun,
    /// Something other than a packet channel reached the TUN sink.
    #[error("--tun takes only packet channels (IP tunnel), not {0:?}")]
    NotPackets(ChannelKind),
    /// A channel that is not one of the tap's packet channels reached the
    /// packet sink, or one of its records is malformed.
    #[error("not a packet channel: {0}")]
    NotTapPackets(String),
    /// Something other than a Kafka topic-partition's channel reached the
    /// Kafka sink.
    #[error("--kafka takes only Kafka channels (stream \"kafka:TOPIC/PARTITION\"), not {0}")]
    NotKafka(String),
}

/// A file operation of the file sink (the text before `: <OS error>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Creating the staging file.
    CreateStaging,
    /// Reserving the announced size on disk.
    Reserve,
    /// Writing to the staging file.
    Write,
    /// fsync before the rename.
    Fsync,
    /// Setting the permissions.
    Chmod,
    /// Setting the modification time.
    SetMtime,
    /// Renaming into place.
    Rename,
}

impl fmt::Display for FileOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FileOp::CreateStaging => "cannot create staging file",
            FileOp::Reserve => "cannot reserve the announced size",
            FileOp::Write => "write",
            FileOp::Fsync => "fsync",
            FileOp::Chmod => "chmod",
            FileOp::SetMtime => "set mtime",
            FileOp::Rename => "rename",
        })
    }
}

/// Why a sink gave a channel up.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkFailure {
    /// The channel was refused on opening (the file sink quarantines it).
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// The name cannot be placed under the output folder (too long a path).
    #[error("{0}")]
    Name(NameError),
    /// The announced size does not fit on the output filesystem; refused
    /// before the first byte.
    #[error(
        "output disk full: {size} bytes announced, the output filesystem has {available} available \
         ({pending} promised to files being written, {reserve} kept free)"
    )]
    WontFit {
        /// The announced size.
        size: u64,
        /// Bytes available on the output filesystem (`f_bavail`).
        available: u64,
        /// Bytes still to come of the files being written.
        pending: u64,
        /// Bytes always kept free.
        reserve: u64,
    },
    /// A file operation found no room (`ENOSPC`, `EDQUOT`).
    #[error("output disk full: {op}: {source}")]
    NoSpace {
        /// Which.
        op: FileOp,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// A file operation failed.
    #[error("{op}: {source}")]
    File {
        /// Which.
        op: FileOp,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// The staging file is missing.
    #[error("no staging file")]
    NoStagingFile,
    /// Bytes arrived at another offset than the next one.
    #[error("data at offset {offset}, expected {expected}")]
    OutOfOrder {
        /// Offset of the data.
        offset: u64,
        /// Bytes written so far.
        expected: u64,
    },
    /// The bytes written differ from the channel's length.
    #[error("wrote {written} bytes, channel has {bytes}")]
    Length {
        /// Written.
        written: u64,
        /// The channel's length.
        bytes: u64,
    },
    /// The name could not be made a safe path.
    #[error("unsafe name")]
    UnsafeName,
    /// A file merged from the blocks of several passes does not hash to
    /// the digest its trailer announced: its kept blocks are forgotten.
    #[error("the file merged from several passes does not match its digest ({what})")]
    MergedDigest {
        /// What differed.
        what: &'static str,
    },
    /// A sync manifest larger than the receiver holds.
    #[error("a manifest of {0} bytes is larger than the {max} bytes a receiver holds", max = crate::sync::manifest::MAX_MANIFEST_BYTES)]
    ManifestTooLarge(u64),
    /// A verified manifest that is not JSON Lines of known records.
    #[error("{0}")]
    Manifest(String),
    /// A sync bundle larger than the receiver holds, or of unknown size.
    #[error("a bundle of {0} bytes is larger than the {max} bytes a receiver holds", max = diodon_proto::bundle::MAX_BUNDLE_BYTES)]
    BundleTooLarge(u64),
    /// A verified bundle that is not a sequence of entries.
    #[error("{0}")]
    Bundle(String),
    /// A bundle some of whose files did not land (each has its own audit
    /// record and quarantine entry).
    #[error("{0}")]
    BundleFiles(String),
    /// The Kafka sink could not read or produce a record (broker, topic,
    /// malformed record).
    #[error("kafka: {0}")]
    Kafka(String),
    /// The destination has no parent directory.
    #[error("no parent directory")]
    NoParent,
    /// The destination is a directory.
    #[error("{} is a directory", .0.display())]
    IsADirectory(PathBuf),
    /// A directory on the way is a symlink.
    #[error("{} is a symlink: refusing to follow it", .0.display())]
    Symlink(PathBuf),
    /// Something on the way exists and is not a directory.
    #[error("{} exists and is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A directory on the way could not be created.
    #[error("mkdir {}: {source}", path.display())]
    Mkdir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// A directory on the way could not be examined.
    #[error("{}: {source}", path.display())]
    Examine {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// stdout already carries another channel.
    #[error("stdout is busy with another channel")]
    StdoutBusy,
    /// Writing to stdout failed.
    #[error("stdout: {0}")]
    Stdout(Arc<io::Error>),
    /// Connecting to the TCP destination failed.
    #[error("connect {dest}: {source}")]
    Connect {
        /// Destination.
        dest: String,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// Writing to the TCP destination failed.
    #[error("write {dest}: {source}")]
    WriteTo {
        /// Destination.
        dest: String,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// The UDP socket towards the destination could not be made.
    #[error("socket for {dest}: {source}")]
    Socket {
        /// Destination.
        dest: String,
        /// The OS error.
        source: Arc<io::Error>,
    },
    /// A frame output (TAP interface, pcap folder) failed.
    #[error("{0}")]
    Output(String),
    /// Sending to the UDP destination failed.
    #[error("send to {dest}: {source}")]
    SendTo {
        /// Destination.
        dest: String,
        /// The OS error.
        source: Arc<io::Error>,
    },
}

impl SinkFailure {
    /// A failed file operation ([`SinkFailure::NoSpace`] when it found no room).
    pub fn file(op: FileOp) -> impl FnOnce(io::Error) -> SinkFailure {
        move |e| {
            if is_no_space_error(&e) {
                SinkFailure::NoSpace {
                    op,
                    source: Arc::new(e),
                }
            } else {
                SinkFailure::File {
                    op,
                    source: Arc::new(e),
                }
            }
        }
    }

    /// Whether the channel failed for lack of room on the output filesystem.
    pub fn is_no_space(&self) -> bool {
        match self {
            SinkFailure::WontFit { .. } | SinkFailure::NoSpace { .. } => true,
            SinkFailure::Mkdir { source, .. } => is_no_space_error(source),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diodon_proto::{FailReason, Rejection};

    #[test]
    fn texts_are_the_reports_and_the_core_keeps_the_type() {
        let refusal = Refusal::NotDatagrams(ChannelKind::File);
        assert_eq!(
            refusal.to_string(),
            "--udp-forward takes only datagram channels, not File"
        );
        let failure = SinkFailure::Connect {
            dest: "10.0.0.1:9".into(),
            source: Arc::new(io::Error::from(io::ErrorKind::ConnectionRefused)),
        };
        assert!(failure.to_string().starts_with("connect 10.0.0.1:9: "));
        let reason = FailReason::Rejected(Rejection::from(refusal.clone()));
        assert_eq!(
            reason.to_string(),
            "rejected: --udp-forward takes only datagram channels, not File"
        );
        let FailReason::Rejected(r) = reason else {
            unreachable!()
        };
        assert_eq!(r.downcast_ref::<Refusal>(), Some(&refusal));
        assert!(r.downcast_ref::<SinkFailure>().is_none());
    }

    #[test]
    fn no_room_says_the_disk_is_full() {
        let full = SinkFailure::file(FileOp::Write)(io::Error::from_raw_os_error(libc::ENOSPC));
        assert!(full.is_no_space());
        assert!(
            full.to_string().starts_with("output disk full: write: "),
            "{full}"
        );
        let quota = SinkFailure::file(FileOp::Fsync)(io::Error::from_raw_os_error(libc::EDQUOT));
        assert!(quota.is_no_space(), "{quota}");
        let other = SinkFailure::file(FileOp::Write)(io::Error::from_raw_os_error(libc::EIO));
        assert!(!other.is_no_space());
        assert_eq!(
            other.to_string(),
            SinkFailure::File {
                op: FileOp::Write,
                source: Arc::new(io::Error::from_raw_os_error(libc::EIO))
            }
            .to_string()
        );
    }
}
