//! Parameters of the RoCEv2 fabric model, with their sources.

use crate::driver::failure::FailurePlan;
use fabricsim_core::proto::dcqcn::{DcqcnParams, DcqcnPreset};
use fabricsim_core::proto::ecn::RedParams;
use fabricsim_core::proto::hpcc::HpccParams;
use fabricsim_core::proto::timely::TimelyParams;
use fabricsim_core::units::{BitRate, HostId, Time};
use fabricsim_core::wire::roce::IpVersion;
use serde::Serialize;

/// ECN marking at switch egresses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EcnConfig {
    pub red: RedParams,
    /// When set, `red`'s thresholds are for a port of this rate and scale with each
    /// port's rate (the HPCC ns-3 model's rate maps); otherwise they hold on every port.
    pub scale_from: Option<BitRate>,
}

impl EcnConfig {
    /// The thresholds on a port of `rate`.
    pub fn for_rate(&self, rate: BitRate) -> RedParams {
        match self.scale_from {
            Some(base) => self.red.scaled(base.bps(), rate.bps()),
            None => self.red,
        }
    }
}

/// DCQCN at the NICs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DcqcnConfig {
    pub preset: DcqcnPreset,
    pub params: DcqcnParams,
    /// NP: at most one CNP per flow per this interval (docs/REFERENCE.md section 4: 50 us in the
    /// paper, ConnectX min_time_between_cnps 4 us).
    pub cnp_interval: Time,
}

/// Congestion control that reacts to what each ACK brings back, in place of DCQCN's CNPs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum AckCc {
    /// HPCC: switches stamp INT on data packets, the ACK echoes it.
    Hpcc(HpccParams),
    /// Swift: delay from NIC timestamps against a target. Its parameters follow from the
    /// network's base RTT ([`SwiftParams::default_for`]) unless `base_target` is given.
    ///
    /// [`SwiftParams::default_for`]: fabricsim_core::proto::swift::SwiftParams::default_for
    Swift { base_target: Option<Time> },
    /// TIMELY: the RTT's gradient from NIC timestamps.
    Timely(TimelyParams),
}

impl AckCc {
    /// Its name in `fabric.rocev2.congestion_control`.
    pub fn name(&self) -> &'static str {
        match self {
            AckCc::Hpcc(_) => "hpcc",
            AckCc::Swift { .. } => "swift",
            AckCc::Timely(_) => "timely",
        }
    }
}

/// How a sender recovers lost packets (`fabric.rocev2.loss_recovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LossRecovery {
    /// RoCE's go-back-N: the receiver discards out-of-order packets and NAKs once; the
    /// sender resends from the packet NAKed.
    GoBackN,
    /// IRN's selective repeat (Mittal et al., SIGCOMM 2018): the receiver places out of
    /// order and NAKs each packet beyond its prefix, naming it; the sender resends only
    /// the holes, keeps at most the network's bandwidth-delay product outstanding, and
    /// times out after [`IRN_RTO_LOW`] with few packets outstanding, [`IRN_RTO_HIGH`]
    /// otherwise.
    SelectiveRepeat,
}

impl LossRecovery {
    pub const NAMES: [&'static str; 2] = ["go-back-n", "selective-repeat"];

    pub fn name(self) -> &'static str {
        match self {
            LossRecovery::GoBackN => Self::NAMES[0],
            LossRecovery::SelectiveRepeat => Self::NAMES[1],
        }
    }
}

/// IRN's timeouts: RTO_low with at most [`IRN_FEW_OUTSTANDING`] packets outstanding,
/// RTO_high otherwise (the paper's values, set for 40 Gb/s fabrics; unverified at 400G).
pub const IRN_RTO_LOW: Time = Time::from_us(100);
pub const IRN_RTO_HIGH: Time = Time::from_us(320);
pub const IRN_FEW_OUTSTANDING: u32 = 3;

/// A NIC whose receive pipeline stalls: from `start` it drops what arrives and pauses its
/// switch port without end (the pause storm of Guo et al., SIGCOMM 2016), until `end`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PauseStorm {
    pub host: HostId,
    pub start: Time,
    pub end: Option<Time>,
}

/// The PFC watchdog of switch egresses (Guo et al. 2016; as in switch vendors' "PFC
/// watchdog" features): an egress paused without a break for `timeout` while holding
/// data stops honouring PAUSE for `restore`, dropping its queued and arriving data.
/// Vendors' defaults are 100-200 ms detection; these are scenario parameters with no
/// default (unverified for any product).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PfcWatchdog {
    pub timeout: Time,
    pub restore: Time,
}

