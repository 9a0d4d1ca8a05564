//! Scenario files: the TOML contract of docs/SCENARIO.md, parsed into a validated
//! [`Scenario`]. Every error names the key, the value and, where known, the line.
//!
//! One module per section of the file, each owning its keys: their parsing, checks,
//! defaults and their part of the effective configuration `fabricsim check` prints.

mod cluster;
mod compare;
mod cost;
mod fabric;
mod failure;
mod host;
mod infiniband;
mod nccl;
mod pathologies;
mod placement;
pub mod ranges;
mod reader;
mod rocev2;
mod simulation;
mod topology;
mod traffic;

pub use cluster::{describe as describe_design, ClusterDesigns, Hardware, Optics};
pub use compare::{
    AdaptiveCandidate, CompareSettings, INFINIBAND, ROCEV2, ROCEV2_ADAPTIVE, ROCEV2_TUNED,
};
pub use cost::{CostRanges, CostSettings, SettingRange};
pub use fabric::FabricKind;
pub use failure::{describe_nodes, FailedPart, FailureSpec};
pub use nccl::NcclSettings;
pub use placement::{Job, Placement};
pub(crate) use simulation::packets_only;
pub use simulation::{flow_unmodelled, fluid_unmodelled, Auto, Level, OpenLoop, DEFAULT_BUDGET};
pub use topology::{TopologySpec, NO_NVLS};

use crate::catalog::{Catalog, ItemKind};

use fabricsim_core::topology::{Nvlink, Topology};
use fabricsim_core::units::{BitRate, Time};
use fabricsim_fabric::infiniband::IbConfig;
use fabricsim_fabric::rocev2::RoceConfig;
use fabricsim_fabric::workload::datapath::HostConfig;
use fabricsim_fabric::workload::Traffic;
use reader::{invalid, Ctx, Field};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// A scenario that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The file's top level: its own keys and one field per section.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRoot {
    name: Option<String>,
    seed: Option<i64>,
    stop_at: Field,
    #[serde(default)]
    fabric: fabric::FileFabric,
    topology: Option<topology::FileTopology>,
    #[serde(default)]
    traffic: Vec<traffic::FileTraffic>,
    #[serde(default)]
    job: Vec<placement::FileJob>,
    #[serde(default)]
    failure: Vec<failure::FileFailure>,
    host: Option<host::FileHost>,
    cluster: Option<cluster::FileCluster>,
    cost: Option<cost::FileCost>,
    catalog: Option<toml::Table>,
    simulation: Option<simulation::FileSimulation>,
    nccl: Option<nccl::FileNccl>,
    compare: Option<compare::FileCompare>,
    /// `[[validation]]`: a validation case's reference figures, read by `fabricsim
    /// validate` (crate::validate), not by a run.
    #[serde(rename = "validation")]
    _validation: Option<toml::Value>,
}

/// A validated scenario with every default filled in.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    pub seed: u64,
    pub stop_at: Option<Time>,
    pub fabric: FabricKind,
    pub link_rate: BitRate,
    pub link_delay: Time,
    pub ib: IbConfig,
    pub roce: RoceConfig,
    pub topology: TopologySpec,
    /// GPUs (hosts with their own NIC) per server, sharing an NVLink domain.
    pub gpus_per_node: u32,
    pub nvlink: Nvlink,
    /// Whether the servers' NVSwitch has NVLink SHARP (the `nvls` algorithm).
    pub nvls: bool,
    /// The hosts' data paths; None: RDMA straight from memory, no host stages.
    pub host: Option<HostConfig>,
    pub traffic: Vec<Traffic>,
    /// `[[job]]`: the jobs and the hosts each was placed on (empty: one workload).
    pub jobs: Vec<Job>,
    /// For each traffic entry, the index in `jobs` of the job that owns it.
    pub traffic_jobs: Vec<Option<usize>>,
    /// `[[failure]]`: links and switches going down (and up), by node id.
    pub failures: Vec<FailureSpec>,
    /// The hardware the network is built and costed with (`[cluster]`).
    pub hardware: Hardware,
    pub cost: CostSettings,
    /// The catalog after the user's overrides.
    pub catalog: Catalog,
    /// Packet level, flow level, or flow level above a size (`[simulation]`).
    pub level: Level,
    /// How flow level times open-loop traffic (`simulation.open_loop`).
    pub open_loop: OpenLoop,
    /// Why `auto` chose the level it was settled on (`Scenario::settle_level`); None
    /// for a level set otherwise.
    pub level_reason: Option<String>,
    /// Each all-reduce whose algorithm `[nccl]` chose: which, and why.
    pub nccl_choices: Vec<String>,
    /// `[nccl]`: connections and the algorithm's default.
    pub nccl: nccl::NcclSettings,
    /// `[compare]`: how the verdict samples the ranges.
    pub compare: CompareSettings,
    /// The run parameters taken from catalog entries (and so sampled over their ranges).
    pub catalog_latency: CatalogLatency,
    /// How the scenario runs either fabric otherwise than at its best practice, in
    /// words (empty: both at their best practice).
    pub departures: Vec<String>,
}

