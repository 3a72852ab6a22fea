//! What a process may still do once its privileged setup is done: the
//! policy of `diodon recv`, `send`, `sync`, `tunnel send`, `tap` and
//! `agent`, decided from the run's settings; `diodon_io::sandbox` carries
//! it out.
//!
//! ```text
//!  RecvOutput / SendSources + metrics + config files ─► recv_policy / send_policy ─► Restrictions
//!  open_recv / open_send (privileged) ─► apply(Restrictions) ─► self_test ─► OpenedRecv/Send::run
//!  TapJob / FrameTarget ─► tap_policy / agent_policy; run_tap / run_agent open their rings and
//!  outputs, then call the caller's `restrict` (apply) before any thread of theirs starts
//!
//!  receiver, Landlock:  read   config, key file's folder, /proc/self (UDP MIB, CPU), /sys net stats (metrics,
//!                              TUN, TAP)
//!                       write  --out folder (staging and quarantine are inside it), --pcap-out
//!                       TCP    connect to the --tcp-connect port only; never bind
//!                       --kafka: connect to the brokers' ports; read the resolver's files
//!                       --tap-out: /dev/net/tun, /proc/sys/net/ipv6/conf (TAPs appear with
//!                       agents, so this output also keeps its capabilities)
//!  sender, Landlock:    read   the given paths, config, key file's folder, /proc/self, /sys net stats; no write;
//!                       --kafka: connect to the brokers' ports, read the resolver's files
//!  tunnel send:         read   config, key file's folder, /proc/self (the TUN's tx_dropped in net/dev);
//!                              no write; the TUN's queues are open (read, poll: Base)
//!  tap, Landlock:       read   config, key file's folder, the rule file's folder (SIGHUP reload), /proc/self;
//!                              no write; rings, raw senders, UDP socket open before
//!  agent, Landlock:     read   config, /proc/self, /sys net stats (a TAP output's rx_dropped)
//!                       write  --pcap-out folder (rotation makes new files there); a TAP's
//!                              device and a Unix socket are open (connected) before
//!  sync, Landlock:      read   its sources, config, key file's folder, /proc/self, /sys net stats
//!                       write  the state database's folder (database, WAL, shared memory);
//!                              with --after-send the sources (delete) and the move folder
//!  seccomp groups:      Base + ReadFiles always; UdpReceive | UdpSend; WriteFiles for files
//!                       out; TcpConnect / UdpSockets for forwarding outputs; TcpAccept for
//!                       --metrics and --tcp-listen; NetDevices for --tap-out; WriteFiles and
//!                       Watch (inotify) for sync; UdpReceive for a capture ring's statistics
//!                       and errors (getsockopt) in tap and agent; UdpSend for the tap's raw
//!                       senders (sendmmsg) and an agent's Unix socket (send is sendto)
//! ```
//!
//! No command here keeps a capability but a `--tap-out` receiver: nothing
//! else opens an interface or a device after it started (a tap or agent
//! whose interface or output goes away stops with an error, exit 3).
//!
//! `DIODON_SANDBOX_SELFTEST` (a test hook, not a setting): after the
//! sandbox is applied, the process tries what the variable lists
//! (`write:PATH`, `read:PATH`, `connect:ADDR`, `exec:PATH`, comma
//! separated) from a new thread, like its pipeline threads, and logs each
//! outcome with its errno. Tests use it to show that the real binary is
//! denied what its policy does not grant.

use crate::files::STAGING;
use crate::frames_out::FrameTarget;
use crate::gateway::RecvOutput;
use crate::packet_sink::PacketOutput;
use crate::quarantine::QUARANTINE;
use crate::sync::{AfterSend, SyncOptions};
use crate::tap::TapJob;
use diodon_io::sandbox::{
    Applied, Confinement, Landlock, Restrictions, SandboxError, Syscalls, User,
};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The environment variable of the self-test hook.
pub const SELFTEST_ENV: &str = "DIODON_SANDBOX_SELFTEST";