/// How switches spread packets over equal-cost egress ports
/// (`fabric.rocev2.load_balancing`). Replies (ACKs, NAKs, CNPs) always follow ECMP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum LoadBalancing {
    /// ECMP: a hash of each QP's 5-tuple, so one path per QP for its whole life.
    Ecmp,
    /// Flowlet switching: a QP's packets keep their port while they come closer together
    /// than `gap`; the first packet after a longer pause starts a new flowlet on the
    /// candidate with the fewest bytes queued (as Broadcom's dynamic load balancing picks
    /// a new flowlet's port by its quality). Each switch keeps [`FLOWLET_ENTRIES`]
    /// entries indexed by the 5-tuple's hash (colliding QPs share one). The receiver is
    /// RoCE's in-order one: a flowlet that overtakes the one before it is discarded and
    /// NAKed, as with standard NICs.
    Flowlet { gap: Time },
    /// Adaptive routing by egress queue depth: each data packet takes the candidate with
    /// the fewest bytes queued when it arrives (ties to the ECMP hash's choice), and the
    /// receiving NIC places packets out of order (Spectrum-X with SuperNICs).
    Adaptive,
    /// Per-packet spraying: each data packet takes a candidate drawn from a hash of its
    /// QP and sequence number; the receiver places packets out of order (RDMA WRITE data
    /// needs no reorder buffer: it keeps a bitmap of the message's packets).
    Spray,
}

impl LoadBalancing {
    /// The names of `fabric.rocev2.load_balancing`.
    pub const NAMES: [&'static str; 4] = ["ecmp", "flowlet", "adaptive", "spray"];

    /// Its name in `fabric.rocev2.load_balancing`.
    pub fn name(self) -> &'static str {
        match self {
            LoadBalancing::Ecmp => Self::NAMES[0],
            LoadBalancing::Flowlet { .. } => Self::NAMES[1],
            LoadBalancing::Adaptive => Self::NAMES[2],
            LoadBalancing::Spray => Self::NAMES[3],
        }
    }

    /// Whether the receiving NIC places packets out of order (a bitmap of the message's
    /// packets, ACKs for the in-order prefix) rather than discarding them.
    pub fn places_out_of_order(self) -> bool {
        matches!(self, LoadBalancing::Adaptive | LoadBalancing::Spray)
    }

    /// Whether a switch picks a data packet's egress when it arrives, from its own state
    /// (queue depths, flowlet table), rather than from the packet's fields alone.
    pub fn decides_on_arrival(self) -> bool {
        matches!(
            self,
            LoadBalancing::Adaptive | LoadBalancing::Flowlet { .. }
        )
    }
}

/// Flowlet table entries per switch (unverified: switch ASICs keep tables of this order,
/// e.g. 4K-64K entries; the figure only matters when QPs collide in it).
pub const FLOWLET_ENTRIES: usize = 4096;

/// The default flowlet gap (unverified: flowlet timeouts for RDMA fabrics are set to a
/// few microseconds, above the path delay spread of a two- or three-tier fabric).
pub const DEFAULT_FLOWLET_GAP: Time = Time(8_000_000);

/// Everything the RoCEv2 model needs besides topology and traffic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoceConfig {
    /// RDMA payload bytes per packet (1024, 2048 or 4096: the RoCE MTU below a 9000 B
    /// Ethernet MTU is 4096; docs/REFERENCE.md section 2).
    pub mtu: u32,
    pub ip: IpVersion,
    /// Port-to-port latency, excluding serialisation (store-and-forward). Default 600 ns,
    /// inside the 500-800 ns quoted for Spectrum-4 / Tomahawk-5 class switches
    /// (docs/REFERENCE.md section 2, unverified).
    pub switch_latency: Time,
    /// NIC latency from posting a WRITE to its first packet being eligible (500 ns, the IB
    /// HCA's figure; unverified).
    pub nic_tx_latency: Time,
    /// NIC latency from the last packet's arrival to the completion (500 ns, unverified).
    pub nic_rx_latency: Time,
    /// Lossless data priority with PFC.
    pub pfc: bool,
    /// Shared packet buffer per switch. Default 32 MiB (SCENARIO.md's example; unverified).
    pub switch_buffer: u64,
    /// PFC headroom per ingress port for the lossless priority; None: the mlx5 rule.
    pub headroom: Option<u64>,
    /// Cable length for the headroom rule, in millimetres (from the link delay at 5 ns/m).
    pub cable_mm: u64,
    /// Guaranteed bytes per ingress queue before the shared pool is used. Default 4 KiB
    /// (unverified; the HPCC ns-3 model reserves a few KB per queue).
    pub reserve: u64,
    /// Dynamic threshold T = free shared buffer / 2^`alpha_shift`. Default 3 (alpha 1/8,
    /// unverified: the HPCC ns-3 model's pfc_a_shift).
    pub alpha_shift: u32,
    /// Quanta in each PAUSE frame (0xFFFF, the largest; re-sent at half its duration while
    /// the ingress stays congested: the refresh point is unverified).
    pub pause_quanta: u16,
    pub ecn: Option<EcnConfig>,
    pub dcqcn: Option<DcqcnConfig>,
    /// HPCC, Swift or TIMELY in place of DCQCN (never both).
    pub ack_cc: Option<AckCc>,
    pub loss_recovery: LossRecovery,
    /// The receiver ACKs every this many packets and on the last one (unverified).
    pub ack_every: u32,
    /// Local ACK timeout exponent t: RTO = 4.096 us x 2^t (docs/REFERENCE.md section 4). Default
    /// 20 (4.29 s), NCCL's default.
    pub rto_exponent: u32,
    /// Seed for ECN marking draws and the ECMP hash.
    pub seed: u64,
    /// How switches spread packets over equal-cost ports. Default ECMP per QP.
    pub load_balancing: LoadBalancing,
    /// NICs that stall and pause their switch port.
    pub pause_storms: Vec<PauseStorm>,
    pub watchdog: Option<PfcWatchdog>,
    /// While any switch egress is paused, the wait-for graph of paused queues is checked
    /// for a deadlock this often (the check is exact; this only bounds detection delay).
    pub deadlock_check: Time,
    /// Every active flow's pacing and sending rates are sampled this often (rates.csv).
    pub rate_sample: Time,
    /// Keep rates.csv's records (DCQCN cuts and periodic samples). Off unless a run writes
    /// rates.csv, so other runs pay nothing for them.
    pub record_rates: bool,
    /// A test mode, not a scenario key: one event at every frame's end, with no
    /// foresight (see `Simulation::transmit`). Its results must equal the default's in
    /// everything but the event count; a difference means something made a packet
    /// sendable without telling its transmitter.
    pub plain_schedule: bool,
    /// Link and switch failures. Detection default 1 ms (loss of signal after the PHY's
    /// debounce; BFD at its common 300 ms x 3 takes about a second), re-route 50 ms (BGP
    /// withdrawals and FIB updates across a Clos, as RFC 7938 routes one): estimates,
    /// not measurements.
    #[serde(skip_serializing_if = "FailurePlan::is_empty")]
    pub failures: FailurePlan,
}

