//! `[topology]`: the built-in topologies (single switch, leaf-spine, fat-tree,
//! rail-optimized GPU servers) or an ns-3 topology file, GPUs per server and NVLink.

use super::reader::{invalid, reject_present, Ctx, Field};
use super::{ClusterDesigns, FabricKind, Scenario, ScenarioError};
use crate::formats::ns3::{self, Ns3Topology};
use fabricsim_core::topology::{Nvlink, Routes, Topology};
use fabricsim_core::units::{BitRate, Time};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTopology {
    kind: Option<Spanned<String>>,
    hosts: Field,
    leaves: Field,
    spines: Field,
    uplink_rate: Field,
    k: Field,
    path: Option<Spanned<String>>,
    nodes: Field,
    gpus_per_node: Field,
    nvlink_bandwidth: Field,
    nvlink_latency: Field,
    gpu: Option<Spanned<String>>,
    gpu_memory_bandwidth: Field,
}

/// NVLink bandwidth per GPU, each direction, and memory bandwidth, by GPU (GB/s). NVLink:
/// half the datasheets' both-ways figure: A100 SXM, NVLink 3, 600 GB/s (NVIDIA A100
/// datasheet); H100 SXM, H200 and H20, NVLink 4, 900 GB/s (NVIDIA H100 and H200
/// datasheets, H20 specifications); B200, NVLink 5, 1.8 TB/s (NVIDIA DGX B200 datasheet).
/// Memory: A100 80 GB SXM 2,039 GB/s (A100 datasheet), H100 SXM 3.35 TB/s (H100
/// datasheet), H200 4.8 TB/s (H200 datasheet), H20 4.0 TB/s (H20 specifications), B200
/// 8 TB/s (DGX B200 datasheet: 64 TB/s for 8 GPUs).
const GPUS: [(&str, u64, u64); 5] = [
    ("a100", 300, 2039),
    ("h100", 450, 3350),
    ("h200", 450, 4800),
    ("h20", 450, 4000),
    ("b200", 900, 8000),
];

/// The topology a scenario asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum TopologySpec {
    SingleSwitch {
        hosts: u32,
    },
    LeafSpine {
        hosts: u32,
        leaves: u32,
        spines: u32,
        uplink_rate: BitRate,
    },
    FatTree {
        k: u32,
    },
    /// GPU servers wired rail by rail: GPU g of every server on rail leaf g.
    RailOptimized {
        nodes: u32,
        gpus: u32,
        spines: u32,
        uplink_rate: BitRate,
    },
    /// An ns-3 RDMA-model topology file, read at load time.
    File {
        path: String,
        graph: Ns3Topology,
    },
    /// `[cluster]`: each fabric its own design.
    Cluster(Box<ClusterDesigns>),
}

impl TopologySpec {
    /// Hosts (NICs, or GPUs with their own NIC) in the topology.
    pub fn hosts(&self) -> u32 {
        match self {
            TopologySpec::SingleSwitch { hosts } | TopologySpec::LeafSpine { hosts, .. } => *hosts,
            TopologySpec::FatTree { k } => k * k * k / 4,
            TopologySpec::File { graph, .. } => graph.host_count(),
            TopologySpec::RailOptimized { nodes, gpus, .. } => nodes * gpus,
            TopologySpec::Cluster(ref d) => d.gpus,
        }
    }

