//! Byte streams of unknown length: stdin → stdout (pipe mode) and TCP
//! connections (the sender listens, each accepted connection is a channel;
//! the receiver connects to a fixed destination per channel).
//!
//! ```text
//!  stdin ──► channel "stdin" ─────────────► stdout (bytes as they are decoded;
//!                                                  the verdict comes at the end)
//!  TCP accept ─► thread per conn ─► channel "tcp:PEER" ─► connect(dest) per channel
//!       EOF ─► finish ─► trailer ─► Complete ─► shutdown(write)
//!       error ─► abort ─► Failed ──────────────► reset (SO_LINGER 0) the destination
//! ```
//!
//! Streams cannot wait for the digest before releasing bytes: the receiver
//! writes each block as soon as it decodes, and a failed channel is made
//! visible to the destination (a reset connection, a non-zero exit code),
//! never as silently missing bytes.

use crate::recv::{ChannelKey, ChannelOutcome, Sink, SinkError, SinkEvent, Verdict};
use crate::send::{SourceHandle, CHUNK};
use crate::sink_error::{Refusal, SinkFailure};
use diodon_proto::ChannelMeta;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sends `input` (stdin) as one stream channel called `name`.
pub fn send_reader(mut input: impl Read, name: &str, handle: &SourceHandle) -> io::Result<u64> {
    let token = handle
        .open_digested(ChannelMeta::stream(name))
        .map_err(io::Error::other)?;
    pump(&mut input, token, handle)
}

/// Copies `input` into channel `token` (opened with `open_digested`) until
/// EOF (finish, with the digest hashed here as the bytes came) or an error
/// (abort).
fn pump(input: &mut impl Read, token: u64, handle: &SourceHandle) -> io::Result<u64> {
    let mut total = 0u64;
    let mut hasher = blake3::Hasher::new();
    loop {
        let mut buf = vec![0u8; CHUNK];
        match input.read(&mut buf) {
            Ok(0) => {
                handle
                    .finish_digested(token, *hasher.finalize().as_bytes())
                    .map_err(io::Error::other)?;
                return Ok(total);
            }
            Ok(n) => {
                buf.truncate(n);
                total += n as u64;
                hasher.update(&buf);
                handle.data(token, buf).map_err(io::Error::other)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = handle.abort(token, e.to_string());
                return Err(e);
            }
        }
    }
}

/// Accepts connections on `listener` until `stop` is set; each connection
/// becomes a channel read by its own thread.
pub fn serve_tcp(
    listener: &TcpListener,
    handle: &SourceHandle,
    stop: &Arc<AtomicBool>,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((conn, peer)) => {
                conn.set_nonblocking(false)?;
                let handle = handle.clone();
                std::thread::Builder::new()
                    .name(format!("tcp-{peer}"))
                    .spawn(move || {
                        let name = format!("tcp:{peer}");
                        tracing::info!(%peer, "connection accepted");
                        match handle.open_digested(ChannelMeta::stream(name)) {
                            Ok(token) => {
                                let mut conn = conn;
                                match pump(&mut conn, token, &handle) {
                                    Ok(n) => tracing::info!(%peer, bytes = n, "connection closed"),
                                    Err(e) => tracing::warn!(%peer, "connection failed: {e}"),
                                }
                            }
                            Err(e) => tracing::warn!(%peer, "{e}"),
                        }
                    })?;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Byte-stream sinks take files and streams; a datagram channel (a UDP
/// flow's length-prefixed records) needs `--udp-forward`.
pub(crate) fn refuse_datagrams(meta: &ChannelMeta) -> Result<(), Refusal> {
    if meta.aligned {
        Err(Refusal::PacketsNeedTun)
    } else if meta.kind == diodon_proto::ChannelKind::Datagrams {
        Err(Refusal::DatagramsNeedUdpForward)
    } else {
        Ok(())
    }
}

/// Byte sinks (stdout, TCP) take streams and files, not sync manifests
/// or bundles.
fn refuse_manifests(meta: &ChannelMeta) -> Result<(), Refusal> {
    refuse_datagrams(meta)?;
    match meta.kind {
        diodon_proto::ChannelKind::Manifest => Err(Refusal::SyncNeedsOut("manifest")),
        diodon_proto::ChannelKind::Bundle => Err(Refusal::SyncNeedsOut("bundle")),
        _ => Ok(()),
    }
}

/// Writes the (single) stream to stdout; a second concurrent channel is
/// refused.
#[derive(Debug, Default)]
pub struct StdoutSink {
    active: Option<(ChannelKey, String, u64)>,
    broken: bool,
}

impl Sink for StdoutSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        refuse_manifests(meta)
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        match event {
            SinkEvent::Opened { key, meta } => {
                if self.active.is_some() {
                    return Err(SinkError {
                        key,
                        why: SinkFailure::StdoutBusy,
                    });
                }
                self.active = Some((key, meta.name, 0));
                self.broken = false;
                Ok(None)
            }
            SinkEvent::Refused { .. }
            | SinkEvent::Gap { .. }
            | SinkEvent::Partial { .. }
            | SinkEvent::Assembled { .. } => Ok(None),
            SinkEvent::Data { key, data, .. } => {
                let Some((k, _, n)) = &mut self.active else {
                    return Ok(None);
                };
                if *k != key || self.broken {
                    return Ok(None);
                }
                *n += data.len() as u64;
                let mut out = io::stdout().lock();
                if let Err(e) = out.write_all(&data) {
                    self.broken = true;
                    return Err(SinkError {
                        key,
                        why: SinkFailure::Stdout(Arc::new(e)),
                    });
                }
                Ok(None)
            }
            SinkEvent::Complete { key, bytes, digest } => {
                let name = self.take(key);
                let flushed = io::stdout().flush();
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    "stdout",
                    match flushed {
                        Ok(()) => Verdict::Verified {
                            blake3: hex::encode(digest),
                        },
                        Err(e) => Verdict::Failed {
                            reason: format!("stdout: {e}"),
                        },
                    },
                )))
            }
            SinkEvent::Failed { key, reason } => {
                let name = self.take(key);
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    0,
                    "stdout",
                    Verdict::Failed {
                        reason: reason.to_string(),
                    },
                )))
            }
        }
    }
}

