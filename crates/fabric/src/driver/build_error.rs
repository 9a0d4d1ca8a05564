//! Why a model cannot be built for a scenario: what it does not take, named by the key or
//! the part of the network at fault.

use fabricsim_core::topology::TopologyError;

/// Why a packet-level or flow-level model refused to build.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The topology cannot be routed.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error("fabric.mtu = {mtu}: the RoCEv2 model takes MTUs up to {max}")]
    Mtu { mtu: u32, max: u32 },
    #[error("the fabric has {ports} ports; the {model} model takes up to {max}")]
    TooManyPorts {
        ports: usize,
        model: &'static str,
        max: u64,
    },
    #[error("topology: {ports} ports; the {model} model orders same-time events by port and takes at most {max}")]
    TooManyForTies {
        ports: usize,
        model: &'static str,
        max: u64,
    },
    #[error("switch {switch} has {ports} ports; the InfiniBand model takes switches of up to {max} ports")]
    SwitchRadix {
        switch: usize,
        ports: usize,
        max: usize,
    },
    #[error("fabric.rocev2.switch_buffer = {buffer} B: switch {switch} sets aside {set_aside} B of headroom and reserve, leaving no shared buffer")]
    NoSharedBuffer {
        buffer: u64,
        switch: usize,
        set_aside: u64,
    },
    #[error("algorithm \"sharp\": SHARP in-network aggregation needs InfiniBand switches")]
    SharpNeedsInfiniband,
    #[error("SHARP needs switches")]
    SharpWithoutSwitches,
    #[error("host {host} cannot reach the SHARP root switch")]
    SharpUnreachable { host: u32 },
    #[error("the routes' buffer dependencies form a cycle: a PFC deadlock or credit loop can form, which flow level cannot show; run this scenario at packet level")]
    FlowCycle,
}

/// For callers that report errors as sentences.
impl From<BuildError> for String {
    fn from(e: BuildError) -> String {
        e.to_string()
    }
}
