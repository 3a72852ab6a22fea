//! `diodon deltat …` (Delta-t file transfer and the thesis's echo
//! client/server).
//!
//! ```text
//!  deltat send FILE --to ADDR ──▶ "DTF1" | len u64 | data | BLAKE3(32) ──▶ deltat recv --listen ADDR --out FILE
//!                             ◀── verdict byte (1 verified, 0 digest mismatch) ◀──
//! ```
//!
//! The same framing runs over Linux TCP with `--tcp`, so the benchmark
//! compares transports with identical application code. The sender's time
//! runs from the first byte written to the verdict read (end-to-end, verified).
//! Each side prints one JSON summary line on stdout.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use diodon_apps::report::Exit;
use diodon_deltat::{Config, CongestionAlgorithm};
use diodon_io::deltat_driver::{DeltatListener, DeltatStream, DEFAULT_PORT};
use diodon_io::MonotonicClock;

const MAGIC: &[u8; 4] = b"DTF1";
const CHUNK: usize = 64 * 1024;
/// How long a Delta-t sender keeps acking after it read the verdict.
const VERDICT_LINGER: Duration = Duration::from_secs(2);

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
    fn config(&self, peer_v6: bool) -> Result<Config> {
        let overhead = if peer_v6 { 48 } else { 28 } + diodon_deltat::wire::HEADER_LEN;
        let max_payload = self
            .mtu
            .checked_sub(overhead)
            .filter(|p| *p > 0)
            .ok_or_else(|| anyhow!("--mtu {} leaves no room for data", self.mtu))?;
        Ok(Config {
            max_payload,
            congestion: self.congestion.into(),
            recv_buffer: self.recv_buffer,
            ..Config::default()
        })
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }

    /// Applies `--tcp-congestion` (accepted sockets inherit it from a listener).
    fn set_tcp_congestion<S: std::os::fd::AsFd>(&self, socket: &S) -> Result<()> {
        if let Some(name) = &self.tcp_congestion {
            socket2::SockRef::from(socket)
                .set_tcp_congestion(name.as_bytes())
                .with_context(|| format!("TCP congestion control {name:?}"))?;
        }
        Ok(())
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
    /// Output file (written as FILE.part, renamed once verified).
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
pub fn run(args: &DeltatArgs) -> Result<Exit> {
    let code = match &args.cmd {
        DeltatCommand::Send(a) => send(a),
        DeltatCommand::Recv(a) => recv(a),
        DeltatCommand::Echo(a) => echo(a),
    }?;
    Ok(exit_of(code))
}

/// The exit status of a Delta-t command's code (0 delivered, 1 failed, 3 IO).
fn exit_of(code: u8) -> Exit {
    match code {
        0 => Exit::Success,
        1 => Exit::ChannelFailed,
        2 => Exit::Config,
        _ => Exit::Io,
    }
}

/// A connected byte stream of either transport.
trait Conn: Read + Write + Send {
    /// Bounds blocking writes and flushes.
    fn set_write_limit(&mut self, d: Duration);
    /// The transport's counters, for a failure report (Delta-t only).
    fn counters(&self) -> Option<String> {
        None
    }
}

impl Conn for TcpStream {
    fn set_write_limit(&mut self, d: Duration) {
        let _ = self.set_write_timeout(Some(d));
    }
}

impl Conn for DeltatStream {
    fn set_write_limit(&mut self, d: Duration) {
        self.set_write_timeout(Some(d));
    }

    fn counters(&self) -> Option<String> {
        Some(format!(
            "{:?}, socket send retries {}",
            self.stats(),
            self.send_retries()
        ))
    }
}

/// Adds the transport's counters to a failed transfer's error.
fn with_counters<T>(conn: &dyn Conn, r: Result<T>) -> Result<T> {
    r.map_err(|e| match conn.counters() {
        Some(c) => e.context(format!("delta-t counters at failure: {c}")),
        None => e,
    })
}

fn connect(to: SocketAddr, t: &TransportArgs) -> Result<Box<dyn Conn>> {
    if t.tcp {
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(10))
            .with_context(|| format!("TCP connect {to}"))?;
        t.set_tcp_congestion(&s)?;
        s.set_read_timeout(Some(t.timeout()))?;
        s.set_write_timeout(Some(t.timeout()))?;
        Ok(Box::new(s))
    } else {
        let mut s = DeltatStream::connect_with(to, t.port, t.config(to.is_ipv6())?)
            .with_context(|| format!("Delta-t connect {to}"))?;
        s.set_read_timeout(Some(t.timeout()));
        s.set_write_timeout(Some(t.timeout()));
        Ok(Box::new(s))
    }
}

