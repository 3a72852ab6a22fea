//! PNG line plots, one line per configuration: the only module that draws
//! (and the only one that links plotters).
//!
//! ```text
//!  report: cells ─► Series { label, (bitrate, value)… } ─► plot(path, lines, metric) ─┐
//!  tunnel: fig4.csv ─► Series { reader, (queue length, value)… } ─► plot_fig4 ────────┴► plot_xy ─► PNG
//! ```

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::fs;
use std::path::Path;

/// What a plot shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// CFR %.
    Cfr,
    /// Average duration of successful trials (all trials when none succeeded).
    Duration,
}

/// Registers a TrueType font for labels; `false` when none is installed (the
/// plot is then drawn without text).
fn font() -> bool {
    static FONT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FONT.get_or_init(|| {
        let candidates = [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        ];
        for c in candidates {
            if let Ok(bytes) = fs::read(c) {
                let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// One line of a plot: a configuration's (bitrate, value) points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The configuration (the legend).
    pub label: String,
    /// (bitrate in Mbit/s, value), in bitrate order.
    pub points: Vec<(f64, f64)>,
}

/// How one chart is labelled and scaled.
#[derive(Clone, Debug)]
pub struct Axes<'a> {
    /// The title.
    pub title: &'a str,
    /// What x is.
    pub x_desc: &'a str,
    /// What y is.
    pub y_desc: &'a str,
    /// The y axis ends here (x ends 5 % beyond the largest x).
    pub y_max: f64,
    /// x on a logarithmic scale (x values must be > 0).
    pub log_x: bool,
    /// Where the legend goes.
    pub legend: SeriesLabelPosition,
}

/// Draws one metric against bitrate, one line per series.
pub fn plot(path: &Path, lines: &[Series], metric: Metric) -> Result<(), String> {
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let axes = match metric {
        Metric::Cfr => Axes {
            title: "Completed File Ratio vs bitrate",
            x_desc: "bitrate (Mbit/s)",
            y_desc: "CFR (%)",
            y_max: 105.0,
            log_x: false,
            // Failing cells sit low on the right; successful ones at 100 %.
            legend: SeriesLabelPosition::LowerLeft,
        },
        Metric::Duration => Axes {
            title: "Average transfer duration vs bitrate",
            x_desc: "bitrate (Mbit/s)",
            y_desc: "duration (s)",
            y_max: all().map(|p| p.1).fold(0.1, f64::max) * 1.15,
            log_x: false,
            legend: SeriesLabelPosition::UpperRight,
        },
    };
    plot_xy(path, lines, &axes)
}

/// The NODROP paper's Fig. 4 for a `scripts/bench-tunnel.sh` run: loss
/// (%) and throughput (Mbit/s) against the TUN queue length on a log
/// scale, one line per reader, as `loss.png` and `throughput.png` in `dir`.
/// `csv` has the columns `reader,qlen,offered,lost,loss_pct,throughput_mbps`.
pub fn plot_fig4(csv: &str, dir: &Path) -> Result<(), String> {
    let mut loss: Vec<Series> = Vec::new();
    let mut rate: Vec<Series> = Vec::new();
    for (n, line) in csv.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |i: usize| -> Result<f64, String> {
            f.get(i)
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("line {}: column {} is not a number", n + 1, i + 1))
        };
        let (reader, qlen) = (f.first().copied().unwrap_or_default(), num(1)?);
        for (set, value) in [(&mut loss, num(4)?), (&mut rate, num(5)?)] {
            match set.iter_mut().find(|s| s.label == reader) {
                Some(s) => s.points.push((qlen, value)),
                None => set.push(Series {
                    label: reader.to_owned(),
                    points: vec![(qlen, value)],
                }),
            }
        }
    }
    if loss.is_empty() {
        return Err("no rows below the header".into());
    }
    for s in loss.iter_mut().chain(rate.iter_mut()) {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let rate_max = rate
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| p.1)
        .fold(1.0, f64::max);
    plot_xy(
        &dir.join("loss.png"),
        &loss,
        &Axes {
            title: "Packets lost at the TUN vs queue length",
            x_desc: "txqueuelen (packets, log scale)",
            y_desc: "lost (%)",
            y_max: 105.0,
            log_x: true,
            legend: SeriesLabelPosition::LowerLeft,
        },
    )?;
    plot_xy(
        &dir.join("throughput.png"),
        &rate,
        &Axes {
            title: "Throughput read from the TUN vs queue length",
            x_desc: "txqueuelen (packets, log scale)",
            y_desc: "Mbit/s",
            y_max: rate_max * 1.15,
            log_x: true,
            legend: SeriesLabelPosition::UpperLeft,
        },
    )
}

/// Draws `lines` on one chart.
pub fn plot_xy(path: &Path, lines: &[Series], axes: &Axes<'_>) -> Result<(), String> {
    let text = font();
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = all().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        b.caption(axes.title, ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(60);
    }
    if axes.log_x {
        let x_min = all()
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min)
            .clamp(1e-9, 1.0)
            * 0.9;
        let chart = b
            .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..axes.y_max)
            .map_err(|e| e.to_string())?;
        draw(chart, lines, axes, text)?;
    } else {
        let chart = b
            .build_cartesian_2d(0.0..x_max, 0.0..axes.y_max)
            .map_err(|e| e.to_string())?;
        draw(chart, lines, axes, text)?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// The mesh, the lines, their points and the legend, on either x scale.
fn draw<'a, X>(
    mut chart: ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, RangedCoordf64>>,
    lines: &[Series],
    axes: &Axes<'_>,
    text: bool,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    {
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc(axes.x_desc).y_desc(axes.y_desc);
        } else {
            mesh.x_labels(0).y_labels(0);
        }
        mesh.draw().map_err(|e| e.to_string())?;
    }
    for (i, line) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts = &line.points;
        let series = chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        if text {
            let name = line.label.clone();
            series
                .label(name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    if text {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(axes.legend.clone())
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fig4_draws_both_plots_and_refuses_a_bad_row() {
        let dir = tempfile::tempdir().expect("dir");
        let csv = "reader,qlen,offered,lost,loss_pct,throughput_mbps\n\
                   naive,10,100,90,90.0,30.5\ndiodon,10,100,80,80.0,40.1\n\
                   naive,1,100,99,99.0,1.2\ndiodon,1,100,98,98.0,2.3\n";
        plot_fig4(csv, dir.path()).expect("plots");
        for name in ["loss.png", "throughput.png"] {
            let png = std::fs::read(dir.path().join(name)).expect(name);
            assert_eq!(&png[1..4], b"PNG", "{name}");
        }
        let err = plot_fig4("h\nnaive,ten,1,1,1,1\n", dir.path()).expect_err("bad row");
        assert!(err.contains("line 2: column 2"), "{err}");
        assert!(plot_fig4("header only\n", dir.path()).is_err());
    }
}
