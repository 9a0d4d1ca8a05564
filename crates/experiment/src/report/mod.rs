//! `fabricsim compare --report DIR`: report.html (one self-contained file, plots as inline
//! SVG, the recommendation first), summary.md and summary.json (the `--json` object),
//! written as one folder atomically.

mod inputs;
mod plots;

pub use plots::{identity_plot, line_plot};

use crate::compare::{self, Comparison};
use crate::output;
use std::fmt::Write as _;
use std::path::Path;

const FILES: [&str; 3] = ["report.html", "summary.md", "summary.json"];

/// Writes the report folder `dir`, replacing an earlier report there.
pub fn write(dir: &Path, c: &Comparison) -> std::io::Result<()> {
    let files = vec![
        ("report.html", html(c).into_bytes()),
        ("summary.md", markdown(c).into_bytes()),
        ("summary.json", c.to_json().into_bytes()),
    ];
    output::write_folder(dir, &files, &FILES)
}

/// Text safe inside HTML.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fabric_title(name: &str) -> &'static str {
    match name {
        "rocev2" => "RoCEv2",
        "rocev2-tuned" => "RoCEv2 tuned",
        "rocev2-adaptive" => "Ethernet adaptive",
        _ => "InfiniBand",
    }
}

/// The headline: the verdict across the ranges, and the base values' saving per job.
fn headline(c: &Comparison) -> String {
    let r = &c.recommendation;
    let v = &r.across_ranges;
    let share = |f: &str| v.share.get(f).copied().unwrap_or(0.0) * 100.0;
    if v.verdict == "too-close" {
        return format!(
            "Too close to call: InfiniBand is cheaper per job in {:.0} % of the ranges, RoCEv2 in {:.0} %",
            share("infiniband"),
            share("rocev2")
        );
    }
    let within = if v.samples > 0 {
        format!("cheaper in {:.0} % of the ranges; ", share(v.verdict))
    } else {
        String::new()
    };
    match r.saving.filter(|_| r.fabric == v.verdict) {
        Some(s) => format!(
            "Recommendation: {} ({within}{:.2} % lower cost per job at the base values)",
            fabric_title(v.verdict),
            s * 100.0
        ),
        None => format!(
            "Recommendation: {}{}",
            fabric_title(v.verdict),
            if within.is_empty() {
                String::new()
            } else {
                format!(" ({})", within.trim_end_matches("; "))
            }
        ),
    }
}

/// A table cell: thousands separated from 1,000 up, else at most three decimals.
fn cell(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else {
        plots::tick(&v)
    }
}

/// The drivers as rows: input, confidence, low / base / high, the ratio at each end and
/// the break-even.
fn driver_rows(c: &Comparison) -> Vec<[String; 6]> {
    use crate::decision::value;
    c.recommendation
        .across_ranges
        .drivers
        .iter()
        .map(|d| {
            [
                d.input.clone(),
                d.confidence.name().to_string(),
                range_text(d.low, d.base, d.high, d.unit),
                format!("{:.3}", d.ratio_at_low),
                format!("{:.3}", d.ratio_at_high),
                d.breakeven.map_or("none".into(), |b| {
                    let inside = (d.low..=d.high).contains(&b);
                    format!(
                        "{}{}",
                        value(b, d.unit),
                        if inside { " (in range)" } else { "" }
                    )
                }),
            ]
        })
        .collect()
}

/// low / base / high in the input's unit, the unit said once.
fn range_text(low: f64, base: f64, high: f64, unit: &str) -> String {
    use crate::decision::value;
    match unit {
        "USD" | "USD/kWh" => format!(
            "{} / {} / {}",
            value(low, unit),
            value(base, unit),
            value(high, unit)
        ),
        _ => {
            let plain = |x: f64| value(x, "");
            let t = if unit == "ns" {
                format!("{low:.0} / {base:.0} / {high:.0}")
            } else if unit == "years" {
                format!("{low:.1} / {base:.1} / {high:.1}")
            } else {
                format!("{} / {} / {}", plain(low), plain(base), plain(high))
            };
            format!("{t} {unit}").trim_end().to_string()
        }
    }
}

const DRIVER_HEADER: [&str; 6] = [
    "input",
    "confidence",
    "low / base / high",
    "RoCEv2 / IB cost at low",
    "at high",
    "break-even",
];

