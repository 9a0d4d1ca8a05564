//! The switch: ingress admission to the shared buffer, routing by ECMP, ECN marking and egress scheduling.

use super::{Kind, Packet, PacketPort, PortState, Simulation, CONTROL, DATA, NEVER};
use crate::driver::BuildError;
use crate::driver::{self};
use crate::rocev2::config::{LoadBalancing, RoceConfig, FLOWLET_ENTRIES};
use fabricsim_core::pool::Slot;
use fabricsim_core::proto::ecn::marking_draw;
use fabricsim_core::proto::ecn::splitmix64;
use fabricsim_core::proto::pfc::RESUME_OFFSET;
use fabricsim_core::topology::{NodeKind, Topology};

use fabricsim_core::units::{HostId, NodeId, PortId, Time};

/// A switch's shared buffer (docs/REFERENCE.md section 4, as in the HPCC ns-3 model).
#[derive(Clone, Debug, Default)]
pub(super) struct SharedBuffer {
    /// Bytes in the shared pool, all ingress queues together.
    pub(super) used: u64,
    /// Buffer left for sharing once headroom and reserves are set aside.
    pub(super) pool: u64,
}

impl Simulation {
    /// A switch egress: control first, then data unless paused. Err(wake) if nothing.
    pub(super) fn pick_switch(&mut self, port: PortId, now: Time) -> Result<Slot, Option<Time>> {
        let paused = self.data_paused(port, now);
        let class = self.sendable_class(port, now, paused, None)?;
        let p = &mut self.ports[port.index()];
        let slot = self.frames.pop_front(&mut p.queues[class]);
        let slot = slot.expect("front exists");
        let pkt = self.frames.get_mut(slot).packet_mut();
        if class == DATA {
            if let Some(red) = &p.red {
                let prob = red.probability(p.queued[DATA]);
                if prob > 0.0 && !pkt.ce {
                    let u = marking_draw(self.cfg.seed, port.0, p.ecn_draws);
                    p.ecn_draws += 1;
                    if u < prob {
                        pkt.ce = true;
                        p.ecn_marks += 1;
                    }
                }
            }
        }
        p.queued[class] -= pkt.wire as u64;
        if class == DATA {
            let pkt = *pkt;
            self.leave_ingress(pkt);
        }
        Ok(slot)
    }

    /// A data packet left its switch: free its ingress bytes and resume the upstream when
    /// the ingress has drained below the threshold.
    pub(super) fn leave_ingress(&mut self, pkt: Packet) {
        let input = pkt.port.input().index();
        let node = self.ports[input].node.index();
        let bytes = pkt.wire as u64;
        let reserve = self.cfg.reserve;
        let q = &mut self.ports[input];
        let from_headroom = bytes.min(q.headroom_used);
        q.headroom_used -= from_headroom;
        let rest = bytes - from_headroom;
        let shared_before = q.ingress.saturating_sub(reserve);
        q.ingress -= rest;
        let shared_after = q.ingress.saturating_sub(reserve);
        self.buffers[node].used -= shared_before - shared_after;
        if self.cfg.pfc && q.xoff && q.headroom_used == 0 {
            let threshold = self.threshold(node);
            let q = &mut self.ports[input];
            if shared_after == 0 || shared_after + RESUME_OFFSET <= threshold {
                q.xoff = false;
                q.pause_refresh_at = NEVER;
                q.pfc_pending = Some(0);
                self.try_transmit(PortId(input as u32));
            }
        }
    }

    /// The dynamic threshold of switch `node`: free shared buffer x alpha.
    pub(super) fn threshold(&self, node: usize) -> u64 {
        let b = &self.buffers[node];
        b.pool.saturating_sub(b.used) >> self.cfg.alpha_shift
    }

    /// A packet (`pkt`, held in `slot`) entered switch `node` by `input`: admit it to the
    /// buffer (or drop it) and queue its slot at the egress it was routed to when sent.
    pub(super) fn forward(
        &mut self,
        node: NodeId,
        input: PortId,
        slot: Slot,
        mut pkt: Packet,
        now: Time,
    ) {
        let mut out = pkt.port.egress();
        if self.failures.any() {
            if self.failures.switch_is_down(node) {
                // A dead switch takes nothing in.
                self.frames.free(slot);
                if pkt.kind == Kind::Data {
                    self.drop_data(input, pkt);
                }
                return;
            }
            if self.failures.avoided(out) {
                // Routed before the routes went around a dead port.
                out = self.route(node, &pkt);
            }
        }
        if self.cfg.load_balancing.decides_on_arrival() {
            out = self.rebalance(node, &pkt, out, now);
        }
        if pkt.kind == Kind::Data {
            // (Only the watchdog sets `pfc_ignored_until`, in a line packets do not
            // otherwise touch.)
            let dropped_at =
                if self.cfg.watchdog.is_some() && self.ports[out.index()].pfc_ignored_until > now {
                    // The watchdog discards data for an egress it has taken out of PFC.
                    Some(out)
                } else if !self.admit(node, input, pkt.wire as u64) {
                    Some(input)
                } else {
                    None
                };
            if let Some(at) = dropped_at {
                self.frames.free(slot);
                self.drop_data(at, pkt);
                return;
            }
        }
        pkt.port = PacketPort::entered_by(input);
        *self.frames.get_mut(slot).packet_mut() = pkt;
        let ready = now + self.cfg.switch_latency;
        let o = &mut self.ports[out.index()];
        let class = pkt.class();
        // Behind a packet of its class it cannot be sendable sooner than that one, so the
        // transmitter's plans stand unless they fall due now: its frame's end has passed,
        // or its wake-up is this instant's (later in the tie order).
        let plans_stand = !o.queues[class].is_empty()
            && if o.busy {
                o.wake_at == NEVER || o.deferred_end_to_come(now, self.state.queue.now_tie())
            } else {
                o.wake_at > now && o.wake_at != NEVER
            };
        self.frames.push_back(&mut o.queues[class], slot, ready);
        o.queued[class] += pkt.wire as u64;
        o.peak_queue = o.peak_queue.max(o.queued[DATA] + o.queued[CONTROL]);
        if !plans_stand {
            self.try_transmit(out);
        }
    }

