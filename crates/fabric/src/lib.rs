//! fabricsim-fabric: packet-level fabric models wired onto the core's engine and
//! protocol machines, and the workloads that drive them.
//!
//! - [`workload`]: traffic specifications turned into messages.
//! - [`infiniband`]: the InfiniBand fabric (HCAs, credit-flow-controlled switches, links).
//! - [`rocev2`]: the RoCEv2 fabric (NICs with DCQCN and go-back-N, shared-buffer
//!   switches with PFC and ECN, ECMP).
//! - [`driver`]: the run loop and ideal completion time both fabrics share.
//! - [`flow`]: flow level: the same workloads as max-min fair fluid flows, for the
//!   largest clusters.
//! - [`report`]: what a run measured, as plain data.

#![forbid(unsafe_code)]

pub mod driver;
pub mod flow;
pub mod infiniband;
pub mod parallel;
pub mod report;
pub mod rocev2;
pub mod workload;

pub use driver::EventDriven;

/// Which of the two fabrics a run is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricKind {
    Infiniband,
    Rocev2,
}

impl FabricKind {
    pub fn name(self) -> &'static str {
        match self {
            FabricKind::Infiniband => "infiniband",
            FabricKind::Rocev2 => "rocev2",
        }
    }

    /// The name as people write it: "InfiniBand", "RoCEv2".
    pub fn label(self) -> &'static str {
        match self {
            FabricKind::Infiniband => "InfiniBand",
            FabricKind::Rocev2 => "RoCEv2",
        }
    }
}
