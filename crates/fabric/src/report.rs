//! What a run measured, as plain data for the experiment layer to serialise.

use crate::workload::Message;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::{PortId, Time};

/// One flow's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowResult {
    pub src: u32,
    pub dst: u32,
    pub bytes: u64,
    pub start: Time,
    /// When the receiver held every byte (plus the HCA receive latency); None if unfinished.
    pub finish: Option<Time>,
    /// When the sender saw the final ACK.
    pub acked: Option<Time>,
    /// Ideal completion time on an empty fabric (see `ideal_fct`).
    pub ideal: Time,
    pub delivered_bytes: u64,
    /// The messages it stands for: 1, or at flow level a compact collective edge's
    /// pieces on the wire (each a message at packet level).
    pub pieces: u64,
    /// A compact edge's piece's completion time, from its posting (its step); None for
    /// a plain message.
    pub piece_fct: Option<Time>,
    /// A data-path stage or an NVLink SHARP operation: a transfer inside one server
    /// whose ends are one host (a SHARP contribution, whose ends are one host too,
    /// crosses the network).
    pub local: bool,
}

impl FlowResult {
    /// A flow of `msg` that has delivered nothing yet, with its ideal completion time.
    pub fn new(msg: &Message, ideal: Time) -> Self {
        FlowResult {
            src: msg.src.0,
            dst: msg.dst.0,
            bytes: msg.size,
            start: msg.start,
            finish: None,
            acked: None,
            ideal,
            delivered_bytes: 0,
            pieces: 1,
            piece_fct: None,
            local: msg.local.is_some(),
        }
    }
}

/// One directed port's counters.
#[derive(Clone, Debug, PartialEq)]
pub struct PortResult {
    pub node: u32,
    pub port: u16,
    pub peer_node: u32,
    /// A link from a switch to a switch (where load balancing chooses).
    pub between_switches: bool,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    /// Largest bytes queued for this egress at once (switch ports).
    pub peak_queue_bytes: u64,
    /// Largest occupancy of this port's input buffer, any VL, in bytes.
    pub peak_input_bytes: u64,
    /// Time a ready packet waited here for credits.
    pub credit_stall: Time,
    pub credit_packets: u64,
    /// PFC frames (PAUSE and RESUME) this port sent.
    pub pause_frames: u64,
    /// Time this port's data was paused by its peer.
    pub paused: Time,
    /// Packets dropped here: on entry through this port (buffer full, or a stalled NIC's
    /// receiver), or at this egress by the PFC watchdog.
    pub drops: u64,
    /// Packets this egress marked (ECN CE on RoCEv2, FECN on InfiniBand).
    pub ecn_marks: u64,
}

impl PortResult {
    /// Port `id` of `topo` with every counter at zero.
    pub fn new(topo: &Topology, id: PortId) -> Self {
        let spec = topo.port(id);
        let peer = topo.port(spec.peer).node;
        let switch = |n: fabricsim_core::units::NodeId| {
            matches!(
                topo.nodes()[n.index()],
                fabricsim_core::topology::NodeKind::Switch { .. }
            )
        };
        PortResult {
            node: spec.node.0,
            port: spec.local,
            peer_node: peer.0,
            between_switches: switch(spec.node) && switch(peer),
            tx_bytes: 0,
            tx_packets: 0,
            peak_queue_bytes: 0,
            peak_input_bytes: 0,
            credit_stall: Time::ZERO,
            credit_packets: 0,
            pause_frames: 0,
            paused: Time::ZERO,
            drops: 0,
            ecn_marks: 0,
        }
    }
}

/// The whole run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunReport {
    pub sim_time: Time,
    pub events: u64,
    pub flows: Vec<FlowResult>,
    pub ports: Vec<PortResult>,
    pub drops: u64,
    pub retransmitted_packets: u64,
    /// Packets marked as congested: FECN on InfiniBand, ECN CE on RoCEv2.
    pub congestion_marks: u64,
    /// Congestion notifications returned to senders: BECNs on InfiniBand, CNPs on RoCEv2.
    pub congestion_notifications: u64,
    pub duplicates: u64,
    pub buffer_overflows: u64,
    pub peak_packets_in_flight: u64,
    /// The most packets a receiver held beyond its in-order prefix (RoCEv2 under
    /// adaptive routing or spraying, whose NICs place out of order): what its bitmap must
    /// track; 0 where packets arrive in order or are discarded out of order.
    pub peak_reorder_packets: u64,
    pub stopped_by_time: bool,
    pub pfc_pause_frames: u64,
    pub naks: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    /// PFC watchdog trips (RoCEv2).
    pub watchdog_trips: u64,
    /// A deadlock that stopped the run.
    pub deadlock: Option<Deadlock>,
    /// Cycles of PFC-paused queues found while the PFC watchdog was on (RoCEv2): not
    /// permanent deadlocks, since the watchdog breaks them, so the run went on. One entry
    /// per cycle as it formed (the same cycle again after a watchdog trip is a new one).
    pub pfc_cycles: Vec<Deadlock>,
}

/// A set of queues that can never drain again: each waits on the next one's buffer, which
/// holds only packets queued in the set. The run stops when one is found.
#[derive(Clone, Debug, PartialEq)]
pub struct Deadlock {
    pub at: Time,
    /// One cycle of the wait-for graph: each egress waits on the next one's switch.
    pub cycle: Vec<DeadlockHop>,
}

/// An egress port in a deadlock cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlockHop {
    pub node: u32,
    pub port: u16,
    pub peer_node: u32,
}
