//! The switch: routing (static or adaptive), FECN marking, egress VL arbitration, and SHARP aggregation.

use super::{Frame, Kind, Packet, Release, Simulation, NEVER};
use fabricsim_core::pool::Slot;
use fabricsim_core::units::{HostId, NodeId, PortId, Time};

impl Simulation {
    /// Sends a switch egress port's next packet, chosen by VL arbitration and then
    /// round-robin over the inputs with a ready head, or waits.
    pub(super) fn serve_switch(&mut self, port: PortId, now: Time) {
        let p = &mut self.ports[port.index()];
        let mut blocked = false;
        let mut wake: Option<Time> = None;
        let vls = self.cfg.virtual_lanes as usize;
        let egress = &mut self.egress[port.index() * vls..(port.index() + 1) * vls];
        let tx_credit = &self.tx_credit[port.index() * vls..];
        let frames = &mut self.frames;
        let vl = self.arbitration.pick(&mut p.arbiter, |vl| {
            let e = &mut egress[vl as usize];
            e.mature(frames, now);
            match e.next_input() {
                Some(input) => {
                    let pkt = frames.get(e.head(input)).packet();
                    if tx_credit[vl as usize].can_send(pkt.blocks()) {
                        return true;
                    }
                    blocked = true;
                }
                None => {
                    if e.first_ready != NEVER {
                        wake = Some(wake.map_or(e.first_ready, |w: Time| w.min(e.first_ready)));
                    }
                }
            }
            false
        });
        let Some(vl) = vl else {
            return self.wait(port, blocked, wake, now);
        };
        let (input, slot) = egress[vl as usize].take(&mut self.frames);
        let pkt = *self.frames.get(slot).packet();
        p.queued -= pkt.wire as u64;
        self.loads[port.index()] -= pkt.wire as u64;
        p.arbiter.charge(pkt.blocks());
        // Packets the switch made itself (the last input) hold no input buffer.
        p.releasing = self
            .topo
            .node_ports(p.link.node)
            .get(input as usize)
            .map(|&input_port| Release {
                input: input_port,
                vl,
                blocks: pkt.blocks() as u16,
            });
        self.transmit(port, slot, pkt.wire);
    }

    /// A SHARP packet reached switch `node` on `input`: the aggregation unit takes it
    /// (returning its credits), and sends on what is complete: a reduced chunk to the
    /// parent, or at the root the result down, or (going down) copies to every child.
    pub(super) fn sharp_at_switch(&mut self, node: NodeId, input: PortId, pkt: Packet, now: Time) {
        let q = self.vl_index(input, pkt.vl);
        self.rx_credit[q].on_free(pkt.blocks());
        self.ports[input.index()].fc_pending |= 1 << pkt.vl;
        self.try_transmit(input);
        self.count_in_flight(-1);
        let g = &mut self.sharp[pkt.dst as usize];
        let outs: Vec<(PortId, Kind)> = match pkt.kind {
            Kind::SharpUp if !g.contribute(node, pkt.index) => Vec::new(),
            Kind::SharpUp => match g.up[node.index()] {
                Some(p) => vec![(p, Kind::SharpUp)],
                None => g.down[node.index()]
                    .iter()
                    .map(|&p| (p, Kind::SharpDown))
                    .collect(),
            },
            _ => g.down[node.index()]
                .iter()
                .map(|&p| (p, Kind::SharpDown))
                .collect(),
        };
        for (out, kind) in outs {
            self.enqueue_generated(out, Packet { kind, ..pkt }, now);
        }
    }

    /// The egress of switch `node` towards `dst`: the static route's port, or with
    /// adaptive routing the least loaded candidate (the static one on a tie).
    #[inline(always)]
    pub(super) fn route(&self, node: NodeId, dst: HostId) -> PortId {
        let preferred = self.routes.static_port(node, dst);
        if !self.cfg.adaptive_routing {
            return preferred;
        }
        let mut best = preferred;
        let mut best_load = self.load(preferred);
        for &c in self.routes.candidates(node, dst) {
            let load = self.load(c);
            if load < best_load {
                best = c;
                best_load = load;
            }
        }
        best
    }

    /// Queues a packet the switch made itself at egress `out`, after the switch latency.
    pub(super) fn enqueue_generated(&mut self, out: PortId, pkt: Packet, now: Time) {
        self.count_in_flight(1);
        let queue = self.vl_index(out, pkt.vl);
        let e = &mut self.egress[queue];
        let local = e.radix as usize - 1;
        let slot = self.frames.alloc(Frame::Packet(pkt));
        e.push(&mut self.frames, local, slot, now + self.cfg.switch_latency);
        self.count_queued(out, pkt.wire);
        self.try_transmit(out);
    }

    /// Counts `bytes` more queued at egress `out`: its peak, and adaptive routing's load.
    pub(super) fn count_queued(&mut self, out: PortId, bytes: u32) {
        let o = &mut self.ports[out.index()];
        o.queued += bytes as u64;
        let c = &mut self.counters[out.index()];
        c.peak_queue = c.peak_queue.max(o.queued);
        self.add_load(out, bytes as i64);
    }

    /// Routes the packet in `slot`, which arrived at switch `node` on `input`, into an
    /// egress queue.
    pub(super) fn forward(&mut self, node: NodeId, input: PortId, slot: Slot, now: Time) {
        let pkt = *self.frames.get(slot).packet();
        if matches!(pkt.kind, Kind::SharpUp | Kind::SharpDown) {
            self.frames.free(slot);
            self.sharp_at_switch(node, input, pkt, now);
            return;
        }
        let out = self.route(node, HostId(pkt.dst));
        let local = self.ports[input.index()].link.local as usize;
        let ready = now + self.cfg.switch_latency;
        let queue = self.vl_index(out, pkt.vl);
        let e = &mut self.egress[queue];
        if let Some(cc) = &self.cfg.congestion_control {
            if pkt.kind == Kind::Data && e.bytes >= cc.fecn_threshold {
                if let Frame::Packet(p) = self.frames.get_mut(slot) {
                    p.fecn = true;
                }
                self.fecn_marks += 1;
                self.counters[out.index()].fecn_marks += 1;
            }
        }
        e.push(&mut self.frames, local, slot, ready);
        self.count_queued(out, pkt.wire);
        self.try_transmit(out);
    }

    /// Adaptive routing's load measure: bytes queued for the port, plus the bytes its
    /// credits say sit unreturned in the downstream buffer (the switch's view of
    /// congestion beyond the link), plus one if the transmitter is busy. Unverified: NVIDIA
    /// documents that Quantum adaptive routing picks a less loaded port but not its metric;
    /// this one decides how well a permutation spreads (docs/PARAMETERS.md).
    pub(super) fn load(&self, port: PortId) -> u64 {
        self.loads[port.index()]
    }

    /// Adds a change of the port's queue, transmitter or send credits to its load.
    pub(super) fn add_load(&mut self, port: PortId, delta: i64) {
        let load = &mut self.loads[port.index()];
        *load = load.wrapping_add_signed(delta);
    }
}
