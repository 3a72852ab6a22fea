//! Packetdrill-like scripted segment tests against the sans-IO core in
//! virtual time. Every `tests/scripts/*.pkt` file is parsed and executed;
//! the format is documented in `docs/deltat-scripts.md`.
//!
//! ```text
//!   script line ──▶ parse ──▶ advance virtual time (timers fire, nothing may be sent)
//!                            ├─ `<` build segment ─▶ Endpoint::handle_datagram
//!                            ├─ `>` poll_transmit within ±tolerance ─▶ compare fields
//!                            └─ call / event / stats ─▶ compare result
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use diodon_deltat::{
    Config, CongestionAlgorithm, ConnHandle, Endpoint, Error, Event, Flags, Lifetime, SegmentRepr,
    SegmentType, Seq, Stats, WallClock,
};
use diodon_sansio::Timestamp;

const REMOTE: &str = "192.0.2.2:4000";

struct Options {
    cfg: Config,
    tolerance: Duration,
    local_port: u16,
    remote_port: u16,
    peer_lifetime: u8,
    wall_ms: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cfg: Config {
                max_packet_lifetime: Duration::from_secs(6),
                max_retransmit_time: Duration::from_secs(24),
                max_ack_delay: Duration::from_secs(2),
                initial_rto: Duration::from_millis(500),
                min_rto: Duration::from_millis(200),
                max_rto: Duration::from_secs(8),
                // The thesis's connection: 16-bit window, no SACK, NewReno
                // with IW 4; scripts switch the extensions on with options.
                recv_buffer: 65_535,
                send_buffer: 256 * 1024,
                initial_window_segments: 4,
                congestion: CongestionAlgorithm::NewReno,
                sack: false,
                ..Config::default()
            },
            tolerance: Duration::from_millis(10),
            local_port: 8080,
            remote_port: 9090,
            peer_lifetime: 32,
            wall_ms: 43_200_000,
        }
    }
}

fn num<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.trim().parse().map_err(|_| format!("bad number {s:?}"))
}

fn ms(s: &str) -> Result<Duration, String> {
    Ok(Duration::from_millis(num(s)?))
}

impl Options {
    fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let c = &mut self.cfg;
        match key {
            "tolerance_ms" => self.tolerance = ms(v)?,
            "local_port" => self.local_port = num(v)?,
            "remote_port" => self.remote_port = num(v)?,
            "peer_lifetime" => self.peer_lifetime = num(v)?,
            "wall_ms" => self.wall_ms = num(v)?,
            "mpl_ms" => c.max_packet_lifetime = ms(v)?,
            "r_ms" => c.max_retransmit_time = ms(v)?,
            "a_ms" => c.max_ack_delay = ms(v)?,
            "recv_buffer" => c.recv_buffer = num(v)?,
            "send_buffer" => c.send_buffer = num(v)?,
            "mss" => c.max_payload = num(v)?,
            "initial_rto_ms" => c.initial_rto = ms(v)?,
            "min_rto_ms" => c.min_rto = ms(v)?,
            "max_rto_ms" => c.max_rto = ms(v)?,
            "skew_ms" => c.clock_skew_tolerance = ms(v)?,
            "initial_sn" => c.initial_sn = num(v)?,
            "backlog" => c.backlog = num(v)?,
            "initial_window" => c.initial_window_segments = num(v)?,
            "sack" => c.sack = num::<u8>(v)? != 0,
            "congestion" => {
                c.congestion = match v {
                    "newreno" => CongestionAlgorithm::NewReno,
                    "cubic" => CongestionAlgorithm::Cubic,
                    "unlimited" => CongestionAlgorithm::Unlimited,
                    other => return Err(format!("unknown congestion {other}")),
                }
            }
            other => return Err(format!("unknown option --{other}")),
        }
        Ok(())
    }
}

/// A segment pattern from a `<` or `>` line.
#[derive(Debug, Default)]
struct SegSpec {
    kind: Option<SegmentType>,
    flags: Flags,
    sn: u32,
    end: u32,
    len: usize,
    win: Option<u16>,
    lifetime: Option<u8>,
    deadline: Option<i64>,
    code: Option<u16>,
    port: Option<u16>,
    peer: Option<u16>,
    /// SACK blocks `START:END,…` of an ack (outbound: must match exactly;
    /// absent: the ack must carry none).
    sack: Vec<(u32, u32)>,
}

