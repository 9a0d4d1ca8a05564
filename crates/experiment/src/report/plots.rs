//! The report's plots as SVG text, drawn with plotters. Text is laid out with the
//! bundled DejaVu Sans (assets/DejaVuSans.ttf), so no system font is needed.

use crate::compare::Comparison;
pub use crate::decision::tick;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::sync::Once;

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const WIDTH: u32 = 720;
const HEIGHT: u32 = 360;
/// InfiniBand, RoCEv2, then Ethernet with adaptive routing (the order of
/// `Comparison::candidates`).
const COLORS: [RGBColor; 3] = [
    RGBColor(0x1f, 0x5f, 0xbf),
    RGBColor(0xd9, 0x5f, 0x0e),
    RGBColor(0x2c, 0x8c, 0x3c),
];
const NAMES: [&str; 3] = ["InfiniBand", "RoCEv2", "Ethernet adaptive"];
/// Points drawn per CDF curve.
const CDF_POINTS: usize = 400;

fn font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The font is ours, bundled: registering it cannot fail on a well-formed file.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Draws with `f` into a fresh SVG; a plot that cannot be drawn becomes a note.
fn svg(f: impl FnOnce(DrawingArea<SVGBackend, plotters::coord::Shift>) -> Drawn) -> String {
    font();
    let mut out = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string()).and_then(|()| {
            let r = f(root.clone()).map_err(|e| e.to_string());
            root.present().map_err(|e| e.to_string())?;
            r
        })
    };
    match result {
        Ok(()) => out,
        Err(e) => format!("<p class=\"note\">plot not drawn: {e}</p>"),
    }
}

/// A chart's frame: the title, margins and label areas every plot here shares.
fn frame<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &'b str,
    y_area: u32,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(y_area);
    b
}

/// The series' legend, boxed, at `at`.
fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    at: SeriesLabelPosition,
) -> Drawn {
    chart
        .configure_series_labels()
        .position(at)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    Ok(())
}

/// Upper bound for an axis over `values`, never zero.
fn top(values: impl Iterator<Item = f64>) -> f64 {
    let m = values.filter(|v| v.is_finite()).fold(0.0, f64::max);
    if m > 0.0 {
        m * 1.1
    } else {
        1.0
    }
}

/// A size in bytes as an axis label: B, KiB, MiB or GiB.
fn bytes_tick(b: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{} {}", tick(&v), units[u])
}

/// The right end of an x axis that leaves the legend its own room: data fills the left
/// 70 %, the legend (at the right) the rest, so it never covers a point.
fn legend_room(hi: f64) -> f64 {
    hi / 0.7
}

