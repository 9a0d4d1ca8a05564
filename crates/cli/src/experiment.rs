//! Runs a scenario: builds the model, drives it in slices with a progress bar on
//! standard error, and returns the report.

use crate::scenario::Scenario;
use fabricsim_fabric::infiniband::{CaptureFilter, Captured, Simulation};
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::workload::messages;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::{Duration, Instant};

/// A finished run with its wall time and, if asked for, its captured packets.
pub struct Outcome {
    pub report: RunReport,
    pub wall_seconds: f64,
    pub captured: Vec<Captured>,
}

/// Events processed between looks at the wall clock.
const SLICE: u64 = 1 << 18;

/// Builds and runs `scenario`. `progress` shows a bar on standard error once the run
/// has lasted a second.
pub fn run(
    scenario: &Scenario,
    capture: Option<CaptureFilter>,
    progress: bool,
) -> Result<Outcome, String> {
    let topo = scenario.build_topology()?;
    let msgs = messages(&scenario.traffic, scenario.seed);
    let mut sim = Simulation::new(scenario.ib.clone(), topo, &msgs, scenario.stop_at)?;
    if let Some(f) = capture {
        sim.capture(f);
    }
    let started = Instant::now();
    let mut bar: Option<ProgressBar> = None;
    while !sim.step(SLICE) {
        if !progress {
            continue;
        }
        let elapsed = started.elapsed();
        if elapsed < Duration::from_secs(1) {
            continue;
        }
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .expect("static template"),
            );
            b
        });
        let rate = sim.events() as f64 / elapsed.as_secs_f64();
        b.set_message(format!(
            "{} events, {:.1} M events/s, simulated {:.3} us",
            sim.events(),
            rate / 1e6,
            sim.now().ps() as f64 / 1e6
        ));
        b.tick();
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    Ok(Outcome {
        report: sim.report(),
        wall_seconds,
        captured: sim.captured().to_vec(),
    })
}