enum Listener {
    Tcp(TcpListener),
    Deltat(DeltatListener),
}

impl Listener {
    fn bind(addr: SocketAddr, t: &TransportArgs) -> Result<Listener> {
        Ok(if t.tcp {
            let l = TcpListener::bind(addr).with_context(|| format!("TCP listen {addr}"))?;
            t.set_tcp_congestion(&l)?;
            Listener::Tcp(l)
        } else {
            Listener::Deltat(
                DeltatListener::bind_with(addr, t.port, t.config(addr.is_ipv6())?)
                    .with_context(|| format!("Delta-t listen {addr}"))?,
            )
        })
    }

    fn accept(&self, t: &TransportArgs) -> Result<(Box<dyn Conn>, SocketAddr)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_read_timeout(Some(t.timeout()))?;
                s.set_write_timeout(Some(t.timeout()))?;
                Ok((Box::new(s), peer))
            }
            Listener::Deltat(l) => {
                let (mut s, peer) = l.accept()?;
                s.set_read_timeout(Some(t.timeout()));
                s.set_write_timeout(Some(t.timeout()));
                Ok((Box::new(s), peer))
            }
        }
    }
}

fn proto(t: &TransportArgs) -> &'static str {
    if t.tcp {
        "tcp"
    } else {
        "deltat"
    }
}

fn send(a: &SendArgs) -> Result<u8> {
    let file = File::open(&a.file).with_context(|| format!("open {}", a.file.display()))?;
    let len = file.metadata()?.len();
    let mut input = BufReader::with_capacity(CHUNK, file);
    let clock = MonotonicClock::new();
    let mut conn = connect(a.to, &a.t)?;
    let r = send_over(a, &mut *conn, &mut input, len, &clock);
    with_counters(&*conn, r)
}

fn send_over(
    a: &SendArgs,
    conn: &mut dyn Conn,
    input: &mut impl Read,
    len: u64,
    clock: &MonotonicClock,
) -> Result<u8> {
    let start = clock.now();
    let mut header = Vec::with_capacity(12);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&len.to_be_bytes());
    conn.write_all(&header).context("send header")?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut sent = 0u64;
    while sent < len {
        let n = input.read(&mut buf)?;
        if n == 0 {
            bail!(
                "{} shrank while sending ({sent} of {len} bytes)",
                a.file.display()
            );
        }
        hasher.update(&buf[..n]);
        conn.write_all(&buf[..n]).context("send data")?;
        sent += n as u64;
    }
    conn.write_all(hasher.finalize().as_bytes())
        .context("send digest")?;
    // No flush: the verdict follows the digest, so reading it proves every
    // byte arrived, even when the acks of the last segments were lost and
    // the receiver has already gone (flushing would wait for those acks).
    let mut verdict = [0u8; 1];
    conn.read_exact(&mut verdict).context("read verdict")?;
    let secs = clock.elapsed_since(start).as_secs_f64();
    let ok = verdict[0] == 1;
    if !a.t.tcp {
        // No FIN: stay a moment so a retransmitted verdict is still acked.
        std::thread::sleep(VERDICT_LINGER);
    }
    println!(
        "{{\"side\":\"send\",\"proto\":\"{}\",\"bytes\":{len},\"seconds\":{secs:.6},\"mbit_s\":{:.3},\"verified\":{ok}}}",
        proto(&a.t),
        len as f64 * 8.0 / secs / 1e6
    );
    if ok {
        Ok(0)
    } else {
        eprintln!("diodon: receiver reports a digest mismatch");
        Ok(1)
    }
}

fn recv(a: &RecvArgs) -> Result<u8> {
    let listener = Listener::bind(a.listen, &a.t)?;
    let (mut conn, peer) = listener.accept(&a.t)?;
    let r = recv_over(a, &mut *conn, peer);
    with_counters(&*conn, r)
}

