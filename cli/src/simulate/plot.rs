//! The run's plot (SVG or PNG, by the file's extension): active users against the limit,
//! admissions per minute against `new_users_per_minute`, and visitors waiting, over time.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use velvet_rope_cluster::sim::Sample;

/// DejaVu Sans (see assets/DejaVuSans.LICENSE): plots need no system fonts.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Points drawn per line at most: longer runs are reduced (each point the most of its stretch,
/// so no peak is lost).
const MAX_POINTS: usize = 2000;

/// Draws `series` into `path` (`.svg` or `.png`).
pub fn plot(path: &Path, title: &str, series: &[Sample]) -> Result<(), String> {
    // Registering twice (a second plot in one process) is harmless.
    let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let size = (1200, 960);
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root, title, series)?;
            root.present().map_err(|e| e.to_string())
        }
        Some("png") => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(&root, title, series)?;
            root.present().map_err(|e| e.to_string())
        }
        _ => Err(format!("{}: a plot is .svg or .png", path.display())),
    }
}

/// A panel: its figure's label, its limit's label (empty: none), the figure, the limit.
type Panel = (
    &'static str,
    &'static str,
    fn(&Point) -> u64,
    fn(&Point) -> u64,
);

/// Per point: minute, and the most of each figure over its stretch.
struct Point {
    minute: f64,
    active: u64,
    limit: u64,
    per_minute_limit: u64,
    admitted_last_minute: u64,
    waiting: u64,
}

fn reduce(series: &[Sample]) -> Vec<Point> {
    // Admissions over the last 60 s, second by second.
    let mut window = 0u64;
    let mut per_minute = Vec::with_capacity(series.len());
    for (i, s) in series.iter().enumerate() {
        window += s.admitted;
        if i >= 60 {
            window -= series[i - 60].admitted;
        }
        per_minute.push(window);
    }
    let stretch = series.len().div_ceil(MAX_POINTS).max(1);
    series
        .chunks(stretch)
        .zip(per_minute.chunks(stretch))
        .map(|(c, m)| Point {
            minute: c[c.len() - 1].second as f64 / 60.0,
            active: c.iter().map(|s| s.active).max().unwrap_or(0),
            limit: c.iter().map(|s| s.limit).max().unwrap_or(0),
            per_minute_limit: c.iter().map(|s| s.per_minute).max().unwrap_or(0),
            admitted_last_minute: m.iter().copied().max().unwrap_or(0),
            waiting: c.iter().map(|s| s.waiting).max().unwrap_or(0),
        })
        .collect()
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    series: &[Sample],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(err)?;
    let points = reduce(series);
    let end = points.last().map_or(1.0, |p| p.minute.max(1.0 / 60.0));
    let panels = root.split_evenly((3, 1));
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let grey = RGBColor(90, 90, 90);

    let lines: [Panel; 3] = [
        (
            "active users",
            "total_active_users",
            |p| p.active,
            |p| p.limit,
        ),
        (
            "admissions in the last minute",
            "new_users_per_minute",
            |p| p.admitted_last_minute,
            |p| p.per_minute_limit,
        ),
        ("visitors waiting", "", |p| p.waiting, |_| 0),
    ];
    for (area, (label, limit_label, value, limit)) in panels.iter().zip(lines) {
        let top = points
            .iter()
            .map(|p| value(p).max(limit(p)))
            .max()
            .unwrap_or(0)
            .max(1) as f64
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..end, 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_desc(label)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                AreaSeries::new(
                    points.iter().map(|p| (p.minute, value(p) as f64)),
                    0.0,
                    blue.mix(0.25),
                    // A one-pixel border: wider strokes' joins spike past sharp dips.
                )
                .border_style(blue.stroke_width(1)),
            )
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], blue.filled()));
        if !limit_label.is_empty() {
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|p| (p.minute, limit(p) as f64)),
                    orange.stroke_width(2),
                ))
                .map_err(err)?
                .label(limit_label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], orange.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(grey)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_run_is_reduced_keeping_its_peaks() {
        let series: Vec<Sample> = (1..=10_000)
            .map(|i| Sample {
                second: i,
                active: if i == 5_003 { 999 } else { 10 },
                limit: 100,
                per_minute: 50,
                waiting: 0,
                admitted: 1,
            })
            .collect();
        let points = reduce(&series);
        assert!(points.len() <= MAX_POINTS);
        assert_eq!(points.iter().map(|p| p.active).max(), Some(999));
        // One admission a second: 60 in any full minute.
        assert_eq!(points.last().map(|p| p.admitted_last_minute), Some(60));
    }
}
