//! The stop flag of a running command: set by the first SIGINT/SIGTERM, so
//! pipelines end cleanly; a second signal exits at once. For the long-running
//! gateway commands SIGHUP means "read the key file again" instead (without
//! a key file it does nothing). A leaf module
//! (`main` and every command use it, it uses none of them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Sets the returned flag on SIGINT/SIGTERM (and SIGHUP); a second signal
/// exits at once.
pub fn stop_flag() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    on_signal(&stop, false);
    stop
}

/// Sets `stop` on SIGINT/SIGTERM; a second signal exits at once. SIGHUP
/// stops too, unless `reload_keys`: then it is counted, and a keyed
/// pipeline reads its key file again (`diodon_apps::key_file::KeyReload`). Starts the
/// thread that waits for signals (a sandboxed command calls it once it is
/// restricted, so that this thread is too).
pub fn on_signal(stop: &Arc<AtomicBool>, reload_keys: bool) {
    let s = Arc::clone(stop);
    let first = Arc::new(AtomicBool::new(true));
    let _ = ctrlc::set_handler(move || {
        if first.swap(false, Ordering::SeqCst) {
            eprintln!("diodon: stopping (again to force)");
            s.store(true, Ordering::SeqCst);
        } else {
            std::process::exit(130);
        }
    });
    // After the stop handler, which claims SIGHUP too: the last one wins.
    if reload_keys {
        if let Err(e) = diodon_io::signal::count_hangups() {
            tracing::warn!("SIGHUP will not reload the key file: {e}");
        }
    }
}

/// Sets `stop` after `secs` seconds (`--duration`), from a thread started
/// now (a sandboxed command calls it once it is restricted).
pub fn stop_after(secs: Option<f64>, stop: &Arc<AtomicBool>) {
    if let Some(d) = secs {
        let s = Arc::clone(stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(d.max(0.0)));
            s.store(true, Ordering::Relaxed);
        });
    }
}
