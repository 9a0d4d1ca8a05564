//! A sweep's plots: a headline metric of results.csv against the first swept key, one
//! line per value of the second key (or per fabric), written as DIR/plot-METRIC.svg and
//! gathered with the results table in DIR/report.html.

use crate::report;
use fabricsim_core::units::{parse_quantity, Dimension};
use std::fmt::Write as _;
use std::path::Path;

/// A swept value as a number: a plain number, or a quantity in its base unit (bytes,
/// ps, b/s, mm); `None` for names.
fn number(v: &str) -> Option<f64> {
    v.parse::<f64>().ok().or_else(|| {
        [
            Dimension::Size,
            Dimension::Time,
            Dimension::Rate,
            Dimension::Length,
        ]
        .into_iter()
        .find_map(|d| parse_quantity(v, d).ok().map(|x| x as f64))
    })
}

/// results.csv's rows as fields (header first).
fn rows(dir: &Path) -> Result<Vec<Vec<String>>, String> {
    let text = std::fs::read_to_string(dir.join("results.csv"))
        .map_err(|e| format!("{}: results.csv: {e}", dir.display()))?;
    let mut reader = super::table_reader(false).from_reader(text.as_bytes());
    let rows: Result<Vec<Vec<String>>, csv::Error> = reader
        .records()
        .map(|r| r.map(|r| r.iter().map(String::from).collect()))
        .collect();
    rows.map_err(|e| format!("{}: results.csv: {e}", dir.display()))
}

/// One plot of `metric` (a results.csv column) against the first swept key.
pub fn plot(dir: &Path, metric: &str, keys: &[String]) -> Result<String, String> {
    let rows = rows(dir)?;
    let header = &rows[0];
    let col = |name: &str| header.iter().position(|h| h == name);
    let y = col(metric).ok_or_else(|| {
        format!(
            "--plot {metric}: not a column of results.csv ({})",
            header[1..].join(", ")
        )
    })?;
    let x_key = keys.first().ok_or("--plot: the sweep has no keys")?;
    let x = col(x_key).expect("a swept key is a column");
    // Lines: the second key's values if there is one, else the fabric.
    let by = keys
        .get(1)
        .and_then(|k| col(k))
        .or_else(|| col("fabric"))
        .expect("fabric is a column");
    let xs: Vec<&str> = rows[1..].iter().map(|r| r[x].as_str()).collect();
    let numeric = xs.iter().all(|v| number(v).is_some());
    let mut categories: Vec<&str> = Vec::new();
    for v in &xs {
        if !categories.contains(v) {
            categories.push(v);
        }
    }
    let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in &rows[1..] {
        let Ok(value) = r[y].parse::<f64>() else {
            continue;
        };
        let at = if numeric {
            number(&r[x]).expect("checked")
        } else {
            categories.iter().position(|c| *c == r[x]).expect("listed") as f64
        };
        let name = format!("{} = {}", header[by], r[by]);
        match series.iter_mut().find(|s| s.0 == name) {
            Some(s) => s.1.push((at, value)),
            None => series.push((name, vec![(at, value)])),
        }
    }
    for s in &mut series {
        s.1.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let log_x = numeric && {
        let (lo, hi) = xs
            .iter()
            .filter_map(|v| number(v))
            .fold((f64::MAX, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
        lo > 0.0 && hi / lo >= 100.0
    };
    let labels = (!numeric).then_some(categories.iter().map(|c| c.to_string()).collect::<Vec<_>>());
    Ok(report::line_plot(
        &format!("{metric} against {x_key}"),
        x_key,
        metric,
        &series,
        log_x,
        labels.as_deref(),
    ))
}

/// Writes DIR/plot-METRIC.svg for each metric, and DIR/report.html with them and the
/// results table.
pub fn write(dir: &Path, metrics: &[String], keys: &[String]) -> Result<(), String> {
    let mut html = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fabricsim sweep</title>\
<style>body{font-family:'DejaVu Sans',sans-serif;margin:24px auto;max-width:1000px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;font-size:12px}</style></head><body>\n<h1>fabricsim sweep</h1>\n");
    for m in metrics {
        let svg = plot(dir, m, keys)?;
        crate::output::write_file(&dir.join(format!("plot-{m}.svg")), svg.as_bytes())
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = writeln!(
            html,
            "<figure class=\"plot\" id=\"plot-{m}\">{svg}</figure>"
        );
    }
    html.push_str("<h2>Results</h2><table>");
    for (i, r) in rows(dir)?.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        html.push_str("<tr>");
        for f in r {
            let _ = write!(html, "<{cell}>{}</{cell}>", report::esc(f));
        }
        html.push_str("</tr>");
    }
    html.push_str("</table></body></html>\n");
    crate::output::write_file(&dir.join("report.html"), html.as_bytes())
        .map_err(|e| format!("{}: {e}", dir.display()))
}
