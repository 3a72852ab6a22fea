//! The progress bar on a terminal, and a log writer that draws around it.
//!
//! ```text
//!  gateway watch closure (every 100 ms) ─► Bar::update ─► indicatif (stderr, TTY only)
//!  tracing events ─► LogWriter ─► bar.suspend(write to stderr)
//! ```

use indicatif::{ProgressBar, ProgressStyle};
use std::io::Write;
use std::sync::OnceLock;

/// The progress bar, if one is shown (logs are printed around it).
static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// A `tracing` writer that suspends the progress bar while printing.
#[derive(Debug, Clone, Copy)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match BAR.get() {
            Some(bar) => bar
                .suspend(|| std::io::stderr().write_all(buf))
                .map(|()| buf.len()),
            None => std::io::stderr().write_all(buf).map(|()| buf.len()),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Creates the bar (bytes, with a known total or a spinner).
pub fn bar(total: u64) -> &'static ProgressBar {
    BAR.get_or_init(|| {
        let bar = if total > 0 { ProgressBar::new(total) } else { ProgressBar::new_spinner() };
        let style = if total > 0 {
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {binary_bytes_per_sec} {msg}"
        } else {
            "{spinner} [{elapsed_precise}] {bytes} {binary_bytes_per_sec} {msg}"
        };
        if let Ok(s) = ProgressStyle::with_template(style) {
            bar.set_style(s);
        }
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(5));
        bar
    })
}

/// Clears the bar, if one is shown (before the summary or an error).
pub fn clear() {
    if let Some(bar) = BAR.get() {
        bar.finish_and_clear();
    }
}
