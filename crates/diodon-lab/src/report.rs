//! Trial outputs: CSV files (all rows, and one per configuration × bitrate as
//! in the thesis's Appendix A), `testresults.txt` per configuration (the
//! thesis's Listing 4.3 format), a `summary.txt` table, and PNG plots of
//! CFR and average duration against bitrate (one line per configuration).
//!
//! ```text
//!  OUT/trials.csv                       every row
//!  OUT/summary.txt                      CFR and duration per cell
//!  OUT/table.md                         CFR per configuration over all bitrates (loss ×
//!                                       MTU × buffer rows, a column per tool), then the
//!                                       thesis's table layout: per MTU × loss, tool ×
//!                                       bitrate rows, one CFR/duration pair per buffer
//!  OUT/cfr.png, OUT/duration.png        plots (every configuration)
//!  OUT/plots/{cfr,duration}_mtu-M_loss-L.png   the same per MTU × loss (several groups only)
//!  OUT/CONFIG/BITRATE.csv, CONFIG/testresults.txt
//! ```

use crate::plan::Tool;
use crate::plot::{plot, Metric, Series};
use crate::row::{Config, Row, CSV_HEADER};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// CFR and duration of one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Configuration label.
    pub config: String,
    /// Mbit/s.
    pub bitrate: f64,
    /// Trials run.
    pub trials: usize,
    /// Trials whose file arrived intact.
    pub ok: usize,
    /// Average duration of the successful trials, seconds.
    pub avg_ok_s: Option<f64>,
    /// Average duration of all trials, seconds.
    pub avg_all_s: f64,
}

impl Cell {
    /// Completed File Ratio, percent.
    pub fn cfr(&self) -> f64 {
        100.0 * self.ok as f64 / self.trials.max(1) as f64
    }

    /// The 95 % confidence interval of the CFR, percent (Wilson score
    /// interval: unlike the normal approximation it stays inside 0–100 and
    /// is not empty at 0 or all of n, where these trials mostly are). With
    /// 25 of 25 complete the CFR is at least 86.7 %; with 100 of 100, 96.3 %.
    pub fn cfr_interval(&self) -> (f64, f64) {
        wilson(self.ok, self.trials)
    }
}

/// Wilson score interval at 95 % for `k` successes in `n` trials, percent.
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    /// The standard normal quantile for a two-sided 95 % interval.
    const Z: f64 = 1.959_963_984_540_054;
    if n == 0 {
        return (0.0, 100.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z * Z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    (
        (100.0 * (centre - half)).max(0.0),
        (100.0 * (centre + half)).min(100.0),
    )
}

/// `lo–hi` of an interval in whole percent, rounded outwards (never
/// claims more certainty than the interval gives).
fn interval_text((lo, hi): (f64, f64)) -> String {
    format!("{:.0}–{:.0}", (lo + 1e-9).floor(), (hi - 1e-9).ceil())
}

/// `k` of `n` in whole percent, but never "100" for less than all nor "0"
/// for more than none (214 of 215 is 99.5 %, not 100 %).
fn percent_text(k: usize, n: usize) -> String {
    let p = 100.0 * k as f64 / n.max(1) as f64;
    let whole = format!("{p:.0}");
    if (whole == "100" && k < n) || (whole == "0" && k > 0) {
        format!("{p:.1}")
    } else {
        whole
    }
}

/// Groups rows into cells, in first-seen order of configurations.
pub fn cells(rows: &[Row]) -> Vec<Cell> {
    let mut order: Vec<(String, u64)> = Vec::new();
    let mut by: BTreeMap<(String, u64), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        let key = (r.config.label(), r.bitrate.to_bits());
        if !by.contains_key(&key) {
            order.push(key.clone());
        }
        by.entry(key).or_default().push(r);
    }
    order
        .into_iter()
        .map(|key| {
            let rs = &by[&key];
            let ok: Vec<f64> = rs
                .iter()
                .filter(|r| r.xfer_success)
                .map(|r| r.xfer_time)
                .collect();
            Cell {
                config: key.0.clone(),
                bitrate: f64::from_bits(key.1),
                trials: rs.len(),
                ok: ok.len(),
                avg_ok_s: (!ok.is_empty()).then(|| ok.iter().sum::<f64>() / ok.len() as f64),
                avg_all_s: rs.iter().map(|r| r.xfer_time).sum::<f64>() / rs.len() as f64,
            }
        })
        .collect()
}

