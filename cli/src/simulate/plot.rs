//! The run's plot (SVG or PNG, by the file's extension): active users against the limit,
//! admissions per minute against `new_users_per_minute`, and visitors waiting, over time.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use velvet_rope_cluster::sim::{LeaseMeasured, LeaseSample, Sample};

/// DejaVu Sans (see assets/DejaVuSans.LICENSE): plots need no system fonts.
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Points drawn per line at most: longer runs are reduced (each point the most of its stretch,
/// so no peak is lost).
const MAX_POINTS: usize = 2000;

/// A figure that draws itself on any backend.
trait Figure {
    /// Its size in pixels.
    const SIZE: (u32, u32);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static;
}

/// Draws `figure` into `path`: SVG or PNG by the file's extension.
fn render<F: Figure>(path: &Path, figure: &F) -> Result<(), String> {
    // Registering twice (a second plot in one process) is harmless.
    let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("svg") => {
            let root = SVGBackend::new(path, F::SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| e.to_string())
        }
        Some("png") => {
            let root = BitMapBackend::new(path, F::SIZE).into_drawing_area();
            figure.draw(&root)?;
            root.present().map_err(|e| e.to_string())
        }
        _ => Err(format!("{}: a plot is .svg or .png", path.display())),
    }
}

/// A room's run: its three panels.
struct Room<'a> {
    title: &'a str,
    series: &'a [Sample],
}

impl Figure for Room<'_> {
    const SIZE: (u32, u32) = (1200, 960);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        draw(root, self.title, self.series)
    }
}

/// A lease run: the clients together, and the first ones each.
struct Leases<'a> {
    title: &'a str,
    measured: &'a LeaseMeasured,
}

impl Figure for Leases<'_> {
    const SIZE: (u32, u32) = (1200, 800);

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>
    where
        DB::ErrorType: 'static,
    {
        draw_leases(root, self.title, self.measured)
    }
}

/// Draws `series` into `path` (`.svg` or `.png`).
pub fn plot(path: &Path, title: &str, series: &[Sample]) -> Result<(), String> {
    render(path, &Room { title, series })
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
    admitted_in_minute: u64,
    waiting: u64,
}