    /// The network without its GPU servers (on `fabric`'s design for a cluster), links at
    /// `link_rate` and `link_delay` unless the spec gives others.
    pub(super) fn build(
        &self,
        fabric: FabricKind,
        link_rate: BitRate,
        link_delay: Time,
    ) -> Result<Topology, String> {
        let built = match *self {
            TopologySpec::Cluster(ref d) => d.plans[fabric as usize]
                .as_ref()
                .map_err(Clone::clone)?
                .build(d.gpus_per_node, link_rate, link_delay),
            TopologySpec::SingleSwitch { hosts } => {
                Topology::single_switch(hosts, link_rate, link_delay)
            }
            TopologySpec::LeafSpine {
                hosts,
                leaves,
                spines,
                uplink_rate,
            } => Topology::leaf_spine(hosts, leaves, spines, link_rate, uplink_rate, link_delay),
            TopologySpec::FatTree { k } => Topology::fat_tree(k, link_rate, link_delay),
            TopologySpec::File { ref graph, .. } => {
                Topology::from_graph(graph.nodes, &graph.switches, &graph.links)
            }
            TopologySpec::RailOptimized {
                nodes,
                gpus,
                spines,
                uplink_rate,
            } => Topology::rail_optimized(nodes, gpus, spines, link_rate, uplink_rate, link_delay),
        };
        Ok(built?)
    }
}

/// Why the `nvls` algorithm cannot run on servers without NVLink SHARP.
pub const NO_NVLS: &str = "these servers' NVSwitch has no NVLink SHARP (it needs several GPUs per server of Hopper or later; topology.gpu = \"a100\" has none)";

/// `[topology]` read: the network, GPUs per server and their NVLink.
pub(super) struct TopologySection {
    pub spec: TopologySpec,
    pub gpus_per_node: u32,
    pub nvlink: Nvlink,
    /// Whether the servers' NVSwitch has NVLink SHARP (NVLS): Hopper and later, so
    /// every GPU of `topology.gpu` but the A100, with several GPUs per server.
    pub nvls: bool,
}

impl TopologySection {
    /// A `[cluster]`'s designs in place of `[topology]`: its servers, default NVLink.
    pub fn designed(d: ClusterDesigns) -> TopologySection {
        TopologySection {
            gpus_per_node: d.gpus_per_node,
            nvls: d.gpus_per_node > 1,
            spec: TopologySpec::Cluster(Box::new(d)),
            nvlink: Nvlink::default(),
        }
    }
}

/// Reads `[topology]`; a file topology is read relative to `base`.
pub(super) fn parse(
    c: &Ctx,
    t: &FileTopology,
    link_rate: BitRate,
    base: &Path,
) -> Result<TopologySection, ScenarioError> {
    let kind = t
        .kind
        .as_ref()
        .map(|k| k.get_ref().as_str())
        .unwrap_or("single-switch");
    let only = |what: &str| format!("topology kind \"{kind}\" (only of \"{what}\")");
    if kind != "rail-optimized" {
        reject_present(
            &[("nodes", t.nodes.is_some())],
            "topology.",
            &only("rail-optimized"),
        )?;
    }
    if kind != "file" {
        reject_present(&[("path", t.path.is_some())], "topology.", &only("file"))?;
    }
    let spec = spec(c, t, kind, link_rate, base)?;
    let hosts = spec.hosts();
    let gpus_per_node = match spec {
        TopologySpec::RailOptimized { gpus, .. } => gpus,
        _ => c
            .count("topology.gpus_per_node", &t.gpus_per_node, 1, 64)?
            .unwrap_or(1) as u32,
    };
    if !hosts.is_multiple_of(gpus_per_node) {
        return Err(invalid(format!(
            "topology.gpus_per_node = {gpus_per_node}: must divide the {hosts} hosts"
        )));
    }
    let mut nvlink = Nvlink::default();
    let names = GPUS.map(|g| g.0);
    let gpu = c.choice("topology.gpu", &t.gpu, &names)?;
    if let Some(g) = gpu {
        let &(_, link, memory) = GPUS.iter().find(|x| x.0 == g).expect("a listed GPU");
        nvlink.rate = BitRate(link * 8_000_000_000);
        nvlink.gpu_memory = Some(BitRate(memory * 8_000_000_000));
    }
    if let Some(r) = c.link_rate("topology.gpu_memory_bandwidth", &t.gpu_memory_bandwidth)? {
        nvlink.gpu_memory = Some(r);
    }
    if let Some(r) = c.link_rate("topology.nvlink_bandwidth", &t.nvlink_bandwidth)? {
        nvlink.rate = r;
    }
    if let Some(l) = c.time("topology.nvlink_latency", &t.nvlink_latency)? {
        nvlink.latency = l;
    }
    if gpus_per_node == 1
        && (t.nvlink_bandwidth.is_some() || t.nvlink_latency.is_some() || t.gpu.is_some())
    {
        return Err(invalid(
            "topology.gpu / nvlink_bandwidth / nvlink_latency: set with one GPU per node; they would do nothing (set gpus_per_node; gpu_memory_bandwidth alone times reductions)".into(),
        ));
    }
    Ok(TopologySection {
        spec,
        gpus_per_node,
        nvlink,
        nvls: gpus_per_node > 1 && gpu != Some("a100"),
    })
}

