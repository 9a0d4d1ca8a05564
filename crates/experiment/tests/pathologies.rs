//! Deadlocks and PFC pathologies: head-of-line blocking of a victim flow, deadlock through
//! a cyclic buffer dependency (PFC on RoCEv2, a credit loop on InfiniBand), and a NIC
//! pause storm with and without the watchdog.

mod common;
use common::{example, roce_sim, run_conserving, scenario, simulation, EventDriven};
use fabricsim_core::units::{BitRate, Time};
use fabricsim_core::wire::roce;
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;
use fabricsim_fabric::report::RunReport;

fn run(s: &Scenario) -> RunReport {
    runner::run(s, None, false).unwrap().report
}

/// A RoCEv2 flow's completion alone on a path whose first link (the sender's) is the
/// slowest: both NICs' latencies, every link's propagation, a switch latency per switch,
/// every frame serialised on the first link, and the last frame once more on each later
/// link (store and forward). `links` are the path's rates, sender first.
fn line_rate_fct(s: &Scenario, size: u64, links: &[BitRate]) -> Time {
    let mtu = s.roce.mtu as u64;
    let packets = size.div_ceil(mtu);
    let frame =
        |payload: u64, first: bool| roce::write_frame_len(s.roce.ip, payload as u32, first) as u64;
    let last = size - (packets - 1) * mtu;
    let bytes = frame(mtu, true) + (packets - 2) * frame(mtu, false) + frame(last, false);
    let later: Time = links[1..]
        .iter()
        .map(|r| r.serialization(frame(last, false)))
        .fold(Time::ZERO, |a, b| a + b);
    s.roce.nic_tx_latency
        + s.roce.nic_rx_latency
        + s.link_delay * links.len() as u64
        + s.roce.switch_latency * (links.len() as u64 - 1)
        + links[0].serialization(bytes)
        + later
}

fn fct(r: &RunReport, flow: usize) -> Option<Time> {
    r.flows[flow].finish.map(|f| f - r.flows[flow].start)
}

#[test]
fn pfc_blocks_a_victim_that_shares_no_bottleneck() {
    let s = example("rocev2-pfc-victim.toml");
    let victim = 3; // flow 3 -> 5; flows 0-2 are the incast into host 4.
    let congested = run(&s);
    let mut alone = s.clone();
    alone.traffic.remove(0);
    let alone = run(&alone);
    assert_eq!(
        (congested.drops, alone.drops),
        (0, 0),
        "PFC keeps both lossless"
    );
    let (with, without) = (fct(&congested, victim).unwrap(), fct(&alone, 0).unwrap());
    // Alone, the victim runs at its line rate: host link 400 Gb/s, then 1600 Gb/s up and
    // down the spine, then 400 Gb/s to its receiver; within 1 % of that.
    let (host, up) = (BitRate::gbps(400), BitRate::gbps(1600));
    let ideal = line_rate_fct(&s, 8 << 20, &[host, up, up, host]);
    assert!(
        without >= ideal && without.ps() as f64 <= ideal.ps() as f64 * 1.01,
        "victim alone {without} vs line rate {ideal}"
    );
    // Its path has spare capacity (1600 Gb/s uplinks for 1600 Gb/s offered), yet PAUSE
    // from the incast's queues holds it back.
    assert!(
        with.ps() > without.ps() * 3 / 2,
        "victim FCT with the incast {with} should be well above alone {without}"
    );
    assert!(congested.pfc_pause_frames > 0);
    println!(
        "victim FCT {with} with the incast vs {without} alone ({:.2}x)",
        with.ps() as f64 / without.ps() as f64
    );
}

#[test]
fn ring_deadlock_is_detected_and_reported() {
    let s = example("rocev2-pfc-deadlock.toml");
    let r = run(&s);
    let d = r.deadlock.as_ref().expect("the ring must deadlock");
    // The cycle is the five ring egresses (switches are nodes 5-9), each feeding the next.
    let mut nodes: Vec<u32> = d.cycle.iter().map(|h| h.node).collect();
    assert_eq!(d.cycle.len(), 5, "{d:?}");
    for (i, h) in d.cycle.iter().enumerate() {
        assert_eq!(h.peer_node, d.cycle[(i + 1) % 5].node, "{d:?}");
    }
    nodes.sort_unstable();
    assert_eq!(nodes, vec![5, 6, 7, 8, 9]);
    assert!(r.flows.iter().all(|f| f.finish.is_none()));
    assert_eq!(r.sim_time, d.at, "the run stops at detection");
}

#[test]
fn with_the_watchdog_the_ring_recovers_and_completes() {
    let without = run(&example("rocev2-pfc-deadlock.toml"));
    let s = example("rocev2-pfc-deadlock-watchdog.toml");
    let mut sim = roce_sim(&s);
    run_conserving(&mut sim);
    let r = sim.report();
    assert!(
        r.deadlock.is_none(),
        "a cycle the watchdog breaks is no deadlock"
    );
    let first = r.pfc_cycles.first().expect("the cycle forms");
    let formed = without
        .deadlock
        .expect("and deadlocks without the watchdog");
    assert_eq!(first, &formed, "the same cycle, seen at the same moment");
    assert!(r.watchdog_trips > 0 && r.drops > 0);
    for f in &r.flows {
        assert_eq!(f.delivered_bytes, f.bytes, "every byte delivered: {f:?}");
        assert!(f.finish.is_some());
    }
    assert!(!r.stopped_by_time);
}