fn reduce(series: &[Sample]) -> Vec<Point> {
    // Admissions of each second's minute (the minutes `new_users_per_minute` counts: sample
    // `s` covers the second before `s`).
    let minute_of = |s: &Sample| s.second.saturating_sub(1) / 60;
    let mut totals: Vec<u64> = Vec::new();
    for s in series {
        let m = minute_of(s) as usize;
        if totals.len() <= m {
            totals.resize(m + 1, 0);
        }
        totals[m] += s.admitted;
    }
    let per_minute: Vec<u64> = series
        .iter()
        .map(|s| totals[minute_of(s) as usize])
        .collect();
    let stretch = series.len().div_ceil(MAX_POINTS).max(1);
    // The lines start at 0 (the crowd's start) from nothing.
    let start = series.first().map(|s| Point {
        minute: 0.0,
        active: 0,
        limit: s.limit,
        per_minute_limit: s.per_minute,
        admitted_in_minute: 0,
        waiting: 0,
    });
    start
        .into_iter()
        .chain(
            series
                .chunks(stretch)
                .zip(per_minute.chunks(stretch))
                .map(|(c, m)| Point {
                    minute: c[c.len() - 1].second as f64 / 60.0,
                    active: c.iter().map(|s| s.active).max().unwrap_or(0),
                    limit: c.iter().map(|s| s.limit).max().unwrap_or(0),
                    per_minute_limit: c.iter().map(|s| s.per_minute).max().unwrap_or(0),
                    admitted_in_minute: m.iter().copied().max().unwrap_or(0),
                    waiting: c.iter().map(|s| s.waiting).max().unwrap_or(0),
                }),
        )
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
            "admissions per minute",
            "new_users_per_minute",
            |p| p.admitted_in_minute,
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
            .x_label_formatter(&|x| tick(*x, end))
            .y_label_formatter(&|y| tick(*y, top))
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

/// Draws a lease run into `path` (`.svg` or `.png`): what the clients wanted and held together
/// against the capacity, and the first clients' grants (lines) and wants (dashes).
pub fn plot_leases(path: &Path, title: &str, m: &LeaseMeasured) -> Result<(), String> {
    render(path, &Leases { title, measured: m })
}

fn draw_leases<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    m: &LeaseMeasured,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(err)?;
    let stretch = m.series.len().div_ceil(MAX_POINTS).max(1);
    let points: Vec<&LeaseSample> = m.series.iter().step_by(stretch).collect();
    let end = points
        .last()
        .map_or(1.0, |p| (p.second as f64 / 60.0).max(1.0 / 60.0));
    let panels = root.split_evenly((2, 1));
    let blue = RGBColor(31, 119, 180);
    let orange = RGBColor(255, 127, 14);
    let grey = RGBColor(90, 90, 90);
    let minute = |p: &LeaseSample| p.second as f64 / 60.0;

    // Together, against the capacity.
    let top = points
        .iter()
        .map(|p| p.wanted.max(p.granted))
        .fold(m.capacity, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&panels[0])
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .y_desc("all clients")
        .x_label_formatter(&|x| tick(*x, end))
        .y_label_formatter(&|y| tick(*y, top))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (minute(p), p.granted)),
            blue.stroke_width(1),
        ))
        .map_err(err)?
        .label("granted")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], blue.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            points.iter().map(|p| (minute(p), p.wanted)),
            grey.stroke_width(1),
        ))
        .map_err(err)?
        .label("wanted")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(2)));
    chart
        .draw_series(LineSeries::new(
            [(0.0, m.capacity), (end, m.capacity)],
            orange.stroke_width(2),
        ))
        .map_err(err)?
        .label("capacity")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], orange.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(grey)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)?;

    // Per client (the first ten): granted, and wanted dotted.
    let shown = points.first().map_or(0, |p| p.clients.len());
    let top = points
        .iter()
        .flat_map(|p| p.clients.iter().map(|c| c.0.max(c.1)))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&panels[1])
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .y_desc(format!("per client (first {shown})"))
        .x_label_formatter(&|x| tick(*x, end))
        .y_label_formatter(&|y| tick(*y, top))
        .draw()
        .map_err(err)?;
    for i in 0..shown {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (minute(p), p.clients[i].1)),
                color.stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .draw_series(
                points
                    .iter()
                    .step_by(4)
                    .map(|p| Circle::new((minute(p), p.clients[i].0), 1, color.filled())),
            )
            .map_err(err)?;
    }
    Ok(())
}

/// A tick label: whole numbers on an axis up to `span` of 10 or more, tenths below.
fn tick(value: f64, span: f64) -> String {
    if span >= 10.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
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
        assert!(points.len() <= MAX_POINTS + 1);
        assert_eq!(points.iter().map(|p| p.active).max(), Some(999));
        assert_eq!(points[0].minute, 0.0);
        // One admission a second: 60 in every full minute; 40 in the last (10,000 s is 166
        // minutes and 40 s).
        assert_eq!(points[1].admitted_in_minute, 60);
        assert_eq!(points.last().map(|p| p.admitted_in_minute), Some(40));
    }

    #[test]
    fn admissions_are_counted_per_calendar_minute() {
        // 100 in the last second of minute 0 and 100 in the first of minute 1: a sliding
        // window would show 200 in a minute; the limit counts minutes.
        let series: Vec<Sample> = (1..=120)
            .map(|i| Sample {
                second: i,
                admitted: if i == 60 || i == 61 { 100 } else { 0 },
                ..Sample::default()
            })
            .collect();
        let points = reduce(&series);
        assert_eq!(points.iter().map(|p| p.admitted_in_minute).max(), Some(100));
    }

    #[test]
    fn short_axes_keep_their_tenths() {
        assert_eq!(tick(2.5, 4.0), "2.5");
        assert_eq!(tick(2.5, 40.0), "2");
    }
}
