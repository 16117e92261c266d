//! The bench's PNG: every sample of each latency scenario on a log axis (a strip plot with the
//! median and p95 marked), and throughput and latency against the number of concurrent threads.
//!
//! Plotters draws text with `ab_glyph` from a TTF file read at run time (`BENCH_FONT`, else DejaVu
//! Sans or Liberation Sans where Debian and others put them), so the build needs no system font
//! libraries. With no font found, [`draw`] fails and the report says so.

use std::path::Path;

use anyhow::{anyhow, Context};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{ms, Scaling, Series};

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
];

/// Draws `series` (one row each) and `scaling` into a PNG at `path`.
pub fn draw(path: &Path, series: &[&Series], scaling: &[Scaling]) -> anyhow::Result<()> {
    register_font()?;
    let root = BitMapBackend::new(path, (1400, 1050)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(620);
    distributions(&top, series)?;
    let (left, right) = bottom.split_horizontally(700);
    throughput(&left, scaling)?;
    scaling_latency(&right, scaling)?;
    root.present()
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn register_font() -> anyhow::Result<()> {
    let configured = std::env::var("BENCH_FONT").ok();
    let path = configured
        .iter()
        .map(String::as_str)
        .chain(FONT_PATHS.iter().copied())
        .find(|p| Path::new(p).is_file())
        .ok_or_else(|| {
            anyhow!("no TTF font found (set BENCH_FONT, or install fonts-dejavu-core)")
        })?;
    let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
    // Plotters keeps fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| anyhow!("{path} is not a usable TTF font"))
}

/// One clearly distinct colour per row (cold, prewarmed, warm, raw CLI, SDK fresh, SDK warm).
const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn distributions(area: &Area<'_>, series: &[&Series]) -> anyhow::Result<()> {
    let all = series.iter().flat_map(|s| s.samples.iter().map(|d| ms(*d)));
    let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // From a power of ten, so the axis's 1-2-5 labels start at the left edge.
    let lo = 10f64.powf((lo / 1.2).max(0.01).log10().floor());
    let hi = (hi * 1.4).max(lo * 10.0);
    let n = series.len() as i32;
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "Turn latency, every sample (log scale; thick bar = median, thin bar = p95)",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(50)
        .y_label_area_size(320)
        .build_cartesian_2d((lo..hi).log_scale(), (0..n - 1).into_segmented())?;
    chart
        .configure_mesh()
        .x_desc("ms")
        .y_label_formatter(&|v| category(&names, v))
        .x_label_formatter(&one_two_five)
        .x_labels(30)
        .x_max_light_lines(1)
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 18))
        .disable_y_mesh()
        .draw()?;
    // Row height in pixels, to spread points and size the markers.
    let row_px = (area.dim_in_pixel().1 as i32 - 110) / n.max(1);
    for (i, s) in series.iter().enumerate() {
        let row = SegmentValue::CenterOf(i as i32);
        let color = COLORS[i % COLORS.len()];
        let count = s.samples.len().max(1) as f64;
        chart.draw_series(s.samples.iter().enumerate().map(|(k, d)| {
            // Spread the points over the row so that equal times stay visible.
            let jitter = (((k as f64 + 0.5) / count - 0.5) * 0.5 * row_px as f64) as i32;
            EmptyElement::at((ms(*d), row.clone()))
                + Circle::new((0, jitter), 4, color.mix(0.6).filled())
        }))?;
        let (median, p95) = (ms(s.median()), ms(s.p95()));
        let half = (row_px * 2) / 5;
        chart.draw_series([
            EmptyElement::at((median, row.clone()))
                + PathElement::new(vec![(0, -half), (0, half)], BLACK.stroke_width(3)),
            EmptyElement::at((p95, row.clone()))
                + PathElement::new(
                    vec![(0, -half * 3 / 4), (0, half * 3 / 4)],
                    BLACK.stroke_width(1),
                ),
        ])?;
        // Right of the median bar, or left of it when the row's times sit at the right edge.
        let right_side = (median / lo).ln() / (hi / lo).ln() < 0.6;
        let (dx, anchor) = if right_side {
            (6, HPos::Left)
        } else {
            (-6, HPos::Right)
        };
        chart.draw_series([EmptyElement::at((median, row.clone()))
            + Text::new(
                format!("median {median:.1} ms, p95 {p95:.1} ms"),
                (dx, -half),
                ("sans-serif", 15)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(anchor, VPos::Top)),
            )])?;
    }
    Ok(())
}

/// Labels the log axis at 1, 2 and 5 times a power of ten only.
fn one_two_five(v: &f64) -> String {
    let leading = *v / 10f64.powf(v.log10().floor());
    if [1.0, 2.0, 5.0].iter().any(|d| (leading - d).abs() < 1e-6) {
        format!("{v}")
    } else {
        String::new()
    }
}