fn parse_seg(words: &[&str]) -> Result<SegSpec, String> {
    let mut w = words.iter().copied().peekable();
    if w.peek() == Some(&"deltat") {
        w.next();
    }
    let mut spec = SegSpec {
        kind: Some(match w.next().ok_or("missing segment type")? {
            "data" => SegmentType::Data,
            "ack" => SegmentType::Ack,
            "rendezvous" => SegmentType::Rendezvous,
            "nak" => SegmentType::Nak,
            other => return Err(format!("unknown segment type {other}")),
        }),
        ..SegSpec::default()
    };
    for c in w.next().ok_or("missing flags")?.chars() {
        spec.flags = spec.flags.with(match c {
            'D' => Flags::D,
            'O' => Flags::O,
            'R' => Flags::R,
            'W' => Flags::W,
            '-' => Flags::NONE,
            other => return Err(format!("unknown flag {other}")),
        });
    }
    let range = w.next().ok_or("missing start:end(len)")?;
    let (se, len) = range.split_once('(').ok_or("expected start:end(len)")?;
    let (s, e) = se.split_once(':').ok_or("expected start:end")?;
    spec.sn = num(s)?;
    spec.end = num(e)?;
    spec.len = num(len.trim_end_matches(')'))?;
    if spec.end.wrapping_sub(spec.sn) as usize != spec.len {
        return Err(format!("{range}: end - start != len"));
    }
    while let Some(key) = w.next() {
        let v = w.next().ok_or_else(|| format!("{key} needs a value"))?;
        match key {
            "win" => spec.win = Some(num(v)?),
            "lifetime" => spec.lifetime = Some(num(v)?),
            "deadline" => spec.deadline = Some(num(v.trim_start_matches('+'))?),
            "code" => spec.code = Some(num(v)?),
            "port" => spec.port = Some(num(v)?),
            "peer" => spec.peer = Some(num(v)?),
            "sack" => {
                for block in v.split(',') {
                    let (s, e) = block.split_once(':').ok_or("sack blocks are START:END")?;
                    spec.sack.push((num(s)?, num(e)?));
                }
            }
            other => return Err(format!("unknown segment field {other}")),
        }
    }
    Ok(spec)
}

/// The script's view of call results.
fn err_name(e: &Error) -> &'static str {
    match e {
        Error::UnknownHandle => "EBADF",
        Error::WouldBlock => "EWOULDBLOCK",
        Error::WriteShutdown => "EPIPE",
        Error::Failed(_) => "EFAILED",
        Error::AddrInUse | Error::PortInUse(_) => "EADDRINUSE",
        Error::InvalidPort => "EINVAL",
    }
}

fn stat(s: &Stats, name: &str) -> Result<u64, String> {
    Ok(match name {
        "datagrams_in" => s.datagrams_in,
        "malformed" => s.malformed,
        "expired" => s.expired,
        "deadline_too_far" => s.deadline_too_far,
        "recovery_drops" => s.recovery_drops,
        "no_connection" => s.no_connection,
        "not_in_data_run" => s.not_in_data_run,
        "backlog_full" => s.backlog_full,
        "time_wait_discards" => s.time_wait_discards,
        "duplicate_segments" => s.duplicate_segments,
        "out_of_order_segments" => s.out_of_order_segments,
        "overflow_segments" => s.overflow_segments,
        "overflow_bytes" => s.overflow_bytes,
        "overruns" => s.overruns,
        "stale_acks" => s.stale_acks,
        "retransmissions" => s.retransmissions,
        "fast_retransmits" => s.fast_retransmits,
        "rto_expirations" => s.rto_expirations,
        "retransmit_limit" => s.retransmit_limit,
        "rendezvous_sent" => s.rendezvous_sent,
        "rendezvous_received" => s.rendezvous_received,
        "reliable_acks_sent" => s.reliable_acks_sent,
        "reliable_acks_received" => s.reliable_acks_received,
        "naks_sent" => s.naks_sent,
        "naks_received" => s.naks_received,
        "stimer_expirations" => s.stimer_expirations,
        "rtimer_expirations" => s.rtimer_expirations,
        "connections_failed" => s.connections_failed,
        "bytes_acked" => s.bytes_acked,
        "bytes_received" => s.bytes_received,
        "sack_blocks_sent" => s.sack_blocks_sent,
        "sacked_segments" => s.sacked_segments,
        "sack_loss_marks" => s.sack_loss_marks,
        "window_updates" => s.window_updates,
        other => return Err(format!("unknown stat {other}")),
    })
}

struct Runner {
    opts: Options,
    ep: Endpoint,
    now: Timestamp,
    remote: SocketAddr,
    wall: WallClock,
}

