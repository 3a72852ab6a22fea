//! `diodon sync`: flags and the TOML file become [`SyncOptions`]; the
//! library runs the sync; the summary is printed. `--status` reads the
//! state database and prints what it knows.
//!
//! ```text
//!  SyncArgs + FileConfig ─► Link ─► send::{sender_config, socket}, ScanOptions ─► gateway::run_sync
//!                                   ─► SyncSummary ─► stderr text, --json stdout, exit code
//!  --status ─► sync::status(state) ─► text | --json
//! ```

use crate::args::SyncArgs;
use crate::config::{pick, FileConfig, Link};
use crate::fatal::Fatal;
use crate::stop::on_signal;
use anyhow::{anyhow, Context};
use diodon_apps::gateway::{run_sync, GatewayError, MetricsOptions};
use diodon_apps::report::Exit;
use diodon_apps::sandbox::{self, sync_policy};
use diodon_apps::sync::scan::{Root, ScanOptions};
use diodon_apps::sync::{status, AfterSend, SyncOptions};
use diodon_apps::SendOptions;
use globset::{Glob, GlobSetBuilder};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Temporary files never sent unless `--no-default-ignores`.
pub const DEFAULT_IGNORES: &[&str] = &[
    "*.tmp",
    "*.temp",
    "*.part",
    "*.partial",
    "*.crdownload",
    ".~*",
    "~$*",
    "*~",
    ".#*",
    "*.swp",
    "*.swx",
    ".*.sw?",
];

/// `--bundle`: at most 8 MiB (receivers hold 16 MiB).
fn bundle_bytes(args: &SyncArgs, file: &FileConfig) -> Result<u64, Fatal> {
    let bytes = args.bundle.or(file.bundle).unwrap_or(1 << 20);
    if bytes > 8 << 20 {
        return Err(Fatal::config(anyhow!(
            "bundle = {bytes}: a bundle is at most 8388608 bytes (receivers hold 16 MiB)"
        )));
    }
    Ok(bytes)
}

