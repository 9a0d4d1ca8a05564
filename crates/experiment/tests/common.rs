//! Helpers shared by the integration tests.
#![allow(dead_code)]

use fabricsim_experiment::scenario::Scenario;
use fabricsim_fabric::infiniband::Simulation;
use fabricsim_fabric::report::RunReport;
use fabricsim_fabric::workload::{build, Workload};
pub use fabricsim_fabric::EventDriven;

/// Parses a scenario from TOML text; panics with the loader's message on error.
pub fn scenario(text: &str) -> Scenario {
    Scenario::parse(text, "test").unwrap_or_else(|e| panic!("test scenario rejected: {e}"))
}

/// Builds the simulation for a scenario, with its messages.
pub fn simulation(s: &Scenario) -> (Simulation, Workload) {
    let msgs = build(&s.traffic, s.seed);
    let sim = Simulation::new(s.ib.clone(), s.build_topology().unwrap(), &msgs, s.stop_at).unwrap();
    (sim, msgs)
}

/// IB payload efficiency of full MTU packets: payload / (payload + LRH 8 + BTH 12 + ICRC 4 + VCRC 2).
pub fn ib_efficiency(mtu: f64) -> f64 {
    mtu / (mtu + 26.0)
}

/// Payload bytes each of the first `flows` flows delivered between two instants of the
/// run (in ps).
pub fn delivered_between(sim: &mut Simulation, flows: usize, t1_ps: u64, t2_ps: u64) -> Vec<u64> {
    use fabricsim_core::units::Time;
    sim.run_until(Time(t1_ps));
    let a: Vec<u64> = (0..flows).map(|f| sim.flow_delivered(f)).collect();
    sim.run_until(Time(t2_ps));
    (0..flows).map(|f| sim.flow_delivered(f) - a[f]).collect()
}

/// One 64 MiB flow from host 0 to `dst` on `fabric` at 400 Gb/s with 4 KiB packets, over
/// `topology` (a `[topology]` table); its report, once every byte has arrived.
pub fn one_64mib_flow(fabric: &str, topology: &str, dst: u32) -> RunReport {
    let s = scenario(&format!(
        "[fabric]\nkind = \"{fabric}\"\nlink_rate = \"400Gbps\"\nmtu = 4096\n{topology}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = {dst}\nsize = \"64MiB\"\n"
    ));
    let r = fabricsim_experiment::runner::run(&s, None, false)
        .unwrap()
        .report;
    assert_eq!(r.flows[0].delivered_bytes, 64 << 20);
    r
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

/// Builds the RoCEv2 simulation for a scenario (the scenario seed drives ECN and ECMP).
pub fn roce_sim(s: &Scenario) -> fabricsim_fabric::rocev2::Simulation {
    let msgs = build(&s.traffic, s.seed);
    let cfg = fabricsim_fabric::rocev2::RoceConfig {
        seed: s.seed,
        ..s.roce.clone()
    };
    fabricsim_fabric::rocev2::Simulation::new(cfg, s.build_topology().unwrap(), &msgs, s.stop_at)
        .unwrap()
}

/// Runs a RoCEv2 simulation to the end, checking sent = delivered + lost + in flight,
/// and that no frame-pool slot leaks, every 5 us of simulated time.
pub fn run_conserving(sim: &mut fabricsim_fabric::rocev2::Simulation) {
    use fabricsim_core::units::Time;
    let mut t = Time::from_us(5);
    while !sim.is_finished() {
        sim.run_until(t);
        let a = sim.audit();
        assert_eq!(
            a.sent_payload,
            a.delivered_payload + a.lost_payload + a.in_flight_payload,
            "conservation at {t}"
        );
        assert_eq!(
            a.lost_frames, 0,
            "every pooled frame on a link or queued at {t}"
        );
        t += Time::from_us(5);
    }
}

/// Loads one of the project's example scenarios.
pub fn example(name: &str) -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("example {name} rejected: {e}"))
}