impl Runner {
    fn new(opts: Options) -> Result<Runner, String> {
        let wall = WallClock::at_origin(opts.wall_ms);
        let ep = Endpoint::new(opts.cfg.clone(), wall).map_err(|e| e.to_string())?;
        let remote = REMOTE.parse().map_err(|_| "bad remote")?;
        Ok(Runner {
            opts,
            ep,
            now: Timestamp::ZERO,
            remote,
            wall,
        })
    }

    fn describe(d: &[u8]) -> String {
        SegmentRepr::parse_bytes(d).map_or_else(|e| format!("<malformed: {e}>"), |r| r.to_string())
    }

    /// Advances to `t`, firing timers; nothing may be left to transmit when
    /// time moves on.
    fn advance_to(&mut self, t: Timestamp) -> Result<(), String> {
        if t <= self.now {
            // Same instant: outbound segments may still be matched by a later `>` line.
            return Ok(());
        }
        loop {
            if let Some((_, d)) = next_segment(&mut self.ep, self.now) {
                return Err(format!(
                    "unexpected outbound at {:?}: {}",
                    self.now,
                    Self::describe(&d)
                ));
            }
            match self.ep.poll_timeout() {
                Some(next) if next <= t => {
                    self.now = self.now.max(next);
                    self.ep.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = self.now.max(t);
        Ok(())
    }

    fn inbound(&mut self, spec: &SegSpec) -> Result<(), String> {
        let lifetime = Lifetime::from_secs(spec.lifetime.unwrap_or(self.opts.peer_lifetime))
            .ok_or("lifetime 0")?;
        let today = self.wall.time_of_day(self.now);
        let deadline = match spec.deadline {
            Some(off) => diodon_deltat::Deadline::wrapping(
                (i64::from(today.ms()) + off).rem_euclid(i64::from(diodon_deltat::wire::MS_PER_DAY))
                    as u64,
            ),
            None => today.after(lifetime.duration()),
        };
        let kind = spec.kind.ok_or("no type")?;
        let payload: Vec<u8> = if kind == SegmentType::Ack {
            let blocks: Vec<(Seq, Seq)> =
                spec.sack.iter().map(|&(s, e)| (Seq(s), Seq(e))).collect();
            diodon_deltat::wire::encode_sack(&blocks)
        } else {
            (0..spec.len)
                .map(|i| (spec.sn as usize + i) as u8)
                .collect()
        };
        let window = match kind {
            SegmentType::Nak => spec.code.unwrap_or(1),
            _ => spec.win.unwrap_or(65_535),
        };
        let repr = SegmentRepr {
            src_port: spec.peer.unwrap_or(self.opts.remote_port),
            dst_port: spec.port.unwrap_or(self.opts.local_port),
            kind,
            flags: spec.flags,
            sn: Seq(spec.sn),
            deadline,
            lifetime,
            window,
            payload: &payload,
        };
        let bytes = repr.to_vec().map_err(|e| e.to_string())?;
        self.ep.handle_datagram(self.now, self.remote, &bytes);
        Ok(())
    }

    fn outbound(&mut self, spec: &SegSpec, t: Timestamp) -> Result<(), String> {
        let tol = self.opts.tolerance;
        let earliest = Timestamp::from_nanos(t.as_nanos().saturating_sub(tol.as_nanos() as u64));
        let (to, d) = loop {
            if let Some(x) = next_segment(&mut self.ep, self.now) {
                break x;
            }
            match self.ep.poll_timeout() {
                Some(next) if next <= t + tol => {
                    self.now = self.now.max(next);
                    self.ep.handle_timeout(self.now);
                }
                _ => return Err(format!("expected outbound by {:?}, nothing sent", t + tol)),
            }
        };
        let got = Self::describe(&d);
        if self.now < earliest {
            return Err(format!(
                "outbound too early at {:?} (expected {t:?}): {got}",
                self.now
            ));
        }
        let r = SegmentRepr::parse_bytes(&d)
            .map_err(|e| format!("core emitted a malformed segment: {e}"))?;
        let mut problems = Vec::new();
        if to != self.remote {
            problems.push(format!("sent to {to}"));
        }
        if Some(r.kind) != spec.kind {
            problems.push("type".to_string());
        }
        if r.flags != spec.flags {
            problems.push("flags".to_string());
        }
        let len = if r.kind == SegmentType::Data {
            r.payload.len()
        } else {
            0
        };
        if r.sn != Seq(spec.sn) || len != spec.len {
            problems.push("sn/len".to_string());
        }
        if r.src_port != spec.port.unwrap_or(self.opts.local_port)
            || r.dst_port != spec.peer.unwrap_or(self.opts.remote_port)
        {
            problems.push(format!("ports {}->{}", r.src_port, r.dst_port));
        }
        if r.kind != SegmentType::Nak && spec.win.is_some_and(|w| w != r.window) {
            problems.push("win".to_string());
        }
        if spec.code.is_some_and(|c| c != r.window) {
            problems.push("code".to_string());
        }
        let sack: Vec<(u32, u32)> = r.sack_blocks().map(|(s, e)| (s.0, e.0)).collect();
        if sack != spec.sack {
            problems.push(format!("sack {sack:?}"));
        }
        if spec.lifetime.is_some_and(|l| l != r.lifetime.secs()) {
            problems.push("lifetime".to_string());
        }
        if let Some(want) = spec.deadline {
            let have = r.deadline.remaining_ms(self.wall.time_of_day(self.now));
            if (have - want).unsigned_abs() > tol.as_millis() as u64 + 1 {
                problems.push(format!("deadline +{have}ms"));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "outbound mismatch ({}) at {:?}: got {got}",
                problems.join(", "),
                self.now
            ))
        }
    }

    fn call(&mut self, text: &str) -> Result<(), String> {
        let (call, expect) = match text.split_once('=') {
            Some((c, e)) => (c.trim(), Some(e.trim())),
            None => (text.trim(), None),
        };
        let (name, args) = call
            .split_once('(')
            .ok_or_else(|| format!("not a call: {call}"))?;
        let args: Vec<&str> = args
            .trim_end_matches(')')
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        let arg = |i: usize| -> Result<u64, String> { num(args.get(i).ok_or("missing argument")?) };
        let h = |i: usize| -> Result<ConnHandle, String> { Ok(ConnHandle::from_id(arg(i)?)) };
        let result: Result<String, Error> = match name.trim() {
            "listen" => self.ep.listen(arg(0)? as u16).map(|()| "0".into()),
            "connect" => {
                let remote = self.remote;
                self.ep
                    .connect(remote, arg(0)? as u16, arg(1)? as u16)
                    .map(|h| h.id().to_string())
            }
            "accept" => Ok(self
                .ep
                .accept()
                .map_or("none".into(), |h| h.id().to_string())),
            "write" => {
                let data = vec![0x5a; arg(1)? as usize];
                self.ep.write(h(0)?, &data).map(|n| n.to_string())
            }
            "read" => {
                let mut buf = vec![0; arg(1)? as usize];
                self.ep.read(h(0)?, &mut buf).map(|n| n.to_string())
            }
            "shutdown" => self.ep.shutdown(h(0)?).map(|()| "0".into()),
            "close" => self.ep.close(h(0)?).map(|()| "0".into()),
            "restart" => {
                self.ep =
                    Endpoint::new(self.opts.cfg.clone(), self.wall).map_err(|e| e.to_string())?;
                self.ep.start_recovery(self.now);
                Ok("0".into())
            }
            other => return Err(format!("unknown call {other}")),
        };
        let got = match &result {
            Ok(v) => v.clone(),
            Err(e) => err_name(e).to_string(),
        };
        match expect {
            Some(want) if want != got => Err(format!("{call} = {got}, expected {want}")),
            _ => Ok(()),
        }
    }

    fn event(&mut self, spec: &str) -> Result<(), String> {
        let (name, arg) = match spec.split_once('(') {
            Some((n, a)) => (n.trim(), Some(a.trim_end_matches(')').trim())),
            None => (spec.trim(), None),
        };
        let mut seen = Vec::new();
        while let Some(ev) = self.ep.poll_event() {
            let (n, detail) = match &ev {
                Event::Incoming { local_port } => ("incoming", local_port.to_string()),
                Event::Readable(h) => ("readable", h.id().to_string()),
                Event::Failed { handle, .. } => ("failed", handle.id().to_string()),
                Event::Nak { handle, code, .. } => {
                    ("nak", format!("{}, {}", handle.id(), code.to_u16()))
                }
                Event::SendTimerExpired(h) => ("stimer", h.id().to_string()),
                Event::ReceiveTimerExpired(h) => ("rtimer", h.id().to_string()),
                Event::Closed(h) => ("closed", h.id().to_string()),
            };
            if n == name && arg.is_none_or(|a| a == detail) {
                return Ok(());
            }
            seen.push(format!("{ev:?}"));
        }
        Err(format!("event {spec} not found; saw [{}]", seen.join(", ")))
    }
}

fn parse_time(tok: &str, prev: Timestamp) -> Result<Timestamp, String> {
    let (rel, v) = match tok.strip_prefix('+') {
        Some(v) => (true, v),
        None => (false, tok),
    };
    let secs: f64 = num(v)?;
    let d = Duration::from_secs_f64(secs);
    Ok(if rel { prev + d } else { Timestamp::ZERO + d })
}

fn run_script(text: &str) -> Result<(), String> {
    let mut opts = Options::default();
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(opt) = line.strip_prefix("--") {
            let (k, v) = opt
                .split_once('=')
                .ok_or_else(|| format!("line {}: option needs =", i + 1))?;
            opts.set(k.trim(), v.trim())
                .map_err(|e| format!("line {}: {e}", i + 1))?;
        } else {
            lines.push((i + 1, line));
        }
    }
    let mut r = Runner::new(opts)?;
    let mut t = Timestamp::ZERO;
    for (no, line) in lines {
        let (time, rest) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("line {no}: no action"))?;
        t = parse_time(time, t).map_err(|e| format!("line {no}: {e}"))?;
        let rest = rest.trim();
        let words: Vec<&str> = rest.split_whitespace().collect();
        let res = match words.first().copied() {
            Some("<") => {
                let spec = parse_seg(&words[1..]);
                spec.and_then(|s| {
                    r.advance_to(t)?;
                    r.inbound(&s)
                })
            }
            Some(">") => parse_seg(&words[1..]).and_then(|s| r.outbound(&s, t)),
            Some("event") => r
                .advance_to(t)
                .and_then(|()| r.event(rest.trim_start_matches("event").trim())),
            Some("stats") => r.advance_to(t).and_then(|()| {
                let body = rest.trim_start_matches("stats");
                let (name, want) = body.split_once('=').ok_or("stats NAME = N")?;
                let have = stat(r.ep.stats(), name.trim())?;
                let want: u64 = num(want)?;
                if have == want {
                    Ok(())
                } else {
                    Err(format!("stats {} = {have}, expected {want}", name.trim()))
                }
            }),
            Some("connections") => r.advance_to(t).and_then(|()| {
                let want: usize = num(rest.split('=').nth(1).ok_or("connections = N")?)?;
                let have = r.ep.connection_count();
                if have == want {
                    Ok(())
                } else {
                    Err(format!("connections = {have}, expected {want}"))
                }
            }),
            _ => r.advance_to(t).and_then(|()| r.call(rest)),
        };
        res.map_err(|e| format!("line {no} `{line}`: {e}"))?;
    }
    if let Some((_, d)) = next_segment(&mut r.ep, r.now) {
        return Err(format!(
            "unexpected outbound at end of script: {}",
            Runner::describe(&d)
        ));
    }
    Ok(())
}