const STYLE: &str = "body{font-family:'DejaVu Sans',sans-serif;margin:24px auto;max-width:1000px;color:#222}\
h1{font-size:22px}#recommendation{border:3px solid #2a7a2a;background:#eef8ee;padding:12px 18px;border-radius:6px}\
#recommendation h2{margin:4px 0 8px;font-size:24px}table{border-collapse:collapse;margin:8px 0}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}\
figure.plot{margin:18px 0}figure.plot figcaption{font-size:13px;color:#555}.note{color:#777}";

/// The self-contained HTML report.
pub fn html(c: &Comparison) -> String {
    let r = &c.recommendation;
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fabricsim: {}</title><style>{STYLE}</style></head><body>\n",
        esc(&c.runs[0].summary.scenario)
    );
    let _ = write!(
        h,
        "<h1>fabricsim: InfiniBand or RoCEv2 for {}</h1>\n<section id=\"recommendation\" data-fabric=\"{}\" data-verdict=\"{}\"><h2>{}</h2><ul>",
        esc(&c.runs[0].summary.scenario),
        r.fabric,
        r.across_ranges.verdict,
        esc(&headline(c))
    );
    for line in &r.reasons {
        let _ = write!(h, "<li>{}</li>", esc(line));
    }
    h.push_str("</ul><p><b>Where the answer would flip</b></p><ul>");
    for line in &r.flip {
        let _ = write!(h, "<li>{}</li>", esc(line));
    }
    h.push_str("</ul></section>\n");
    let rows = driver_rows(c);
    if !rows.is_empty() {
        let v = &r.across_ranges;
        let _ = write!(
            h,
            "<h2>Across the ranges</h2><p>Each input below is drawn uniformly from its range ({} samples, seeded by the scenario); a fabric is named when it is cheaper per job in at least {:.0} % of them. The table gives each input's swing with the others at base, the widest first.</p><table id=\"drivers\"><tr>",
            crate::decision::thousands(v.samples as f64),
            v.threshold * 100.0
        );
        for th in DRIVER_HEADER {
            let _ = write!(h, "<th>{th}</th>");
        }
        h.push_str("</tr>");
        for row in rows {
            h.push_str("<tr>");
            for cell in row {
                let _ = write!(h, "<td>{}</td>", esc(&cell));
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>\n");
    }
    h.push_str("<h2>What this answers</h2><table id=\"inputs\">");
    for (what, value) in inputs::rows(c) {
        let _ = write!(
            h,
            "<tr><th>{}</th><td style=\"text-align:left\">{}</td></tr>",
            esc(&what),
            esc(&value)
        );
    }
    let names: Vec<&str> = c.candidates().iter().map(|(n, _)| *n).collect();
    h.push_str("</table>\n<h2>Side by side</h2><table id=\"side-by-side\"><tr><th></th>");
    for n in &names {
        let _ = write!(h, "<th data-candidate=\"{n}\">{}</th>", fabric_title(n));
    }
    for n in &names[1..] {
        let _ = write!(h, "<th>{} / IB</th>", fabric_title(n));
    }
    h.push_str("</tr>");
    for row in compare::rows(c) {
        let _ = write!(h, "<tr><td>{}</td>", esc(&row.name));
        for v in &row.values {
            let _ = write!(h, "<td>{}</td>", cell(*v));
        }
        for k in 1..names.len() {
            let q = compare::ratio(&row, k).map_or(String::new(), |q| format!("{q:.3}"));
            let _ = write!(h, "<td>{q}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>\n<h2>Plots</h2>\n");
    // Each plot, or a line saying why it has nothing to show.
    let flow = c.runs.iter().any(|r| r.summary.level == "flow");
    let plots = [
        (
            "tornado",
            plots::tornado(c),
            "Each input at its low and high end, the others at base: the bars that cross the black line can flip the answer (grey: the base values).",
            "no input has a range (every figure is the scenario's own), or a job did not finish",
        ),
        (
            "job-cost",
            plots::job_cost(c),
            "The job's cost: its GPUs' hours and its network's hours.",
            "a fabric's job did not finish",
        ),
        (
            "iteration",
            plots::iteration_split(c),
            "Training iteration time: compute, and communication not hidden behind it.",
            "the scenario has no training job",
        ),
        (
            "busbw",
            plots::collective_busbw(c),
            "Collective bus bandwidth, as nccl-tests reports it.",
            "the scenario has no collective",
        ),
        (
            "fct-cdf",
            Some(plots::fct_cdf(c)),
            "Flow completion times (every message of the run).",
            "",
        ),
        (
            "slowdown",
            Some(plots::slowdown_by_size(c)),
            "Mean slowdown (FCT over the ideal on an empty network) by flow size.",
            "",
        ),
        (
            "queues",
            plots::ports(c),
            "Peak egress queue of the ten busiest ports.",
            "flow level models no queue (run at packet level to see them)",
        ),
        (
            "paused",
            plots::paused(c),
            "Time RoCEv2 ports were held by PFC pauses.",
            if flow {
                "flow level models no PFC pause (run at packet level to see them)"
            } else {
                "no RoCEv2 port was paused"
            },
        ),
        (
            "dcqcn",
            plots::dcqcn_rates(c),
            "DCQCN pacing rate of the flows cut most often.",
            if flow {
                "flow level models no DCQCN rate cut (run at packet level to see them)"
            } else {
                "DCQCN cut no flow's rate"
            },
        ),
        (
            "cost",
            Some(plots::cost_breakdown(c)),
            "Network cost over its lifetime, by part.",
            "",
        ),
    ];
    for (id, svg, caption, why) in plots {
        match svg {
            Some(svg) => {
                let _ = writeln!(
                    h,
                    "<figure class=\"plot\" id=\"plot-{id}\">{svg}<figcaption>{}</figcaption></figure>",
                    esc(caption)
                );
            }
            None => {
                let _ = writeln!(
                    h,
                    "<p class=\"note\" id=\"absent-{id}\">{} Not drawn: {}.</p>",
                    esc(caption),
                    esc(why)
                );
            }
        }
    }
    h.push_str("<h2>Bill of materials</h2>\n");
    for run in &c.runs {
        let _ = write!(
            h,
            "<h3>{}: {} tier(s), {} switches, {} links</h3><table><tr><th>item</th><th>count</th><th>unit USD</th><th>range USD</th><th>confidence</th><th>W each</th><th>source</th></tr>",
            fabric_title(run.summary.fabric),
            run.design.tiers,
            run.design.switches,
            run.design.links
        );
        for l in &run.cost.bom {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.0} to {:.0}</td><td>{}</td><td>{}</td><td style=\"text-align:left;font-size:11px\">{}</td></tr>",
                esc(&l.item),
                l.count,
                l.unit_usd,
                l.low_usd,
                l.high_usd,
                l.confidence.name(),
                l.watts,
                esc(&l.source)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<p class=\"note\">Prices and power come from the catalog (catalog/catalog.toml, overridable); confidence says whether a figure is sourced (published), an estimate (an analyst's or fabricsim's) or a placeholder (nothing published: set your quote); the range is what published figures span, and the verdict above is sampled over it. Generated by fabricsim.</p>\n</body></html>\n");
    h
}

/// summary.md: the recommendation and the table, in Markdown.
pub fn markdown(c: &Comparison) -> String {
    let r = &c.recommendation;
    let mut m = format!(
        "# {}: InfiniBand vs RoCEv2\n\n## {}\n\n",
        c.runs[0].summary.scenario,
        headline(c)
    );
    for line in &r.reasons {
        let _ = writeln!(m, "- {line}");
    }
    m.push_str("\nWhere it would flip:\n\n");
    for line in &r.flip {
        let _ = writeln!(m, "- {line}");
    }
    let rows = driver_rows(c);
    if !rows.is_empty() {
        m.push_str("\nAcross the ranges, what moves the answer most:\n\n|");
        for th in DRIVER_HEADER {
            let _ = write!(m, " {th} |");
        }
        m.push_str("\n|---|---|---|---:|---:|---|\n");
        for row in rows {
            let _ = writeln!(m, "| {} |", row.join(" | "));
        }
    }
    m.push_str("\nWhat this answers:\n\n");
    for (what, value) in inputs::rows(c) {
        let _ = writeln!(m, "- {what}: {value}");
    }
    m.push_str("\n|");
    for (n, _) in c.candidates() {
        let _ = write!(m, " | {}", fabric_title(n));
    }
    m.push_str(" |\n|---|");
    for _ in c.candidates() {
        m.push_str("---:|");
    }
    m.push('\n');
    for row in compare::rows(c) {
        let cells: Vec<String> = row.values.iter().map(|v| cell(*v)).collect();
        let _ = writeln!(m, "| {} | {} |", row.name, cells.join(" | "));
    }
    m
}
