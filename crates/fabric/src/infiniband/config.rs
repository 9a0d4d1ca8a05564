//! Parameters of the InfiniBand fabric model, with their sources.

use crate::driver::failure::FailurePlan;
use fabricsim_core::proto::ibcc::CcParams;
use fabricsim_core::units::Time;
use serde::Serialize;

/// Everything the InfiniBand model needs besides topology and traffic.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IbConfig {
    /// Payload bytes per packet (IB MTU 256..4096; docs/REFERENCE.md section 2).
    pub mtu: u32,
    /// Switch port-to-port latency, excluding serialisation; the switch is store-and-forward
    /// and this is added once the whole packet is in. Default 150 ns: Quantum-2 is quoted at
    /// about 130-150 ns (docs/REFERENCE.md section 2, unverified).
    pub switch_latency: Time,
    /// HCA latency from posting a WRITE to its first packet being eligible for the wire.
    /// Default 500 ns, half of the "order of 1 us" one-way figure (unverified).
    pub hca_tx_latency: Time,
    /// HCA latency from the last packet's arrival to the completion. Default 500 ns (unverified).
    pub hca_rx_latency: Time,
    /// Data VLs per port (1..=15). Default 1: every SL on one VL, as a fabric configured
    /// without QoS runs; ConnectX firmware supports 4 or more data VLs (docs/REFERENCE.md
    /// section 3), which scenarios set with `virtual_lanes`.
    pub virtual_lanes: u8,
    /// Input buffer per VL per port, in bytes (a multiple of 64, at most 128 KiB, the
    /// 2048-block window of the 12-bit credit counters). Default 64 KiB: unverified, and
    /// above the ~23 KB credit round trip of a 400 Gb/s, 5 m hop so one flow is not
    /// credit-limited.
    pub vl_buffer: u32,
    /// SL-to-VL table (16 entries); default SL i -> VL (i mod virtual_lanes).
    pub sl_to_vl: [u8; 16],
    /// VL arbitration weights in 64-byte units, one per data VL; default 255 each.
    pub vl_weights: Vec<u32>,
    /// Per-packet adaptive routing among minimal up-ports, least queued bytes first.
    pub adaptive_routing: bool,
    /// Congestion control (FECN/BECN/CCT), off by default.
    pub congestion_control: Option<IbCc>,
    /// The receiver ACKs every this many packets and on the last one (unverified:
    /// ConnectX coalescing is not documented; 4 keeps ACK load under 0.2 % of a link).
    pub ack_every: u32,
    /// Period of the unconditional flow-control refresh. The IBA requires one at least
    /// every 65,536 symbol times; at 4x NDR (4 lanes x 53.125 GBd PAM4 symbols) that is
    /// about 0.3 us, at 8b/10b rates longer. Default 1 us (unverified).
    pub credit_refresh: Time,
    /// While a switch egress waits for credits, the wait-for graph of credit-blocked VLs is
    /// checked this often; a deadlock is declared when the same closed set is found, with
    /// nothing sent, at two checks in a row (so credits in flight cannot fool it). Must
    /// exceed `credit_refresh` plus a link's delay.
    pub deadlock_check: Time,
    /// Link and switch failures. Detection default 1 ms, re-route 1 ms: estimates, not
    /// measurements. With SHIELD (on by default in OpenSM's shield_mode) a switch picks
    /// another output port itself when its forwarding table's port is not Active, and
    /// tells its neighbours when it has none, without the subnet manager (NVIDIA,
    /// "InfiniBand Cluster Bring-up Procedure: SHIELD"); NVIDIA publishes no recovery
    /// time. Without SHIELD the subnet manager's sweep re-routes in seconds.
    #[serde(skip_serializing_if = "FailurePlan::is_empty")]
    pub failures: FailurePlan,
}

/// Congestion-control parameters: the switch's marking threshold and the source's CCT.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IbCc {
    /// A switch marks FECN on a packet enqueued while its egress VL holds at least this
    /// many bytes. Default 32 KiB (unverified; the IBA's Threshold is a 0-15 weight).
    pub fecn_threshold: u64,
    pub source: CcParams,
}

impl Default for IbCc {
    fn default() -> Self {
        IbCc {
            fecn_threshold: 32 * 1024,
            source: CcParams::default(),
        }
    }
}

impl Default for IbConfig {
    fn default() -> Self {
        IbConfig {
            mtu: 4096,
            switch_latency: Time::from_ns(150),
            hca_tx_latency: Time::from_ns(500),
            hca_rx_latency: Time::from_ns(500),
            virtual_lanes: 1,
            vl_buffer: 64 * 1024,
            sl_to_vl: default_sl_to_vl(1),
            vl_weights: vec![255],
            adaptive_routing: false,
            congestion_control: None,
            ack_every: 4,
            credit_refresh: Time::from_us(1),
            deadlock_check: Time::from_us(10),
            failures: FailurePlan::none(Time::from_us(1000), Time::from_us(1000)),
        }
    }
}

/// SL i -> VL (i mod vls).
pub fn default_sl_to_vl(vls: u8) -> [u8; 16] {
    std::array::from_fn(|i| (i as u8) % vls.max(1))
}
