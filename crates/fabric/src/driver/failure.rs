//! Link and switch failures, the same on both fabrics: which ports are down, and which
//! the routes go around.
//!
//! A failure takes its links down at `at`: from then on a port of them starts no frame
//! (a frame already being serialised finishes: the cut is taken at a frame boundary, so a
//! lone flow's delay is exact to the frame). Packets routed to a dead port wait at it, and
//! flow control (credits, PFC) holds back what is behind them. `detection + reroute`
//! later the fabric routes around every port down at that moment (the subnet manager's
//! or the routing protocol's new tables, [`Routes::avoiding`]), and the packets waiting
//! at a dead switch port go back through their switch's pipeline to their new egress.
//! When a failure ends (`until`), its ports come back at once and the routes take them
//! in again `detection + reroute` later.

use fabricsim_core::topology::{Routes, Topology};
use fabricsim_core::units::{NodeId, PortId, Time};

/// One failure as a run sees it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    /// Both directed ports of every link it takes down.
    pub ports: Vec<PortId>,
    pub at: Time,
    /// Back up at this time; None: for the rest of the run.
    pub until: Option<Time>,
    /// The switch, when a whole switch fails (RoCEv2 then loses the packets it holds).
    pub switch: Option<NodeId>,
}

/// A fabric's failures and how long it takes to route around them (a fabric's
/// configuration holds one).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FailurePlan {
    pub failures: Vec<Failure>,
    /// From a link going down (or up) to the fabric knowing it.
    pub detection: Time,
    /// From knowing it to every switch forwarding by the new routes.
    pub reroute: Time,
}

impl FailurePlan {
    /// No failure, with `detection` and `reroute` for any that are added.
    pub fn none(detection: Time, reroute: Time) -> FailurePlan {
        FailurePlan {
            failures: Vec::new(),
            detection,
            reroute,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
    }

    /// The run's state for a topology of `ports` ports.
    pub fn start(&self, ports: usize) -> Failures {
        Failures::new(self.failures.clone(), self.detection, self.reroute, ports)
    }
}

/// What happens at a failure's instants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Down,
    Up,
    /// Routes recomputed around the ports down at this instant.
    Reroute,
}

/// The failures of a run and the state they leave the ports in.
#[derive(Clone, Debug, Default)]
pub struct Failures {
    pub list: Vec<Failure>,
    /// How long after a port goes down (or up) the routes follow.
    pub delay: Time,
    /// Per port: how many failures hold it down now (empty without failures).
    down: Vec<u16>,
    /// Per port: whether the current routes go around it (empty without failures).
    avoided: Vec<bool>,
    /// The switches down now, each once per failure holding it.
    switches_down: Vec<NodeId>,
}

impl Failures {
    pub fn new(list: Vec<Failure>, detection: Time, reroute: Time, ports: usize) -> Failures {
        let sized = if list.is_empty() { 0 } else { ports };
        Failures {
            list,
            delay: detection + reroute,
            down: vec![0; sized],
            avoided: vec![false; sized],
            switches_down: Vec::new(),
        }
    }

    /// Whether the run has failures at all (the hot paths check nothing else without).
    #[inline(always)]
    pub fn any(&self) -> bool {
        !self.down.is_empty()
    }

    /// Whether `port` is down now.
    #[inline(always)]
    pub fn is_down(&self, port: PortId) -> bool {
        self.any() && self.down[port.index()] > 0
    }

    /// Whether the current routes go around `port` (a packet routed to it before is stale).
    #[inline(always)]
    pub fn avoided(&self, port: PortId) -> bool {
        self.any() && self.avoided[port.index()]
    }

    /// Whether switch `node` is down now (what reaches it is lost, or on InfiniBand held).
    #[inline(always)]
    pub fn switch_is_down(&self, node: NodeId) -> bool {
        !self.switches_down.is_empty() && self.switches_down.contains(&node)
    }

    /// Every instant to schedule: (time, failure index, phase), each failure's in order.
    pub fn instants(&self) -> Vec<(Time, u32, Phase)> {
        let mut out = Vec::new();
        for (i, f) in self.list.iter().enumerate() {
            let i = i as u32;
            out.push((f.at, i, Phase::Down));
            out.push((f.at + self.delay, i, Phase::Reroute));
            if let Some(u) = f.until {
                out.push((u, i, Phase::Up));
                out.push((u + self.delay, i, Phase::Reroute));
            }
        }
        out
    }

    /// Failure `i` takes its ports down (`up` false) or releases them; returns the ports
    /// whose state changed.
    pub fn set(&mut self, i: u32, up: bool) -> Vec<PortId> {
        if let Some(s) = self.list[i as usize].switch {
            if up {
                let at = self.switches_down.iter().position(|&d| d == s);
                self.switches_down
                    .remove(at.expect("a switch that went down"));
            } else {
                self.switches_down.push(s);
            }
        }
        let mut changed = Vec::new();
        for &p in &self.list[i as usize].ports {
            let d = &mut self.down[p.index()];
            let was = *d > 0;
            if up {
                *d -= 1;
            } else {
                *d += 1;
            }
            if was != (*d > 0) {
                changed.push(p);
            }
        }
        changed
    }

    /// The routes around every port down now (callers then move the packets waiting at
    /// those ports, [`Self::down_ports`]).
    pub fn reroute(&mut self, topo: &Topology) -> Routes {
        for (a, &d) in self.avoided.iter_mut().zip(&self.down) {
            *a = d > 0;
        }
        Routes::avoiding(topo, &self.avoided)
    }

    /// The ports down now, in increasing order.
    pub fn down_ports(&self) -> Vec<PortId> {
        (0..self.down.len() as u32)
            .map(PortId)
            .filter(|&p| self.down[p.index()] > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_failures_hold_a_port_down_until_both_end() {
        let f = |ports: &[u32], at: u64, until: u64| Failure {
            ports: ports.iter().map(|&p| PortId(p)).collect(),
            at: Time(at),
            until: Some(Time(until)),
            switch: None,
        };
        let mut s = Failures::new(
            vec![f(&[1, 2], 10, 50), f(&[2, 3], 20, 40)],
            Time(3),
            Time(4),
            5,
        );
        assert_eq!(s.set(0, false), vec![PortId(1), PortId(2)]);
        assert_eq!(s.set(1, false), vec![PortId(3)]);
        assert_eq!(s.set(1, true), vec![PortId(3)]);
        assert!(s.is_down(PortId(2)));
        assert_eq!(s.set(0, true), vec![PortId(1), PortId(2)]);
        assert!(!s.is_down(PortId(2)));
        let at: Vec<u64> = s.instants().iter().map(|i| i.0.ps()).collect();
        assert_eq!(at, vec![10, 17, 50, 57, 20, 27, 40, 47]);
        assert!(!Failures::default().any());
    }
}
