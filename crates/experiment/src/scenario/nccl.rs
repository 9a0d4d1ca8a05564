//! `[nccl]`: how collectives pick their algorithm (SCENARIO.md v3). `algorithm` applies to
//! every all-reduce (collective entries and training jobs) that does not name its own:
//! "auto" runs NCCL's tuner (`fabricsim_fabric::workload::tuner`, NCCL 2.30.7), the
//! others force one. Without `[nccl]`, a `[cluster]` file runs "auto" and any other keeps
//! its entries' v1 defaults (a ring).

use super::reader::{invalid, Ctx};
use super::ScenarioError;
use fabricsim_core::units::{BitRate, HostId};
use fabricsim_fabric::workload::collective::by_server;
use fabricsim_fabric::workload::tuner::{TunedAlgorithm, TunerInput};
use fabricsim_fabric::workload::CollectiveAlgorithm;
use serde::Deserialize;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileNccl {
    algorithm: Option<Spanned<String>>,
}

/// `[nccl] algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclAlgorithm {
    /// NCCL's tuner picks ring or tree per all-reduce by its size, ranks and servers.
    Auto,
    /// NCCL's ring: on servers of several GPUs with a NIC each, every rail carries its
    /// share (fabricsim's "hierarchical" shape); otherwise a ring over the ranks.
    Ring,
    /// NCCL's tree: a chain inside each server, double binary trees across servers.
    Tree,
    /// NCCL's CollNet: SHARP in the InfiniBand switches (fabricsim's "sharp").
    CollNet,
}

const NAMES: [&str; 5] = ["auto", "ring", "tree", "nvls", "collnet"];

/// Reads `[nccl]`: None when absent.
pub(super) fn parse(c: &Ctx, f: Option<&FileNccl>) -> Result<Option<NcclAlgorithm>, ScenarioError> {
    let Some(f) = f else { return Ok(None) };
    Ok(match c.choice("nccl.algorithm", &f.algorithm, &NAMES)? {
        None => Some(NcclAlgorithm::Auto),
        Some("auto") => Some(NcclAlgorithm::Auto),
        Some("ring") => Some(NcclAlgorithm::Ring),
        Some("tree") => Some(NcclAlgorithm::Tree),
        Some("collnet") => Some(NcclAlgorithm::CollNet),
        Some(other) => {
            return Err(invalid(format!(
                "nccl.algorithm = \"{other}\": NVLink SHARP (NVSwitch reductions) is not modelled; give \"auto\", \"ring\", \"tree\" or \"collnet\""
            )))
        }
    })
}

/// What the choice of one all-reduce rests on.
pub(super) struct Hardware {
    pub nic: BitRate,
    pub gpus_per_node: u32,
    pub nvlink: BitRate,
}

/// The algorithm `choice` gives an all-reduce of `bytes` over `ranks`, and a line saying
/// why (for `check`).
pub(super) fn resolve(
    choice: NcclAlgorithm,
    ranks: &[HostId],
    bytes: u64,
    hw: &Hardware,
) -> (CollectiveAlgorithm, String) {
    let servers = by_server(ranks, hw.gpus_per_node);
    let ring = if servers {
        CollectiveAlgorithm::Hierarchical
    } else {
        CollectiveAlgorithm::Ring
    };
    let picked = match choice {
        NcclAlgorithm::Ring => return (ring, "[nccl] algorithm = \"ring\"".into()),
        NcclAlgorithm::Tree => {
            return (
                CollectiveAlgorithm::Tree,
                "[nccl] algorithm = \"tree\"".into(),
            )
        }
        NcclAlgorithm::CollNet => {
            return (
                CollectiveAlgorithm::Sharp,
                "[nccl] algorithm = \"collnet\"".into(),
            )
        }
        NcclAlgorithm::Auto => {
            let nodes = if servers {
                ranks.len() as u32 / hw.gpus_per_node
            } else {
                ranks.len() as u32
            };
            let input = TunerInput {
                ranks: ranks.len() as u32,
                nodes,
                bytes,
                nic: hw.nic,
                nvlink: servers.then_some(hw.nvlink),
            };
            input.choose(&[TunedAlgorithm::Ring, TunedAlgorithm::Tree])
        }
    };
    let (best, times) = picked;
    let why = times
        .iter()
        .map(|(a, t)| format!("{} {:.0} us", a.name(), t))
        .collect::<Vec<_>>()
        .join(", ");
    let algorithm = match best {
        TunedAlgorithm::Tree => CollectiveAlgorithm::Tree,
        TunedAlgorithm::CollNet => CollectiveAlgorithm::Sharp,
        TunedAlgorithm::Ring => ring,
    };
    (
        algorithm,
        format!(
            "[nccl] algorithm = \"auto\": NCCL 2.30.7's tuner model for {} B over {} ranks: {why}",
            bytes,
            ranks.len()
        ),
    )
}