/// What the operator asked for.
#[derive(Debug, Clone, Default)]
pub struct SandboxOptions {
    /// `--user NAME` (looked up already).
    pub user: Option<User>,
    /// `--no-sandbox`: no `no_new_privs`, Landlock or seccomp (the user is
    /// still changed when asked).
    pub off: bool,
    /// What the process was configured from: the config file and the key
    /// file's folder (read again on SIGHUP, perhaps as a new file).
    pub config_files: Vec<PathBuf>,
    /// `--metrics` is on.
    pub metrics: bool,
}

/// Where the kernel's counters are read at run time.
fn counters_read(metrics_or_links: bool) -> Vec<PathBuf> {
    // /proc/thread-self/net/snmp and /proc/self/stat are both below the
    // process's own /proc/PID.
    let mut v = vec![PathBuf::from("/proc/self")];
    if metrics_or_links {
        // /sys/class/net/IF is a symlink into /sys/devices/…/net/IF.
        v.push("/sys/class/net".into());
        v.push("/sys/devices".into());
    }
    v
}

/// The receiver's restrictions for `output`.
pub fn recv_policy(output: &RecvOutput, o: &SandboxOptions) -> Restrictions {
    let mut landlock = Landlock {
        read: o.config_files.clone(),
        ..Landlock::default()
    };
    let mut syscalls = vec![Syscalls::ReadFiles, Syscalls::UdpReceive];
    let mut links = o.metrics;
    let mut keep_capabilities = false;
    match output {
        RecvOutput::Dir { path, files } => {
            landlock.write.push(path.clone());
            // An audit log outside the output folder (`--audit`): its
            // folder, where it is rotated.
            if let Some(dir) = files.mirror.audit.as_ref().and_then(|a| a.parent()) {
                if !dir.starts_with(path) {
                    landlock.write.push(dir.to_path_buf());
                }
            }
            syscalls.push(Syscalls::WriteFiles);
        }
        RecvOutput::Stdout => {}
        RecvOutput::Tcp(dest) => {
            landlock.tcp_connect.push(dest.port());
            syscalls.push(Syscalls::TcpConnect);
        }
        RecvOutput::UdpForward(_) => syscalls.push(Syscalls::UdpSockets),
        RecvOutput::Tun { .. } => links = true,
        RecvOutput::Packets(PacketOutput::Pcap { dir, .. }) => {
            landlock.write.push(dir.clone());
            syscalls.push(Syscalls::WriteFiles);
        }
        RecvOutput::Packets(PacketOutput::Tap(_)) => {
            // A TAP per agent, created when its first channel opens.
            links = true;
            keep_capabilities = true;
            landlock.devices.push("/dev/net/tun".into());
            landlock.write.push("/proc/sys/net/ipv6/conf".into());
            syscalls.extend([Syscalls::NetDevices, Syscalls::WriteFiles]);
        }
        RecvOutput::Kafka(k) => kafka_brokers(&k.brokers, &mut landlock, &mut syscalls),
    }
    if o.metrics {
        syscalls.push(Syscalls::TcpAccept);
    }
    landlock.read.extend(counters_read(links));
    restrictions(o, !keep_capabilities, landlock, syscalls)
}

/// What the sender reads from.
#[derive(Debug, Clone)]
pub enum SendSources {
    /// Files and directories (read-only beneath each).
    Paths(Vec<PathBuf>),
    /// Standard input.
    Stdin,
    /// Accepted TCP connections (the listener is bound already).
    Tcp,
    /// UDP flows (the socket is bound already).
    Udp,
    /// IP packets from a TUN (`diodon tunnel send`; its queues are open
    /// already: reads and polls on them are in [`Syscalls::Base`]).
    Tun,
    /// A Kafka topic from these brokers (`host:port,…`).
    Kafka(String),
}

/// What a Kafka client needs once running: TCP connections to its
/// brokers' ports (a client reconnects, and learns the other brokers of
/// the cluster from the first: they listen on the same ports in the usual
/// deployment; a cluster on other ports is given in `brokers` too), and
/// the resolver's files for broker host names.
fn kafka_brokers(brokers: &str, landlock: &mut Landlock, syscalls: &mut Vec<Syscalls>) {
    for port in broker_ports(brokers) {
        if !landlock.tcp_connect.contains(&port) {
            landlock.tcp_connect.push(port);
        }
    }
    landlock.read.extend(
        [
            "/etc/hosts",
            "/etc/resolv.conf",
            "/etc/nsswitch.conf",
            "/etc/gai.conf",
        ]
        .map(PathBuf::from),
    );
    syscalls.extend([Syscalls::TcpConnect, Syscalls::UdpSockets]);
}

