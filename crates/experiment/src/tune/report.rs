//! DIR/report.html of a tune: the objective against the trials, how much each setting
//! moves it, and the scenario before and after (flow completion times, PFC paused time,
//! DCQCN's rates), from a run of each with rates recorded.

use super::{space, unit, Figures, Objective, Trial, Tuned, KNOBS};
use crate::decision::tick;
use crate::outcome::Outcome;
use crate::report::{esc, line_plot};
use std::fmt::Write as _;

/// Spearman's rank correlation of `a` and `b` (0 when either is constant).
fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let rank = |v: &[f64]| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]).then(i.cmp(&j)));
        let mut r = vec![0.0; v.len()];
        let mut k = 0;
        while k < idx.len() {
            // Ties share their mean rank.
            let mut e = k;
            while e + 1 < idx.len() && v[idx[e + 1]] == v[idx[k]] {
                e += 1;
            }
            for &i in &idx[k..=e] {
                r[i] = (k + e) as f64 / 2.0;
            }
            k = e + 1;
        }
        r
    };
    let (ra, rb) = (rank(a), rank(b));
    let n = a.len() as f64;
    let mean = (n - 1.0) / 2.0;
    let cov: f64 = ra
        .iter()
        .zip(&rb)
        .map(|(x, y)| (x - mean) * (y - mean))
        .sum();
    let var = |r: &[f64]| r.iter().map(|x| (x - mean).powi(2)).sum::<f64>();
    let d = (var(&ra) * var(&rb)).sqrt();
    if d > 0.0 {
        cov / d
    } else {
        0.0
    }
}