fn recv_over(a: &RecvArgs, conn: &mut dyn Conn, peer: SocketAddr) -> Result<u8> {
    let clock = MonotonicClock::new();
    let start = clock.now();
    let mut header = [0u8; 12];
    conn.read_exact(&mut header).context("read header")?;
    if &header[..4] != MAGIC {
        bail!("{peer}: not a diodon deltat transfer (bad magic)");
    }
    let len = u64::from_be_bytes(header[4..].try_into()?);
    let part = part_name(&a.out);
    let mut out = BufWriter::with_capacity(
        CHUNK,
        File::create(&part).with_context(|| format!("create {}", part.display()))?,
    );
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < len {
        let want = usize::try_from(len - got).unwrap_or(usize::MAX).min(CHUNK);
        let n = conn
            .read(&mut buf[..want])
            .with_context(|| format!("{peer}: connection lost after {got} of {len} bytes"))?;
        if n == 0 {
            bail!("{peer}: stream ended after {got} of {len} bytes");
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        got += n as u64;
    }
    let mut digest = [0u8; 32];
    conn.read_exact(&mut digest).context("read digest")?;
    let ok = *hasher.finalize().as_bytes() == digest;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.sync_all()?;
    drop(file);
    if ok {
        std::fs::rename(&part, &a.out)?;
    } else {
        let _ = std::fs::remove_file(&part);
    }
    let secs = clock.elapsed_since(start).as_secs_f64();
    conn.write_all(&[u8::from(ok)]).context("send verdict")?;
    // Delta-t: flush waits until the verdict is acknowledged (no FIN exists).
    // The file is verified and in place either way; a sender that left before
    // acking only loses the news.
    conn.set_write_limit(Duration::from_secs(10));
    if let Err(e) = conn.flush() {
        eprintln!("diodon: warning: verdict not acknowledged by {peer}: {e}");
    }
    println!(
        "{{\"side\":\"recv\",\"proto\":\"{}\",\"bytes\":{len},\"seconds\":{secs:.6},\"mbit_s\":{:.3},\"verified\":{ok}}}",
        proto(&a.t),
        len as f64 * 8.0 / secs / 1e6
    );
    if ok {
        Ok(0)
    } else {
        eprintln!("diodon: digest mismatch; {} removed", part.display());
        Ok(1)
    }
}

fn part_name(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

fn echo(a: &EchoArgs) -> Result<u8> {
    if let Some(listen) = a.listen {
        let listener = Listener::bind(listen, &a.t)?;
        eprintln!("diodon: echo ({}) listening on {listen}", proto(&a.t));
        loop {
            let (mut conn, peer) = listener.accept(&a.t)?;
            std::thread::spawn(move || {
                let mut buf = vec![0u8; CHUNK];
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            if let Err(e) = conn.write_all(&buf[..n]).and_then(|()| conn.flush()) {
                                eprintln!("diodon: echo {peer}: {e}");
                                break;
                            }
                        }
                        Err(e) => {
                            if e.kind() != io::ErrorKind::TimedOut {
                                eprintln!("diodon: echo {peer}: {e}");
                            }
                            break;
                        }
                    }
                }
            });
        }
    }
    let to = a.to.ok_or_else(|| anyhow!("give --listen or --to"))?;
    let clock = MonotonicClock::new();
    let mut conn = connect(to, &a.t)?;
    let mut rtts = Vec::with_capacity(a.count as usize);
    for i in 0..a.count {
        let msg: Vec<u8> = (0..a.size)
            .map(|j| (j as u32).wrapping_mul(31).wrapping_add(i) as u8)
            .collect();
        let t0 = clock.now();
        conn.write_all(&msg).context("echo write")?;
        let mut back = vec![0u8; msg.len()];
        conn.read_exact(&mut back).context("echo read")?;
        if back != msg {
            bail!("echo {i}: reply differs from the message");
        }
        rtts.push(clock.elapsed_since(t0).as_secs_f64() * 1e3);
    }
    conn.flush().context("flush")?;
    rtts.sort_by(f64::total_cmp);
    let median = rtts.get(rtts.len() / 2).copied().unwrap_or(0.0);
    println!(
        "{{\"side\":\"echo\",\"proto\":\"{}\",\"messages\":{},\"size\":{},\"rtt_ms_median\":{median:.3},\"rtt_ms_max\":{:.3}}}",
        proto(&a.t),
        a.count,
        a.size,
        rtts.last().copied().unwrap_or(0.0)
    );
    Ok(0)
}