/// The ports of a `host:port,…` broker list (9092 where none is given).
pub fn broker_ports(brokers: &str) -> Vec<u16> {
    brokers
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|b| {
            b.rsplit_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(9092)
        })
        .collect()
}

/// The sender's restrictions: it reads its sources and writes nothing.
pub fn send_policy(sources: &SendSources, o: &SandboxOptions) -> Restrictions {
    let mut landlock = Landlock {
        read: o.config_files.clone(),
        ..Landlock::default()
    };
    let mut syscalls = vec![Syscalls::ReadFiles, Syscalls::UdpSend];
    match sources {
        SendSources::Paths(p) => landlock.read.extend(p.iter().cloned()),
        SendSources::Stdin | SendSources::Tun => {}
        SendSources::Tcp => syscalls.push(Syscalls::TcpAccept),
        SendSources::Udp => syscalls.push(Syscalls::UdpReceive),
        SendSources::Kafka(brokers) => kafka_brokers(brokers, &mut landlock, &mut syscalls),
    }
    if o.metrics {
        syscalls.push(Syscalls::TcpAccept);
    }
    // A TUN's tx_dropped is read from /proc/thread-self/net/dev, below
    // /proc/self: /sys only for the metrics' link counters.
    landlock.read.extend(counters_read(o.metrics));
    restrictions(o, true, landlock, syscalls)
}

/// The sync sender's restrictions: it reads its sources, writes its state
/// database (and, as an outbox, takes sent files away), watches the
/// sources, sends on its open socket.
pub fn sync_policy(opts: &SyncOptions, o: &SandboxOptions) -> Restrictions {
    let mut landlock = Landlock {
        read: o.config_files.clone(),
        ..Landlock::default()
    };
    let roots = opts.scan.roots.iter().map(|r| r.path.clone());
    // SQLite writes the database, its WAL and shared memory beside it.
    landlock.write.push(folder_of(&opts.state));
    match &opts.after_send {
        None => landlock.read.extend(roots),
        Some(after) => {
            landlock.write.extend(roots);
            if let AfterSend::Move(dir) = after {
                landlock.write.push(dir.clone());
            }
        }
    }
    let mut syscalls = vec![Syscalls::ReadFiles, Syscalls::WriteFiles, Syscalls::UdpSend];
    if opts.watch {
        syscalls.push(Syscalls::Watch);
    }
    if o.metrics {
        syscalls.push(Syscalls::TcpAccept);
    }
    landlock.read.extend(counters_read(o.metrics));
    restrictions(o, true, landlock, syscalls)
}

/// The tap's restrictions: its rings, raw senders and UDP socket are open;
/// it reads its rule file again on SIGHUP and writes nothing.
pub fn tap_policy(job: &TapJob, o: &SandboxOptions) -> Restrictions {
    let mut landlock = Landlock {
        read: o.config_files.clone(),
        ..Landlock::default()
    };
    if let Some(rules) = &job.rules {
        // Its folder, not the file: an editor or a deployment tool replaces
        // the file by a rename, a new inode a rule on the old one misses.
        landlock.read.push(folder_of(rules));
    }
    // The rings' statistics and errors (getsockopt).
    let mut syscalls = vec![Syscalls::ReadFiles, Syscalls::UdpReceive];
    if job.encap.is_some() || job.diode.is_some() {
        // sendmmsg on the raw senders; the one-way sender's UDP socket.
        syscalls.push(Syscalls::UdpSend);
    }
    if o.metrics {
        syscalls.push(Syscalls::TcpAccept);
    }
    landlock.read.extend(counters_read(o.metrics));
    restrictions(o, true, landlock, syscalls)
}