/// Each setting's rank correlation with the objective over the feasible search trials,
/// the strongest first.
pub fn sensitivity(
    trials: &[Trial],
    objective: Objective,
    max_paused_ns: Option<u64>,
) -> Vec<(&'static str, f64)> {
    let ok: Vec<&Trial> = trials
        .iter()
        .filter(|t| !t.x.is_empty() && t.load == 1.0 && t.infeasible(max_paused_ns).is_none())
        .collect();
    let y: Vec<f64> = ok
        .iter()
        .map(|t| objective.figure(t.figures.as_ref().expect("feasible")))
        .collect();
    let mut v: Vec<(&'static str, f64)> = KNOBS
        .iter()
        .enumerate()
        .map(|(k, knob)| {
            let x: Vec<f64> = ok.iter().map(|t| t.x[k]).collect();
            (knob.key, spearman(&x, &y))
        })
        .collect();
    v.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    v
}

/// The report's HTML. `before` and `after` are the scenario's run with its own settings
/// and with the tuned ones (rates recorded).
pub fn html(
    t: &Tuned,
    trials: &[Trial],
    max_paused_ns: Option<u64>,
    before: &Outcome,
    after: &Outcome,
) -> String {
    let o = t.objective;
    let mut h = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fabricsim tune</title><style>body{{font-family:'DejaVu Sans',sans-serif;margin:24px auto;max-width:1000px;color:#222}}table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child,th:first-child{{text-align:left}}.note{{color:#777}}</style></head><body>\n<h1>RoCEv2 tuned for {} ({})</h1>\n",
        o.name(),
        esc(unit(o))
    );
    let _ = writeln!(
        h,
        "<p id=\"result\">{} trials. The scenario's own settings give {}; the best trial {}; the best settings at their worst over two other seeds and a 1.25x and 0.8x load {}{}.</p>",
        t.trials,
        figure(o, &t.baseline),
        figure(o, &t.best),
        tick(&t.worst_figure),
        if t.robust_feasible { "" } else { " (not feasible in every run)" }
    );
    h.push_str("<table id=\"runs\"><tr><th>run</th><th>seed</th><th>load</th><th>objective</th><th>p99 slowdown</th><th>goodput (Gb/s)</th><th>job (s)</th><th>drops</th><th>paused (us)</th><th>CNPs</th><th>feasible</th></tr>");
    let rows = [
        ("scenario's settings", &t.baseline),
        ("best trial", &t.best),
    ]
    .into_iter()
    .chain(t.robust.iter().map(|r| ("best settings, robustness", r)));
    for (name, r) in rows {
        let f = r.figures.as_ref();
        let g = |x: fn(&Figures) -> f64| f.map_or("-".into(), |f| tick(&x(f)));
        let _ = write!(
            h,
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.seed,
            r.load,
            figure(o, r),
            g(|f| f.p99_slowdown),
            g(|f| f.goodput_gbps),
            g(|f| f.job_seconds),
            g(|f| f.drops as f64),
            g(|f| f.pfc_paused_ns as f64 / 1e3),
            g(|f| f.cnps as f64),
            esc(&r.infeasible(max_paused_ns).unwrap_or_else(|| "yes".into()))
        );
    }
    h.push_str("</table>\n");
    // The objective against the trials, and the best so far.
    let mut best = f64::INFINITY;
    let mut points = Vec::new();
    let mut running = Vec::new();
    for (i, tr) in trials.iter().enumerate() {
        if tr.infeasible(max_paused_ns).is_some() {
            continue;
        }
        let f = tr.figures.as_ref().expect("feasible");
        points.push((i as f64, o.figure(f)));
        best = best.min(o.cost(f));
        running.push((i as f64, if o == Objective::Goodput { -best } else { best }));
    }
    let _ = writeln!(
        h,
        "<h2>The search</h2><figure id=\"plot-trials\">{}<figcaption>Each feasible trial's objective, and the best so far (infeasible trials left out).</figcaption></figure>",
        line_plot(
            "Objective against the trials",
            "trial",
            unit(o),
            &[("trial".into(), points), ("best so far".into(), running)],
            false,
            None
        )
    );
    h.push_str("<h2>What moves the objective</h2><p>Spearman's rank correlation of each setting with the objective over the feasible trials (1 or -1: the objective follows the setting; 0: no relation seen).</p><table id=\"sensitivity\"><tr><th>setting</th><th>rank correlation</th><th>range searched</th><th>source</th></tr>");
    for (key, rho) in sensitivity(trials, o, max_paused_ns) {
        let k = KNOBS.iter().find(|k| k.key == key).expect("a knob");
        let _ = write!(
            h,
            "<tr><td>{key}</td><td>{rho:.2}</td><td>{}</td><td style=\"text-align:left;font-size:11px\">{}</td></tr>",
            space::range_text(k),
            esc(k.source)
        );
    }
    h.push_str("</table>\n<h2>Before and after</h2>\n");
    let cdf = |o: &Outcome| {
        let v = o.sorted_fcts_us();
        let n = v.len().max(1);
        let step = n.div_ceil(200).max(1);
        v.iter()
            .enumerate()
            .filter(|(k, _)| k % step == step - 1 || k + 1 == n)
            .map(|(k, &x)| (x.max(1e-3), (k + 1) as f64 / n as f64))
            .collect::<Vec<_>>()
    };
    let _ = writeln!(
        h,
        "<figure id=\"plot-fct\">{}<figcaption>Flow completion times with the scenario's settings and with the tuned ones.</figcaption></figure>",
        line_plot(
            "Flow completion time, CDF",
            "FCT (us)",
            "fraction of flows",
            &[("before".into(), cdf(before)), ("after".into(), cdf(after))],
            true,
            None
        )
    );
    let paused = |o: &Outcome| {
        o.report
            .ports
            .iter()
            .map(|p| p.paused.ps() as f64 / 1e6)
            .sum::<f64>()
    };
    let _ = writeln!(
        h,
        "<p id=\"paused\">PFC paused time over all ports: {} us before, {} us after.</p>",
        tick(&paused(before)),
        tick(&paused(after))
    );
    let rates = |o: &Outcome| {
        let Some(flow) = o.rates.iter().find(|r| r.sent.is_none()).map(|r| r.flow) else {
            return Vec::new();
        };
        o.rates
            .iter()
            .filter(|r| r.flow == flow)
            .map(|r| (r.time.ps() as f64 / 1e6, r.rate.bps() as f64 / 1e9))
            .collect()
    };
    let (rb, ra) = (rates(before), rates(after));
    if rb.is_empty() && ra.is_empty() {
        h.push_str("<p class=\"note\" id=\"absent-dcqcn\">DCQCN's rates: not drawn, as no flow's rate was cut before or after.</p>\n");
    } else {
        let _ = writeln!(
            h,
            "<figure id=\"plot-dcqcn\">{}<figcaption>DCQCN's pacing rate of the first flow cut, before and after.</figcaption></figure>",
            line_plot(
                "DCQCN rate of the first flow cut",
                "time (us)",
                "rate (Gb/s)",
                &[("before".into(), rb), ("after".into(), ra)],
                false,
                None
            )
        );
    }
    h.push_str("<p class=\"note\">Generated by fabricsim tune. Settings as equipment takes them: sonic-config_db.json, nvue.txt, mlnx_qos.sh.</p>\n</body></html>\n");
    h
}

/// A trial's objective as shown.
fn figure(o: Objective, t: &Trial) -> String {
    t.figures.as_ref().map_or("-".into(), |f| {
        format!("{} {}", tick(&o.figure(f)), unit(o))
    })
}