#[test]
fn a_detected_deadlock_really_never_moves_again() {
    // The same ring with detection pushed beyond the run: nothing is delivered between
    // 1 ms and 2 ms, though every flow is unfinished.
    let mut s = example("rocev2-pfc-deadlock.toml");
    s.roce.deadlock_check = Time::from_us(10_000);
    s.stop_at = Some(Time::from_us(2_000));
    let mut sim = roce_sim(&s);
    sim.run_until(Time::from_us(1_000));
    let at_1ms: Vec<u64> = (0..5).map(|f| sim.flow_delivered(f)).collect();
    sim.run();
    let at_2ms: Vec<u64> = (0..5).map(|f| sim.flow_delivered(f)).collect();
    assert_eq!(at_1ms, at_2ms, "a deadlocked fabric delivers nothing more");
    assert!(at_2ms.iter().all(|&b| b < 8_000_000));
    assert!(sim.report().deadlock.is_none());
}

#[test]
fn congestion_without_a_cycle_is_not_called_a_deadlock() {
    // The ring with one transit flow and a 2:1 hot spot: pauses but no cycle.
    let s = scenario(&format!(
        "stop_at = \"20ms\"\n[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nswitch_buffer = \"2MiB\"\ncongestion_control = \"none\"\necn = {{ enabled = false }}\n[topology]\nkind = \"file\"\npath = \"{}/../../examples/ns3/ring5.topo\"\n[[traffic]]\nkind = \"incast\"\nsenders = [0, 1]\ndst = 2\nsize = \"8MB\"\n",
        env!("CARGO_MANIFEST_DIR")
    ));
    let r = run(&s);
    assert!(r.pfc_pause_frames > 0, "the hot spot must pause");
    assert!(r.deadlock.is_none());
    assert!(r.flows.iter().all(|f| f.delivered_bytes == 8_000_000));
}

#[test]
fn pause_storm_stalls_a_victim_until_the_watchdog_breaks_it() {
    let storm = example("rocev2-pause-storm.toml");
    let victim = 1; // 6 -> 1; flow 0 sends to the stalled host 0.
    let mut unguarded = storm.clone();
    unguarded.roce.watchdog = None;
    let r = run(&unguarded);
    assert!(
        r.flows[victim].finish.is_none(),
        "without a watchdog the storm holds the victim until stop_at"
    );
    assert!(
        r.ports.iter().any(|p| p.node == 0 && p.pause_frames > 10),
        "the NIC storms"
    );
    assert_eq!(r.watchdog_trips, 0);

    let mut sim = roce_sim(&storm);
    run_conserving(&mut sim);
    let r = sim.report();
    let finish = fct(&r, victim).expect("the watchdog frees the victim");
    assert!(
        r.watchdog_trips >= 1 && r.drops > 0,
        "{} trips, {} drops",
        r.watchdog_trips,
        r.drops
    );
    assert_eq!(r.flows[victim].delivered_bytes, 8 << 20);
    // The victim waits at most for the watchdog's detection (100 us after the storm began,
    // 70 us after its own start) plus its own transfer at line rate (400 Gb/s host links,
    // 800 Gb/s up and down the spine).
    let (host, up) = (BitRate::gbps(400), BitRate::gbps(800));
    let bound = line_rate_fct(&storm, 8 << 20, &[host, up, up, host]) + Time::from_us(100);
    assert!(finish < bound, "victim FCT {finish} vs bound {bound}");
}

#[test]
fn infiniband_credit_loop_is_detected_and_really_stuck() {
    let s = example("infiniband-credit-loop.toml");
    let r = run(&s);
    let d = r
        .deadlock
        .as_ref()
        .expect("the 7-ring with 3-hop flows must deadlock");
    let mut nodes: Vec<u32> = d.cycle.iter().map(|h| h.node).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, (7..14).collect::<Vec<u32>>(), "{d:?}");
    for (i, h) in d.cycle.iter().enumerate() {
        assert_eq!(h.peer_node, d.cycle[(i + 1) % d.cycle.len()].node, "{d:?}");
    }
    // With detection pushed beyond the run, nothing moves between 1 ms and 2 ms.
    let mut late = s.clone();
    late.ib.deadlock_check = Time::from_us(10_000);
    late.stop_at = Some(Time::from_us(2_000));
    let (mut sim, _) = simulation(&late);
    sim.run_until(Time::from_us(1_000));
    let at_1ms: Vec<u64> = (0..7).map(|f| sim.flow_delivered(f)).collect();
    sim.run();
    let at_2ms: Vec<u64> = (0..7).map(|f| sim.flow_delivered(f)).collect();
    assert_eq!(at_1ms, at_2ms);
    assert!(at_2ms.iter().all(|&b| b < 8_000_000));
}

#[test]
fn infiniband_ring_without_a_loop_completes() {
    // Two-hop flows on the 5-ring: credits stall but every buffer keeps draining.
    let mut s = example("rocev2-pfc-deadlock.toml");
    s.fabric = fabricsim_experiment::scenario::FabricKind::Infiniband;
    let r = run(&s);
    assert!(r.deadlock.is_none());
    assert!(r.flows.iter().all(|f| f.delivered_bytes == 8_000_000));
    assert!(r.ports.iter().any(|p| p.credit_stall > Time::ZERO));
}