/// The keys of each topology kind, read into its spec.
fn spec(
    c: &Ctx,
    t: &FileTopology,
    kind: &str,
    link_rate: BitRate,
    base: &Path,
) -> Result<TopologySpec, ScenarioError> {
    let what = format!("topology kind \"{kind}\"");
    let (hosts, leaves, spines) = (t.hosts.is_some(), t.leaves.is_some(), t.spines.is_some());
    let (k, uplink) = (t.k.is_some(), t.uplink_rate.is_some());
    let uplink_rate = || -> Result<BitRate, ScenarioError> {
        Ok(c.link_rate("topology.uplink_rate", &t.uplink_rate)?
            .unwrap_or(link_rate))
    };
    let count = |key: &str, v: &Field, max: u64, default: u64| -> Result<u32, ScenarioError> {
        Ok(c.count(&format!("topology.{key}"), v, 1, max)?
            .unwrap_or(default) as u32)
    };
    Ok(match kind {
        "single-switch" => {
            let stray = [
                ("leaves", leaves),
                ("spines", spines),
                ("k", k),
                ("uplink_rate", uplink),
            ];
            reject_present(&stray, "topology.", &what)?;
            TopologySpec::SingleSwitch {
                hosts: c.count("topology.hosts", &t.hosts, 2, 4096)?.unwrap_or(2) as u32,
            }
        }
        "rail-optimized" => {
            reject_present(
                &[("hosts", hosts), ("leaves", leaves), ("k", k)],
                "topology.",
                &what,
            )?;
            TopologySpec::RailOptimized {
                nodes: c.count("topology.nodes", &t.nodes, 2, 8192)?.unwrap_or(2) as u32,
                gpus: count("gpus_per_node", &t.gpus_per_node, 64, 8)?,
                spines: count("spines", &t.spines, 4096, 2)?,
                uplink_rate: uplink_rate()?,
            }
        }
        "leaf-spine" => {
            reject_present(&[("k", k)], "topology.", &what)?;
            TopologySpec::LeafSpine {
                hosts: c.count("topology.hosts", &t.hosts, 2, 65536)?.unwrap_or(16) as u32,
                leaves: count("leaves", &t.leaves, 4096, 4)?,
                spines: count("spines", &t.spines, 4096, 2)?,
                uplink_rate: uplink_rate()?,
            }
        }
        "fat-tree" => {
            let stray = [
                ("hosts", hosts),
                ("leaves", leaves),
                ("spines", spines),
                ("uplink_rate", uplink),
            ];
            reject_present(&stray, "topology.", &what)?;
            fat_tree(c, t)?
        }
        "file" => {
            let stray = [
                ("hosts", hosts),
                ("leaves", leaves),
                ("spines", spines),
                ("uplink_rate", uplink),
                ("k", k),
            ];
            reject_present(&stray, "topology.", &what)?;
            file(c, t, base)?
        }
        _ => {
            return Err(c.unexpected(
                "topology.kind",
                t.kind.as_ref().expect("a kind other than the default"),
                "\"single-switch\", \"leaf-spine\", \"fat-tree\", \"rail-optimized\" or \"file\"",
            ));
        }
    })
}

