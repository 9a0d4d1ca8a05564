//! The rooms of the RoCEv2 model, each driven directly with explicit times and bytes:
//! the link's timing, the switch's buffer admission and PFC thresholds, a PAUSE received,
//! and what a transmitter foresees at its frame's end.

use super::{AfterEnd, Event, Frame, Kind, Packet, PacketPort, Simulation, DATA, NEVER};
use crate::rocev2::RoceConfig;
use crate::workload::{build, Traffic};
use fabricsim_core::proto::pfc::{pause_duration, RESUME_OFFSET};
use fabricsim_core::topology::Topology;
use fabricsim_core::units::{BitRate, HostId, NodeId, PortId, Time};
use fabricsim_core::wire::roce;

const RATE: BitRate = BitRate::gbps(100);
const DELAY: Time = Time::from_ns(1_000);

/// Two hosts on one switch (node 2), host 0 sending `size` bytes (if any) to host 1 at
/// time 0.
fn two_hosts(cfg: RoceConfig, size: Option<u64>) -> Simulation {
    let topo = Topology::single_switch(2, RATE, DELAY).unwrap();
    let traffic: Vec<Traffic> = size
        .map(|size| Traffic::Flow {
            src: HostId(0),
            dst: HostId(1),
            size,
            start: Time::ZERO,
            sl: 0,
        })
        .into_iter()
        .collect();
    Simulation::new(cfg, topo, &build(&traffic, 1), None).unwrap()
}

/// The switch's port facing host `h`.
fn switch_port(sim: &Simulation, h: u32) -> PortId {
    sim.topo.port(sim.topo.host_port(HostId(h))).peer
}

/// A data packet of `wire` link bytes that entered the switch by `input`.
fn data_packet(wire: u16, input: PortId) -> Packet {
    Packet {
        flow: 0,
        index: 0,
        dst: 1,
        src: 0,
        sport: 0,
        payload: wire - 100,
        wire,
        kind: Kind::Data,
        ce: false,
        port: PacketPort::entered_by(input),
    }
}

#[test]
fn a_packet_reaches_the_switch_one_serialisation_and_one_propagation_after_it_leaves() {
    let cfg = RoceConfig::default();
    let tx_latency = cfg.nic_tx_latency;
    let mut sim = two_hosts(cfg, Some(1_000));
    let nic = sim.topo.host_port(HostId(0));
    // Run until the NIC has put its one packet on the wire.
    while sim.ports[nic.index()].tx_packets == 0 {
        sim.handle_event();
    }
    let wire = roce::write_frame_len(sim.cfg.ip, 1_000, true) as u64;
    let slot = sim.ports[nic.index()]
        .wire
        .head()
        .expect("the packet is on the link");
    let end = tx_latency + RATE.serialization(wire);
    assert_eq!(
        sim.frames.time(slot),
        end + DELAY,
        "arrival = post + NIC latency + serialisation + propagation"
    );
    // It is routed to the switch port facing host 1 when it leaves.
    let Frame::Packet(pkt) = sim.frames.get(slot) else {
        panic!("a packet")
    };
    assert_eq!(pkt.port.egress(), switch_port(&sim, 1));
}

#[test]
fn admission_fills_the_reserve_then_the_shared_pool_then_pauses_at_the_threshold() {
    let cfg = RoceConfig {
        switch_buffer: 1 << 20,
        ..RoceConfig::default()
    };
    let (reserve, alpha_shift, quanta) = (cfg.reserve, cfg.alpha_shift, cfg.pause_quanta);
    let mut sim = two_hosts(cfg, None);
    let (switch, input) = (NodeId(2), switch_port(&sim, 0));
    let pool = sim.buffers[2].pool;
    // The reserve takes the first bytes; the shared pool is untouched.
    assert!(sim.admit(switch, input, reserve));
    assert_eq!(
        (sim.ports[input.index()].ingress, sim.buffers[2].used),
        (reserve, 0)
    );
    // Then shared bytes while the port's share stays within the dynamic threshold (free
    // pool >> alpha_shift, falling as the pool fills); a packet that would pass it goes
    // to headroom. Either way the port sends XOFF once its share reaches the threshold
    // or headroom is touched.
    let mut shared = 0;
    loop {
        let threshold = (pool - shared) >> alpha_shift;
        let to_headroom = shared + 1_000 > threshold;
        assert!(sim.admit(switch, input, 1_000));
        let q = &sim.ports[input.index()];
        if to_headroom {
            assert_eq!((q.headroom_used, sim.buffers[2].used), (1_000, shared));
        } else {
            shared += 1_000;
            assert_eq!((q.headroom_used, sim.buffers[2].used), (0, shared));
        }
        let reached = to_headroom || shared >= (pool - shared) >> alpha_shift;
        assert_eq!(
            q.xoff, reached,
            "XOFF exactly when the threshold is reached"
        );
        if reached {
            break;
        }
    }
    // The idle port sends the PAUSE at once.
    let pause = sim.ports[input.index()]
        .wire
        .tail()
        .map(|slot| *sim.frames.get(slot));
    assert!(
        matches!(pause, Some(Frame::Pause { quanta: q }) if q == quanta),
        "XOFF sends a PAUSE"
    );
    // Departures empty headroom first; RESUME (0 quanta) once headroom is empty and the
    // share is RESUME_OFFSET below the threshold.
    while sim.ports[input.index()].xoff {
        let from_headroom = sim.ports[input.index()].headroom_used.min(1_000);
        sim.leave_ingress(data_packet(1_000, input));
        shared -= 1_000 - from_headroom;
        assert_eq!(sim.buffers[2].used, shared);
        let q = &sim.ports[input.index()];
        let due = q.headroom_used == 0 && shared + RESUME_OFFSET <= (pool - shared) >> alpha_shift;
        assert_eq!(
            !q.xoff, due,
            "XON exactly when below the threshold by the offset"
        );
    }
    // The port is still sending the PAUSE: the RESUME waits for it.
    assert_eq!(
        sim.ports[input.index()].pfc_pending,
        Some(0),
        "XON sends a RESUME"
    );
}

