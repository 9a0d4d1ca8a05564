//! What flow level takes from a scenario's fabric: framing, latencies, routing, where
//! RoCEv2's congestion control first acts, and DCQCN's parameters for its fluid.

use crate::scenario::{FabricKind, Scenario};
use fabricsim_fabric::flow::{self, FlowConfig, FlowRouting, FlowWire};
use fabricsim_fabric::rocev2::{self, LoadBalancing};

/// Where RoCEv2's congestion control first acts on a port (see [`flow::Onset`]): DCQCN
/// at ECN's Kmin; PFC where the dynamic threshold on an empty buffer (`switch_buffer /
/// 2^alpha_shift`) pauses an ingress, a lower bound of the egress queue that takes when
/// several ingresses feed it; without PFC, where the shared buffer fills and drops.
fn congestion_onset(r: &rocev2::RoceConfig) -> flow::Onset {
    let (bytes, at_bps) = match (&r.ecn, &r.dcqcn) {
        (Some(ecn), Some(_)) => (ecn.red.kmin as f64, ecn.scale_from.map(|b| b.bps())),
        _ => (f64::INFINITY, None),
    };
    let cap = if r.pfc {
        (r.switch_buffer >> r.alpha_shift) as f64
    } else {
        r.switch_buffer as f64
    };
    flow::Onset { bytes, at_bps, cap }
}

/// DCQCN at flow level (`flow::dcqcn`) with the scenario's ECN, DCQCN and buffer
/// settings; None without DCQCN.
fn fluid_dcqcn(r: &rocev2::RoceConfig, seed: u64) -> Option<flow::FluidDcqcn> {
    let (ecn, d) = (r.ecn.as_ref()?, r.dcqcn.as_ref()?);
    Some(flow::FluidDcqcn {
        params: d.params.clone(),
        red: ecn.red,
        red_at_bps: ecn.scale_from.map(|b| b.bps()),
        cnp_interval: d.cnp_interval,
        queue_cap: congestion_onset(r).cap,
        seed,
    })
}

/// What flow level takes from the scenario's fabric: its packets' framing and MTU, its
/// endpoint and switch latencies, and its routing (InfiniBand's static or adaptive
/// choice, RoCEv2's seeded ECMP hash).
pub(super) fn flow_config(scenario: &Scenario) -> FlowConfig {
    match scenario.fabric {
        FabricKind::Infiniband => {
            let ib = &scenario.ib;
            FlowConfig {
                wire: FlowWire::Infiniband,
                mtu: ib.mtu,
                tx_latency: ib.hca_tx_latency,
                rx_latency: ib.hca_rx_latency,
                switch_latency: ib.switch_latency,
                routing: if ib.adaptive_routing {
                    FlowRouting::Adaptive
                } else {
                    FlowRouting::Static
                },
                sharing: Vec::new(),
                onset: None,
                dcqcn: None,
            }
        }
        FabricKind::Rocev2 => {
            let r = &scenario.roce;
            FlowConfig {
                wire: FlowWire::Rocev2(r.ip),
                mtu: r.mtu,
                tx_latency: r.nic_tx_latency,
                rx_latency: r.nic_rx_latency,
                switch_latency: r.switch_latency,
                routing: match r.load_balancing {
                    // Flowlets are not modelled here (`flow_unmodelled` says so; `auto`
                    // warns): each QP keeps its hashed path, as under ECMP.
                    LoadBalancing::Ecmp | LoadBalancing::Flowlet { .. } => FlowRouting::Ecmp {
                        seed: scenario.seed,
                    },
                    LoadBalancing::Adaptive => FlowRouting::Adaptive,
                    LoadBalancing::Spray => FlowRouting::Spray,
                },
                sharing: Vec::new(),
                onset: Some(congestion_onset(r)),
                dcqcn: fluid_dcqcn(r, scenario.seed),
            }
        }
    }
}
