//! The credit-loop deadlock check.

use super::{Event, Simulation, NEVER};
use crate::driver::{self, deadlock_hop, WaitGraph};
use crate::parallel::{self, Check};
use crate::report::Deadlock;
use fabricsim_core::topology::NodeKind;
use fabricsim_core::units::{PortId, Time};

impl Simulation {
    /// Schedules the run-wide deadlock check at `at`.
    pub(super) fn schedule_check(&mut self, at: Time) {
        self.deadlock_check_pending = true;
        let tie = self.ties.next(self.ties.global());
        (self.state.queue).schedule_tied(at, tie, Event::DeadlockCheck);
    }

    /// The periodic deadlock check, while any port waits for credits.
    pub(super) fn check_deadlock(&mut self) {
        self.deadlock_check_pending = false;
        let now = self.state.queue.now();
        let mut suspect = self.deadlock_suspect.take();
        let check = Self::judge(&[self], &mut suspect);
        self.deadlock_suspect = suspect;
        match check {
            Check::Deadlock(cycle) => self.state.deadlock = Some(Deadlock { at: now, cycle }),
            Check::Again => self.schedule_check(now + self.cfg.deadlock_check),
            Check::Clear => {}
        }
    }

    /// The deadlock check over the run made of `parts` (this run's parts in
    /// order, or this run alone): a credit loop seen twice in a row with no packet sent
    /// from its ports in between is a deadlock; otherwise the check goes on while a loop
    /// is suspected or any port waits for credits. `suspect` is the loop seen last, with
    /// its ports' packet counts.
    pub(super) fn judge(
        parts: &[&Simulation],
        suspect: &mut Option<(Vec<usize>, Vec<u64>)>,
    ) -> Check {
        let first = parts[0];
        let vls = first.vls();
        match Self::find_deadlock(parts) {
            Some(cycle) => {
                let sent: Vec<u64> = cycle
                    .iter()
                    .map(|&q| parallel::holder(parts, q / vls).ports[q / vls].tx_packets)
                    .collect();
                if suspect
                    .as_ref()
                    .is_some_and(|(c, s)| *c == cycle && *s == sent)
                {
                    let hops = cycle
                        .iter()
                        .map(|&q| deadlock_hop(&first.topo, PortId((q / vls) as u32)))
                        .collect();
                    return Check::Deadlock(hops);
                }
                *suspect = Some((cycle, sent));
            }
            None => *suspect = None,
        }
        let stalled = (0..first.ports.len())
            .any(|i| parallel::holder(parts, i).ports[i].stall_since != NEVER);
        if suspect.is_some() || stalled {
            Check::Again
        } else {
            Check::Clear
        }
    }

    /// A credit loop (see [`WaitGraph::find_deadlock`]): queue and buffer `port x VLs +
    /// vl`; a switch-to-switch egress VL whose next packet lacks credits waits on its
    /// peer's input buffer, whose blocks sit in the egress VLs its packets were queued at.
    /// Returns the cycle as queue numbers.
    pub(super) fn find_deadlock(parts: &[&Simulation]) -> Option<Vec<usize>> {
        let first = parts[0];
        let (topo, vls, n) = (&first.topo, first.vls(), first.ports.len());
        let is_switch = |port: PortId| {
            matches!(
                topo.nodes()[topo.port(port).node.index()],
                NodeKind::Switch { .. }
            )
        };
        // A switch-to-switch egress VL whose ready packet lacks credits.
        let blocked = |i: usize, vl: usize| {
            let s = parallel::holder(parts, i);
            let p = &s.ports[i];
            if p.host.is_some() || !is_switch(p.link.peer) {
                return false;
            }
            let e = &s.egress[i * vls + vl];
            e.next_input().is_some_and(|input| {
                let front = s.frames.get(e.head(input)).packet();
                !s.tx_credit[i * vls + vl].can_send(front.blocks())
            })
        };
        let mut edges: Vec<(u32, u32)> = (0..n)
            .filter(|&i| (0..vls).any(|vl| blocked(i, vl)))
            .map(|i| {
                let link = first.ports[i].link;
                (link.node.0, topo.port(link.peer).node.0)
            })
            .collect();
        if !driver::has_cycle(&mut edges) {
            return None;
        }
        let mut g = WaitGraph {
            waits_on: vec![None; n * vls],
            holds: vec![Vec::new(); n * vls],
            occupancy: (0..n * vls)
                .map(|q| parallel::holder(parts, q / vls).rx_credit[q].used() as u64)
                .collect(),
        };
        for i in 0..n {
            let s = parallel::holder(parts, i);
            let port = PortId(i as u32);
            let peer = s.ports[i].link.peer;
            let inputs = topo.node_ports(topo.port(port).node);
            for (vl, e) in s.egress[i * vls..(i + 1) * vls].iter().enumerate() {
                if !blocked(i, vl) {
                    continue;
                }
                let q = i * vls + vl;
                g.waits_on[q] = Some(peer.index() * vls + vl);
                for (input, blocks) in inputs.iter().zip(e.blocks_by_input(&s.frames)) {
                    if blocks > 0 {
                        g.holds[q].push((input.index() * vls + vl, blocks));
                    }
                }
            }
        }
        g.find_deadlock()
    }
}
