//! Helpers shared by the integration tests.
#![allow(dead_code)]

use fabricsim::scenario::Scenario;
use fabricsim_fabric::infiniband::Simulation;
use fabricsim_fabric::workload::{messages, Message};
pub use fabricsim_fabric::EventDriven;

/// Parses a scenario from TOML text; panics with the loader's message on error.
pub fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, "test").unwrap_or_else(|e| panic!("test scenario rejected: {e}"))
}

/// Builds the simulation for a scenario, with its messages.
pub fn simulation(s: &Scenario) -> (Simulation, Vec<Message>) {
    let msgs = messages(&s.traffic, s.seed);
    let sim = Simulation::new(s.ib.clone(), s.build_topology().unwrap(), &msgs, s.stop_at).unwrap();
    (sim, msgs)
}

/// IB payload efficiency of full MTU packets: payload / (payload + LRH 8 + BTH 12 + ICRC 4 + VCRC 2).
pub fn ib_efficiency(mtu: f64) -> f64 {
    mtu / (mtu + 26.0)
}

/// Aggregate payload rate (Gb/s) delivered between two instants of the run, in ps.
pub fn delivered_between(sim: &mut Simulation, flows: usize, t1_ps: u64, t2_ps: u64) -> Vec<u64> {
    use fabricsim_core::units::Time;
    sim.run_until(Time(t1_ps));
    let a: Vec<u64> = (0..flows).map(|f| sim.flow_delivered(f)).collect();
    sim.run_until(Time(t2_ps));
    (0..flows).map(|f| sim.flow_delivered(f) - a[f]).collect()
}

/// Asserts a measured goodput (Gb/s) within 0.5 % of the analytic `expected`.
pub fn assert_goodput(got: f64, expected: f64) {
    let err = (got - expected).abs() / expected;
    assert!(
        err < 0.005,
        "goodput {got:.3} Gb/s vs {expected:.3} Gb/s ({:.3} %)",
        err * 100.0
    );
}