/// Flow completion times' CDF per fabric, in microseconds (log axis).
pub fn fct_cdf(c: &Comparison) -> String {
    let series: Vec<Vec<f64>> = c
        .candidates()
        .iter()
        .map(|(_, r)| r.outcome.sorted_fcts_us())
        .collect();
    let lo = series
        .iter()
        .flatten()
        .copied()
        .fold(f64::MAX, f64::min)
        .max(1e-3);
    let hi = top(series.iter().flatten().copied()).max(lo * 10.0);
    svg(|root| {
        let mut chart = frame(&root, "Flow completion time, CDF", 50)
            .build_cartesian_2d((lo * 0.9..hi).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc("FCT (us)")
            .y_desc("fraction of flows")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        for (i, v) in series.iter().enumerate() {
            // At most CDF_POINTS points: the curve, not a million vertices.
            let n = v.len();
            let step = n.div_ceil(CDF_POINTS).max(1);
            let points = (step - 1..n)
                .step_by(step)
                .chain(n.checked_sub(1).filter(|last| last % step != step - 1))
                .map(|k| (v[k], (k + 1) as f64 / n as f64));
            chart
                .draw_series(LineSeries::new(points, COLORS[i].stroke_width(2)))?
                .label(NAMES[i])
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], COLORS[i]));
        }
        // A CDF is near 1 at the right: the lower right corner is empty.
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// Mean slowdown (FCT / ideal FCT) by flow size, in powers-of-two size bins.
pub fn slowdown_by_size(c: &Comparison) -> String {
    let series: Vec<Vec<(f64, f64)>> = c
        .runs
        .iter()
        .map(|r| {
            let mut bins: std::collections::BTreeMap<u32, (f64, u32)> = Default::default();
            for f in &r.outcome.report.flows {
                if let (Some(t), true) = (f.finish, f.ideal.ps() > 0) {
                    let b = 64 - f.bytes.max(1).leading_zeros();
                    let e = bins.entry(b).or_default();
                    e.0 += (t - f.start).ps() as f64 / f.ideal.ps() as f64;
                    e.1 += 1;
                }
            }
            bins.into_iter()
                .map(|(b, (sum, n))| (2f64.powi(b as i32 - 1).max(1.0), sum / n as f64))
                .collect()
        })
        .collect();
    // x is log2 of the bin's first size: one tick per power of two, labelled in bytes.
    let series: Vec<Vec<(f64, f64)>> = series
        .into_iter()
        .map(|v| v.into_iter().map(|(b, y)| (b.log2(), y)).collect())
        .collect();
    let xs = || series.iter().flatten().map(|p| p.0);
    let lo = xs().fold(f64::MAX, f64::min).max(0.0);
    let hi = xs().fold(0.0, f64::max).max(lo + 1.0);
    let y_hi = top(series.iter().flatten().map(|p| p.1)).max(1.5);
    let whole = |x: &f64| x.fract().abs() < 1e-9;
    svg(|root| {
        let mut chart = frame(&root, "Mean slowdown by flow size", 50)
            .build_cartesian_2d(lo - 0.5..legend_room(hi + 0.5 - lo) + lo, 0.0..y_hi)?;
        chart
            .configure_mesh()
            .x_desc("flow size (bin start)")
            .y_desc("FCT / ideal FCT")
            .x_labels(((hi + 1.0 - lo) / 0.7) as usize + 3)
            .x_label_formatter(&|x| {
                if whole(x) && *x >= lo && *x <= hi {
                    bytes_tick(2f64.powf(*x))
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&tick)
            .draw()?;
        for (i, s) in series.iter().enumerate() {
            chart
                .draw_series(LineSeries::new(
                    s.iter().copied(),
                    COLORS[i].stroke_width(2),
                ))?
                .label(NAMES[i])
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], COLORS[i]));
            chart.draw_series(s.iter().map(|&p| Circle::new(p, 4, COLORS[i].filled())))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}

/// Stacked horizontal bars, one per fabric: `parts` are (name, [ib, roce], color).
/// Horizontal stacked bars, one per candidate (`parts`: each part's name, its value per
/// candidate, its colour).
fn stacked(title: &str, unit: &str, parts: &[(String, Vec<f64>, RGBColor)]) -> String {
    let bars = parts.first().map_or(0, |p| p.1.len());
    let total = |i: usize| parts.iter().map(|p| p.1[i].max(0.0)).sum::<f64>();
    let x_hi = legend_room(top((0..bars).map(total)));
    svg(|root| {
        let mut chart = frame(&root, title, 110)
            .build_cartesian_2d(0.0..x_hi, (0..bars as i32 - 1).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc(unit)
            .x_label_formatter(&tick)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => {
                    NAMES.get(*i as usize).copied().unwrap_or("").to_string()
                }
                _ => String::new(),
            })
            .draw()?;
        for fabric in 0..bars as i32 {
            let mut x = 0.0;
            for (name, v, color) in parts {
                let w = v[fabric as usize].max(0.0);
                let (a, b) = (x, x + w);
                x = b;
                let s = chart.draw_series(std::iter::once(Rectangle::new(
                    [
                        (a, SegmentValue::Exact(fabric)),
                        (b, SegmentValue::Exact(fabric + 1)),
                    ],
                    color.filled(),
                )))?;
                if fabric == 0 {
                    let c = *color;
                    s.label(name.as_str()).legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled())
                    });
                }
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

const PALETTE: [RGBColor; 7] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
];

/// The network's lifetime cost by part: equipment groups, then energy and support.
pub fn cost_breakdown(c: &Comparison) -> String {
    let groups = ["switches", "nics", "optics", "cables", "software"];
    let runs = c.candidates();
    let mut parts: Vec<(String, Vec<f64>, RGBColor)> = groups
        .iter()
        .enumerate()
        .map(|(k, g)| {
            let v: Vec<f64> = runs
                .iter()
                .map(|(_, r)| {
                    r.cost
                        .bom
                        .iter()
                        .filter(|l| l.group == *g)
                        .map(|l| l.usd())
                        .sum::<f64>()
                        / 1e6
                })
                .collect();
            (g.to_string(), v, PALETTE[k])
        })
        .filter(|p| p.1.iter().any(|&v| v > 0.0))
        .collect();
    let opex = runs
        .iter()
        .map(|(_, r)| (r.cost.lifetime_usd - r.cost.capex_usd) / 1e6)
        .collect();
    parts.push(("energy and support, lifetime".into(), opex, PALETTE[5]));
    stacked("Network cost over its lifetime", "million USD", &parts)
}

/// The job's cost: GPU hours and network hours.
pub fn job_cost(c: &Comparison) -> Option<String> {
    let parts: Option<Vec<(f64, f64)>> = c
        .candidates()
        .iter()
        .map(|(_, r)| {
            let k = &r.cost;
            k.job_hours.map(|h| {
                (
                    h * k.gpus as f64 * k.gpu_usd_per_hour,
                    h * k.network_usd_per_hour,
                )
            })
        })
        .collect();
    let parts = parts?;
    Some(stacked(
        "Cost of the job",
        "USD",
        &[
            (
                "GPU hours".into(),
                parts.iter().map(|p| p.0).collect(),
                PALETTE[0],
            ),
            (
                "network hours".into(),
                parts.iter().map(|p| p.1).collect(),
                PALETTE[1],
            ),
        ],
    ))
}

/// The first training job's iteration: compute and exposed communication.
pub fn iteration_split(c: &Comparison) -> Option<String> {
    let t: Option<Vec<_>> = c
        .candidates()
        .iter()
        .map(|(_, r)| r.summary.training.first().cloned())
        .collect();
    let t = t?;
    let exposed =
        |x: &crate::results::TrainingResult| x.exposed_communication_ns.unwrap_or(f64::NAN) / 1e6;
    Some(stacked(
        "Training iteration: compute and exposed communication",
        "ms",
        &[
            (
                "compute".into(),
                t.iter().map(|x| x.compute_ns / 1e6).collect(),
                PALETTE[4],
            ),
            (
                "exposed communication".into(),
                t.iter().map(exposed).collect(),
                PALETTE[2],
            ),
        ],
    ))
}

/// Grouped bars: one group per label, one bar per fabric.
fn grouped(title: &str, unit: &str, labels: &[String], values: &[[f64; 2]]) -> String {
    let y_hi = top(values.iter().flatten().copied());
    let n = labels.len().max(1) as i32;
    svg(|root| {
        let mut chart = frame(&root, title, 60)
            // A segmented 0..m range has m + 1 segments: one per group, and a last,
            // empty one that holds the legend.
            .build_cartesian_2d((0..n).into_segmented(), 0.0..y_hi)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(unit)
            .y_label_formatter(&tick)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        for fabric in 0..2 {
            let s = chart.draw_series(values.iter().enumerate().map(|(k, v)| {
                let x = k as i32;
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(x), 0.0),
                        (SegmentValue::Exact(x + 1), v[fabric].max(0.0)),
                    ],
                    COLORS[fabric].filled(),
                );
                // Two bars side by side in each group of about `group` pixels.
                let group = (WIDTH - 80) / (n as u32 + 1);
                let (narrow, wide) = (group / 10, group / 2);
                if fabric == 0 {
                    bar.set_margin(0, 0, narrow, wide);
                } else {
                    bar.set_margin(0, 0, wide, narrow);
                }
                bar
            }))?;
            s.label(NAMES[fabric]).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], COLORS[fabric].filled())
            });
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
}

