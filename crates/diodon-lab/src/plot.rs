//! PNG line plots of one metric against bitrate, one line per
//! configuration: the only module that draws (and the only one that links
//! plotters).
//!
//! ```text
//!  report: cells ─► Series { label, (bitrate, value)… } ─► plot(path, lines, metric) ─► PNG
//! ```

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

/// Draws one metric against bitrate, one line per series.
pub fn plot(path: &Path, lines: &[Series], metric: Metric) -> Result<(), String> {
    let text = font();
    let all = || lines.iter().flat_map(|l| l.points.iter());
    let x_max = all().map(|p| p.0).fold(1.0, f64::max) * 1.05;
    let y_max = match metric {
        Metric::Cfr => 105.0,
        Metric::Duration => all().map(|p| p.1).fold(0.1, f64::max) * 1.15,
    };
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut b = ChartBuilder::on(&root);
    b.margin(20);
    if text {
        let title = match metric {
            Metric::Cfr => "Completed File Ratio vs bitrate",
            Metric::Duration => "Average transfer duration vs bitrate",
        };
        b.caption(title, ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(60);
    }
    let mut chart = b
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(|e| e.to_string())?;
    {
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_desc("bitrate (Mbit/s)").y_desc(match metric {
                Metric::Cfr => "CFR (%)",
                Metric::Duration => "duration (s)",
            });
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
            .position(match metric {
                // Failing cells sit low on the right; successful ones at 100 %.
                Metric::Cfr => SeriesLabelPosition::LowerLeft,
                Metric::Duration => SeriesLabelPosition::UpperRight,
            })
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
