//! `[nccl]`: how collectives open connections and pick their algorithm (SCENARIO.md v3).
//! `algorithm` applies to every all-reduce (collective entries and training jobs) that
//! does not name its own: "auto" runs NCCL's tuner (`fabricsim_fabric::workload::tuner`,
//! NCCL 2.30.7), the others force one; without `[nccl]` the entries keep their v1
//! defaults (a ring). `channels` is the default of entries that give none;
//! `qps_per_connection` and `split_data_on_qps` set each connection's QPs, `pxn` whether
//! traffic across rails goes first over NVLink to the GPU on the receiver's rail. Their
//! defaults are NCCL's (docs/REFERENCE.md section 10).

use super::reader::{invalid, Ctx, Field};
use super::ScenarioError;
use fabricsim_core::units::{BitRate, HostId};
use fabricsim_fabric::workload::collective::{by_server, whole_servers};
use fabricsim_fabric::workload::tuner::{TunedAlgorithm, TunerInput};
use fabricsim_fabric::workload::{CollectiveAlgorithm, Connections};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileNccl {
    algorithm: Option<Spanned<String>>,
    channels: Field,
    qps_per_connection: Field,
    split_data_on_qps: Option<bool>,
    pxn: Option<bool>,
}

/// `[nccl]`, every default filled in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NcclSettings {
    /// For all-reduces that name none; None without `[nccl]` (the v1 defaults).
    pub algorithm: Option<NcclAlgorithm>,
    /// Channels of collectives that give none (NCCL_MIN/MAX_NCHANNELS); None: the
    /// entries' own defaults (NCCL's is platform dependent).
    pub channels: Option<u32>,
    /// QPs per connection (NCCL_IB_QPS_PER_CONNECTION) and PXN (NCCL_PXN_DISABLE), NCCL's
    /// defaults unless given. The QPs are taken in turn, message by message
    /// (NCCL_IB_SPLIT_DATA_ON_QPS = 0, its default since 2.20; split mode is refused).
    pub connections: Connections,
}

impl NcclSettings {
    /// A designed cluster (`[cluster]` with `gpus`) runs its collectives as NCCL would:
    /// without `[nccl]`, its tuner picks each all-reduce's algorithm (entries that name
    /// one keep it).
    pub(super) fn for_designed_cluster(self) -> Self {
        NcclSettings {
            algorithm: self.algorithm.or(Some(NcclAlgorithm::Auto)),
            ..self
        }
    }
}

/// `[nccl] algorithm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NcclAlgorithm {
    /// NCCL's tuner picks ring, tree or NVLS per all-reduce by its size, ranks and
    /// servers.
    Auto,
    /// NCCL's ring: on servers of several GPUs with a NIC each, every rail carries its
    /// share (fabricsim's "hierarchical" shape); otherwise a ring over the ranks.
    Ring,
    /// NCCL's tree: a chain inside each server, double binary trees across servers.
    Tree,
    /// NCCL's CollNet: SHARP in the InfiniBand switches (fabricsim's "sharp").
    CollNet,
    /// NCCL's NVLS (one server) or NVLS-tree (several): NVLink SHARP on the NVSwitch.
    Nvls,
}

const NAMES: [&str; 5] = ["auto", "ring", "tree", "nvls", "collnet"];

/// Reads `[nccl]`: the defaults when absent.
pub(super) fn parse(c: &Ctx, f: Option<&FileNccl>) -> Result<NcclSettings, ScenarioError> {
    let Some(f) = f else {
        return Ok(NcclSettings::default());
    };
    let d = Connections::default();
    if f.split_data_on_qps == Some(true) {
        return Err(invalid(
            "nccl.split_data_on_qps = true: split mode (each message cut over every QP) is not modelled; NCCL's default since 2.20 is false, the QPs taken in turn".into(),
        ));
    }
    Ok(NcclSettings {
        algorithm: algorithm(c, f)?,
        channels: c
            .count("nccl.channels", &f.channels, 1, 64)?
            .map(|n| n as u32),
        connections: Connections {
            qps_per_connection: c
                .count("nccl.qps_per_connection", &f.qps_per_connection, 1, 128)?
                .map_or(d.qps_per_connection, |n| n as u16),
            pxn: f.pxn.unwrap_or(d.pxn),
        },
    })
}

/// `[nccl]`'s connection keys where they differ from NCCL's defaults (the entries carry
/// their algorithms and channels, so the rest need not be written).
pub(super) fn write_toml(n: &NcclSettings, s: &mut String) {
    let c = n.connections;
    if c != Connections::default() {
        let _ = writeln!(
            s,
            "\n[nccl]\nqps_per_connection = {}\nsplit_data_on_qps = false\npxn = {}",
            c.qps_per_connection, c.pxn
        );
    }
}

/// `[nccl] algorithm`: "auto" unless given.
fn algorithm(c: &Ctx, f: &FileNccl) -> Result<Option<NcclAlgorithm>, ScenarioError> {
    Ok(match c.choice("nccl.algorithm", &f.algorithm, &NAMES)? {
        None => Some(NcclAlgorithm::Auto),
        Some("auto") => Some(NcclAlgorithm::Auto),
        Some("ring") => Some(NcclAlgorithm::Ring),
        Some("tree") => Some(NcclAlgorithm::Tree),
        Some("collnet") => Some(NcclAlgorithm::CollNet),
        Some(_) => Some(NcclAlgorithm::Nvls),
    })
}

/// What the choice of one all-reduce rests on.
pub(super) struct Hardware {
    pub nic: BitRate,
    pub gpus_per_node: u32,
    pub nvlink: BitRate,
    /// Whether the servers' NVSwitch has NVLink SHARP.
    pub nvls: bool,
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
    // Whole servers, one or more: NVLink inside each, NVLS where the NVSwitch has it.
    let whole = whole_servers(ranks, hw.gpus_per_node);
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
        NcclAlgorithm::Nvls => {
            return (
                CollectiveAlgorithm::Nvls,
                "[nccl] algorithm = \"nvls\"".into(),
            )
        }
        NcclAlgorithm::Auto => {
            let nodes = if whole {
                ranks.len() as u32 / hw.gpus_per_node
            } else {
                ranks.len() as u32
            };
            let input = TunerInput {
                ranks: ranks.len() as u32,
                nodes,
                bytes,
                nic: hw.nic,
                nvlink: whole.then_some(hw.nvlink),
                nvls: whole && hw.nvls,
            };
            input.choose(&[
                TunedAlgorithm::Ring,
                TunedAlgorithm::Tree,
                TunedAlgorithm::Nvls,
            ])
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
        TunedAlgorithm::Nvls => CollectiveAlgorithm::Nvls,
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