/// The thesis's `testresults.txt` for one configuration (highest bitrate first).
pub fn testresults(config: &str, cells: &[Cell]) -> String {
    let mut s = format!("Configuration: {config}\n\nTest results\n-----\n");
    let mut mine: Vec<&Cell> = cells.iter().filter(|c| c.config == config).collect();
    mine.sort_by(|a, b| b.bitrate.total_cmp(&a.bitrate));
    for c in mine {
        let _ = write!(
            s,
            "Bitrate: {} bits/second\nSuccess rate: {:.1}%\nAverage duration: {} seconds\n\n",
            (c.bitrate * 1e6).round() as u64,
            c.cfr(),
            c.avg_ok_s
                .map_or_else(|| "n/a".to_owned(), |d| format!("{d:.2}"))
        );
    }
    s
}

/// A fixed-width table of every cell.
pub fn summary(cells: &[Cell]) -> String {
    let mut s = format!(
        "{:<44} {:>9} {:>7} {:>8} {:>11} {:>12} {:>12}\n",
        "configuration", "Mbit/s", "trials", "CFR %", "95 % CI", "avg ok (s)", "avg all (s)"
    );
    for c in cells {
        let _ = writeln!(
            s,
            "{:<44} {:>9} {:>7} {:>8.1} {:>11} {:>12} {:>12.2}",
            c.config,
            c.bitrate,
            c.trials,
            c.cfr(),
            interval_text(c.cfr_interval()),
            c.avg_ok_s
                .map_or_else(|| "n/a".to_owned(), |d| format!("{d:.2}")),
            c.avg_all_s
        );
    }
    s
}

/// `(mtu, loss)` groups of the rows, in first-seen order, with the
/// configurations of each.
fn groups(rows: &[Row]) -> Vec<((u32, f64), Vec<Config>)> {
    let mut out: Vec<((u32, f64), Vec<Config>)> = Vec::new();
    for r in rows {
        let key = (r.config.mtu, r.config.loss);
        let i = out.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
            out.push((key, Vec::new()));
            out.len() - 1
        });
        if !out[i].1.contains(&r.config) {
            out[i].1.push(r.config.clone());
        }
    }
    out
}

fn buffer_name(rcvbuf: u64) -> String {
    match rcvbuf {
        0 => "default buffer".to_owned(),
        b if b.is_multiple_of(1 << 20) => format!("{} MiB", b >> 20),
        b => format!("{b} B"),
    }
}

/// CFR per configuration over all its bitrates, in Markdown: a row per
/// injected loss × MTU × receive buffer, a column per tool, each with the
/// 95 % interval of the pooled trials (one cell's few trials give a wide
/// interval; the run as a whole is read here).
pub fn overview(rows: &[Row]) -> String {
    /// (loss as bits — ordered like the value for non-negative floats, MTU, buffer).
    type Link = (u64, u32, u64);
    /// Per tool index: (complete, trials).
    type Counts = BTreeMap<usize, (usize, usize)>;
    let mut tools: Vec<Tool> = Vec::new();
    let mut by: BTreeMap<Link, Counts> = BTreeMap::new();
    for r in rows {
        let tool = tools
            .iter()
            .position(|t| *t == r.config.tool)
            .unwrap_or_else(|| {
                tools.push(r.config.tool);
                tools.len() - 1
            });
        let counts = by
            .entry((r.config.loss.to_bits(), r.config.mtu, r.config.rcvbuf))
            .or_default()
            .entry(tool)
            .or_default();
        counts.0 += usize::from(r.xfer_success);
        counts.1 += 1;
    }
    let mut s = "### CFR per configuration, all bitrates

CFR: percent (complete/trials, 95 % confidence interval).

| injected loss | MTU | buffer |"
        .to_owned();
    for t in &tools {
        let _ = write!(s, " {t} |");
    }
    s.push_str("\n|---:|---:|---|");
    for _ in &tools {
        s.push_str("---:|");
    }
    s.push('\n');
    for ((loss, mtu, rcvbuf), per) in by {
        let _ = write!(
            s,
            "| {} % | {mtu} | {} |",
            f64::from_bits(loss),
            buffer_name(rcvbuf)
        );
        for i in 0..tools.len() {
            match per.get(&i) {
                Some(&(k, n)) => {
                    let _ = write!(
                        s,
                        " {} % ({k}/{n}, {}) |",
                        percent_text(k, n),
                        interval_text(wilson(k, n))
                    );
                }
                None => s.push_str(" |"),
            }
        }
        s.push('\n');
    }
    s.push('\n');
    s
}

