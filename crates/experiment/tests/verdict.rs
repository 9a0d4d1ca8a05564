//! The verdict under uncertainty against brute force: the share of the ranges each
//! fabric wins, sampled from the response surface, equals the share found by running
//! compare at every point of a grid over the same ranges; a narrow case is too close to
//! call and names what decides it; a clear case is not.

mod common;

use common::scenario;
use fabricsim_experiment::compare::{self, Comparison};

/// Billed catalog entries held at a point (a price given without its range).
const POINTS: &str = "
[catalog.quantum-2-qm9700]
price_usd = 36000
latency = \"130ns\"
[catalog.connectx-7-400g]
price_usd = 1900
latency = \"500ns\"
[catalog.h100-sxm]
price_usd = 33750
[catalog.osfp-400g-sr4]
price_usd = 450
[catalog.osfp-800g-2xsr4]
price_usd = 900
[catalog.dac-400g]
price_usd = 150
[catalog.mpo-fiber]
price_usd = 122
[catalog.aoc-400g]
price_usd = 700
[cost]
lifetime_years = 5
electricity_usd_per_kwh = 0.08
pue = 1.3
support_share_per_year = 0.1
";

/// A 16-GPU cluster training a small data-parallel job (its exposed communication moves
/// with the Ethernet switch's latency), every input a point but the Ethernet switch's
/// price (`price` = [low, base, high]) and latency (`latency_ns` likewise).
fn text(price: [f64; 3], latency_ns: [f64; 3]) -> String {
    format!(
        "seed = 3\n[cluster]\ngpus = 16\ngpus_per_node = 8\n{POINTS}\n[catalog.spectrum-4-sn5600]\nlow_usd = {}\nprice_usd = {}\nhigh_usd = {}\nlow_latency = \"{}ps\"\nlatency = \"{}ps\"\nhigh_latency = \"{}ps\"\n[compare]\nsamples = 20000\n[[traffic]]\nkind = \"training\"\nsize = \"16MiB\"\nbuckets = 4\niterations = 2\nforward = \"30us\"\nbackward = \"60us\"\noverlap = true\nalgorithm = \"hierarchical\"\njob_iterations = 1000\n",
        price[0],
        price[1],
        price[2],
        ps(latency_ns[0]),
        ps(latency_ns[1]),
        ps(latency_ns[2])
    )
}

/// Nanoseconds as whole picoseconds, as the verdict sets a latency.
fn ps(ns: f64) -> u64 {
    (ns * 1e3).round() as u64
}

fn run(text: &str) -> Comparison {
    compare::run_both(&scenario(text), false, 2).unwrap()
}

/// RoCEv2's job cost over InfiniBand's.
fn ratio(c: &Comparison) -> f64 {
    c.runs[1].cost.job_cost_usd.unwrap() / c.runs[0].cost.job_cost_usd.unwrap()
}

/// The Ethernet switch price at which both fabrics' jobs cost the same with its latency
/// at `latency_ns`: job costs are linear in it, so two points give it.
fn breakeven_price(latency_ns: f64) -> f64 {
    let at = |p: f64| {
        let c = run(&text([p; 3], [latency_ns; 3]));
        let [a, b] = [0, 1].map(|f| c.runs[f].cost.job_cost_usd.unwrap());
        b - a
    };
    let (d0, d1) = (at(10_000.0), at(110_000.0));
    10_000.0 - d0 * 100_000.0 / (d1 - d0)
}