/// Each collective's bus bandwidth per fabric.
pub fn collective_busbw(c: &Comparison) -> Option<String> {
    let [a, b] = c.summaries();
    if a.collectives.is_empty() {
        return None;
    }
    let labels: Vec<String> = a
        .collectives
        .iter()
        .enumerate()
        .map(|(i, x)| format!("#{i} {} {}", x.op, x.algorithm))
        .collect();
    let values: Vec<[f64; 2]> = a
        .collectives
        .iter()
        .zip(&b.collectives)
        .map(|(x, y)| [x.busbw_gbps.unwrap_or(0.0), y.busbw_gbps.unwrap_or(0.0)])
        .collect();
    Some(grouped(
        "Collective bus bandwidth",
        "busbw (GB/s)",
        &labels,
        &values,
    ))
}

/// The ten busiest ports (by peak queue, in either fabric): peak queue; `None` at flow
/// level, which models no queue.
pub fn ports(c: &Comparison) -> Option<String> {
    if c.runs.iter().any(|r| r.summary.level == "flow") {
        return None;
    }
    let per = |i: usize| &c.runs[i].outcome.report.ports;
    let mut keyed: Vec<(u64, usize)> = (0..per(0).len().min(per(1).len()))
        .map(|k| {
            (
                per(0)[k].peak_queue_bytes.max(per(1)[k].peak_queue_bytes),
                k,
            )
        })
        .collect();
    keyed.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    keyed.truncate(10);
    let labels: Vec<String> = keyed
        .iter()
        .map(|&(_, k)| format!("{}:{}", per(0)[k].node, per(0)[k].port))
        .collect();
    let q: Vec<[f64; 2]> = keyed
        .iter()
        .map(|&(_, k)| [0, 1].map(|i| per(i)[k].peak_queue_bytes as f64 / 1024.0))
        .collect();
    Some(grouped(
        "Peak egress queue, ten busiest ports (node:port)",
        "KiB",
        &labels,
        &q,
    ))
}

