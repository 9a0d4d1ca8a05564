//! What flow level takes from a fabric's configuration: its packets' framing, latencies,
//! routing, and RoCEv2's measured sharing correction.

use fabricsim_core::proto::dcqcn::DcqcnParams;
use fabricsim_core::proto::ecn::RedParams;
use fabricsim_core::units::Time;
use fabricsim_core::wire::{ib, roce};

/// Which fabric's packets the flows stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowWire {
    Infiniband,
    Rocev2(roce::IpVersion),
}

/// How a flow's path is chosen at each switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowRouting {
    /// The d-mod-k static route.
    Static,
    /// Adaptive routing (InfiniBand's, or Ethernet's by egress queue depth), which the
    /// packet models do per packet, as perfect balance: at each hop a flow crosses the
    /// trunk of every candidate port of every switch its packets may reach there, shared
    /// as one link of their summed rate.
    Adaptive,
    /// RoCEv2's ECMP hash of each QP's 5-tuple, seeded as the packet model seeds it: a
    /// message takes its QP's path; a compact edge, whose pieces take the connection's
    /// QPs in turn, spreads its bytes evenly over their paths.
    Ecmp { seed: u64 },
    /// Per-packet spraying: at every switch a packet takes any candidate port alike, so
    /// a flow's bytes split evenly over the candidates hop by hop (each port carrying its
    /// fraction of the flow, shared with every other flow there).
    Spray,
}

/// What flow level takes from the fabric's configuration.
#[derive(Clone, Debug)]
pub struct FlowConfig {
    pub wire: FlowWire,
    pub mtu: u32,
    pub tx_latency: Time,
    pub rx_latency: Time,
    pub switch_latency: Time,
    pub routing: FlowRouting,
    /// How congestion control shares an overloaded port, by load, in increasing load
    /// (see [`Sharing`]); empty: the whole line rate. The experiment layer measures it at
    /// packet level (RoCEv2's congestion control cutting rates below the fair share).
    pub sharing: Vec<Sharing>,
    /// The queue at which congestion control or PFC starts to act on a port (see
    /// [`Onset`]); None: wherever a port is overloaded.
    pub onset: Option<Onset>,
    /// RoCEv2's DCQCN run as a fluid model (see [`FluidDcqcn`]), in place of the
    /// measured `sharing` correction; None: no rate control at flow level.
    pub dcqcn: Option<FluidDcqcn>,
}

/// DCQCN at flow level (`flow::dcqcn`): each switch egress holds a fluid queue fed by
/// its flows' sending rates, ECN marks what leaves it by RED, each connection's receiver
/// returns at most one CNP per `cnp_interval`, and each connection's sender runs the
/// packet model's own reaction point (`proto::dcqcn`) with the same parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct FluidDcqcn {
    pub params: DcqcnParams,
    /// RED's thresholds, on a port of `red_at_bps` (scaled with each port's rate) or,
    /// without it, on every port.
    pub red: RedParams,
    pub red_at_bps: Option<u64>,
    pub cnp_interval: Time,
    /// The most a port's queue holds: where PFC pauses its senders (the dynamic
    /// threshold on an empty buffer), or without PFC the shared buffer.
    pub queue_cap: f64,
    /// Seeds the marking draws (the scenario's seed).
    pub seed: u64,
}

impl FluidDcqcn {
    /// RED's thresholds on a port of `line_bps`.
    pub fn red_on(&self, line_bps: u64) -> RedParams {
        match self.red_at_bps {
            Some(at) if at > 0 => self.red.scaled(at, line_bps),
            _ => self.red,
        }
    }
}

/// The standing queue at which RoCEv2's congestion control or PFC first acts on a port:
/// ECN's first marks (`bytes` on a port of `at_bps`, scaled with each port's rate when
/// `at_bps` is set, as the HPCC model's defaults scale Kmin) or, whichever is less, the
/// `cap` where PFC pauses or the buffer drops (the same on every port). A port whose flows
/// cannot build that queue is shared max-min, without [`Sharing`]'s correction: DCQCN
/// sees no mark there, nor PFC a pause, and packet level shares it fairly (issue 32: two
/// rails' ring edges ECMP collided on an uplink, in 32 KiB steps, marked nothing).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Onset {
    pub bytes: f64,
    pub at_bps: Option<u64>,
    pub cap: f64,
}

impl Onset {
    /// The onset on a port of `line_bps`, bytes.
    pub fn on(&self, line_bps: u64) -> f64 {
        let marks = match self.at_bps {
            Some(at) if at > 0 => self.bytes * line_bps as f64 / at as f64,
            _ => self.bytes,
        };
        marks.min(self.cap)
    }
}

/// The quantiles of the queueing delay a [`Sharing`] holds.
pub const QUEUE_QUANTILES: usize = 16;

