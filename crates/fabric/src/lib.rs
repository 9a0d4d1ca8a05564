//! fabricsim-fabric: packet-level fabric models wired onto the core's engine and
//! protocol machines, and the workloads that drive them.
//!
//! - [`workload`]: traffic specifications turned into messages.
//! - [`infiniband`]: the InfiniBand fabric (HCAs, credit-flow-controlled switches, links).
//! - [`report`]: what a run measured, as plain data.

pub mod infiniband;
pub mod report;
pub mod workload;