#[test]
fn the_sampled_shares_agree_with_a_brute_force_sweep_of_the_ranges() {
    let b = breakeven_price(600.0);
    assert!(b > 0.0, "a positive break-even price: {b}");
    // Ranges of like swing, neither centred on the break-even, so that both decide.
    let price = [0.96 * b, b, 1.03 * b];
    let latency = [300.0, 600.0, 1500.0];
    let c = run(&text(price, latency));
    let v = &c.recommendation.across_ranges;
    assert_eq!(v.drivers.len(), 2, "{:?}", v.drivers);
    // Brute force: compare at the midpoints of a 24 x 6 grid over both ranges.
    let (np, nl) = (24, 6);
    let mut roce_wins = 0;
    for j in 0..nl {
        let l = latency[0] + (latency[2] - latency[0]) * (j as f64 + 0.5) / nl as f64;
        for i in 0..np {
            let p = price[0] + (price[2] - price[0]) * (i as f64 + 0.5) / np as f64;
            if ratio(&run(&text([p; 3], [l; 3]))) < 1.0 {
                roce_wins += 1;
            }
        }
    }
    let grid = roce_wins as f64 / (np * nl) as f64;
    let sampled = v.share["rocev2"];
    assert!(
        (0.1..0.9).contains(&grid),
        "the ranges straddle the break-even: {grid}"
    );
    assert!(
        (grid - sampled).abs() < 0.03,
        "RoCEv2 wins in {sampled} of the samples and {grid} of the grid"
    );
    assert!((v.share["infiniband"] + sampled - 1.0).abs() < 1e-12);
    // The drivers' ends are real runs: each equals compare at that point.
    for d in &v.drivers {
        let at = |x: f64| {
            let (mut p, mut l) = (b, 600.0);
            if d.unit == "ns" {
                l = x;
            } else {
                p = x;
            }
            ratio(&run(&text([p; 3], [l; 3])))
        };
        for (x, want) in [(d.low, d.ratio_at_low), (d.high, d.ratio_at_high)] {
            let got = at(x);
            assert!(
                (got - want).abs() < 1e-9 * got,
                "{}: {want} at {x}, compare gives {got}",
                d.input
            );
        }
        // Its break-even, with the other input at base, is where compare is level.
        if let Some(e) = d.breakeven.filter(|e| (d.low..=d.high).contains(e)) {
            assert!((at(e) - 1.0).abs() < 1e-3, "{}: {e}", d.input);
        }
    }
}

#[test]
fn a_narrow_case_is_too_close_to_call_and_names_what_decides_it() {
    let b = breakeven_price(600.0);
    let c = run(&text([0.9 * b, b, 1.1 * b], [600.0; 3]));
    let v = &c.recommendation.across_ranges;
    assert_eq!(v.verdict, "too-close", "{:?}", v.share);
    let first = &c.recommendation.reasons[0];
    assert!(first.starts_with("too close to call"), "{first}");
    assert!(
        first.contains("spectrum-4-sn5600 price (break-even $"),
        "{first}"
    );
    let d = &v.drivers[0];
    let e = d.breakeven.unwrap();
    assert!((e - b).abs() < 1e-3 * b, "break-even {e} against {b}");
}

#[test]
fn a_clear_case_is_called() {
    let b = breakeven_price(600.0);
    // Ethernet switches of 5 to 20 us (a job-time gap of its own) at about the
    // break-even price: InfiniBand wins everywhere.
    let c = run(&text([0.8 * b, b, 1.2 * b], [5000.0, 10000.0, 20000.0]));
    let v = &c.recommendation.across_ranges;
    assert_eq!(v.verdict, "infiniband", "{:?}", v.share);
    assert!(v.share["infiniband"] >= 0.99, "{:?}", v.share);
    let (ti, tr) = (
        c.runs[0].cost.job_hours.unwrap(),
        c.runs[1].cost.job_hours.unwrap(),
    );
    assert!(tr > 1.2 * ti, "a job-time gap: {ti} h vs {tr} h");
    assert!(c.recommendation.reasons[0].starts_with("across the inputs' ranges: InfiniBand"));
}

/// Without `[compare]`'s settings or a seed change the verdict is the same every time;
/// the samples are the scenario's seed's.
#[test]
fn the_verdict_is_deterministic() {
    let t = text([20_000.0, 40_000.0, 150_000.0], [450.0, 600.0, 800.0]);
    let json = |c: Comparison| serde_json::to_string(&c.recommendation).unwrap();
    let a = json(run(&t));
    assert_eq!(a, json(run(&t)));
    assert!(a.contains("\"verdict\":"), "{a}");
    assert!(a.contains("\"drivers\":"), "{a}");
}

