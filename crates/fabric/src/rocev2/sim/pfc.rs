//! Priority flow control: pauses received and sent, stalled receivers, the PFC watchdog and the deadlock check.

use super::{Event, Frame, Simulation, DATA, NEVER};
use crate::driver::{self, deadlock_hop, WaitGraph};
use crate::parallel;
use crate::report::{Deadlock, DeadlockHop};
use fabricsim_core::units::{HostId, PortId, Time};

impl Simulation {
    /// A NIC's receiver stalls (it pauses its switch port, refreshing without end, and
    /// drops what still arrives) or recovers (it sends RESUME).
    pub(super) fn set_stalled(&mut self, host: HostId, stalled: bool) {
        self.nics[host.index()].stalled = stalled;
        let port = self.topo.host_port(host);
        let p = &mut self.ports[port.index()];
        p.xoff = stalled;
        p.pause_refresh_at = NEVER;
        p.pfc_pending = Some(if stalled { self.cfg.pause_quanta } else { 0 });
        self.try_transmit(port);
    }

    /// The watchdog's look at a switch egress: trips if the egress has been paused without
    /// a break for the whole timeout while holding data.
    pub(super) fn watchdog(&mut self, port: PortId, now: Time) {
        let Some(wd) = self.cfg.watchdog else { return };
        let p = &mut self.ports[port.index()];
        p.watchdog_pending = false;
        let Some(since) = p.paused_since.filter(|_| p.paused_until > now) else {
            return;
        };
        if now < since + wd.timeout {
            p.watchdog_pending = true;
            self.schedule(since + wd.timeout, Event::Watchdog { port: port.0 });
            return;
        }
        if p.queues[DATA].is_empty() {
            return;
        }
        let mut flushed = Vec::new();
        while let Some(slot) = self.frames.pop_front(&mut p.queues[DATA]) {
            flushed.push(*self.frames.free(slot).packet());
        }
        self.watchdog_trips += 1;
        p.paused_total += now - since;
        p.paused_since = None;
        p.paused_until = now;
        p.pfc_ignored_until = now + wd.restore;
        p.queued[DATA] = 0;
        for pkt in flushed {
            self.drop_data(port, pkt);
            self.leave_ingress(pkt);
        }
        self.try_transmit(port);
    }

    /// Whether data on this port is paused by the peer at `now`, settling paused time.
    pub(super) fn data_paused(&mut self, port: PortId, now: Time) -> bool {
        let p = &mut self.ports[port.index()];
        if p.paused_until > now {
            return true;
        }
        if let Some(s) = p.paused_since.take() {
            p.paused_total += p.paused_until.max(s) - s;
        }
        false
    }

    /// The periodic deadlock check, while any switch egress is paused.
    /// With the PFC watchdog on, a cycle is not permanent: it is recorded (once until the
    /// watchdog next trips, or until another cycle forms) and the run goes on; without
    /// it, the cycle is a deadlock and stops the run.
    pub(super) fn check_deadlock(&mut self, now: Time) {
        self.deadlock_check_pending = false;
        if let Some(cycle) = Self::find_deadlock(&[self], now) {
            if self.cfg.watchdog.is_none() {
                self.state.deadlock = Some(Deadlock { at: now, cycle });
                return;
            }
            let seen = self.pfc_cycles.last().is_some_and(|d| d.cycle == cycle)
                && self.trips_at_last_cycle == self.watchdog_trips;
            if !seen {
                self.pfc_cycles.push(Deadlock { at: now, cycle });
                self.trips_at_last_cycle = self.watchdog_trips;
            }
        }
        if Self::any_switch_paused(&[self], now) {
            self.deadlock_check_pending = true;
            self.schedule_global(now + self.cfg.deadlock_check, Event::DeadlockCheck);
        }
    }

    /// Whether any switch egress of the run made of `parts` is paused at `now`.
    pub(crate) fn any_switch_paused(parts: &[&Simulation], now: Time) -> bool {
        (0..parts[0].ports.len()).any(|i| {
            let p = &parallel::holder(parts, i).ports[i];
            p.paused_until > now && p.host().is_none()
        })
    }

    /// A deadlock among paused switch-to-switch egresses holding data (see
    /// [`WaitGraph::find_deadlock`]) in the run made of `parts`: each waits on its peer's
    /// ingress, which blocks it while in XOFF; an ingress's bytes sit in the egresses its
    /// packets were queued at.
    pub(crate) fn find_deadlock(parts: &[&Simulation], now: Time) -> Option<Vec<DeadlockHop>> {
        let first = parts[0];
        let n = first.ports.len();
        let blocked = |i: usize| {
            let p = &parallel::holder(parts, i).ports[i];
            p.paused_until > now
                && !p.queues[DATA].is_empty()
                && p.host().is_none()
                && p.peer_switch().is_some()
        };
        let mut edges: Vec<(u32, u32)> = (0..n)
            .filter(|&i| blocked(i))
            .map(|i| {
                let link = first.ports[i].link;
                (link.node.0, first.ports[link.peer.index()].link.node.0)
            })
            .collect();
        if !driver::has_cycle(&mut edges) {
            return None;
        }
        let mut g = WaitGraph {
            waits_on: vec![None; n],
            holds: vec![Vec::new(); n],
            occupancy: (0..n)
                .map(|i| {
                    let q = &parallel::holder(parts, i).ports[i];
                    if q.xoff {
                        q.ingress + q.headroom_used
                    } else {
                        0
                    }
                })
                .collect(),
        };
        for i in 0..n {
            if blocked(i) {
                let s = parallel::holder(parts, i);
                let p = &s.ports[i];
                g.waits_on[i] = Some(p.link.peer.index());
                for pkt in s.frames.iter(&p.queues[DATA]).map(Frame::packet) {
                    g.holds[i].push((pkt.port.input().index(), pkt.wire as u64));
                }
            }
        }
        let cycle = g.find_deadlock()?;
        Some(
            cycle
                .into_iter()
                .map(|e| deadlock_hop(&first.topo, PortId(e as u32)))
                .collect(),
        )
    }
}