/// PFC paused time of the ten most paused RoCEv2 ports, or `None` if nothing paused.
pub fn paused(c: &Comparison) -> Option<String> {
    let ports = &c.runs[1].outcome.report.ports;
    let mut keyed: Vec<(u64, usize)> = ports
        .iter()
        .enumerate()
        .filter(|(_, p)| p.paused.ps() > 0)
        .map(|(k, p)| (p.paused.ps(), k))
        .collect();
    if keyed.is_empty() {
        return None;
    }
    keyed.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
    keyed.truncate(10);
    let labels: Vec<String> = keyed
        .iter()
        .map(|&(_, k)| format!("{}:{}", ports[k].node, ports[k].port))
        .collect();
    let values: Vec<[f64; 2]> = keyed
        .iter()
        .map(|&(ps, _)| [0.0, ps as f64 / 1e6])
        .collect();
    Some(grouped(
        "RoCEv2: PFC paused time, ten most paused ports",
        "us paused",
        &labels,
        &values,
    ))
}

/// DCQCN pacing rates over time for the (up to) four flows cut most often.
pub fn dcqcn_rates(c: &Comparison) -> Option<String> {
    let rates = &c.runs[1].outcome.rates;
    let mut cuts: std::collections::BTreeMap<u32, u32> = Default::default();
    for r in rates.iter().filter(|r| r.sent.is_none()) {
        *cuts.entry(r.flow).or_default() += 1;
    }
    if cuts.is_empty() {
        return None;
    }
    let mut by: Vec<(u32, u32)> = cuts.into_iter().collect();
    by.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
    let flows: Vec<u32> = by.iter().take(4).map(|x| x.0).collect();
    let series: Vec<Vec<(f64, f64)>> = flows
        .iter()
        .map(|&f| {
            rates
                .iter()
                .filter(|r| r.flow == f)
                .map(|r| (r.time.ps() as f64 / 1e6, r.rate.bps() as f64 / 1e9))
                .collect()
        })
        .collect();
    let x_hi = legend_room(top(series.iter().flatten().map(|p| p.0)));
    let y_hi = top(series.iter().flatten().map(|p| p.1));
    Some(svg(|root| {
        let mut chart = frame(&root, "RoCEv2: DCQCN rate of the most-cut flows", 50)
            .build_cartesian_2d(0.0..x_hi, 0.0..y_hi)?;
        chart
            .configure_mesh()
            .x_desc("time (us)")
            .y_desc("rate (Gb/s)")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        for (k, s) in series.iter().enumerate() {
            let color = PALETTE[k];
            chart
                .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))?
                .label(format!("flow {}", flows[k]))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    }))
}

/// Lines of (x, y) points, one per named series; a log x axis if `log_x`; with `labels`,
/// x is an index into them (names rather than numbers).
pub fn line_plot(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
    log_x: bool,
    labels: Option<&[String]>,
) -> String {
    let xs = || series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let (lo, hi) = xs().fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (lo, hi) = if lo > hi { (0.0, 1.0) } else { (lo, hi) };
    let y_hi = top(series.iter().flat_map(|s| s.1.iter().map(|p| p.1)));
    let color = |k: usize| PALETTE[k % PALETTE.len()];
    let label_of = |x: &f64| -> String {
        match labels {
            Some(l) if x.fract() == 0.0 && *x >= 0.0 => {
                l.get(*x as usize).cloned().unwrap_or_default()
            }
            Some(_) => String::new(),
            None => tick(x),
        }
    };
    svg(|root| {
        let mut chart = frame(&root, title, 60);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_labels(if log_x { 6 } else { 10 })
                    .x_label_formatter(&label_of)
                    .y_label_formatter(&tick)
                    .draw()?;
                for (k, (name, points)) in series.iter().enumerate() {
                    let c = color(k);
                    chart
                        .draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
                }
                legend(&mut chart, SeriesLabelPosition::UpperRight)?;
            }};
        }
        // The right end leaves the legend its own room (a log axis: in decades).
        if log_x {
            let (a, b) = (lo * 0.8, hi * 1.25);
            let right = a * (b / a).powf(1.0 / 0.7);
            draw!(chart.build_cartesian_2d((a..right).log_scale(), 0.0..y_hi)?);
        } else {
            let pad = ((hi - lo) * 0.05).max(0.5);
            draw!(chart.build_cartesian_2d(lo - pad..legend_room(hi + pad - lo) + lo, 0.0..y_hi)?);
        }
        Ok(())
    })
}