impl StdoutSink {
    fn take(&mut self, key: ChannelKey) -> String {
        if self.active.as_ref().is_some_and(|(k, _, _)| *k == key) {
            self.active.take().map(|(_, n, _)| n).unwrap_or_default()
        } else {
            format!("channel {key}")
        }
    }
}

/// Connects to `dest` for every channel and writes its bytes there.
#[derive(Debug)]
pub struct TcpSink {
    dest: SocketAddr,
    conns: HashMap<ChannelKey, (String, Option<TcpStream>, u64)>,
}

impl TcpSink {
    /// A sink connecting to `dest`.
    pub fn new(dest: SocketAddr) -> Self {
        TcpSink {
            dest,
            conns: HashMap::new(),
        }
    }
}

impl Sink for TcpSink {
    fn admit(meta: &ChannelMeta) -> Result<(), Refusal> {
        refuse_manifests(meta)
    }

    fn handle(&mut self, event: SinkEvent) -> Result<Option<ChannelOutcome>, SinkError> {
        let dest = self.dest.to_string();
        match event {
            SinkEvent::Opened { key, meta } => {
                match TcpStream::connect_timeout(&self.dest, Duration::from_secs(5)) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        self.conns.insert(key, (meta.name, Some(s), 0));
                        Ok(None)
                    }
                    Err(e) => {
                        self.conns.insert(key, (meta.name, None, 0));
                        Err(SinkError {
                            key,
                            why: SinkFailure::Connect {
                                dest,
                                source: Arc::new(e),
                            },
                        })
                    }
                }
            }
            SinkEvent::Refused { .. }
            | SinkEvent::Gap { .. }
            | SinkEvent::Partial { .. }
            | SinkEvent::Assembled { .. } => Ok(None),
            SinkEvent::Data { key, data, .. } => {
                let Some((_, Some(s), n)) = self.conns.get_mut(&key) else {
                    return Ok(None);
                };
                *n += data.len() as u64;
                if let Err(e) = s.write_all(&data) {
                    if let Some(c) = self.conns.get_mut(&key) {
                        c.1 = None;
                    }
                    return Err(SinkError {
                        key,
                        why: SinkFailure::WriteTo {
                            dest,
                            source: Arc::new(e),
                        },
                    });
                }
                Ok(None)
            }
            SinkEvent::Complete { key, bytes, digest } => {
                let (name, s, _) = self.conns.remove(&key).unwrap_or_default();
                if let Some(s) = s {
                    let _ = s.shutdown(Shutdown::Write);
                }
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    bytes,
                    &dest,
                    Verdict::Verified {
                        blake3: hex::encode(digest),
                    },
                )))
            }
            SinkEvent::Failed { key, reason } => {
                let (name, s, n) = self.conns.remove(&key).unwrap_or_default();
                if let Some(s) = s {
                    // A reset, so the destination cannot mistake the cut for a clean end.
                    let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                    drop(s);
                }
                Ok(Some(ChannelOutcome::new(
                    key,
                    name,
                    n,
                    &dest,
                    Verdict::Failed {
                        reason: reason.to_string(),
                    },
                )))
            }
        }
    }
}