/// `kind = "fat-tree"`: an even k.
fn fat_tree(c: &Ctx, t: &FileTopology) -> Result<TopologySpec, ScenarioError> {
    let k = c.count("topology.k", &t.k, 2, 64)?.unwrap_or(4) as u32;
    if !k.is_multiple_of(2) {
        return Err(c.err(
            "topology.k",
            t.k.as_ref().expect("parsed"),
            "a fat-tree needs an even k",
        ));
    }
    Ok(TopologySpec::FatTree { k })
}

/// `kind = "file"`: an ns-3 topology file at `path`, checked by building it.
fn file(c: &Ctx, t: &FileTopology, base: &Path) -> Result<TopologySpec, ScenarioError> {
    let path = t.path.as_ref().ok_or_else(|| {
        invalid("topology.path: required by kind = \"file\" (an ns-3 topology file)".into())
    })?;
    let (shown, text) = c.read_named(base, "topology.path", path)?;
    let bad = |m: String| invalid(format!("topology.path = \"{shown}\": {m}"));
    let graph = ns3::parse_topology(&text).map_err(bad)?;
    let topo = Topology::from_graph(graph.nodes, &graph.switches, &graph.links)
        .map_err(|e| bad(e.to_string()))?;
    // Every host must reach every other; say so here, with the file's name.
    Routes::minimal(&topo).map_err(|e| bad(e.to_string()))?;
    Ok(TopologySpec::File { path: shown, graph })
}

/// A leaf-spine needs at least one host per leaf.
pub(super) fn check_leaves(spec: &TopologySpec) -> Result<(), ScenarioError> {
    if let TopologySpec::LeafSpine { hosts, leaves, .. } = *spec {
        if hosts < leaves {
            return Err(invalid(format!(
                "topology.hosts = {hosts}: fewer hosts than leaves ({leaves})"
            )));
        }
    }
    Ok(())
}

/// `[topology]` with every default filled in.
pub(super) fn write_toml(sc: &Scenario, s: &mut String) {
    let _ = match &sc.topology {
        // Written with [cluster].
        TopologySpec::Cluster(_) => Ok(()),
        TopologySpec::SingleSwitch { hosts } => writeln!(s, "\n[topology]\nkind = \"single-switch\"\nhosts = {hosts}"),
        TopologySpec::LeafSpine { hosts, leaves, spines, uplink_rate } => writeln!(
            s,
            "\n[topology]\nkind = \"leaf-spine\"\nhosts = {hosts}\nleaves = {leaves}\nspines = {spines}\nuplink_rate = \"{uplink_rate}\""
        ),
        TopologySpec::FatTree { k } => writeln!(s, "\n[topology]\nkind = \"fat-tree\"\nk = {k}\n# hosts = {}", k * k * k / 4),
        TopologySpec::RailOptimized { nodes, gpus, spines, uplink_rate } => writeln!(
            s,
            "\n[topology]\nkind = \"rail-optimized\"\nnodes = {nodes}\ngpus_per_node = {gpus}\nspines = {spines}\nuplink_rate = \"{uplink_rate}\"\n# hosts = {}",
            nodes * gpus
        ),
        TopologySpec::File { path, graph } => writeln!(
            s,
            "\n[topology]\nkind = \"file\"\npath = {}\n# {} nodes: {} hosts, {} switches, {} links",
            super::quoted(path),
            graph.nodes,
            graph.host_count(),
            graph.switches.len(),
            graph.links.len()
        ),
    };
    if sc.gpus_per_node > 1 && !matches!(sc.topology, TopologySpec::Cluster(_)) {
        if !matches!(sc.topology, TopologySpec::RailOptimized { .. }) {
            let _ = writeln!(s, "gpus_per_node = {}", sc.gpus_per_node);
        }
        let _ = writeln!(
            s,
            "nvlink_bandwidth = \"{}\"\nnvlink_latency = \"{}\"",
            sc.nvlink.rate, sc.nvlink.latency
        );
    }
    if let (Some(m), false) = (
        sc.nvlink.gpu_memory,
        matches!(sc.topology, TopologySpec::Cluster(_)),
    ) {
        let _ = writeln!(s, "gpu_memory_bandwidth = \"{m}\"");
    }
}