/// Simulated against measured (log-log), the identity line and its ±5 % band; one point
/// per named case.
pub fn identity_plot(title: &str, points: &[(String, f64, f64)]) -> String {
    let all = || points.iter().flat_map(|p| [p.1, p.2]).filter(|v| *v > 0.0);
    let lo = all().fold(f64::MAX, f64::min).min(1.0) * 0.7;
    let hi = all().fold(0.0, f64::max).max(lo * 10.0) * 1.4;
    svg(|root| {
        let mut chart = frame(&root, title, 60)
            .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("measured")
            .y_desc("simulated")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .draw()?;
        let line = |k: f64| {
            (0..=40).map(move |i| {
                let x = lo * (hi / lo).powf(i as f64 / 40.0);
                (x, x * k)
            })
        };
        chart
            .draw_series(LineSeries::new(line(1.0), BLACK.stroke_width(1)))?
            .label("simulated = measured")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        for k in [0.95, 1.05] {
            chart.draw_series(LineSeries::new(line(k), RGBColor(0xaa, 0xaa, 0xaa)))?;
        }
        for (i, (_, m, s)) in points.iter().enumerate() {
            let c = PALETTE[i % PALETTE.len()];
            chart.draw_series(std::iter::once(Circle::new((*m, *s), 5, c.filled())))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
}

/// Drivers drawn in the tornado chart, the widest first.
const TORNADO_ROWS: usize = 8;

/// The tornado chart: for each input that moves the answer, RoCEv2's job cost over
/// InfiniBand's with the input at its low end and at its high end (the others at base),
/// about the base; left of 1 RoCEv2 is cheaper. None without drivers.
pub fn tornado(c: &Comparison) -> Option<String> {
    let v = &c.recommendation.across_ranges;
    let rows: Vec<_> = v.drivers.iter().take(TORNADO_ROWS).collect();
    if rows.is_empty() {
        return None;
    }
    let base = c.runs[1].cost.job_cost_usd? / c.runs[0].cost.job_cost_usd?;
    let ends = rows
        .iter()
        .flat_map(|d| [d.ratio_at_low, d.ratio_at_high])
        .chain([base, 1.0]);
    let (lo, hi) = ends.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let pad = ((hi - lo) * 0.08).max(1e-3);
    let (lo, hi) = (lo - pad, hi + pad);
    let n = rows.len() as i32;
    let labels: Vec<String> = rows.iter().map(|d| d.input.clone()).collect();
    Some(svg(|root| {
        // Two empty rows below the inputs hold the legend, clear of every bar.
        let mut chart = frame(
            &root,
            "What moves the answer: RoCEv2's job cost over InfiniBand's",
            250,
        )
        .build_cartesian_2d(lo..hi, (-2..n - 1).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("RoCEv2 / InfiniBand job cost (below 1: RoCEv2 cheaper)")
            .x_label_formatter(&tick)
            .y_label_formatter(&|y| match y {
                // Row 0 (the widest swing) at the top.
                SegmentValue::CenterOf(i) if *i >= 0 => labels
                    .get((n - 1 - *i) as usize)
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .draw()?;
        let ends = [
            ("input at its low end", PALETTE[0], true),
            ("input at its high end", PALETTE[1], false),
        ];
        for (name, color, low) in ends {
            let s = chart.draw_series(rows.iter().enumerate().map(|(k, d)| {
                let y = n - 1 - k as i32;
                let end = if low { d.ratio_at_low } else { d.ratio_at_high };
                let mut bar = Rectangle::new(
                    [
                        (base.min(end), SegmentValue::Exact(y)),
                        (base.max(end), SegmentValue::Exact(y + 1)),
                    ],
                    color.filled(),
                );
                bar.set_margin(4, 4, 0, 0);
                bar
            }))?;
            s.label(name).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
            });
        }
        let line = |x: f64, style: ShapeStyle| {
            LineSeries::new(
                [(x, SegmentValue::Exact(-2)), (x, SegmentValue::Exact(n))],
                style,
            )
        };
        chart
            .draw_series(line(1.0, BLACK.stroke_width(2)))?
            .label("both cost the same")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
        chart.draw_series(line(base, RGBColor(0x77, 0x77, 0x77).stroke_width(1)))?;
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    }))
}