/// The endpoint's next segment on its own (one datagram per transmit, as a
/// script names them one by one).
fn next_segment(ep: &mut Endpoint, now: Timestamp) -> Option<(SocketAddr, Vec<u8>)> {
    let mut buf = Vec::new();
    let t = ep.poll_transmit(now, 1, &mut buf)?;
    Some((t.destination?, buf))
}

#[test]
fn all_scripts_pass() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/scripts exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pkt"))
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 10,
        "expected the script suite, found {} scripts",
        paths.len()
    );
    let mut report = String::new();
    for p in &paths {
        let text = std::fs::read_to_string(p).expect("readable script");
        // `// EXPECT-FAIL "text"`: the script must fail with an error containing text.
        let expect_fail = text
            .lines()
            .find_map(|l| l.strip_prefix("// EXPECT-FAIL"))
            .map(|rest| rest.split('"').nth(1).unwrap_or("").to_string());
        match (run_script(&text), expect_fail) {
            (Ok(()), None) => {}
            (Err(e), Some(want)) if e.contains(&want) => {}
            (Err(e), Some(want)) => {
                let _ = writeln!(
                    report,
                    "{}: failed with `{e}`, expected `{want}`",
                    p.display()
                );
            }
            (Ok(()), Some(_)) => {
                let _ = writeln!(report, "{}: passed but is marked EXPECT-FAIL", p.display());
            }
            (Err(e), None) => {
                let _ = writeln!(report, "{}: {e}", p.display());
            }
        }
    }
    assert!(report.is_empty(), "script failures:\n{report}");
}