/// The run's overview (above), then the thesis's table layout (Tables 5.2,
/// 7.x) in Markdown: one table per MTU × injected loss; a row per tool and
/// bitrate; per receive buffer the CFR and the average duration of the
/// successful trials.
pub fn table(rows: &[Row], cells: &[Cell]) -> String {
    let mut s = overview(rows);
    for ((mtu, loss), configs) in groups(rows) {
        let mut buffers: Vec<u64> = configs.iter().map(|c| c.rcvbuf).collect();
        buffers.dedup();
        buffers.sort_unstable();
        buffers.dedup();
        let mut tools = Vec::new();
        for c in &configs {
            if !tools.contains(&c.tool) {
                tools.push(c.tool);
            }
        }
        let _ = writeln!(
            s,
            "### MTU {mtu}, injected loss {loss} %
"
        );
        let mut head = "| tool | Mbit/s |".to_owned();
        let mut rule = "|---|---:|".to_owned();
        for b in &buffers {
            let _ = write!(head, " CFR ({0}) | avg s ({0}) |", buffer_name(*b));
            rule.push_str("---:|---:|");
        }
        let _ = writeln!(
            s,
            "CFR: percent (complete/trials, 95 % confidence interval); avg s: successful trials.

{head}
{rule}"
        );
        for tool in tools {
            let mut rates: Vec<f64> = cells
                .iter()
                .filter(|c| {
                    configs
                        .iter()
                        .any(|k| k.tool == tool && k.label() == c.config)
                })
                .map(|c| c.bitrate)
                .collect();
            rates.sort_by(f64::total_cmp);
            rates.dedup();
            for rate in rates {
                let _ = write!(s, "| {tool} | {rate} |");
                for &rcvbuf in &buffers {
                    let label = Config {
                        tool,
                        rcvbuf,
                        mtu,
                        loss,
                    }
                    .label();
                    match cells
                        .iter()
                        .find(|c| c.config == label && c.bitrate.to_bits() == rate.to_bits())
                    {
                        Some(c) => {
                            let _ = write!(
                                s,
                                " {} % ({}/{}, {}) | {} |",
                                percent_text(c.ok, c.trials),
                                c.ok,
                                c.trials,
                                interval_text(c.cfr_interval()),
                                c.avg_ok_s
                                    .map_or_else(|| "–".to_owned(), |d| format!("{d:.2}"))
                            );
                        }
                        None => s.push_str(" | |"),
                    }
                }
                s.push('\n');
            }
        }
        s.push('\n');
    }
    s
}

/// Writes every output into `out`; returns the files written.
pub fn write_all(out: &Path, rows: &[Row]) -> io::Result<Vec<PathBuf>> {
    fs::create_dir_all(out)?;
    let mut written = Vec::new();
    let mut all = format!("{CSV_HEADER}\n");
    for r in rows {
        all.push_str(&r.csv());
        all.push('\n');
    }
    let p = out.join("trials.csv");
    fs::write(&p, all)?;
    written.push(p);
    let cells = cells(rows);
    let mut configs: Vec<String> = Vec::new();
    for c in &cells {
        if !configs.contains(&c.config) {
            configs.push(c.config.clone());
        }
    }
    for config in &configs {
        let dir = out.join(config);
        fs::create_dir_all(&dir)?;
        let mut per: BTreeMap<u64, String> = BTreeMap::new();
        for r in rows.iter().filter(|r| &r.config.label() == config) {
            let text = per
                .entry((r.bitrate * 1e6).round() as u64)
                .or_insert_with(|| format!("{CSV_HEADER}\n"));
            text.push_str(&r.csv());
            text.push('\n');
        }
        for (bits, text) in per {
            let p = dir.join(format!("{bits}.csv"));
            fs::write(&p, text)?;
            written.push(p);
        }
        let p = dir.join("testresults.txt");
        fs::write(&p, testresults(config, &cells))?;
        written.push(p);
    }
    let p = out.join("summary.txt");
    fs::write(&p, summary(&cells))?;
    written.push(p);
    let p = out.join("table.md");
    fs::write(&p, table(rows, &cells))?;
    written.push(p);
    for (name, what) in [("cfr.png", Metric::Cfr), ("duration.png", Metric::Duration)] {
        let p = out.join(name);
        plot_cells(&p, &cells, what)?;
        written.push(p);
    }
    let groups = groups(rows);
    if groups.len() > 1 {
        let dir = out.join("plots");
        fs::create_dir_all(&dir)?;
        for ((mtu, loss), configs) in &groups {
            let labels: Vec<String> = configs.iter().map(Config::label).collect();
            let mine: Vec<Cell> = cells
                .iter()
                .filter(|c| labels.contains(&c.config))
                .cloned()
                .collect();
            for (kind, what) in [("cfr", Metric::Cfr), ("duration", Metric::Duration)] {
                let p = dir.join(format!("{kind}_mtu-{mtu}_loss-{loss}.png"));
                plot_cells(&p, &mine, what)?;
                written.push(p);
            }
        }
    }
    Ok(written)
}