/// How a port under a given load is shared when congestion control acts, measured at
/// two transfer sizes: transfers that would take F at line rate take F / `steady` +
/// `transient` (the line through both measurements), or keep the smaller measurement's
/// `small_share` where F is at most its `small_fair`. The load is what the senders of
/// the flows crossing the port could send, in units of its line rate (N line-rate
/// senders into one host: N; sixteen 400G senders over two 1.6T uplinks: 2). DCQCN's
/// first cuts and slow recovery cost about the same time however long the transfers are
/// (the transient), and the rate it settles to is the steady share; where the smaller
/// size stayed under the ECN threshold the transient comes out below zero and the line
/// rises to the smaller size's share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sharing {
    pub load: u32,
    pub steady: f64,
    /// Picoseconds.
    pub transient: f64,
    /// The smaller measurement: its transfers' time at line rate (picoseconds), and the
    /// share it kept.
    pub small_fair: f64,
    pub small_share: f64,
    /// The queue a message arriving at the port meets while it is loaded, as delays in
    /// picoseconds: FIFO service puts it behind the bytes already queued, where max-min
    /// sharing would serve it at once (queueing behind long flows). Quantiles of what
    /// the probe's messages met, in increasing order: each message meets the quantile
    /// its draw picks, so flow level's tails follow the measured spread.
    pub queue: [f64; QUEUE_QUANTILES],
}

impl FlowConfig {
    /// The share of its line rate a port keeps while its flows have `fair` picoseconds
    /// of bytes at line rate to send (see [`Sharing`]), at most 1: the transient (or the
    /// small transfers' share) of the `line_load` its senders start with at their line
    /// rates, the steady share of the `load` they settle to (the same but for a ring's
    /// edges, which forward at their ring's pace). The measurements are interpolated in
    /// log2 of the load between the measured loads (from no loss at a load of 1), the
    /// last one's beyond it.
    pub(super) fn sharing_share(&self, load: f64, line_load: f64, fair: f64) -> f64 {
        let Some(start) = self.sharing_at(line_load) else {
            return 1.0;
        };
        let steady = self.sharing_at(load).map_or(1.0, |p| p.steady);
        if fair <= start.small_fair {
            return start.small_share;
        }
        (fair / (fair / steady + start.transient)).min(1.0)
    }

    /// The queueing delay a message meets on arriving at a port under `load` that has
    /// been overloaded for `overloaded`: its senders overdrive it by `load - 1` times its
    /// line rate until congestion control and PFC hold the queue where the probe
    /// measured it ([`Sharing::queue`], the quantile `draw` picks, taken modulo their
    /// number), so the queue's delay grows by `load - 1` per unit of time up to that.
    /// Zero without a measurement or at a load of at most 1.
    pub(super) fn queue_delay(&self, load: f64, overloaded: Time, draw: u64) -> Time {
        let Some(p) = self.sharing_at(load) else {
            return Time::ZERO;
        };
        let rising = (load - 1.0) * overloaded.ps() as f64;
        let held = p.queue[(draw % QUEUE_QUANTILES as u64) as usize];
        Time(rising.min(held).max(0.0) as u64)
    }

    /// The sharing at `load`, interpolated as [`Self::sharing_share`] says; None below a
    /// load of 1 or without a measurement.
    pub fn sharing_at(&self, load: f64) -> Option<Sharing> {
        if load <= 1.0 || self.sharing.is_empty() {
            return None;
        }
        let unloaded = Sharing {
            load: 1,
            steady: 1.0,
            transient: 0.0,
            small_fair: self.sharing[0].small_fair,
            small_share: 1.0,
            queue: [0.0; QUEUE_QUANTILES],
        };
        let mut lo = unloaded;
        let mut point = *self.sharing.last().expect("not empty");
        for &p in &self.sharing {
            if load <= p.load as f64 {
                let x = (load.log2() - (lo.load as f64).log2())
                    / ((p.load as f64).log2() - (lo.load as f64).log2());
                let mix = |a: f64, b: f64| a + (b - a) * x;
                point = Sharing {
                    load: p.load,
                    steady: mix(lo.steady, p.steady),
                    transient: mix(lo.transient, p.transient),
                    small_fair: mix(lo.small_fair, p.small_fair),
                    small_share: mix(lo.small_share, p.small_share),
                    queue: std::array::from_fn(|q| mix(lo.queue[q], p.queue[q])),
                };
                break;
            }
            lo = p;
        }
        Some(point)
    }
}

impl FlowConfig {
    /// A packet's link bytes.
    pub(super) fn frame_len(&self, payload: u32, first: bool) -> u64 {
        match self.wire {
            FlowWire::Infiniband => ib::write_packet_len(payload, first) as u64,
            FlowWire::Rocev2(ip) => roce::write_frame_len(ip, payload, first) as u64,
        }
    }

    /// A message's link bytes: its packets, each with its headers.
    pub fn wire_bytes(&self, size: u64) -> u64 {
        let mtu = self.mtu as u64;
        let packets = size.div_ceil(mtu).max(1);
        let last = size - (packets - 1) * mtu;
        self.frame_len(if packets == 1 { last as u32 } else { self.mtu }, true)
            + self.frame_len(self.mtu, false) * packets.saturating_sub(2)
            + if packets > 1 {
                self.frame_len(last as u32, false)
            } else {
                0
            }
    }
}