#[test]
fn beyond_the_threshold_headroom_takes_packets_until_it_is_full() {
    let cfg = RoceConfig {
        switch_buffer: 1 << 20,
        ..RoceConfig::default()
    };
    let mut sim = two_hosts(cfg, None);
    let (switch, input) = (NodeId(2), switch_port(&sim, 0));
    while !sim.ports[input.index()].xoff {
        assert!(sim.admit(switch, input, 1_000));
    }
    let headroom = sim.ports[input.index()].headroom;
    assert!(headroom > 0, "PFC gives a switch port headroom");
    let mut taken = sim.ports[input.index()].headroom_used;
    while sim.admit(switch, input, 1_000) {
        taken += 1_000;
    }
    assert_eq!(sim.ports[input.index()].headroom_used, taken);
    assert!(
        taken <= headroom && taken + 1_000 > headroom,
        "headroom {headroom}, took {taken}"
    );
}

#[test]
fn a_pause_stops_data_for_its_quanta_at_the_link_rate() {
    let mut sim = two_hosts(RoceConfig::default(), None);
    let facing = switch_port(&sim, 1);
    let host = sim.topo.port(facing).peer;
    // Host 1's NIC sends PAUSE to the switch port facing it, arriving at 5 us.
    let at = Time::from_us(5);
    let slot = sim.frames.alloc(Frame::Pause { quanta: 1_000 });
    let (frames, queue) = (&mut sim.frames, &mut sim.state.queue);
    let event = Event::Arrival { port: host.0 };
    sim.ports[host.index()]
        .wire
        .carry(frames, queue, slot, at, 0, event);
    sim.handle_event();
    assert_eq!(sim.now(), at);
    let p = &sim.ports[facing.index()];
    assert_eq!(p.paused_until, at + pause_duration(1_000, RATE));
    assert_eq!(
        pause_duration(1_000, RATE),
        Time::from_ns(5_120),
        "1000 x 512 bits at 100 Gb/s"
    );
    assert_eq!(p.paused_since, Some(at));
}

#[test]
fn a_switch_egress_foresees_a_wake_up_for_a_packet_still_in_the_switch_latency() {
    let mut sim = two_hosts(RoceConfig::default(), None);
    let (out, input) = (switch_port(&sim, 1), switch_port(&sim, 0));
    assert!(matches!(
        sim.after_end(out, Time::ZERO, None),
        AfterEnd::Idle
    ));
    let ready = Time::from_ns(700);
    let slot = sim.frames.alloc(Frame::Packet(data_packet(1_100, input)));
    let o = &mut sim.ports[out.index()];
    sim.frames.push_back(&mut o.queues[DATA], slot, ready);
    assert!(
        matches!(sim.after_end(out, Time::from_ns(600), None), AfterEnd::Wake(t) if t == ready)
    );
    assert!(matches!(
        sim.after_end(out, ready, None),
        AfterEnd::Sendable
    ));
    // Paused data waits for the pause's end instead.
    sim.ports[out.index()].paused_until = Time::from_ns(900);
    let at = Time::from_ns(800);
    assert!(matches!(sim.after_end(out, at, None), AfterEnd::Wake(t) if t == Time::from_ns(900)));
    assert_eq!(sim.ports[out.index()].wake_at, NEVER);
}