/// The agent's restrictions: its ring and output are open; a pcap output
/// writes (and rotates) in its folder, a TAP's drops are read from /sys,
/// a Unix socket is connected already (no connect is allowed after, so
/// its path needs no rule; Landlock up to ABI 6 has none for connecting
/// to a named socket).
pub fn agent_policy(target: &FrameTarget, o: &SandboxOptions) -> Restrictions {
    let mut landlock = Landlock {
        read: o.config_files.clone(),
        ..Landlock::default()
    };
    // The ring's statistics and errors (getsockopt).
    let mut syscalls = vec![Syscalls::ReadFiles, Syscalls::UdpReceive];
    let mut links = o.metrics;
    match target {
        FrameTarget::Pcap { dir, .. } => {
            landlock.write.push(dir.clone());
            syscalls.push(Syscalls::WriteFiles);
        }
        // write(2) on the open device: Base.
        FrameTarget::Tap(_) => links = true,
        // send(2) is sendto(2).
        FrameTarget::Socket(_) => syscalls.push(Syscalls::UdpSend),
    }
    if o.metrics {
        syscalls.push(Syscalls::TcpAccept);
    }
    landlock.read.extend(counters_read(links));
    restrictions(o, true, landlock, syscalls)
}

/// The folder a file is in (`.` for a bare name).
fn folder_of(file: &Path) -> PathBuf {
    match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn restrictions(
    o: &SandboxOptions,
    drop_capabilities: bool,
    landlock: Landlock,
    syscalls: Vec<Syscalls>,
) -> Restrictions {
    Restrictions {
        user: o.user.clone(),
        drop_capabilities: drop_capabilities && !o.off,
        confine: (!o.off).then_some(Confinement { landlock, syscalls }),
    }
}

/// The receiver's [`apply`]: when it changes user, the folders it made
/// inside a file output (staging, quarantine) become that user's first
/// (the output folder itself must already be; a warning says when not).
pub fn apply_recv(output: &RecvOutput, r: &Restrictions) -> Result<Applied, SandboxError> {
    if let (Some(user), RecvOutput::Dir { path, .. }) = (&r.user, output) {
        for dir in [path.join(STAGING), path.join(QUARANTINE)] {
            std::os::unix::fs::chown(&dir, Some(user.uid), Some(user.gid)).map_err(|source| {
                SandboxError::Os {
                    step: "handing the staging and quarantine folders to the user",
                    source,
                }
            })?;
        }
        if std::fs::metadata(path).is_ok_and(|m| m.uid() != user.uid) {
            tracing::warn!(
                folder = %path.display(),
                user = %user.name,
                "the output folder is not owned by the user the receiver runs as: files may not be written"
            );
        }
    }
    apply(r)
}

/// Applies `r`, logs what was applied in one line, then runs the self-test
/// hook when its variable is set.
pub fn apply(r: &Restrictions) -> Result<Applied, SandboxError> {
    let applied = diodon_io::sandbox::apply(r)?;
    for p in &applied.missing {
        tracing::warn!(path = %p.display(), "sandbox: no such path, no rule for it");
    }
    tracing::info!("sandbox: {applied}");
    if let Ok(spec) = std::env::var(SELFTEST_ENV) {
        // A new thread, as the pipeline's are: it inherits the restrictions.
        let _ = std::thread::Builder::new()
            .name("diodon-selftest".into())
            .spawn(move || self_test(&spec))
            .map(std::thread::JoinHandle::join);
    }
    Ok(applied)
}

/// Tries each probe of `spec` and logs its outcome.
fn self_test(spec: &str) {
    for probe in spec.split(',').filter(|p| !p.is_empty()) {
        let (kind, arg) = probe.split_once(':').unwrap_or((probe, ""));
        let result = match kind {
            "write" => try_write(Path::new(arg)),
            "read" => std::fs::File::open(arg).and_then(|mut f| f.read(&mut [0u8; 1]).map(drop)),
            "connect" => arg
                .parse::<SocketAddr>()
                .map_err(std::io::Error::other)
                .and_then(|a| {
                    std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_secs(2))
                        .map(drop)
                }),
            "exec" => std::process::Command::new(arg).status().map(drop),
            _ => Err(std::io::Error::other("unknown probe")),
        };
        match result {
            Ok(()) => tracing::warn!(probe = kind, target = arg, "sandbox self-test: allowed"),
            Err(e) => tracing::info!(
                probe = kind,
                target = arg,
                errno = e.raw_os_error().unwrap_or(0),
                "sandbox self-test: denied: {e}"
            ),
        }
    }
}