fn category(labels: &[String], v: &SegmentValue<i32>) -> String {
    match v {
        SegmentValue::CenterOf(i) | SegmentValue::Exact(i) => usize::try_from(*i)
            .ok()
            .and_then(|i| labels.get(i))
            .cloned()
            .unwrap_or_default(),
        SegmentValue::Last => String::new(),
    }
}

fn throughput(area: &Area<'_>, scaling: &[Scaling]) -> anyhow::Result<()> {
    let labels: Vec<String> = scaling.iter().map(|s| s.threads.to_string()).collect();
    let top = scaling
        .iter()
        .map(Scaling::turns_per_sec)
        .fold(1.0f64, f64::max)
        * 1.25;
    let mut chart = ChartBuilder::on(area)
        .caption("Throughput: warm turns/s", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d((0..scaling.len() as i32 - 1).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("concurrent threads")
        .y_desc("turns/s")
        .x_label_formatter(&|v| category(&labels, v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 16))
        .disable_x_mesh()
        .y_max_light_lines(1)
        .draw()?;
    let points: Vec<(SegmentValue<i32>, f64)> = scaling
        .iter()
        .enumerate()
        .map(|(i, s)| (SegmentValue::CenterOf(i as i32), s.turns_per_sec()))
        .collect();
    chart.draw_series(LineSeries::new(points.clone(), BLUE.stroke_width(2)))?;
    chart.draw_series(points.iter().map(|(x, y)| {
        EmptyElement::at((x.clone(), *y))
            + Circle::new((0, 0), 5, BLUE.filled())
            + Text::new(format!("{y:.1}"), (8, -22), ("sans-serif", 15))
    }))?;
    Ok(())
}

fn scaling_latency(area: &Area<'_>, scaling: &[Scaling]) -> anyhow::Result<()> {
    let labels: Vec<String> = scaling.iter().map(|s| s.threads.to_string()).collect();
    let top = scaling
        .iter()
        .map(|s| ms(s.latency.p95()))
        .fold(1.0f64, f64::max)
        * 1.25;
    let mut chart = ChartBuilder::on(area)
        .caption("Latency under concurrency", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(75)
        .build_cartesian_2d((0..scaling.len() as i32 - 1).into_segmented(), 0.0..top)?;
    chart
        .configure_mesh()
        .x_desc("concurrent threads")
        .y_desc("ms")
        .x_label_formatter(&|v| category(&labels, v))
        .label_style(("sans-serif", 16))
        .axis_desc_style(("sans-serif", 16))
        .disable_x_mesh()
        .y_max_light_lines(1)
        .draw()?;
    let line = |f: fn(&Series) -> std::time::Duration| -> Vec<(SegmentValue<i32>, f64)> {
        scaling
            .iter()
            .enumerate()
            .map(|(i, s)| (SegmentValue::CenterOf(i as i32), ms(f(&s.latency))))
            .collect()
    };
    for (name, points, color, dy) in [
        ("median", line(Series::median), BLUE, 6),
        ("p95", line(Series::p95), RED, -22),
    ] {
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|(x, y)| {
            EmptyElement::at((x.clone(), *y))
                + Circle::new((0, 0), 5, color.filled())
                + Text::new(format!("{y:.0}"), (8, dy), ("sans-serif", 15))
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn series(name: &str, base_ms: f64) -> Series {
        Series {
            name: name.into(),
            samples: (0..20)
                .map(|k| Duration::from_secs_f64((base_ms + k as f64 * base_ms / 40.0) / 1000.0))
                .collect(),
        }
    }

    #[test]
    fn draws_a_png_with_every_row_and_scaling_level() {
        let rows = [
            series("cold", 600.0),
            series("prewarmed", 150.0),
            series("warm", 40.0),
            series("raw", 35.0),
        ];
        let scaling: Vec<Scaling> = [(1, 25.0), (4, 60.0), (16, 200.0)]
            .into_iter()
            .map(|(threads, latency)| Scaling {
                threads,
                turns: threads * 10,
                wall: Duration::from_secs(1),
                latency: series("level", latency),
                cli_cpu_ms: 40.0,
                bench_cpu_ms: 4.0,
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        match draw(&path, &rows.iter().collect::<Vec<_>>(), &scaling) {
            Ok(()) => {
                let bytes = std::fs::read(&path).unwrap();
                assert_eq!(&bytes[1..4], b"PNG");
                assert!(bytes.len() > 10_000, "{} bytes", bytes.len());
            }
            // A machine without any of the fonts: the bench reports it and goes on.
            Err(err) => assert!(err.to_string().contains("no TTF font"), "{err:#}"),
        }
    }
}