/// Runs `diodon sync`.
pub fn run(args: &SyncArgs) -> Result<Exit, Fatal> {
    let file = FileConfig::load(args.link.config.as_deref()).map_err(Fatal::config)?;
    let link = Link::merge(&args.link, &file).map_err(Fatal::config)?;
    let state = pick(args.state.as_ref(), file.state.as_ref())
        .unwrap_or_else(|| PathBuf::from("diodon-sync.sqlite"));
    // Absolute, so that the sandbox's rule and SQLite name the same folder.
    let state = std::path::absolute(&state)
        .with_context(|| format!("the state database {}", state.display()))
        .map_err(Fatal::config)?;
    let passes = args.passes.or(file.passes).unwrap_or(2);
    if args.status {
        return print_status(&state, passes, link.json);
    }
    let paths = if args.paths.is_empty() {
        file.sources.clone().unwrap_or_default()
    } else {
        args.paths.clone()
    };
    let roots = roots(&paths).map_err(Fatal::config)?;
    let scan = ScanOptions {
        roots,
        ignore: ignores(args, &file, &state).map_err(Fatal::config)?,
        follow_symlinks: args.follow_symlinks || file.follow_symlinks.unwrap_or(false),
        batch: 2000,
        watch: None,
    };
    if args.scan_only {
        return scan_only(&state, &scan, link.json);
    }
    let links = crate::config::links(&args.to, args.bind, &file).map_err(Fatal::config)?;
    let no_gso = args.no_gso || file.no_gso.unwrap_or(false);
    let to = links
        .first()
        .map(|l| l.to)
        .context("--to ADDR is required")
        .map_err(Fatal::config)?;
    let (config, udp, more_links) = crate::send::link_cores(&link, &links, false, no_gso)?;
    let after_send = pick(args.after_send.as_ref(), file.after_send.as_ref())
        .map(|s| s.parse::<AfterSend>())
        .transpose()
        .map_err(|e| Fatal::config(anyhow!("--after-send {e}")))?;
    let ms = |flag: Option<u64>, key: Option<u64>, default: u64| {
        Duration::from_millis(flag.or(key).unwrap_or(default))
    };
    let bundle_bytes = bundle_bytes(args, &file)?;
    let opts = SyncOptions {
        more_links,
        send: SendOptions {
            config,
            dest: to,
            udp,
            queue_chunks: 32,
            linger: ms(args.linger, file.linger, 750),
            on_sent: None,
            keys: link.key_reload(),
        },
        scan,
        state,
        passes,
        repeat_share: f64::from(args.repeat_share.or(file.repeat_share).unwrap_or(50)) / 100.0,
        settle: ms(args.settle, file.settle, 2000),
        rescan: ms(args.rescan, file.rescan, 30_000),
        watch: !args.no_watch,
        in_flight: args.in_flight.or(file.in_flight).unwrap_or(32) as usize,
        readers: args.readers.or(file.readers).unwrap_or(4) as usize,
        bundle_bytes,
        bundle_file_max: args
            .bundle_file_max
            .or(file.bundle_file_max)
            .unwrap_or(64 << 10),
        after_send,
        once: args.once || file.once.unwrap_or(false),
    };
    let metrics = pick(args.metrics.as_ref(), file.metrics.as_ref()).map(|addr| MetricsOptions {
        addr,
        peer: to.ip(),
        device: link.device.clone(),
    });
    let sandbox = crate::sandbox::options(&args.sandbox, &file, &args.link, metrics.is_some())?;
    let policy = sync_policy(&opts, &sandbox);
    // The signal thread starts once the process is restricted, so it is too.
    let stop = Arc::new(AtomicBool::new(false));
    let restrict = || {
        sandbox::apply(&policy).map_err(|e| GatewayError::Io {
            what: "restricting the process".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        on_signal(&stop, true);
        Ok(())
    };
    let summary = run_sync(opts, metrics, &stop, restrict, |_, _| {}).map_err(Fatal::gateway)?;
    let s = &summary.sync;
    print_summary(&summary);
    if link.json {
        println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    }
    Ok(if stop.load(Ordering::Relaxed) {
        Exit::Interrupted
    } else if s.unreadable > 0 || s.outbox_errors > 0 {
        Exit::ChannelFailed
    } else {
        Exit::Success
    })
}

/// The sync's one-paragraph account on stderr.
fn print_summary(summary: &diodon_apps::sync::SyncSummary) {
    let s = &summary.sync;
    eprintln!(
        "sync: {} scans, {} files sent first ({} of them in {} bundles), {} repeated ({:.1} MB + {:.1} MB), {} deletions and {} renames announced, {} vanished, {} unreadable, {} outbox; {} files known, {} pending",
        s.scans,
        s.files_new,
        s.bundled_files,
        s.bundles,
        s.files_repeat,
        s.bytes_new as f64 / 1e6,
        s.bytes_repeat as f64 / 1e6,
        s.deletions,
        s.renames,
        s.vanished,
        s.unreadable,
        s.outbox_done,
        summary.status.files,
        summary.status.pending,
    );
}

/// One scan into the database, timed; prints the counts and peak memory.
fn scan_only(state: &std::path::Path, scan: &ScanOptions, json: bool) -> Result<Exit, Fatal> {
    let db = diodon_apps::sync::state::State::open(state)
        .with_context(|| format!("opening {}", state.display()))
        .map_err(Fatal::io)?;
    let stats = diodon_apps::sync::SyncStats::default();
    let t0 = diodon_io::unix_time_ms();
    let sum = diodon_apps::sync::scan::scan(&db, scan, &stats, &crate::stop::stop_flag())
        .context("scanning")
        .map_err(Fatal::io)?;
    let ms = diodon_io::unix_time_ms().saturating_sub(t0);
    let rss = diodon_io::counters::peak_rss_kib().unwrap_or(0);
    if json {
        println!(
            "{}",
            serde_json::json!({"dirs": sum.dirs, "files": sum.files, "changed": sum.changed,
                "deleted": sum.deleted, "skipped": sum.skipped, "ms": ms, "peak_rss_kib": rss})
        );
    }
    eprintln!(
        "scan: {} directories, {} files ({} new or changed, {} gone, {} skipped) in {:.1} s; peak RSS {} MiB",
        sum.dirs,
        sum.files,
        sum.changed,
        sum.deleted,
        sum.skipped,
        ms as f64 / 1000.0,
        rss / 1024
    );
    Ok(Exit::Success)
}

fn print_status(state: &std::path::Path, passes: u32, json: bool) -> Result<Exit, Fatal> {
    let st = status(state, passes)
        .with_context(|| format!("reading {}", state.display()))
        .map_err(Fatal::io)?;
    if json {
        println!("{}", serde_json::to_string(&st).unwrap_or_default());
    } else {
        println!(
            "files {} ({:.1} MB), pending {} (sent fewer than {passes} times), deletions pending {}, errors {}",
            st.files,
            st.bytes as f64 / 1e6,
            st.pending,
            st.deletions_pending,
            st.errors
        );
        for (p, n) in st.by_passes.iter().enumerate() {
            let more = if p == passes as usize { "+" } else { "" };
            println!("  sent {p}{more} times: {n}");
        }
        println!(
            "scans {}, last scan at Unix ms {}",
            st.scans, st.last_scan_ms
        );
    }
    Ok(Exit::Success)
}

/// Each source directory, named by its last component (unique).
fn roots(paths: &[PathBuf]) -> anyhow::Result<Vec<Root>> {
    if paths.is_empty() {
        return Err(anyhow!("nothing to sync: give source directories"));
    }
    let mut roots: Vec<Root> = Vec::new();
    for p in paths {
        if !p.is_dir() {
            return Err(anyhow!("{}: sync takes directories", p.display()));
        }
        let base = p
            .canonicalize()
            .ok()
            .and_then(|c| c.file_name().and_then(|n| n.to_str()).map(str::to_owned))
            .ok_or_else(|| anyhow!("{}: its name is not UTF-8", p.display()))?;
        if roots.iter().any(|r| r.base == base) {
            return Err(anyhow!("two sources are both named {base:?}"));
        }
        roots.push(Root {
            path: p.clone(),
            base,
        });
    }
    Ok(roots)
}

/// The ignore globs: defaults, the state database's own files, the flags.
fn ignores(
    args: &SyncArgs,
    file: &FileConfig,
    state: &std::path::Path,
) -> anyhow::Result<globset::GlobSet> {
    let mut b = GlobSetBuilder::new();
    if !(args.no_default_ignores || file.no_default_ignores.unwrap_or(false)) {
        for g in DEFAULT_IGNORES {
            b.add(Glob::new(g)?);
        }
    }
    if let Some(name) = state.file_name().and_then(|n| n.to_str()) {
        let escaped = globset::escape(name);
        b.add(Glob::new(&format!("{escaped}*"))?);
    }
    for g in args.ignore.iter().chain(file.ignore.iter().flatten()) {
        b.add(Glob::new(g).with_context(|| format!("--ignore {g}"))?);
    }
    Ok(b.build()?)
}
