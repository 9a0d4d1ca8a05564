//! The rooms of the InfiniBand model, each driven directly with explicit times: a switch
//! egress VL's maturing and round-robin queues, credits holding a packet back, and a
//! flow-control packet taking link time without an event.

use super::{EgressVl, Frame, Kind, Packet, Simulation, NEVER};
use crate::infiniband::IbConfig;
use crate::workload::build;
use fabricsim_core::pool::Pool;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::{BitRate, HostId, PortId, Time};
use fabricsim_core::wire::ib::{self, Opcode};

const RATE: BitRate = BitRate::gbps(100);

fn packet(flow: u32, wire: u32) -> Packet {
    Packet {
        flow,
        index: 0,
        payload: wire - 30,
        wire,
        dst: 1,
        kind: Kind::Data,
        opcode: Opcode::RdmaWriteOnly,
        vl: 0,
        fecn: false,
        ack_req: false,
        input: 0,
    }
}

#[test]
fn an_egress_vl_serves_a_packet_only_after_the_switch_latency_and_inputs_in_turn() {
    let mut frames: Pool<Frame> = Pool::default();
    let mut e = EgressVl::new(3);
    // Input 0 queues two packets, input 1 one; ready 150 ns after they came.
    let arrivals = [(0, 0u32, 0u64), (0, 1, 10), (1, 2, 20)];
    for (input, flow, at_ns) in arrivals {
        let slot = frames.alloc(Frame::Packet(packet(flow, 1_000)));
        e.push(&mut frames, input, slot, Time::from_ns(at_ns + 150));
    }
    assert_eq!(e.bytes, 3_000);
    assert_eq!(e.first_ready, Time::from_ns(150));
    e.mature(&mut frames, Time::from_ns(149));
    assert_eq!(
        e.next_input(),
        None,
        "nothing is ready inside the switch latency"
    );
    e.mature(&mut frames, Time::from_ns(170));
    assert_eq!(e.first_ready, NEVER, "all three have matured");
    // Round-robin over the inputs with a ready head: 0, 1, then 0 again.
    let mut served = Vec::new();
    while e.next_input().is_some() {
        let (input, slot) = e.take(&mut frames);
        served.push((input, frames.free(slot).packet().flow));
    }
    assert_eq!(served, [(0, 0), (1, 2), (0, 1)]);
    assert_eq!(e.bytes, 0);
}

/// Two hosts on one switch, no traffic.
fn two_hosts(cfg: IbConfig) -> Simulation {
    let topo = Topology::single_switch(2, RATE, Time::from_ns(100)).unwrap();
    Simulation::new(cfg, topo, &build(&[], 1), None).unwrap()
}

#[test]
fn a_switch_egress_without_the_credits_for_its_packet_waits_and_notes_the_stall() {
    let mut sim = two_hosts(IbConfig::default());
    let out = sim.topo.port(sim.topo.host_port(HostId(1))).peer;
    let input = sim.topo.port(sim.topo.host_port(HostId(0))).peer;
    // The receiver's buffer is full: no credits left on VL 0.
    let vl0 = sim.vl_index(out, 0);
    let all = sim.tx_credit[vl0].available();
    sim.update_tx_credit(out, 0, |c| c.on_send(all));
    let slot = sim.frames.alloc(Frame::Packet(packet(0, 2_000)));
    let local = sim.ports[input.index()].link.local as usize;
    sim.egress[vl0].push(&mut sim.frames, local, slot, Time::ZERO);
    sim.count_queued(out, 2_000);
    sim.try_transmit(out);
    let p = &sim.ports[out.index()];
    assert!(!p.busy, "no credits: nothing is sent");
    assert_eq!(
        p.stall_since,
        Time::ZERO,
        "the stall is noted when it starts"
    );
    // Credits for exactly the packet's blocks let it go.
    let blocks = ib::credit_blocks(2_000);
    sim.update_tx_credit(out, 0, |c| c.on_limit(c.fctbs() + blocks));
    sim.try_transmit(out);
    assert!(sim.ports[out.index()].busy);
    assert_eq!(sim.ports[out.index()].stall_since, NEVER);
}

#[test]
fn a_flow_control_packet_takes_link_time_but_no_event() {
    let mut sim = two_hosts(IbConfig::default());
    let port = PortId(sim.topo.host_port(HostId(0)).0);
    let events = sim.state.queue.len();
    sim.ports[port.index()].fc_pending = 1;
    sim.try_transmit(port);
    let p = &sim.ports[port.index()];
    let len = ib::FLOW_CONTROL_PACKET_LEN as u64;
    assert_eq!(
        p.free_at,
        RATE.serialization(len),
        "the link is busy for its serialisation"
    );
    assert!(!p.busy, "the transmitter is free for the next packet");
    assert_eq!(sim.state.queue.len(), events + 1, "one event: its arrival");
}