/// The lines of one plot: per configuration (first-seen order), its
/// (bitrate, value) points in bitrate order.
fn series(cells: &[Cell], metric: Metric) -> Vec<Series> {
    let value = |c: &Cell| match metric {
        Metric::Cfr => c.cfr(),
        Metric::Duration => c.avg_ok_s.unwrap_or(c.avg_all_s),
    };
    let mut lines: Vec<Series> = Vec::new();
    for c in cells {
        if !lines.iter().any(|l| l.label == c.config) {
            lines.push(Series {
                label: c.config.clone(),
                points: Vec::new(),
            });
        }
        if let Some(l) = lines.iter_mut().find(|l| l.label == c.config) {
            l.points.push((c.bitrate, value(c)));
        }
    }
    for l in &mut lines {
        l.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    lines
}

/// Draws `metric` of `cells` against bitrate into the PNG `path`.
fn plot_cells(path: &Path, cells: &[Cell], metric: Metric) -> io::Result<()> {
    plot(path, &series(cells, metric), metric)
        .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tool: Tool, bitrate: f64, ok: bool, t: f64) -> Row {
        Row {
            config: Config {
                tool,
                rcvbuf: 0,
                mtu: 1500,
                loss: 0.0,
            },
            bitrate,
            trial: 1,
            sender_rc: 0,
            receiver_rc: 0,
            xfer_time: t,
            xfer_success: ok,
            in_file_size: 1,
            out_file_size: 1,
            dtgrms_sent: None,
            dtgrms_received: None,
            dtgrms_corrupt: None,
            tx_errors: 0,
            tx_dropped: 0,
            rx_errors: 0,
            rx_dropped: 0,
            snmp_out_datagrams: 0,
            snmp_sndbuf_errors: 0,
            snmp_in_datagrams: 0,
            snmp_in_errors: 0,
            snmp_rcvbuf_errors: 0,
            snmp_reasm_fails: 0,
            missing: None,
            recovered: None,
            socket_drops: None,
            repair_ratio: None,
            app_rcvbuf: None,
            reason: String::new(),
        }
    }

    #[test]
    fn cells_cfr_and_testresults_format() {
        let rows = vec![
            row(Tool::Netcat, 100.0, true, 2.0),
            row(Tool::Netcat, 100.0, false, 4.0),
            row(Tool::Netcat, 1000.0, true, 1.0),
            row(Tool::Diodon, 100.0, true, 1.0),
        ];
        let cs = cells(&rows);
        assert_eq!(cs.len(), 3);
        assert!((cs[0].cfr() - 50.0).abs() < 1e-9);
        assert_eq!(cs[0].avg_ok_s, Some(2.0));
        assert!((cs[0].avg_all_s - 3.0).abs() < 1e-9);
        let t = testresults("netcat_rcvbuf-default_mtu-1500_loss-0", &cs);
        assert!(t.contains("Bitrate: 1000000000 bits/second\nSuccess rate: 100.0%\nAverage duration: 1.00 seconds\n\nBitrate: 100000000 bits/second\nSuccess rate: 50.0%\nAverage duration: 2.00 seconds"), "{t}");
        assert!(summary(&cs).contains("diodon_rcvbuf-default_mtu-1500_loss-0"));
        let sum = summary(&cs);
        assert!(
            sum.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.get(3..5) == Some(&["50.0", "9–91"][..])
            }),
            "CFR and its interval: {sum}"
        );
    }

    #[test]
    fn wilson_interval_matches_known_values() {
        let close = |(lo, hi): (f64, f64), (a, b): (f64, f64)| {
            assert!((lo - a).abs() < 0.05 && (hi - b).abs() < 0.05, "{lo} {hi}");
        };
        // Reference values (Wilson 1927; e.g. Newcombe 1998, table I).
        close(wilson(25, 25), (86.68, 100.0));
        close(wilson(100, 100), (96.30, 100.0));
        close(wilson(0, 10), (0.0, 27.75));
        close(wilson(81, 263), (25.53, 36.62));
        close(wilson(1, 2), (9.45, 90.55));
        assert_eq!(wilson(0, 0), (0.0, 100.0));
        assert_eq!(interval_text(wilson(25, 25)), "86–100");
        assert_eq!(interval_text(wilson(0, 25)), "0–14");
        assert_eq!(percent_text(214, 215), "99.5");
        assert_eq!(percent_text(215, 215), "100");
        assert_eq!(percent_text(1, 1000), "0.1");
        assert_eq!(percent_text(0, 215), "0");
        assert_eq!(percent_text(150, 215), "70");
    }

    #[test]
    fn table_per_mtu_and_loss_and_plots_per_group() {
        let dir = tempfile::tempdir().expect("test");
        let mut rows = vec![
            row(Tool::Diodon, 100.0, true, 1.25),
            row(Tool::Diodon, 100.0, false, 9.0),
            row(Tool::Netcat, 100.0, true, 2.0),
        ];
        let mut big = row(Tool::Diodon, 100.0, true, 1.5);
        big.config.rcvbuf = 4 << 20;
        rows.push(big);
        let mut lossy = row(Tool::Diodon, 1000.0, true, 0.25);
        lossy.config.mtu = 9000;
        lossy.config.loss = 1.0;
        rows.push(lossy);
        let t = table(&rows, &cells(&rows));
        assert!(
            t.starts_with("### CFR per configuration, all bitrates"),
            "{t}"
        );
        for line in [
            "| injected loss | MTU | buffer | diodon | netcat |",
            "| 0 % | 1500 | default buffer | 50 % (1/2, 9–91) | 100 % (1/1, 20–100) |",
            "| 0 % | 1500 | 4 MiB | 100 % (1/1, 20–100) | |",
            "| 1 % | 9000 | default buffer | 100 % (1/1, 20–100) | |",
        ] {
            assert!(t.lines().any(|l| l == line), "{line} in {t}");
        }
        assert!(t.contains("### MTU 1500, injected loss 0 %"), "{t}");
        assert!(t.contains("### MTU 9000, injected loss 1 %"), "{t}");
        assert!(
            t.contains("| tool | Mbit/s | CFR (default buffer) | avg s (default buffer) | CFR (4 MiB) | avg s (4 MiB) |"),
            "{t}"
        );
        assert!(
            t.contains("| diodon | 100 | 50 % (1/2, 9–91) | 1.25 | 100 % (1/1, 20–100) | 1.50 |"),
            "{t}"
        );
        assert!(
            t.contains("| netcat | 100 | 100 % (1/1, 20–100) | 2.00 | | |"),
            "{t}"
        );
        assert!(
            t.contains("| diodon | 1000 | 100 % (1/1, 20–100) | 0.25 |"),
            "{t}"
        );
        write_all(dir.path(), &rows).expect("test");
        for f in [
            "table.md",
            "plots/cfr_mtu-1500_loss-0.png",
            "plots/duration_mtu-9000_loss-1.png",
        ] {
            assert!(dir.path().join(f).is_file(), "{f}");
        }
    }

    #[test]
    fn writes_csvs_summary_and_plots() {
        let dir = tempfile::tempdir().expect("test");
        let rows = vec![
            row(Tool::Netcat, 100.0, true, 2.0),
            row(Tool::Pydiode(2), 100.0, false, 4.0),
            row(Tool::Netcat, 500.0, true, 1.0),
        ];
        let files = write_all(dir.path(), &rows).expect("test");
        for f in &files {
            assert!(fs::metadata(f).expect("test").len() > 0, "{}", f.display());
        }
        let png = fs::read(dir.path().join("cfr.png")).expect("test");
        assert_eq!(&png[1..4], b"PNG");
        assert!(dir
            .path()
            .join("pydiode-r2_rcvbuf-default_mtu-1500_loss-0/100000000.csv")
            .is_file());
    }
}
