//! One InfiniBand run split over threads ([`crate::parallel`]): whether it can be, and
//! its parts.

use super::sim::Simulation;
use super::IbConfig;
use crate::driver::BuildError;
use crate::parallel::{self, SplitRun};
use crate::workload::Workload;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::Time;

/// Why a run cannot be split over threads, if it cannot: what needs the whole run's
/// state at every event (a SHARP group's result reaches every rank at once, the NIC
/// message rate's slots), or a topology of one server.
pub fn why_not_split(cfg: &IbConfig, topo: &Topology, workload: &Workload) -> Option<&'static str> {
    if !cfg.failures.is_empty() {
        Some("a failure changes every switch's routes at one instant")
    } else if !workload.sharp_groups.is_empty() {
        Some("a SHARP group completes every rank's message at once")
    } else if workload.message_interval.is_some() {
        Some("a NIC message rate orders posts run-wide")
    } else if topo.host_count() <= topo.gpus_per_node() {
        Some("it has one server")
    } else {
        None
    }
}

/// The scenario run split as `how` says ([`parallel::run_split`]).
pub fn run(
    cfg: IbConfig,
    topo: Topology,
    workload: &Workload,
    how: SplitRun,
    progress: &mut dyn FnMut(u64, Time),
) -> Result<Option<Simulation>, BuildError> {
    parallel::run_split(&topo, how, progress, |part| {
        Simulation::new_part(cfg.clone(), topo.clone(), workload, part)
    })
}