/// The latencies a `[cluster]` design takes from its catalog entries, unless the
/// scenario sets them: the entries' names (their ranges are the verdict's to sample).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CatalogLatency {
    /// Per fabric (InfiniBand, RoCEv2): the switch entry its switches' latency is from.
    pub switch: [Option<String>; 2],
    /// The NIC entry whose latency both fabrics' NICs have on each side.
    pub nic: Option<String>,
}

/// Sets a design's switch and NIC latencies from their catalog entries where the scenario
/// does not set them, and names the entries they came from.
fn latencies_from_catalog(
    f: &fabric::FileFabric,
    catalog: &Catalog,
    hw: &Hardware,
    ib: &mut IbConfig,
    roce: &mut RoceConfig,
) -> CatalogLatency {
    let mut from = CatalogLatency::default();
    if f.switch_latency.is_none() {
        for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
            let name = hw.switch_for(fabric);
            if let Some(l) = catalog.get(name).and_then(|i| i.latency) {
                match fabric {
                    FabricKind::Infiniband => ib.switch_latency = l,
                    FabricKind::Rocev2 => roce.switch_latency = l,
                }
                from.switch[fabric as usize] = Some(name.to_string());
            }
        }
    }
    if !infiniband::sets_nic_latency(&f.infiniband) && !rocev2::sets_nic_latency(&f.rocev2) {
        if let Some(l) = catalog.get(&hw.nic).and_then(|i| i.latency) {
            set_nic_latency(ib, roce, l);
            from.nic = Some(hw.nic.clone());
        }
    }
    from
}

/// Both fabrics' NICs take `l` to send and `l` to receive.
pub(super) fn set_nic_latency(ib: &mut IbConfig, roce: &mut RoceConfig, l: Time) {
    ib.hca_tx_latency = l;
    ib.hca_rx_latency = l;
    roce.nic_tx_latency = l;
    roce.nic_rx_latency = l;
}

/// `text` as a TOML string, quoted and escaped (a name or path may hold any character).
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// The scenario `fabricsim run` uses when given no file (examples/default.toml).
const DEFAULT_SCENARIO: &str = include_str!("../../../../examples/default.toml");

/// The cluster `fabricsim compare` decides for when given no file
/// (examples/cluster-default.toml).
const DEFAULT_CLUSTER: &str = include_str!("../../../../examples/cluster-default.toml");

impl Scenario {
    /// Whether every traffic entry starts its messages at given times, none waiting for
    /// another (flows, incasts, permutations, flow lists, background mixes).
    pub fn open_loop_traffic(&self) -> bool {
        self.traffic.iter().all(|t| {
            matches!(
                t,
                Traffic::Flow { .. }
                    | Traffic::Incast { .. }
                    | Traffic::Permutation { .. }
                    | Traffic::Listed { .. }
                    | Traffic::Background(_)
            )
        })
    }

    /// The built-in default scenario, named "default".
    pub fn builtin_default() -> Result<Scenario, ScenarioError> {
        Scenario::parse(DEFAULT_SCENARIO, "default")
    }