/// A design runs each fabric at its best practice unless the scenario says otherwise,
/// and the verdict says which it is.
#[test]
fn the_verdict_says_when_a_fabric_is_not_at_its_best_practice() {
    let base =
        "[cluster]\ngpus = 16\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 9\nsize = \"1MiB\"\n";
    let best = run(base);
    assert!(
        best.recommendation.reasons[1].starts_with("each fabric at its best practice"),
        "{:?}",
        best.recommendation.reasons
    );
    let text = format!(
        "{base}[fabric.infiniband]\nadaptive_routing = false\n[fabric.rocev2]\ncongestion_control = \"none\"\necn = {{ enabled = false }}\n"
    );
    let r = &run(&text).recommendation.reasons[1];
    for needle in [
        "not each fabric at its best practice",
        "InfiniBand routes statically",
        "RoCEv2 without congestion control",
        "RoCEv2 without ECN marking",
    ] {
        assert!(r.contains(needle), "{needle}: {r}");
    }
}

/// The report holds nothing that differs between two runs of the same scenario: no wall
/// time, no machine's figure.
#[test]
fn the_report_is_the_same_for_two_runs_of_a_scenario() {
    use fabricsim_experiment::report;
    let t = text([20_000.0, 40_000.0, 150_000.0], [450.0, 600.0, 800.0]);
    let (a, b) = (run(&t), run(&t));
    assert_eq!(report::html(&a), report::html(&b));
    assert_eq!(report::markdown(&a), report::markdown(&b));
    assert!(!report::html(&a).contains("wall time"));
}

/// The reasons are typed values with the run's numbers; their sentences are `reasons`.
#[test]
fn the_reasons_carry_their_numbers() {
    use fabricsim_experiment::decision::findings::{Finding, Flip};
    let c = run(&text(
        [20_000.0, 40_000.0, 150_000.0],
        [450.0, 600.0, 800.0],
    ));
    let r = &c.recommendation;
    assert_eq!(
        r.reasons,
        r.findings.iter().map(Finding::text).collect::<Vec<_>>()
    );
    assert_eq!(r.flip, r.flips.iter().map(Flip::text).collect::<Vec<_>>());
    let cost = r
        .findings
        .iter()
        .find_map(|f| match f {
            Finding::CostPerJob {
                infiniband_usd,
                rocev2_usd,
                ..
            } => Some((*infiniband_usd, *rocev2_usd)),
            _ => None,
        })
        .expect("a cost per job");
    assert_eq!(
        cost,
        (
            c.runs[0].cost.job_cost_usd.unwrap(),
            c.runs[1].cost.job_cost_usd.unwrap()
        )
    );
    assert!(matches!(r.findings[0], Finding::AcrossRanges { .. }));
    let json: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
    assert_eq!(
        json["recommendation"]["findings"][0]["kind"],
        "across_ranges"
    );
    assert!(r.flips.iter().any(|f| matches!(f, Flip::TimeRatio { .. })));
}

/// `[compare]`'s keys: candidates it knows, a threshold and a sample count in range;
/// anything else named with its key and value.
#[test]
fn compare_settings_are_checked() {
    use fabricsim_experiment::scenario::Scenario;
    let base = "[cluster]\ngpus = 16\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 9\nsize = \"1MiB\"\n[compare]\n";
    let ok = Scenario::parse(&format!("{base}candidates = [\"infiniband\", \"rocev2\", \"rocev2-tuned\"]\nthreshold = 0.9\nsamples = 1000\n"), "t").unwrap();
    assert!(ok.compare.tuned_candidate);
    assert_eq!((ok.compare.threshold, ok.compare.samples), (0.9, 1000));
    for (text, want) in [
        ("candidates = [\"infiniband\", \"rocev2\", \"ethernet\"]", "compare.candidates = [\"infiniband\", \"rocev2\", \"ethernet\"]: \"ethernet\" is not a candidate"),
        ("candidates = [\"rocev2\"]", "name both"),
        ("threshold = 0.3", "compare.threshold = 0.3"),
        ("samples = 5", "compare.samples = 5"),
    ] {
        let e = Scenario::parse(&format!("{base}{text}\n"), "t").unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
}