    /// The egress of switch `node` for `pkt` as decided when it is sent toward the
    /// switch: the one shortest-path port, ECMP's choice, or spraying's (a hash of the
    /// QP and the packet's sequence number, so each packet draws anew). (Adaptive routing
    /// and flowlets decide again on arrival: [`Self::rebalance`].)
    pub(super) fn route(&self, node: NodeId, pkt: &Packet) -> PortId {
        let dst = HostId(pkt.dst);
        let cands = self.routes.candidates(node, dst);
        if cands.len() == 1 {
            cands[0]
        } else {
            // Data and its replies hash the same 5-tuple fields, ordered by direction.
            let mut h = driver::ecmp_hash(self.cfg.seed, node.0, pkt.src, pkt.dst, pkt.sport);
            if self.cfg.load_balancing == LoadBalancing::Spray && pkt.kind == Kind::Data {
                h = splitmix64(h ^ u64::from(pkt.index));
            }
            cands[(h % cands.len() as u64) as usize]
        }
    }

    /// The egress of switch `node` for `pkt` arriving now, `hashed` being ECMP's choice:
    /// adaptive routing takes the candidate with the fewest bytes queued; flowlet
    /// switching the flowlet's port, or for a new flowlet the least queued candidate.
    /// Replies keep `hashed`. Called only where the load balancing decides on arrival.
    pub(super) fn rebalance(
        &mut self,
        node: NodeId,
        pkt: &Packet,
        hashed: PortId,
        now: Time,
    ) -> PortId {
        let lb = self.cfg.load_balancing;
        if pkt.kind != Kind::Data {
            return hashed;
        }
        let cands = self.routes.candidates(node, HostId(pkt.dst));
        if cands.len() == 1 {
            return hashed;
        }
        let least = || {
            let depth = |p: PortId| self.ports[p.index()].queued[DATA];
            cands.iter().copied().fold(
                hashed,
                |best, p| if depth(p) < depth(best) { p } else { best },
            )
        };
        let LoadBalancing::Flowlet { gap } = lb else {
            return least();
        };
        let h = driver::ecmp_hash(self.cfg.seed, node.0, pkt.src, pkt.dst, pkt.sport);
        let slot = self.flowlet_base[node.index()] + (h >> 40) as usize % FLOWLET_ENTRIES;
        let entry = self.flowlets[slot];
        let port = match entry.port {
            Some(p) if now <= entry.last + gap && cands.contains(&p) => p,
            _ => least(),
        };
        self.flowlets[slot] = Flowlet {
            last: now,
            port: Some(port),
        };
        port
    }

    /// Ingress admission of a data packet of `bytes` on `input` of switch `node`: reserve
    /// first, then the shared pool up to the dynamic threshold, then (with PFC) headroom.
    /// Sends PAUSE upstream once headroom is touched or the threshold is reached.
    pub(super) fn admit(&mut self, node: NodeId, input: PortId, bytes: u64) -> bool {
        let n = node.index();
        let threshold = self.threshold(n);
        let reserve = self.cfg.reserve;
        let q = &mut self.ports[input.index()];
        let shared_now = q.ingress.saturating_sub(reserve);
        let shared_after = (q.ingress + bytes).saturating_sub(reserve);
        let to_shared = shared_after - shared_now;
        if to_shared > 0 && shared_after > threshold {
            // Over the threshold: headroom takes it, if there is room.
            if q.headroom_used + bytes > q.headroom {
                return false;
            }
            q.headroom_used += bytes;
        } else {
            q.ingress += bytes;
            self.buffers[n].used += to_shared;
        }
        let q = &mut self.ports[input.index()];
        q.peak_ingress = q.peak_ingress.max(q.ingress + q.headroom_used);
        if self.cfg.pfc && !q.xoff {
            let shared = q.ingress.saturating_sub(reserve);
            if q.headroom_used > 0 || shared >= self.threshold(n) {
                let q = &mut self.ports[input.index()];
                q.xoff = true;
                q.pfc_pending = Some(self.cfg.pause_quanta);
                self.try_transmit(input);
            }
        }
        true
    }
}

/// A flowlet table entry: when its last packet passed and the port it took.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Flowlet {
    last: Time,
    port: Option<PortId>,
}

/// Each switch's shared buffer: what is left of `switch_buffer` once every port's
/// headroom and reserve are set aside (an error names the switch that has none left).
pub(super) fn shared_buffers(
    cfg: &RoceConfig,
    topo: &Topology,
    ports: &[PortState],
) -> Result<Vec<SharedBuffer>, BuildError> {
    let mut buffers = vec![SharedBuffer::default(); topo.nodes().len()];
    for (n, kind) in topo.nodes().iter().enumerate() {
        if let NodeKind::Switch { .. } = kind {
            let set_aside: u64 = topo
                .node_ports(NodeId(n as u32))
                .iter()
                .map(|&p| ports[p.index()].headroom + cfg.reserve)
                .sum();
            if set_aside >= cfg.switch_buffer {
                return Err(BuildError::NoSharedBuffer {
                    buffer: cfg.switch_buffer,
                    switch: n,
                    set_aside,
                });
            }
            buffers[n].pool = cfg.switch_buffer - set_aside;
        }
    }
    Ok(buffers)
}