    /// The built-in default cluster's text (examples/cluster-default.toml).
    pub fn builtin_cluster_text() -> &'static str {
        DEFAULT_CLUSTER
    }

    /// The built-in default cluster, named "cluster-default", priced with `catalog`.
    pub fn builtin_cluster(catalog: &Catalog) -> Result<Scenario, ScenarioError> {
        Scenario::parse_with(DEFAULT_CLUSTER, "cluster-default", Path::new("."), catalog)
    }

    /// Reads and validates a scenario file; the name defaults to the file stem.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        Scenario::load_with(path, &Catalog::builtin())
    }

    /// Reads and validates a scenario file, its `[catalog]` tables overriding `catalog`.
    pub fn load_with(path: &Path, catalog: &Catalog) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = path.parent().unwrap_or(Path::new("."));
        Scenario::parse_with(&text, &stem, base, catalog).map_err(|e| match e {
            ScenarioError::Invalid(m) => ScenarioError::Invalid(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses and validates scenario text; files it names are relative to the working
    /// directory.
    pub fn parse(text: &str, default_name: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse_in(text, default_name, Path::new("."))
    }

    /// Parses and validates scenario text; files it names are relative to `base`.
    /// Sections are read in dependency order: the fabric, the topology (which bounds host
    /// indices), the RoCEv2 table, the traffic, then the top-level keys and `[host]`.
    pub fn parse_in(
        text: &str,
        default_name: &str,
        base: &Path,
    ) -> Result<Scenario, ScenarioError> {
        Scenario::parse_with(text, default_name, base, &Catalog::builtin())
    }

    /// As [`Scenario::parse_in`], the scenario's `[catalog]` tables overriding `catalog`.
    pub fn parse_with(
        text: &str,
        default_name: &str,
        base: &Path,
        catalog: &Catalog,
    ) -> Result<Scenario, ScenarioError> {
        let root: FileRoot =
            toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().to_string()))?;
        let c = Ctx { text };
        let fabric::Fabric {
            kind,
            mut link_rate,
            link_delay,
            mut ib,
            mut roce,
        } = fabric::parse(&c, &root.fabric)?;
        let mut catalog = catalog.clone();
        if let Some(t) = &root.catalog {
            catalog.merge(t, "").map_err(invalid)?;
        }
        let cluster = cluster::parse(&c, root.cluster.as_ref(), &catalog, link_rate, kind)?;
        let cost = cost::parse(&c, root.cost.as_ref())?;
        for name in &cost.software {
            catalog
                .require("cost.software", name, ItemKind::Software, None)
                .map_err(invalid)?;
        }
        let mut catalog_latency = CatalogLatency::default();
        let topo = match (cluster.designs, &root.topology) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "[cluster] with `gpus` and [topology]: give one (a cluster is designed per fabric; a topology is used as written)".into(),
                ))
            }
            (Some(d), None) => {
                if root.fabric.link_rate.is_some() && d.nic_rate != link_rate {
                    return Err(invalid(format!(
                        "cluster.nic_rate = \"{}\": differs from fabric.link_rate = \"{link_rate}\"; give one",
                        d.nic_rate
                    )));
                }
                link_rate = d.nic_rate;
                catalog_latency = latencies_from_catalog(&root.fabric, &catalog, &cluster.hardware, &mut ib, &mut roce);
                topology::TopologySection::designed(d)
            }
            (None, t) => topology::parse(&c, t.as_ref().unwrap_or(&Default::default()), link_rate, base)?,
        };
        // A topology file gives its links' rates; the NIC rate (which DCQCN's steps,
        // PFC headroom and the ECN scale follow) is its hosts' rate, not a default.
        if let TopologySpec::File { graph, .. } = &topo.spec {
            if let Some(nic) = graph.host_rate() {
                if root.fabric.link_rate.is_some() && nic != link_rate {
                    return Err(invalid(format!(
                        "fabric.link_rate = \"{link_rate}\": the topology file's hosts link at {nic}; the NIC settings scale from the NIC rate, so give {nic} or leave fabric.link_rate out"
                    )));
                }
                link_rate = nic;
            }
        }
        let hosts = topo.spec.hosts();
        rocev2::parse(&c, &root.fabric.rocev2, &mut roce, link_rate, hosts)?;
        topology::check_leaves(&topo.spec)?;
        // A designed cluster runs as AI fabrics are run: NCCL's tuner, adaptive InfiniBand.
        let designed = matches!(topo.spec, TopologySpec::Cluster(_));
        let mut nccl = nccl::parse(&c, root.nccl.as_ref())?;
        if designed {
            nccl = nccl.for_designed_cluster();
            infiniband::route_designs_adaptively(&root.fabric.infiniband, &mut ib);
        }
        let seed = match root.seed {
            Some(s) if s < 0 => return Err(invalid(format!("seed = {s}: must not be negative"))),
            Some(s) => s as u64,
            None => 1,
        };
        // The networks jobs are placed on and failures name nodes of: with a [cluster],
        // both designs (jobs are placed on InfiniBand's), else the one topology.
        let designs: Vec<(FabricKind, Topology)> = if root.job.is_empty() && root.failure.is_empty()
        {
            Vec::new()
        } else {
            let fabrics = match topo.spec {
                TopologySpec::Cluster(_) => vec![FabricKind::Infiniband, FabricKind::Rocev2],
                _ => vec![kind],
            };
            fabrics
                .into_iter()
                .map(|f| {
                    Ok((
                        f,
                        topo.spec.build(f, link_rate, link_delay).map_err(invalid)?,
                    ))
                })
                .collect::<Result<_, ScenarioError>>()?
        };
        let jobs = match designs.first() {
            Some((_, built)) if !root.job.is_empty() => {
                placement::parse(&c, &root.job, built, topo.gpus_per_node, seed)?
            }
            _ => Vec::new(),
        };
        let failures = failure::parse(&c, &root.failure)?;
        for (fabric, built) in &designs {
            for (i, f) in failures.iter().enumerate() {
                f.on(built, i).map_err(|e| match topo.spec {
                    TopologySpec::Cluster(_) => {
                        invalid(format!("{e} (on the {} design)", fabric.label()))
                    }
                    _ => invalid(e),
                })?;
            }
        }
        if kind == FabricKind::Infiniband || designed {
            if let Some(why) = failure::infiniband_refusal(&failures) {
                return Err(invalid(why));
            }
        }
        let setting = traffic::Setting {
            jobs: &jobs,
            base,
            topology: &topo.spec,
            gpus_per_node: topo.gpus_per_node,
            nccl,
            hardware: nccl::Hardware {
                nic: link_rate,
                gpus_per_node: topo.gpus_per_node,
                nvlink: topo.nvlink.rate,
                nvls: topo.nvls,
            },
            choices: Default::default(),
        };
        let (traffic, traffic_jobs) = traffic::parse(&c, &root.traffic, &setting)?;
        let nccl_choices = setting.choices.take();
        let stop_at = c.positive_time("stop_at", &root.stop_at)?;
        if kind == FabricKind::Rocev2 {
            pathologies::check_ends(&roce, stop_at)?;
        }
        let host = match &root.host {
            Some(h) => Some(host::parse(&c, h, hosts / topo.gpus_per_node, link_rate)?),
            None => None,
        };
        let level = simulation::parse(&c, root.simulation.as_ref(), designed)?;
        let open_loop = simulation::parse_open_loop(&c, root.simulation.as_ref())?;
        let compare = compare::parse(
            &c,
            root.compare.as_ref(),
            &compare::CompareContext {
                catalog: &catalog,
                hardware: &cluster.hardware,
                nic_rate: link_rate,
                loss_recovery: roce.loss_recovery,
            },
        )?;
        let mut departures = Vec::new();
        if !ib.adaptive_routing {
            departures.push(if designed {
                "InfiniBand routes statically (`[fabric.infiniband] adaptive_routing = false`)".to_string()
            } else {
                "InfiniBand routes statically (a [topology] keeps adaptive routing off unless `[fabric.infiniband] adaptive_routing = true`)".to_string()
            });
        }
        departures.extend(rocev2::departures(&root.fabric.rocev2));
        let mut scenario = Scenario {
            name: root.name.unwrap_or_else(|| default_name.to_string()),
            seed,
            stop_at,
            fabric: kind,
            link_rate,
            link_delay,
            ib,
            roce,
            topology: topo.spec,
            gpus_per_node: topo.gpus_per_node,
            nvlink: topo.nvlink,
            nvls: topo.nvls,
            host,
            traffic,
            jobs,
            traffic_jobs,
            failures,
            hardware: cluster.hardware,
            cost,
            catalog,
            level: Level::Packet,
            open_loop,
            level_reason: None,
            nccl_choices,
            nccl,
            compare,
            catalog_latency,
            departures,
        };
        scenario.set_level(level)?;
        Ok(scenario)
    }

    /// This scenario on InfiniBand, then on RoCEv2 (each on its own design with a
    /// `[cluster]`), each at its own level; `compare` runs
    /// [`compared_fabrics`](Self::compared_fabrics).
    pub(crate) fn on_each_fabric(&self) -> [Scenario; 2] {
        [FabricKind::Infiniband, FabricKind::Rocev2].map(|fabric| Scenario {
            fabric,
            ..self.clone()
        })
    }

    /// The scenarios `check` estimates: for a `[cluster]` design, which `compare` runs on
    /// both fabrics, one per fabric; otherwise this one.
    pub fn compared(&self) -> Vec<Scenario> {
        match self.topology {
            TopologySpec::Cluster(_) => self.compared_fabrics().into(),
            _ => vec![self.clone()],
        }
    }

    /// The runs `fabricsim run` makes of this scenario (and `compare` of each candidate):
    /// the main one, a training job's +1 us run, each of two or more jobs alone, and the
    /// run without its failures (`runner::Beside` makes them).
    pub fn runs_made(&self) -> usize {
        let training = self
            .traffic
            .iter()
            .any(|t| matches!(t, Traffic::Training(_)));
        let jobs = self.jobs.len();
        1 + usize::from(training)
            + if jobs >= 2 { jobs } else { 0 }
            + usize::from(!self.failures.is_empty())
    }

    /// Job `j` alone on the cluster: every other entry replaced by an empty one, so that
    /// each entry keeps its index (and so its random draws) and the jobs their hosts.
    pub fn job_alone(&self, j: usize) -> Scenario {
        let traffic = self
            .traffic
            .iter()
            .zip(&self.traffic_jobs)
            .map(|(t, owner)| match owner {
                Some(o) if *o == j => t.clone(),
                _ => Traffic::Listed {
                    source: format!("left out: not job \"{}\"", self.jobs[j].name),
                    messages: Vec::new(),
                },
            })
            .collect();
        Scenario {
            traffic,
            ..self.clone()
        }
    }

    /// The failures on `topo` (this scenario's fabric's network), for its configuration.
    pub fn failures_on(
        &self,
        topo: &Topology,
    ) -> Result<Vec<fabricsim_fabric::driver::failure::Failure>, String> {
        let list: Vec<_> = self
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| f.on(topo, i))
            .collect::<Result<_, _>>()?;
        if self.fabric == FabricKind::Infiniband {
            if let Some(why) = failure::infiniband_refusal(&self.failures) {
                return Err(why);
            }
        }
        Ok(list)
    }

    /// Hosts (ranks) in the topology.
    pub fn host_count(&self) -> u32 {
        self.topology.hosts()
    }

    /// Builds the topology this scenario describes, GPU servers and NVLink included.
    pub fn build_topology(&self) -> Result<Topology, String> {
        let mut t = self
            .topology
            .build(self.fabric, self.link_rate, self.link_delay)?;
        t.set_gpus_per_node(self.gpus_per_node)?;
        t.set_nvlink(self.nvlink);
        Ok(t)
    }

    /// The effective configuration as TOML, every default filled in; itself a valid
    /// scenario.
    pub fn effective_toml(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "name = {}\nseed = {}", quoted(&self.name), self.seed);
        if let Some(t) = self.stop_at {
            let _ = writeln!(s, "stop_at = \"{t}\"");
        }
        simulation::write_toml(self.level, self.open_loop, &mut s);
        fabric::write_toml(self, &mut s);
        topology::write_toml(self, &mut s);
        if !self.nccl_choices.is_empty() {
            s.push_str("\n# [nccl]'s algorithm choices, written into the entries below:\n");
            for c in &self.nccl_choices {
                let _ = writeln!(s, "# {c}");
            }
        }
        nccl::write_toml(&self.nccl, &mut s);
        placement::write_toml(&self.jobs, &mut s);
        failure::write_toml(&self.failures, &mut s);
        traffic::write_toml(self, &mut s);
        if let Some(h) = &self.host {
            host::write_toml(h, &mut s);
        }
        let designs = match &self.topology {
            TopologySpec::Cluster(d) => Some(d.as_ref()),
            _ => None,
        };
        cluster::write_toml(&self.hardware, designs, &mut s);
        cost::write_toml(&self.cost, &mut s);
        compare::write_toml(&self.compare, &mut s);
        let mut used: Vec<&str> = self.hardware.switch.iter().map(String::as_str).collect();
        used.extend([self.hardware.nic.as_str(), self.hardware.gpu.as_str()]);
        used.extend(self.cost.software.iter().map(String::as_str));
        if let Some(a) = &self.compare.adaptive {
            used.extend([a.nic.as_str(), a.switch.as_str()]);
        }
        let mut written: Vec<&str> = Vec::new();
        for name in used {
            if written.contains(&name) {
                continue;
            }
            written.push(name);
            s.push_str(&self.catalog.entry_toml(name));
        }
        s
    }
}