/// Creates `path` (new), writes a byte, removes it again.
fn try_write(path: &Path) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?;
    f.write_all(b"x")?;
    drop(f);
    std::fs::remove_file(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::files::FileSinkOptions;

    #[test]
    fn the_file_receiver_writes_only_its_folder_and_keeps_no_capability() {
        let o = SandboxOptions {
            config_files: vec!["/etc/diodon/a.toml".into()],
            ..SandboxOptions::default()
        };
        let r = recv_policy(
            &RecvOutput::Dir {
                path: "/srv/in".into(),
                files: FileSinkOptions::default(),
            },
            &o,
        );
        assert!(r.drop_capabilities);
        let c = r.confine.expect("confined");
        assert_eq!(c.landlock.write, vec![PathBuf::from("/srv/in")]);
        assert!(c.landlock.read.contains(&"/etc/diodon/a.toml".into()));
        assert!(c.landlock.tcp_connect.is_empty());
        assert!(c.syscalls.contains(&Syscalls::WriteFiles));
        assert!(!c.syscalls.contains(&Syscalls::TcpConnect));
    }

    #[test]
    fn the_tcp_receiver_connects_to_its_port_and_writes_nothing() {
        let r = recv_policy(
            &RecvOutput::Tcp("127.0.0.1:9000".parse().expect("addr")),
            &SandboxOptions::default(),
        );
        let c = r.confine.expect("confined");
        assert_eq!(c.landlock.tcp_connect, vec![9000]);
        assert!(c.landlock.write.is_empty());
        assert!(!c.syscalls.contains(&Syscalls::WriteFiles));
    }

    #[test]
    fn kafka_clients_connect_to_their_brokers_ports_only_and_write_nothing() {
        let sink = recv_policy(
            &RecvOutput::Kafka(crate::kafka::KafkaSinkOptions {
                brokers: "10.0.0.1:9092, far.example:9093,10.0.0.2:9092".into(),
                topic_prefix: String::new(),
                hold_bytes: crate::kafka::DEFAULT_HOLD_BYTES,
                timeout: std::time::Duration::from_secs(1),
            }),
            &SandboxOptions::default(),
        );
        let source = send_policy(
            &SendSources::Kafka("near.example".into()),
            &SandboxOptions::default(),
        );
        for (r, ports) in [(sink, vec![9092, 9093]), (source, vec![9092])] {
            assert!(r.drop_capabilities);
            let c = r.confine.expect("confined");
            assert_eq!(c.landlock.tcp_connect, ports);
            assert!(c.landlock.write.is_empty());
            assert!(c.landlock.read.contains(&"/etc/resolv.conf".into()));
            assert!(c.syscalls.contains(&Syscalls::TcpConnect));
            assert!(!c.syscalls.contains(&Syscalls::WriteFiles));
        }
        assert_eq!(broker_ports("a:1,,b"), vec![1, 9092]);
    }

    #[test]
    fn the_sender_reads_its_paths_and_writes_nothing() {
        let r = send_policy(
            &SendSources::Paths(vec!["/data/out".into()]),
            &SandboxOptions::default(),
        );
        let c = r.confine.expect("confined");
        assert!(c.landlock.read.contains(&"/data/out".into()));
        assert!(c.landlock.write.is_empty() && c.landlock.devices.is_empty());
        assert!(!c.syscalls.contains(&Syscalls::WriteFiles));
    }

    #[test]
    fn the_tunnel_sender_reads_its_open_tun_and_writes_nothing() {
        let r = send_policy(&SendSources::Tun, &SandboxOptions::default());
        assert!(r.drop_capabilities, "the TUN is open and up before");
        let c = r.confine.expect("confined");
        assert!(c.landlock.write.is_empty() && c.landlock.devices.is_empty());
        assert_eq!(c.landlock.read, vec![PathBuf::from("/proc/self")]);
        assert!(c.landlock.tcp_connect.is_empty());
        assert!(c.syscalls.contains(&Syscalls::UdpSend));
        for no in [
            Syscalls::WriteFiles,
            Syscalls::NetDevices,
            Syscalls::UdpReceive,
            Syscalls::TcpAccept,
        ] {
            assert!(!c.syscalls.contains(&no), "{no:?}");
        }
    }

    fn tap_job(rules: Option<&str>, encap: bool) -> TapJob {
        TapJob {
            interface: "eth1".into(),
            workers: 1,
            ring_block: 1 << 20,
            ring_blocks: 2,
            rules: rules.map(PathBuf::from),
            flow: diodon_filter::FlowMode::FiveTuple,
            agents: Vec::new(),
            encap: encap.then(|| crate::tap::EncapOptions {
                interface: "eth2".into(),
                ethertype: 0xf1f0,
            }),
            diode: None,
            reload_on_hangup: true,
            stop: std::sync::Arc::default(),
            stats: std::sync::Arc::default(),
            progress: std::sync::Arc::default(),
            capture_only: false,
        }
    }

    #[test]
    fn the_tap_reads_its_rule_folder_writes_nothing_and_keeps_no_capability() {
        let r = tap_policy(
            &tap_job(Some("/etc/diodon/rules.acl"), true),
            &SandboxOptions::default(),
        );
        assert!(r.drop_capabilities);
        let c = r.confine.expect("confined");
        assert!(c.landlock.read.contains(&"/etc/diodon".into()));
        assert!(!c.landlock.read.contains(&"/sys/class/net".into()));
        assert!(c.landlock.write.is_empty() && c.landlock.devices.is_empty());
        assert!(c.syscalls.contains(&Syscalls::UdpReceive));
        assert!(c.syscalls.contains(&Syscalls::UdpSend), "the raw senders");
        for no in [
            Syscalls::WriteFiles,
            Syscalls::NetDevices,
            Syscalls::UdpSockets,
        ] {
            assert!(!c.syscalls.contains(&no), "{no:?}");
        }
        // A bare rule file name: the working folder; capture only sends nothing.
        let r = tap_policy(
            &tap_job(Some("rules.acl"), false),
            &SandboxOptions::default(),
        );
        let c = r.confine.expect("confined");
        assert!(c.landlock.read.contains(&".".into()));
        assert!(!c.syscalls.contains(&Syscalls::UdpSend));
    }

    #[test]
    fn the_agent_writes_only_its_pcap_folder_and_keeps_no_capability() {
        let o = SandboxOptions::default();
        let pcap = crate::frames_out::pcap_target(
            Path::new("/srv/pcap"),
            "frames",
            1 << 20,
            std::time::Duration::ZERO,
        );
        let r = agent_policy(&pcap, &o);
        assert!(r.drop_capabilities);
        let c = r.confine.expect("confined");
        assert_eq!(c.landlock.write, vec![PathBuf::from("/srv/pcap")]);
        assert!(c.syscalls.contains(&Syscalls::WriteFiles));
        let tap = agent_policy(&FrameTarget::Tap("tap0".into()), &o);
        assert!(tap.drop_capabilities, "the TAP is open and up before");
        let c = tap.confine.expect("confined");
        assert!(c.landlock.write.is_empty() && c.landlock.devices.is_empty());
        assert!(c.landlock.read.contains(&"/sys/class/net".into()));
        assert!(!c.syscalls.contains(&Syscalls::WriteFiles));
        assert!(!c.syscalls.contains(&Syscalls::NetDevices));
        let sock = agent_policy(&FrameTarget::Socket("/run/ids.sock".into()), &o);
        let c = sock.confine.expect("confined");
        assert!(c.landlock.write.is_empty());
        assert!(c.syscalls.contains(&Syscalls::UdpSend));
        assert!(!c.syscalls.contains(&Syscalls::UdpSockets), "no new socket");
        assert!(!c.syscalls.contains(&Syscalls::TcpConnect));
    }

    #[test]
    fn no_sandbox_still_changes_the_user() {
        let o = SandboxOptions {
            user: Some(User {
                name: "nobody".into(),
                uid: 65534,
                gid: 65534,
            }),
            off: true,
            ..SandboxOptions::default()
        };
        let r = recv_policy(&RecvOutput::Stdout, &o);
        assert!(r.confine.is_none());
        assert_eq!(r.user.map(|u| u.uid), Some(65534));
    }
}