impl RoceConfig {
    /// The local ACK timeout with `outstanding` packets outstanding: go-back-N's from
    /// `rto_exponent`, selective repeat's IRN pair.
    pub fn rto(&self, outstanding: u32) -> Time {
        match self.loss_recovery {
            LossRecovery::GoBackN => Time(4_096_000u64 << self.rto_exponent),
            LossRecovery::SelectiveRepeat if outstanding <= IRN_FEW_OUTSTANDING => IRN_RTO_LOW,
            LossRecovery::SelectiveRepeat => IRN_RTO_HIGH,
        }
    }

    /// Whether senders need the network's base RTT (a window, a target delay or IRN's
    /// cap) and data packets carry telemetry back in their ACKs.
    pub fn needs_base_rtt(&self) -> bool {
        self.ack_cc.is_some() || self.loss_recovery == LossRecovery::SelectiveRepeat
    }

    /// The headroom on a port of `rate`: the configured figure or the mlx5 rule.
    pub fn headroom_for(&self, rate: BitRate) -> u64 {
        self.headroom.unwrap_or_else(|| {
            fabricsim_core::proto::pfc::headroom_rule(rate, self.cable_mm, self.mtu)
        })
    }
}

/// Production ECN defaults of the HPCC authors at 25 Gb/s: Kmin 100 KB, Kmax 400 KB,
/// Pmax 0.2, scaled with the port rate (docs/REFERENCE.md section 4).
pub fn hpcc_ecn() -> EcnConfig {
    EcnConfig {
        red: RedParams {
            kmin: 100_000,
            kmax: 400_000,
            pmax: 0.2,
        },
        scale_from: Some(BitRate::gbps(25)),
    }
}

impl Default for RoceConfig {
    fn default() -> Self {
        RoceConfig {
            mtu: 4096,
            ip: IpVersion::V4,
            switch_latency: Time::from_ns(600),
            nic_tx_latency: Time::from_ns(500),
            nic_rx_latency: Time::from_ns(500),
            pfc: true,
            switch_buffer: 32 << 20,
            headroom: None,
            cable_mm: 5_000,
            reserve: 4096,
            alpha_shift: 3,
            pause_quanta: fabricsim_core::proto::pfc::MAX_QUANTA,
            ecn: Some(hpcc_ecn()),
            dcqcn: None,
            ack_cc: None,
            loss_recovery: LossRecovery::GoBackN,
            ack_every: 4,
            rto_exponent: 20,
            seed: 1,
            pause_storms: Vec::new(),
            watchdog: None,
            deadlock_check: Time::from_us(10),
            rate_sample: Time::from_us(10),
            record_rates: false,
            plain_schedule: false,
            load_balancing: LoadBalancing::Ecmp,
            failures: FailurePlan::none(Time::from_us(1000), Time::from_us(50_000)),
        }
    }
}

impl DcqcnConfig {
    /// A preset for NICs of `line` rate, with the ConnectX CNP interval of 4 us for the
    /// firmware and ns-3 presets and the paper's 50 us for the paper's.
    pub fn preset(preset: DcqcnPreset, line: BitRate) -> Self {
        DcqcnConfig {
            preset,
            params: preset.params(line),
            cnp_interval: match preset {
                DcqcnPreset::Paper => Time::from_us(50),
                _ => Time::from_us(4),
            },
        }
    }
}
