//! Scenario files: the TOML contract of shared/SCENARIO.md, parsed into a validated
//! [`Scenario`]. Every error names the key, the value and, where known, the line.

use crate::formats::ns3::{self, Ns3Topology};
use fabricsim_core::proto::dcqcn::DcqcnPreset;
use fabricsim_core::proto::ecn::RedParams;
use fabricsim_core::proto::ibcc::CcParams;
use fabricsim_core::topology::{Nvlink, Topology};
use fabricsim_core::units::{parse_quantity, BitRate, ByteSize, Dimension, HostId, Time};
use fabricsim_core::wire::roce::IpVersion;
use fabricsim_fabric::infiniband::{default_sl_to_vl, IbCc, IbConfig};
use fabricsim_fabric::rocev2::{
    hpcc_ecn, DcqcnConfig, EcnConfig, PauseStorm, PfcWatchdog, RoceConfig,
};
use fabricsim_fabric::workload::chakra::{self, ChakraJob};
use fabricsim_fabric::workload::collective::DEFAULT_CHUNK;
use fabricsim_fabric::workload::datapath::{pcie_rate, DataPath, HostConfig};
use fabricsim_fabric::workload::{
    Collective, CollectiveAlgorithm, CollectiveOp, Message, Traffic, Training, Workload,
};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;
use toml::Spanned;

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

/// A quantity as written: a string with a unit, or a bare number.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum Raw {
    Int(i64),
    Float(f64),
    Str(String),
}

type Q = Option<Spanned<Raw>>;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRoot {
    name: Option<String>,
    seed: Option<i64>,
    stop_at: Q,
    #[serde(default)]
    fabric: FileFabric,
    #[serde(default)]
    topology: FileTopology,
    #[serde(default)]
    traffic: Vec<FileTraffic>,
    host: Option<FileHost>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileHost {
    data_path: Option<Spanned<String>>,
    pcie_generation: Q,
    pcie_lanes: Q,
    pcie_uplink: Q,
    pcie_latency: Q,
    gpus_per_pcie_switch: Q,
    host_memory_bandwidth: Q,
    cpu_copy_bandwidth: Q,
    cpu_overhead: Q,
    copy_latency: Q,
    chunk: Q,
    #[serde(default)]
    node: Vec<FileHostNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHostNode {
    index: Spanned<Raw>,
    data_path: Spanned<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileFabric {
    kind: Option<Spanned<String>>,
    link_rate: Q,
    mtu: Q,
    switch_latency: Q,
    link_delay: Q,
    cable_length: Q,
    #[serde(default)]
    infiniband: FileIb,
    #[serde(default)]
    rocev2: FileRoce,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRoce {
    pfc: Option<bool>,
    switch_buffer: Q,
    headroom: Q,
    reserve: Q,
    alpha_shift: Q,
    ecn: Option<FileEcn>,
    congestion_control: Option<Spanned<String>>,
    dcqcn_preset: Option<Spanned<String>>,
    loss_recovery: Option<Spanned<String>>,
    ip: Option<Spanned<String>>,
    ack_every: Q,
    rto_exponent: Q,
    nic_tx_latency: Q,
    nic_rx_latency: Q,
    cnp_interval: Q,
    dcqcn_g: Option<f64>,
    alpha_period: Q,
    increase_period: Q,
    byte_counter: Q,
    fast_recovery_steps: Q,
    rate_ai: Q,
    rate_hai: Q,
    min_rate: Q,
    rate_decrease_period: Q,
    pfc_watchdog: Q,
    pfc_watchdog_restore: Q,
    deadlock_check: Q,
    rate_sample: Q,
    #[serde(default)]
    pause_storm: Vec<FilePauseStorm>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePauseStorm {
    host: Spanned<Raw>,
    start: Q,
    duration: Q,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileEcn {
    enabled: Option<bool>,
    kmin: Q,
    kmax: Q,
    pmax: Option<f64>,
    scale_from: Q,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileIb {
    virtual_lanes: Q,
    adaptive_routing: Option<bool>,
    congestion_control: Option<bool>,
    vl_buffer: Q,
    vl_weights: Option<Vec<Spanned<Raw>>>,
    sl_to_vl: Option<Vec<Spanned<Raw>>>,
    ack_every: Q,
    credit_refresh: Q,
    hca_tx_latency: Q,
    hca_rx_latency: Q,
    fecn_threshold: Q,
    ccti_increase: Q,
    ccti_limit: Q,
    ccti_timer: Q,
    cct_step: Q,
    deadlock_check: Q,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileTopology {
    kind: Option<Spanned<String>>,
    hosts: Q,
    leaves: Q,
    spines: Q,
    uplink_rate: Q,
    k: Q,
    path: Option<Spanned<String>>,
    nodes: Q,
    gpus_per_node: Q,
    nvlink_bandwidth: Q,
    nvlink_latency: Q,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTraffic {
    kind: Spanned<String>,
    src: Q,
    dst: Q,
    senders: Option<Vec<Spanned<Raw>>>,
    hosts: Option<Vec<Spanned<Raw>>>,
    size: Q,
    start: Q,
    sl: Q,
    path: Option<Spanned<String>>,
    op: Option<Spanned<String>>,
    algorithm: Option<Spanned<String>>,
    ranks: Option<Vec<Spanned<Raw>>>,
    channels: Q,
    chunk: Q,
    root: Q,
    buckets: Q,
    iterations: Q,
    forward: Q,
    backward: Q,
    overlap: Option<bool>,
    job_iterations: Q,
    tensor_parallel: Q,
    pipeline_parallel: Q,
    microbatches: Q,
    activation: Q,
}

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
}

/// Which fabric a scenario runs on.
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
    /// The hosts' data paths; None: RDMA straight from memory, no host stages.
    pub host: Option<HostConfig>,
    pub traffic: Vec<Traffic>,
}

/// Default link rate: NDR 400 Gb/s per 4x port (REFERENCE.md section 2).
const DEFAULT_LINK_RATE: BitRate = BitRate::gbps(400);
/// Default propagation: 5 m of cable at about 5 ns per metre (REFERENCE.md section 2).
const DEFAULT_LINK_DELAY: Time = Time::from_ns(25);
/// Propagation per metre of cable, in picoseconds (REFERENCE.md section 2).
const PS_PER_METRE: u64 = 5_000;

/// Resolves line numbers for error messages.
struct Ctx<'a> {
    text: &'a str,
}

impl Ctx<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        self.text[..span.start.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    fn err(&self, key: &str, v: &Spanned<Raw>, msg: &str) -> ScenarioError {
        ScenarioError::Invalid(format!(
            "line {}: {key} = {}: {msg}",
            self.line(v.span()),
            show(v.get_ref())
        ))
    }

    fn quantity(&self, key: &str, v: &Q, dim: Dimension) -> Result<Option<u64>, ScenarioError> {
        let Some(v) = v else { return Ok(None) };
        let value = match v.get_ref() {
            Raw::Str(s) => parse_quantity(s, dim).map_err(|m| self.err(key, v, &m))?,
            Raw::Int(i) if dim == Dimension::Size && *i >= 0 => *i as u64,
            Raw::Int(i) if *i < 0 => return Err(self.err(key, v, "must not be negative")),
            Raw::Int(0) if dim == Dimension::Time => 0,
            _ => {
                return Err(self.err(
                    key,
                    v,
                    &format!(
                        "a {} needs a unit, as a string like \"{}\"",
                        dim.name(),
                        dim.example()
                    ),
                ))
            }
        };
        Ok(Some(value))
    }

    fn positive(&self, key: &str, v: &Q, dim: Dimension) -> Result<Option<u64>, ScenarioError> {
        match self.quantity(key, v, dim)? {
            Some(0) => Err(self.err(
                key,
                v.as_ref().expect("parsed"),
                &format!("a {} must be above zero", dim.name()),
            )),
            other => Ok(other),
        }
    }

    fn count(&self, key: &str, v: &Q, min: u64, max: u64) -> Result<Option<u64>, ScenarioError> {
        let Some(s) = v else { return Ok(None) };
        match s.get_ref() {
            Raw::Int(i) if *i >= min as i64 && *i as u64 <= max => Ok(Some(*i as u64)),
            Raw::Int(_) => {
                Err(self.err(key, s, &format!("must be an integer from {min} to {max}")))
            }
            _ => Err(self.err(key, s, "must be a plain integer")),
        }
    }

    fn host(&self, key: &str, v: &Spanned<Raw>, hosts: u32) -> Result<HostId, ScenarioError> {
        match v.get_ref() {
            Raw::Int(i) if *i >= 0 && (*i as u64) < hosts as u64 => Ok(HostId(*i as u32)),
            Raw::Int(_) => Err(self.err(
                key,
                v,
                &format!(
                    "host index out of range: the topology has hosts 0 to {}",
                    hosts - 1
                ),
            )),
            _ => Err(self.err(key, v, "must be a host index (an integer)")),
        }
    }
}

fn show(r: &Raw) -> String {
    match r {
        Raw::Int(i) => i.to_string(),
        Raw::Float(f) => f.to_string(),
        Raw::Str(s) => format!("\"{s}\""),
    }
}

fn invalid(msg: String) -> ScenarioError {
    ScenarioError::Invalid(msg)
}

/// The scenario `fabricsim run` uses when given no file (examples/default.toml).
const DEFAULT_SCENARIO: &str = include_str!("../../../../examples/default.toml");

impl Scenario {
    /// The built-in default scenario, named "default".
    pub fn builtin_default() -> Result<Scenario, ScenarioError> {
        Scenario::parse(DEFAULT_SCENARIO, "default")
    }

    /// Reads and validates a scenario file; the name defaults to the file stem.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let base = path.parent().unwrap_or(Path::new("."));
        Scenario::parse_in(&text, &stem, base).map_err(|e| match e {
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
    pub fn parse_in(
        text: &str,
        default_name: &str,
        base: &Path,
    ) -> Result<Scenario, ScenarioError> {
        let root: FileRoot =
            toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().to_string()))?;
        let c = Ctx { text };
        let fabric = &root.fabric;
        let mut fabric_kind = FabricKind::Infiniband;
        if let Some(kind) = &fabric.kind {
            match kind.get_ref().as_str() {
                "infiniband" => {}
                "rocev2" => fabric_kind = FabricKind::Rocev2,
                other => {
                    return Err(invalid(format!(
                        "line {}: fabric.kind = \"{other}\": expected \"infiniband\" or \"rocev2\"",
                        c.line(kind.span())
                    )))
                }
            }
        }
        let link_rate = BitRate(
            c.positive("fabric.link_rate", &fabric.link_rate, Dimension::Rate)?
                .unwrap_or(DEFAULT_LINK_RATE.bps()),
        );
        let link_delay = match (
            c.quantity("fabric.link_delay", &fabric.link_delay, Dimension::Time)?,
            c.quantity(
                "fabric.cable_length",
                &fabric.cable_length,
                Dimension::Length,
            )?,
        ) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "fabric.link_delay and fabric.cable_length both given: set one".into(),
                ))
            }
            (Some(d), None) => Time(d),
            (None, Some(mm)) => Time(mm * PS_PER_METRE / 1000),
            (None, None) => DEFAULT_LINK_DELAY,
        };
        let mut ib = IbConfig::default();
        let mut roce = RoceConfig {
            // Cable length for the headroom rule: as given, or from the delay at 5 ns/m.
            cable_mm: c
                .quantity(
                    "fabric.cable_length",
                    &fabric.cable_length,
                    Dimension::Length,
                )?
                .unwrap_or(link_delay.ps() * 1000 / PS_PER_METRE),
            ..RoceConfig::default()
        };
        if let Some(m) = &fabric.mtu {
            let mtu = c
                .count("fabric.mtu", &fabric.mtu, 1, u32::MAX as u64)?
                .unwrap_or(4096) as u32;
            let allowed: &[u32] = match fabric_kind {
                FabricKind::Infiniband => &[256, 512, 1024, 2048, 4096],
                FabricKind::Rocev2 => &[1024, 2048, 4096],
            };
            if !allowed.contains(&mtu) {
                return Err(c.err(
                    "fabric.mtu",
                    m,
                    &format!("a {} MTU must be one of {allowed:?}", fabric_kind.name()),
                ));
            }
            ib.mtu = mtu;
            roce.mtu = mtu;
        }
        if let Some(l) = c.quantity(
            "fabric.switch_latency",
            &fabric.switch_latency,
            Dimension::Time,
        )? {
            ib.switch_latency = Time(l);
            roce.switch_latency = Time(l);
        }
        let f = &fabric.infiniband;
        let key = |k: &str| format!("fabric.infiniband.{k}");
        if let Some(v) = c.count(&key("virtual_lanes"), &f.virtual_lanes, 1, 15)? {
            ib.virtual_lanes = v as u8;
            ib.sl_to_vl = default_sl_to_vl(ib.virtual_lanes);
            ib.vl_weights = vec![255; v as usize];
        }
        ib.adaptive_routing = f.adaptive_routing.unwrap_or(false);
        if let Some(b) = c.positive(&key("vl_buffer"), &f.vl_buffer, Dimension::Size)? {
            if b % 64 != 0 || !(4160..=128 * 1024).contains(&b) {
                return Err(c.err(
                    &key("vl_buffer"),
                    f.vl_buffer.as_ref().expect("parsed"),
                    "must be a multiple of 64 bytes from 4160 B (one MTU packet) to 128 KiB (2048 credit blocks)",
                ));
            }
            ib.vl_buffer = b as u32;
        }
        if let Some(ws) = &f.vl_weights {
            if ws.len() != ib.virtual_lanes as usize {
                return Err(invalid(format!(
                    "{}: {} weights given for {} virtual lanes",
                    key("vl_weights"),
                    ws.len(),
                    ib.virtual_lanes
                )));
            }
            ib.vl_weights = ws
                .iter()
                .map(|w| {
                    c.count(&key("vl_weights"), &Some(w.clone()), 1, 255)
                        .map(|v| v.expect("given") as u32)
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(map) = &f.sl_to_vl {
            if map.len() != 16 {
                return Err(invalid(format!(
                    "{}: needs 16 entries (one per SL), got {}",
                    key("sl_to_vl"),
                    map.len()
                )));
            }
            for (i, v) in map.iter().enumerate() {
                let vl = c
                    .count(
                        &key("sl_to_vl"),
                        &Some(v.clone()),
                        0,
                        ib.virtual_lanes as u64 - 1,
                    )?
                    .expect("given");
                ib.sl_to_vl[i] = vl as u8;
            }
        }
        if let Some(a) = c.count(&key("ack_every"), &f.ack_every, 1, 1 << 20)? {
            ib.ack_every = a as u32;
        }
        if let Some(t) = c.positive(&key("credit_refresh"), &f.credit_refresh, Dimension::Time)? {
            ib.credit_refresh = Time(t);
        }
        if let Some(t) = c.positive(&key("deadlock_check"), &f.deadlock_check, Dimension::Time)? {
            ib.deadlock_check = Time(t);
        }
        if let Some(t) = c.quantity(&key("hca_tx_latency"), &f.hca_tx_latency, Dimension::Time)? {
            ib.hca_tx_latency = Time(t);
        }
        if let Some(t) = c.quantity(&key("hca_rx_latency"), &f.hca_rx_latency, Dimension::Time)? {
            ib.hca_rx_latency = Time(t);
        }
        let cc_keys = [
            &f.fecn_threshold,
            &f.ccti_increase,
            &f.ccti_limit,
            &f.ccti_timer,
            &f.cct_step,
        ];
        if f.congestion_control == Some(true) {
            let mut cc = IbCc::default();
            let d = CcParams::default();
            cc.fecn_threshold = c
                .quantity(&key("fecn_threshold"), &f.fecn_threshold, Dimension::Size)?
                .unwrap_or(cc.fecn_threshold);
            cc.source.ccti_increase = c
                .count(&key("ccti_increase"), &f.ccti_increase, 1, 16383)?
                .map_or(d.ccti_increase, |v| v as u32);
            cc.source.ccti_limit = c
                .count(&key("ccti_limit"), &f.ccti_limit, 1, 16383)?
                .map_or(d.ccti_limit, |v| v as u32);
            cc.source.ccti_timer = c
                .positive(&key("ccti_timer"), &f.ccti_timer, Dimension::Time)?
                .map_or(d.ccti_timer, Time);
            cc.source.cct_step = c
                .quantity(&key("cct_step"), &f.cct_step, Dimension::Time)?
                .map_or(d.cct_step, Time);
            ib.congestion_control = Some(cc);
        } else if cc_keys.iter().any(|k| k.is_some()) {
            return Err(invalid(
                "fabric.infiniband: congestion-control parameters given but congestion_control is not true; they would do nothing".into(),
            ));
        }

        let t = &root.topology;
        let tkind = t
            .kind
            .as_ref()
            .map(|k| k.get_ref().as_str())
            .unwrap_or("single-switch");
        if tkind != "rail-optimized" && t.nodes.is_some() {
            return Err(invalid(format!(
                "topology.nodes: not a key of topology kind \"{tkind}\" (only of \"rail-optimized\")"
            )));
        }
        if tkind != "file" && t.path.is_some() {
            return Err(invalid(format!(
                "topology.path: not a key of topology kind \"{tkind}\" (only of \"file\")"
            )));
        }
        let topology = match tkind {
            "single-switch" => {
                reject_keys(
                    &[
                        ("topology.leaves", &t.leaves),
                        ("topology.spines", &t.spines),
                        ("topology.k", &t.k),
                        ("topology.uplink_rate", &t.uplink_rate),
                    ],
                    tkind,
                )?;
                TopologySpec::SingleSwitch {
                    hosts: c.count("topology.hosts", &t.hosts, 2, 4096)?.unwrap_or(2) as u32,
                }
            }
            "rail-optimized" => {
                reject_keys(
                    &[
                        ("topology.hosts", &t.hosts),
                        ("topology.leaves", &t.leaves),
                        ("topology.k", &t.k),
                    ],
                    tkind,
                )?;
                TopologySpec::RailOptimized {
                    nodes: c.count("topology.nodes", &t.nodes, 2, 8192)?.unwrap_or(2) as u32,
                    gpus: c
                        .count("topology.gpus_per_node", &t.gpus_per_node, 1, 64)?
                        .unwrap_or(8) as u32,
                    spines: c.count("topology.spines", &t.spines, 1, 4096)?.unwrap_or(2) as u32,
                    uplink_rate: c
                        .positive("topology.uplink_rate", &t.uplink_rate, Dimension::Rate)?
                        .map_or(link_rate, BitRate),
                }
            }
            "leaf-spine" => {
                reject_keys(&[("topology.k", &t.k)], tkind)?;
                TopologySpec::LeafSpine {
                    hosts: c.count("topology.hosts", &t.hosts, 2, 65536)?.unwrap_or(16) as u32,
                    leaves: c.count("topology.leaves", &t.leaves, 1, 4096)?.unwrap_or(4) as u32,
                    spines: c.count("topology.spines", &t.spines, 1, 4096)?.unwrap_or(2) as u32,
                    uplink_rate: c
                        .positive("topology.uplink_rate", &t.uplink_rate, Dimension::Rate)?
                        .map_or(link_rate, BitRate),
                }
            }
            "fat-tree" => {
                reject_keys(
                    &[
                        ("topology.hosts", &t.hosts),
                        ("topology.leaves", &t.leaves),
                        ("topology.spines", &t.spines),
                        ("topology.uplink_rate", &t.uplink_rate),
                    ],
                    tkind,
                )?;
                let k = c.count("topology.k", &t.k, 2, 64)?.unwrap_or(4) as u32;
                if !k.is_multiple_of(2) {
                    return Err(c.err(
                        "topology.k",
                        t.k.as_ref().expect("parsed"),
                        "a fat-tree needs an even k",
                    ));
                }
                TopologySpec::FatTree { k }
            }
            "file" => {
                reject_keys(
                    &[
                        ("topology.hosts", &t.hosts),
                        ("topology.leaves", &t.leaves),
                        ("topology.spines", &t.spines),
                        ("topology.uplink_rate", &t.uplink_rate),
                        ("topology.k", &t.k),
                    ],
                    tkind,
                )?;
                let path = t.path.as_ref().ok_or_else(|| {
                    invalid(
                        "topology.path: required by kind = \"file\" (an ns-3 topology file)".into(),
                    )
                })?;
                let (shown, text) = read_named(base, "topology.path", path, &c)?;
                let graph = ns3::parse_topology(&text)
                    .map_err(|m| invalid(format!("topology.path = \"{shown}\": {m}")))?;
                fabricsim_core::topology::Topology::from_graph(
                    graph.nodes,
                    &graph.switches,
                    &graph.links,
                )
                .map_err(|m| invalid(format!("topology.path = \"{shown}\": {m}")))?;
                TopologySpec::File { path: shown, graph }
            }
            other => {
                let line = t.kind.as_ref().map(|k| c.line(k.span())).unwrap_or(0);
                return Err(invalid(format!(
                    "line {line}: topology.kind = \"{other}\": expected \"single-switch\", \"leaf-spine\", \"fat-tree\", \"rail-optimized\" or \"file\""
                )));
            }
        };
        let scenario_hosts = topology_hosts(&topology);
        let gpus_per_node = match topology {
            TopologySpec::RailOptimized { gpus, .. } => gpus,
            _ => c
                .count("topology.gpus_per_node", &t.gpus_per_node, 1, 64)?
                .unwrap_or(1) as u32,
        };
        if !scenario_hosts.is_multiple_of(gpus_per_node) {
            return Err(invalid(format!(
                "topology.gpus_per_node = {gpus_per_node}: must divide the {scenario_hosts} hosts"
            )));
        }
        let mut nvlink = Nvlink::default();
        if let Some(r) = c.positive(
            "topology.nvlink_bandwidth",
            &t.nvlink_bandwidth,
            Dimension::Rate,
        )? {
            nvlink.rate = BitRate(r);
        }
        if let Some(l) = c.quantity(
            "topology.nvlink_latency",
            &t.nvlink_latency,
            Dimension::Time,
        )? {
            nvlink.latency = Time(l);
        }
        if gpus_per_node == 1 && (t.nvlink_bandwidth.is_some() || t.nvlink_latency.is_some()) {
            return Err(invalid(
                "topology.nvlink_bandwidth / nvlink_latency: set with one GPU per node; they would do nothing (set gpus_per_node)".into(),
            ));
        }
        parse_roce(&c, &fabric.rocev2, &mut roce, link_rate, scenario_hosts)?;
        if let TopologySpec::LeafSpine { hosts, leaves, .. } = topology {
            if hosts < leaves {
                return Err(invalid(format!(
                    "topology.hosts = {hosts}: fewer hosts than leaves ({leaves})"
                )));
            }
        }

        let mut traffic = Vec::new();
        for (i, tr) in root.traffic.iter().enumerate() {
            let at = |k: &str| format!("traffic[{i}].{k}");
            let kind = tr.kind.get_ref().as_str();
            if kind == "flow-file" {
                traffic.push(flow_file(&c, base, i, tr, &topology)?);
                continue;
            }
            if kind == "chakra" {
                traffic.push(chakra_traces(
                    &c,
                    base,
                    i,
                    tr,
                    scenario_hosts,
                    gpus_per_node,
                )?);
                continue;
            }
            if tr.path.is_some() {
                return Err(invalid(format!(
                    "traffic[{i}].path: not a key of kind \"{kind}\" (only of \"flow-file\" and \"chakra\")"
                )));
            }
            let size = c
                .positive(&at("size"), &tr.size, Dimension::Size)?
                .ok_or_else(|| invalid(format!("traffic[{i}]: size is required")))?;
            let start = Time(
                c.quantity(&at("start"), &tr.start, Dimension::Time)?
                    .unwrap_or(0),
            );
            let sl = c.count(&at("sl"), &tr.sl, 0, 15)?.unwrap_or(0) as u8;
            let need = |v: &Q, k: &str| -> Result<HostId, ScenarioError> {
                let v = v.as_ref().ok_or_else(|| {
                    invalid(format!(
                        "traffic[{i}] ({}): {k} is required",
                        tr.kind.get_ref()
                    ))
                })?;
                c.host(&at(k), v, scenario_hosts)
            };
            let hosts_list =
                |list: &[Spanned<Raw>], k: &str| -> Result<Vec<HostId>, ScenarioError> {
                    let hs = list
                        .iter()
                        .map(|v| c.host(&at(k), v, scenario_hosts))
                        .collect::<Result<Vec<_>, _>>()?;
                    let mut sorted: Vec<u32> = hs.iter().map(|h| h.0).collect();
                    sorted.sort_unstable();
                    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                        return Err(invalid(format!(
                            "traffic[{i}].{k}: host {} is listed twice",
                            w[0]
                        )));
                    }
                    Ok(hs)
                };
            let collective_keys = [
                ("op", tr.op.is_some()),
                ("algorithm", tr.algorithm.is_some()),
                ("ranks", tr.ranks.is_some()),
                ("channels", tr.channels.is_some()),
                ("chunk", tr.chunk.is_some()),
                ("root", tr.root.is_some()),
            ];
            let training_keys = [
                ("buckets", tr.buckets.is_some()),
                ("iterations", tr.iterations.is_some()),
                ("forward", tr.forward.is_some()),
                ("backward", tr.backward.is_some()),
                ("overlap", tr.overlap.is_some()),
                ("job_iterations", tr.job_iterations.is_some()),
                ("tensor_parallel", tr.tensor_parallel.is_some()),
                ("pipeline_parallel", tr.pipeline_parallel.is_some()),
                ("microbatches", tr.microbatches.is_some()),
                ("activation", tr.activation.is_some()),
            ];
            if kind != "training" {
                reject_stray(i, kind, &training_keys, " (only of \"training\")")?;
            }
            if kind == "training" {
                let implied = [("op", tr.op.is_some()), ("root", tr.root.is_some())];
                reject_stray(i, kind, &implied, " (its all-reduces are implied)")?;
            }
            if kind != "collective" && kind != "training" {
                reject_stray(i, kind, &collective_keys, " (only of \"collective\")")?;
            }
            let stray: &[(&str, bool)] = match kind {
                "flow" => &[
                    ("senders", tr.senders.is_some()),
                    ("hosts", tr.hosts.is_some()),
                ],
                "incast" => &[("src", tr.src.is_some()), ("hosts", tr.hosts.is_some())],
                "permutation" => &[
                    ("src", tr.src.is_some()),
                    ("dst", tr.dst.is_some()),
                    ("senders", tr.senders.is_some()),
                ],
                "collective" | "training" => &[
                    ("src", tr.src.is_some()),
                    ("dst", tr.dst.is_some()),
                    ("senders", tr.senders.is_some()),
                    ("hosts", tr.hosts.is_some()),
                ],
                _ => &[],
            };
            reject_stray(i, kind, stray, "")?;
            traffic.push(match kind {
                "flow" => {
                    let (src, dst) = (need(&tr.src, "src")?, need(&tr.dst, "dst")?);
                    if src == dst {
                        return Err(invalid(format!("traffic[{i}]: src = dst = {src}; a flow needs two hosts")));
                    }
                    Traffic::Flow { src, dst, size, start, sl }
                }
                "incast" => {
                    let dst = need(&tr.dst, "dst")?;
                    let senders = hosts_list(
                        tr.senders.as_deref().ok_or_else(|| invalid(format!("traffic[{i}] (incast): senders is required")))?,
                        "senders",
                    )?;
                    if senders.is_empty() || senders.contains(&dst) {
                        return Err(invalid(format!("traffic[{i}].senders: must be non-empty and exclude dst = {dst}")));
                    }
                    Traffic::Incast { senders, dst, size, start, sl }
                }
                "permutation" => {
                    let hosts = match &tr.hosts {
                        Some(list) => hosts_list(list, "hosts")?,
                        None => (0..scenario_hosts).map(HostId).collect(),
                    };
                    if hosts.len() < 2 {
                        return Err(invalid(format!("traffic[{i}].hosts: a permutation needs at least 2 hosts")));
                    }
                    Traffic::Permutation { hosts, size, start, sl }
                }
                "collective" => {
                    let op_text = tr.op.as_ref().ok_or_else(|| invalid(format!("traffic[{i}] (collective): op is required, one of {:?}", CollectiveOp::NAMES)))?;
                    let op = CollectiveOp::parse(op_text.get_ref()).ok_or_else(|| invalid(format!(
                        "line {}: traffic[{i}].op = \"{}\": expected one of {:?}",
                        c.line(op_text.span()), op_text.get_ref(), CollectiveOp::NAMES
                    )))?;
                    let algorithm = match &tr.algorithm {
                        None => op.default_algorithm(),
                        Some(a) => CollectiveAlgorithm::parse(a.get_ref()).ok_or_else(|| invalid(format!(
                            "line {}: traffic[{i}].algorithm = \"{}\": expected one of {:?}",
                            c.line(a.span()), a.get_ref(), CollectiveAlgorithm::NAMES
                        )))?,
                    };
                    let ranks = match &tr.ranks {
                        Some(list) => hosts_list(list, "ranks")?,
                        None => (0..scenario_hosts).map(HostId).collect(),
                    };
                    let collective = Collective {
                        op,
                        algorithm,
                        ranks,
                        size,
                        start,
                        channels: c.count(&at("channels"), &tr.channels, 1, 64)?.unwrap_or(1) as u32,
                        chunk: c.positive(&at("chunk"), &tr.chunk, Dimension::Size)?.unwrap_or(DEFAULT_CHUNK),
                        sl,
                        root: c.count(&at("root"), &tr.root, 0, u32::MAX as u64)?.unwrap_or(0) as u32,
                        group: gpus_per_node,
                    };
                    if algorithm == CollectiveAlgorithm::Hierarchical {
                        check_server_groups(&collective.ranks, gpus_per_node)
                            .map_err(|m| invalid(format!("traffic[{i}] (collective): {m}")))?;
                    }
                    collective.validate().map_err(|m| invalid(format!("traffic[{i}] (collective): {m}")))?;
                    Traffic::Collective(collective)
                }
                "training" => {
                    let algorithm = match &tr.algorithm {
                        None => CollectiveAlgorithm::Ring,
                        Some(a) => CollectiveAlgorithm::parse(a.get_ref()).ok_or_else(|| invalid(format!(
                            "line {}: traffic[{i}].algorithm = \"{}\": expected one of {:?}",
                            c.line(a.span()), a.get_ref(), CollectiveAlgorithm::NAMES
                        )))?,
                    };
                    let ranks = match &tr.ranks {
                        Some(list) => hosts_list(list, "ranks")?,
                        None => (0..scenario_hosts).map(HostId).collect(),
                    };
                    if algorithm == CollectiveAlgorithm::Hierarchical {
                        check_server_groups(&ranks, gpus_per_node)
                            .map_err(|m| invalid(format!("traffic[{i}] (training): {m}")))?;
                    }
                    let time = |k: &str, v: &Q| c.quantity(&at(k), v, Dimension::Time).map(|o| o.map(Time));
                    let job = Training {
                        ranks,
                        gradient: size,
                        buckets: c.count(&at("buckets"), &tr.buckets, 1, 4096)?.unwrap_or(4) as u32,
                        iterations: c.count(&at("iterations"), &tr.iterations, 1, 1000)?.unwrap_or(3) as u32,
                        forward: time("forward", &tr.forward)?.unwrap_or(Time::from_us(100)),
                        backward: time("backward", &tr.backward)?.unwrap_or(Time::from_us(200)),
                        overlap: tr.overlap.unwrap_or(true),
                        algorithm,
                        channels: c.count(&at("channels"), &tr.channels, 1, 64)?.unwrap_or(1) as u32,
                        chunk: c.positive(&at("chunk"), &tr.chunk, Dimension::Size)?.unwrap_or(DEFAULT_CHUNK),
                        group: gpus_per_node,
                        sl,
                        start,
                        job_iterations: c.count(&at("job_iterations"), &tr.job_iterations, 1, u64::MAX >> 1)?.unwrap_or(100_000),
                        tensor_parallel: c.count(&at("tensor_parallel"), &tr.tensor_parallel, 1, 4096)?.unwrap_or(1) as u32,
                        pipeline_parallel: c.count(&at("pipeline_parallel"), &tr.pipeline_parallel, 1, 4096)?.unwrap_or(1) as u32,
                        microbatches: c.count(&at("microbatches"), &tr.microbatches, 1, 4096)?.unwrap_or(1) as u32,
                        activation: c.quantity(&at("activation"), &tr.activation, Dimension::Size)?.unwrap_or(0),
                    };
                    job.validate().map_err(|m| invalid(format!("traffic[{i}] (training): {m}")))?;
                    Traffic::Training(job)
                }
                other => {
                    return Err(invalid(format!(
                        "line {}: traffic[{i}].kind = \"{other}\": expected \"flow\", \"incast\", \"permutation\", \"flow-file\", \"collective\", \"training\" or \"chakra\"",
                        c.line(tr.kind.span())
                    )))
                }
            });
        }
        let seed = match root.seed {
            Some(s) if s < 0 => return Err(invalid(format!("seed = {s}: must not be negative"))),
            Some(s) => s as u64,
            None => 1,
        };
        let stop_at = c
            .positive("stop_at", &root.stop_at, Dimension::Time)?
            .map(Time);
        if fabric_kind == FabricKind::Rocev2
            && stop_at.is_none()
            && roce.pause_storms.iter().any(|st| st.end.is_none())
        {
            return Err(invalid(
                "fabric.rocev2.pause_storm: a storm without duration never ends; give it a duration or set stop_at".into(),
            ));
        }
        Ok(Scenario {
            name: root.name.unwrap_or_else(|| default_name.to_string()),
            seed,
            stop_at,
            fabric: fabric_kind,
            link_rate,
            link_delay,
            ib,
            roce,
            topology,
            gpus_per_node,
            nvlink,
            host: match &root.host {
                Some(h) => Some(parse_host(
                    &c,
                    h,
                    scenario_hosts / gpus_per_node,
                    link_rate,
                )?),
                None => None,
            },
            traffic,
        })
    }

    /// Hosts (ranks) in the topology.
    pub fn host_count(&self) -> u32 {
        topology_hosts(&self.topology)
    }

    /// Builds the topology this scenario describes, GPU servers and NVLink included.
    pub fn build_topology(&self) -> Result<Topology, String> {
        let mut t = self.build_network()?;
        t.set_gpus_per_node(self.gpus_per_node)?;
        t.set_nvlink(self.nvlink);
        Ok(t)
    }

    fn build_network(&self) -> Result<Topology, String> {
        match self.topology {
            TopologySpec::SingleSwitch { hosts } => {
                Topology::single_switch(hosts, self.link_rate, self.link_delay)
            }
            TopologySpec::LeafSpine {
                hosts,
                leaves,
                spines,
                uplink_rate,
            } => Topology::leaf_spine(
                hosts,
                leaves,
                spines,
                self.link_rate,
                uplink_rate,
                self.link_delay,
            ),
            TopologySpec::FatTree { k } => Topology::fat_tree(k, self.link_rate, self.link_delay),
            TopologySpec::File { ref graph, .. } => {
                Topology::from_graph(graph.nodes, &graph.switches, &graph.links)
            }
            TopologySpec::RailOptimized {
                nodes,
                gpus,
                spines,
                uplink_rate,
            } => Topology::rail_optimized(
                nodes,
                gpus,
                spines,
                self.link_rate,
                uplink_rate,
                self.link_delay,
            ),
        }
    }

    /// `[fabric.rocev2]` with every default filled in.
    fn roce_toml(&self, s: &mut String) {
        let r = &self.roce;
        let _ = writeln!(
            s,
            "\n[fabric.rocev2]\nip = \"{}\"\npfc = {}\nswitch_buffer = \"{}\"\nreserve = \"{}\"\nalpha_shift = {}\nloss_recovery = \"go-back-n\"\nack_every = {}\nrto_exponent = {}   # {}\nnic_tx_latency = \"{}\"\nnic_rx_latency = \"{}\"",
            if r.ip == IpVersion::V6 { "ipv6" } else { "ipv4" },
            r.pfc,
            ByteSize(r.switch_buffer),
            ByteSize(r.reserve),
            r.alpha_shift,
            r.ack_every,
            r.rto_exponent,
            r.rto(),
            r.nic_tx_latency,
            r.nic_rx_latency
        );
        if r.pfc {
            let _ = writeln!(
                s,
                "headroom = \"{}\"{}",
                ByteSize(r.headroom_for(self.link_rate)),
                if r.headroom.is_none() {
                    "   # the mlx5 rule at link_rate"
                } else {
                    ""
                }
            );
        }
        let _ = writeln!(
            s,
            "deadlock_check = \"{}\"\nrate_sample = \"{}\"",
            r.deadlock_check, r.rate_sample
        );
        if let Some(w) = &r.watchdog {
            let _ = writeln!(
                s,
                "pfc_watchdog = \"{}\"\npfc_watchdog_restore = \"{}\"",
                w.timeout, w.restore
            );
        }
        match &r.dcqcn {
            None => {
                let _ = writeln!(s, "congestion_control = \"none\"");
            }
            Some(d) => {
                let p = &d.params;
                let _ = writeln!(
                    s,
                    "congestion_control = \"dcqcn\"\ndcqcn_preset = \"{}\"\ndcqcn_g = {}\nalpha_period = \"{}\"\nincrease_period = \"{}\"\n{}fast_recovery_steps = {}\nrate_ai = \"{}\"\nrate_hai = \"{}\"\nmin_rate = \"{}\"\nrate_decrease_period = \"{}\"\ncnp_interval = \"{}\"",
                    d.preset.name(),
                    p.g,
                    p.alpha_period,
                    p.increase_period,
                    p.byte_counter.map_or("# byte_counter: off\n".to_string(), |b| format!("byte_counter = {b}\n")),
                    p.fast_recovery_steps,
                    p.rate_ai,
                    p.rate_hai,
                    p.min_rate,
                    p.rate_decrease_period,
                    d.cnp_interval
                );
            }
        }
        match &r.ecn {
            None => {
                let _ = writeln!(s, "ecn = {{ enabled = false }}");
            }
            Some(e) => {
                let _ = writeln!(
                    s,
                    "ecn = {{ kmin = \"{}\", kmax = \"{}\", pmax = {}{} }}",
                    ByteSize(e.red.kmin),
                    ByteSize(e.red.kmax),
                    e.red.pmax,
                    e.scale_from
                        .map_or(String::new(), |r| format!(", scale_from = \"{r}\""))
                );
            }
        }
        for st in &r.pause_storms {
            let _ = writeln!(
                s,
                "\n[[fabric.rocev2.pause_storm]]\nhost = {}\nstart = \"{}\"{}",
                st.host,
                st.start,
                st.end
                    .map_or("\n# duration: without end".to_string(), |e| format!(
                        "\nduration = \"{}\"",
                        e - st.start
                    ))
            );
        }
    }

    /// The effective configuration as TOML, every default filled in.
    pub fn effective_toml(&self) -> String {
        let mut s = String::new();
        let ib = &self.ib;
        let _ = writeln!(s, "name = \"{}\"\nseed = {}", self.name, self.seed);
        if let Some(t) = self.stop_at {
            let _ = writeln!(s, "stop_at = \"{t}\"");
        }
        let _ = writeln!(
            s,
            "\n[fabric]\nkind = \"{}\"\nlink_rate = \"{}\"\nmtu = {}\nswitch_latency = \"{}\"\nlink_delay = \"{}\"",
            self.fabric.name(),
            self.link_rate,
            ib.mtu,
            match self.fabric {
                FabricKind::Infiniband => ib.switch_latency,
                FabricKind::Rocev2 => self.roce.switch_latency,
            },
            self.link_delay
        );
        if self.fabric == FabricKind::Rocev2 {
            self.roce_toml(&mut s);
        }
        if self.fabric == FabricKind::Infiniband {
            self.ib_toml(&mut s);
        }
        self.topology_and_traffic_toml(&mut s);
        if let Some(h) = &self.host {
            let _ = writeln!(
                s,
                "\n[host]\ndata_path = \"{}\"\n# PCIe links {} each way\npcie_uplink = \"{}\"\npcie_latency = \"{}\"\ngpus_per_pcie_switch = {}\nhost_memory_bandwidth = \"{}\"\ncpu_copy_bandwidth = \"{}\"\ncpu_overhead = \"{}\"\ncopy_latency = \"{}\"\nchunk = \"{}\"",
                h.data_path.name(),
                h.pcie,
                h.uplink,
                h.pcie_latency,
                h.gpus_per_pcie_switch,
                h.host_memory,
                h.cpu_copy,
                h.cpu_overhead,
                h.copy_latency,
                ByteSize(h.chunk)
            );
            for (server, p) in &h.overrides {
                let _ = writeln!(
                    s,
                    "\n[[host.node]]\nindex = {server}\ndata_path = \"{}\"",
                    p.name()
                );
            }
        }
        s
    }

    /// `[fabric.infiniband]` with every default filled in.
    fn ib_toml(&self, s: &mut String) {
        let ib = &self.ib;
        let _ = writeln!(
            s,
            "\n[fabric.infiniband]\nvirtual_lanes = {}\nadaptive_routing = {}\ncongestion_control = {}\nvl_buffer = \"{}\"\nvl_weights = {:?}\nsl_to_vl = {:?}\nack_every = {}\ncredit_refresh = \"{}\"\ndeadlock_check = \"{}\"\nhca_tx_latency = \"{}\"\nhca_rx_latency = \"{}\"",
            ib.virtual_lanes,
            ib.adaptive_routing,
            ib.congestion_control.is_some(),
            ByteSize(ib.vl_buffer as u64),
            ib.vl_weights,
            ib.sl_to_vl,
            ib.ack_every,
            ib.credit_refresh,
            ib.deadlock_check,
            ib.hca_tx_latency,
            ib.hca_rx_latency
        );
        if let Some(cc) = &ib.congestion_control {
            let _ = writeln!(
                s,
                "fecn_threshold = \"{}\"\nccti_increase = {}\nccti_limit = {}\nccti_timer = \"{}\"\ncct_step = \"{}\"",
                ByteSize(cc.fecn_threshold),
                cc.source.ccti_increase,
                cc.source.ccti_limit,
                cc.source.ccti_timer,
                cc.source.cct_step
            );
        }
    }

    /// `[topology]` and every `[[traffic]]` entry.
    fn topology_and_traffic_toml(&self, s: &mut String) {
        let _ = match &self.topology {
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
                "\n[topology]\nkind = \"file\"\npath = \"{path}\"\n# {} nodes: {} hosts, {} switches, {} links",
                graph.nodes,
                graph.host_count(),
                graph.switches.len(),
                graph.links.len()
            ),
        };
        if self.gpus_per_node > 1 {
            if !matches!(self.topology, TopologySpec::RailOptimized { .. }) {
                let _ = writeln!(s, "gpus_per_node = {}", self.gpus_per_node);
            }
            let _ = writeln!(
                s,
                "nvlink_bandwidth = \"{}\"\nnvlink_latency = \"{}\"",
                self.nvlink.rate, self.nvlink.latency
            );
        }
        let ids = |v: &[HostId]| v.iter().map(|h| h.0).collect::<Vec<_>>();
        for t in &self.traffic {
            let _ = match t {
                Traffic::Flow { src, dst, size, start, sl } => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                    ByteSize(*size)
                ),
                Traffic::Incast { senders, dst, size, start, sl } => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"incast\"\nsenders = {:?}\ndst = {dst}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                    ids(senders),
                    ByteSize(*size)
                ),
                Traffic::Permutation { hosts, size, start, sl } => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"permutation\"\nhosts = {:?}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                    ids(hosts),
                    ByteSize(*size)
                ),
                Traffic::Collective(c) => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"collective\"\nop = \"{}\"\nalgorithm = \"{}\"\nranks = {:?}\nsize = \"{}\"\nstart = \"{}\"\nchannels = {}\nchunk = \"{}\"\nroot = {}\nsl = {}",
                    c.op.name(),
                    c.algorithm.name(),
                    ids(&c.ranks),
                    ByteSize(c.size),
                    c.start,
                    c.channels,
                    ByteSize(c.chunk),
                    c.root,
                    c.sl
                ),
                Traffic::Training(t) => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"training\"\nranks = {:?}\nsize = \"{}\"   # gradient bytes per iteration\nbuckets = {}\niterations = {}\nforward = \"{}\"\nbackward = \"{}\"\noverlap = {}\nalgorithm = \"{}\"\nchannels = {}\nchunk = \"{}\"\njob_iterations = {}\ntensor_parallel = {}\npipeline_parallel = {}\nmicrobatches = {}\nactivation = \"{}\"\nstart = \"{}\"\nsl = {}",
                    ids(&t.ranks),
                    ByteSize(t.gradient),
                    t.buckets,
                    t.iterations,
                    t.forward,
                    t.backward,
                    t.overlap,
                    t.algorithm.name(),
                    t.channels,
                    ByteSize(t.chunk),
                    t.job_iterations,
                    t.tensor_parallel,
                    t.pipeline_parallel,
                    t.microbatches,
                    ByteSize(t.activation),
                    t.start,
                    t.sl
                ),
                Traffic::Chakra(job) => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"chakra\"\npath = \"{}\"\nranks = {:?}\nalgorithm = \"{}\"\nchannels = {}\nchunk = \"{}\"\nstart = \"{}\"\nsl = {}\n# {} traces, {} nodes",
                    job.source,
                    ids(&job.ranks),
                    job.algorithm.name(),
                    job.channels,
                    ByteSize(job.chunk),
                    job.start,
                    job.sl,
                    job.traces.len(),
                    job.traces.iter().map(Vec::len).sum::<usize>()
                ),
                Traffic::Listed { source, messages } => writeln!(
                    s,
                    "\n[[traffic]]\nkind = \"flow-file\"\npath = \"{source}\"\n# {} flows",
                    messages.len()
                ),
            };
        }
    }
}

/// Reads `[fabric.rocev2]` into `roce` (starting from its defaults).
fn parse_roce(
    c: &Ctx,
    f: &FileRoce,
    roce: &mut RoceConfig,
    link_rate: BitRate,
    hosts: u32,
) -> Result<(), ScenarioError> {
    let key = |k: &str| format!("fabric.rocev2.{k}");
    let choice = |k: &str,
                  v: &Option<Spanned<String>>,
                  allowed: &[&str]|
     -> Result<Option<String>, ScenarioError> {
        match v {
            None => Ok(None),
            Some(s) if allowed.contains(&s.get_ref().as_str()) => Ok(Some(s.get_ref().clone())),
            Some(s) => Err(invalid(format!(
                "line {}: {} = \"{}\": expected one of {allowed:?}",
                c.line(s.span()),
                key(k),
                s.get_ref()
            ))),
        }
    };
    roce.pfc = f.pfc.unwrap_or(true);
    if let Some(b) = c.positive(&key("switch_buffer"), &f.switch_buffer, Dimension::Size)? {
        roce.switch_buffer = b;
    }
    if let Some(h) = c.quantity(&key("headroom"), &f.headroom, Dimension::Size)? {
        if !roce.pfc {
            return Err(invalid(format!(
                "{}: set while pfc = false; it would do nothing",
                key("headroom")
            )));
        }
        roce.headroom = Some(h);
    }
    if let Some(r) = c.quantity(&key("reserve"), &f.reserve, Dimension::Size)? {
        roce.reserve = r;
    }
    if let Some(a) = c.count(&key("alpha_shift"), &f.alpha_shift, 0, 16)? {
        roce.alpha_shift = a as u32;
    }
    if let Some(ip) = choice("ip", &f.ip, &["ipv4", "ipv6"])? {
        roce.ip = if ip == "ipv6" {
            IpVersion::V6
        } else {
            IpVersion::V4
        };
    }
    choice("loss_recovery", &f.loss_recovery, &["go-back-n"])?;
    parse_pathologies(c, f, roce, hosts)?;
    if let Some(a) = c.count(&key("ack_every"), &f.ack_every, 1, 1 << 20)? {
        roce.ack_every = a as u32;
    }
    if let Some(t) = c.count(&key("rto_exponent"), &f.rto_exponent, 0, 31)? {
        roce.rto_exponent = t as u32;
    }
    if let Some(t) = c.quantity(&key("nic_tx_latency"), &f.nic_tx_latency, Dimension::Time)? {
        roce.nic_tx_latency = Time(t);
    }
    if let Some(t) = c.quantity(&key("nic_rx_latency"), &f.nic_rx_latency, Dimension::Time)? {
        roce.nic_rx_latency = Time(t);
    }
    if let Some(e) = &f.ecn {
        if e.enabled == Some(false) {
            roce.ecn = None;
        } else {
            let d = hpcc_ecn();
            let red = RedParams {
                kmin: c
                    .quantity(&key("ecn.kmin"), &e.kmin, Dimension::Size)?
                    .unwrap_or(d.red.kmin),
                kmax: c
                    .quantity(&key("ecn.kmax"), &e.kmax, Dimension::Size)?
                    .unwrap_or(d.red.kmax),
                pmax: e.pmax.unwrap_or(d.red.pmax),
            };
            if red.kmax < red.kmin || !(0.0..=1.0).contains(&red.pmax) {
                return Err(invalid(format!(
                    "{}: needs kmin <= kmax and 0 <= pmax <= 1 (got kmin {} B, kmax {} B, pmax {})",
                    key("ecn"),
                    red.kmin,
                    red.kmax,
                    red.pmax
                )));
            }
            // Thresholds written in the file hold on every port unless scale_from is given.
            let explicit = e.kmin.is_some() || e.kmax.is_some();
            let scale_from =
                match c.positive(&key("ecn.scale_from"), &e.scale_from, Dimension::Rate)? {
                    Some(r) => Some(BitRate(r)),
                    None if explicit => None,
                    None => d.scale_from,
                };
            roce.ecn = Some(EcnConfig { red, scale_from });
        }
    }
    let cc = choice(
        "congestion_control",
        &f.congestion_control,
        &["none", "dcqcn"],
    )?;
    let preset = choice("dcqcn_preset", &f.dcqcn_preset, &DcqcnPreset::NAMES)?;
    let overrides = [
        ("alpha_period", &f.alpha_period),
        ("increase_period", &f.increase_period),
        ("byte_counter", &f.byte_counter),
        ("fast_recovery_steps", &f.fast_recovery_steps),
        ("rate_ai", &f.rate_ai),
        ("rate_hai", &f.rate_hai),
        ("min_rate", &f.min_rate),
        ("rate_decrease_period", &f.rate_decrease_period),
        ("cnp_interval", &f.cnp_interval),
    ];
    if cc.as_deref() == Some("none") {
        if let Some((k, _)) = overrides.iter().find(|(_, v)| v.is_some()) {
            return Err(invalid(format!(
                "{}: set while congestion_control = \"none\"; it would do nothing",
                key(k)
            )));
        }
        if preset.is_some() || f.dcqcn_g.is_some() {
            return Err(invalid(format!(
                "{}: set while congestion_control = \"none\"; it would do nothing",
                key("dcqcn_preset / dcqcn_g")
            )));
        }
        roce.dcqcn = None;
        return Ok(());
    }
    // DCQCN is on by default, with the ConnectX firmware's parameters.
    let preset = DcqcnPreset::parse(preset.as_deref().unwrap_or("connectx")).expect("validated");
    let mut d = DcqcnConfig::preset(preset, link_rate);
    let p = &mut d.params;
    if let Some(g) = f.dcqcn_g {
        if !(g > 0.0 && g <= 1.0) {
            return Err(invalid(format!(
                "{} = {g}: must be in (0, 1]",
                key("dcqcn_g")
            )));
        }
        p.g = g;
    }
    let time = |k: &str, v: &Q| c.positive(&key(k), v, Dimension::Time).map(|o| o.map(Time));
    let rate = |k: &str, v: &Q| {
        c.positive(&key(k), v, Dimension::Rate)
            .map(|o| o.map(BitRate))
    };
    if let Some(t) = time("alpha_period", &f.alpha_period)? {
        p.alpha_period = t;
    }
    if let Some(t) = time("increase_period", &f.increase_period)? {
        p.increase_period = t;
    }
    if let Some(b) = c.positive(&key("byte_counter"), &f.byte_counter, Dimension::Size)? {
        p.byte_counter = Some(b);
    }
    if let Some(n) = c.count(&key("fast_recovery_steps"), &f.fast_recovery_steps, 0, 1000)? {
        p.fast_recovery_steps = n as u32;
    }
    if let Some(r) = rate("rate_ai", &f.rate_ai)? {
        p.rate_ai = r;
    }
    if let Some(r) = rate("rate_hai", &f.rate_hai)? {
        p.rate_hai = r;
    }
    if let Some(r) = rate("min_rate", &f.min_rate)? {
        p.min_rate = r;
    }
    if let Some(t) = c.quantity(
        &key("rate_decrease_period"),
        &f.rate_decrease_period,
        Dimension::Time,
    )? {
        p.rate_decrease_period = Time(t);
    }
    if let Some(t) = c.quantity(&key("cnp_interval"), &f.cnp_interval, Dimension::Time)? {
        d.cnp_interval = Time(t);
    }
    roce.dcqcn = Some(d);
    Ok(())
}

/// The PFC watchdog, the deadlock check interval and pause storms of `[fabric.rocev2]`.
fn parse_pathologies(
    c: &Ctx,
    f: &FileRoce,
    roce: &mut RoceConfig,
    hosts: u32,
) -> Result<(), ScenarioError> {
    let key = |k: &str| format!("fabric.rocev2.{k}");
    let watchdog = c.positive(&key("pfc_watchdog"), &f.pfc_watchdog, Dimension::Time)?;
    let restore = c.positive(
        &key("pfc_watchdog_restore"),
        &f.pfc_watchdog_restore,
        Dimension::Time,
    )?;
    roce.watchdog = match (watchdog, restore) {
        (Some(t), r) => Some(PfcWatchdog {
            timeout: Time(t),
            restore: Time(r.unwrap_or(t)),
        }),
        (None, Some(_)) => {
            return Err(invalid(format!(
                "{}: set without {}; it would do nothing",
                key("pfc_watchdog_restore"),
                key("pfc_watchdog")
            )))
        }
        (None, None) => None,
    };
    if let Some(t) = c.positive(&key("deadlock_check"), &f.deadlock_check, Dimension::Time)? {
        roce.deadlock_check = Time(t);
    }
    if let Some(t) = c.positive(&key("rate_sample"), &f.rate_sample, Dimension::Time)? {
        roce.rate_sample = Time(t);
    }
    if (roce.watchdog.is_some() || !f.pause_storm.is_empty()) && !roce.pfc {
        return Err(invalid(format!(
            "{}: pfc_watchdog and pause_storm need pfc = true",
            key("pfc")
        )));
    }
    for (i, st) in f.pause_storm.iter().enumerate() {
        let at = |k: &str| key(&format!("pause_storm[{i}].{k}"));
        let host = c.host(&at("host"), &st.host, hosts)?;
        let start = Time(
            c.quantity(&at("start"), &st.start, Dimension::Time)?
                .unwrap_or(0),
        );
        let end = c
            .positive(&at("duration"), &st.duration, Dimension::Time)?
            .map(|d| start + Time(d));
        roce.pause_storms.push(PauseStorm { host, start, end });
    }
    Ok(())
}

fn topology_hosts(t: &TopologySpec) -> u32 {
    match t {
        TopologySpec::SingleSwitch { hosts } | TopologySpec::LeafSpine { hosts, .. } => *hosts,
        TopologySpec::FatTree { k } => k * k * k / 4,
        TopologySpec::File { graph, .. } => graph.host_count(),
        TopologySpec::RailOptimized { nodes, gpus, .. } => nodes * gpus,
    }
}

/// A `chakra` traffic entry: a folder of execution traces, one `<name>.<rank>.et` per rank;
/// rank i runs on `ranks[i]` (default host i). Checked by expanding it once here, so a
/// trace that cannot run is an input error.
fn chakra_traces(
    c: &Ctx,
    base: &Path,
    i: usize,
    tr: &FileTraffic,
    hosts: u32,
    gpus_per_node: u32,
) -> Result<Traffic, ScenarioError> {
    let at = |k: &str| format!("traffic[{i}].{k}");
    let stray = [
        ("src", tr.src.is_some()),
        ("dst", tr.dst.is_some()),
        ("senders", tr.senders.is_some()),
        ("hosts", tr.hosts.is_some()),
        ("size", tr.size.is_some()),
        ("op", tr.op.is_some()),
        ("root", tr.root.is_some()),
    ];
    reject_stray(i, "chakra", &stray, " (the traces give it)")?;
    let path = tr.path.as_ref().ok_or_else(|| {
        invalid(format!(
            "{}: required by kind \"chakra\" (a folder of traces)",
            at("path")
        ))
    })?;
    let shown = path.get_ref().clone();
    let bad = |m: String| {
        invalid(format!(
            "line {}: {} = \"{shown}\": {m}",
            c.line(path.span()),
            at("path")
        ))
    };
    let traces = crate::formats::chakra::read_folder(&base.join(&shown)).map_err(bad)?;
    let ranks: Vec<HostId> = match &tr.ranks {
        Some(list) => list
            .iter()
            .map(|v| c.host(&at("ranks"), v, hosts))
            .collect::<Result<_, _>>()?,
        None => (0..traces.len() as u32).map(HostId).collect(),
    };
    if ranks.len() != traces.len() || ranks.iter().any(|h| h.0 >= hosts) {
        return Err(bad(format!(
            "{} traces for {} ranks on {hosts} hosts: give one host per trace in ranks",
            traces.len(),
            ranks.len()
        )));
    }
    let algorithm = match &tr.algorithm {
        None => CollectiveAlgorithm::Ring,
        Some(a) => CollectiveAlgorithm::parse(a.get_ref()).ok_or_else(|| {
            invalid(format!(
                "{} = \"{}\": expected one of {:?}",
                at("algorithm"),
                a.get_ref(),
                CollectiveAlgorithm::NAMES
            ))
        })?,
    };
    let job = ChakraJob {
        source: shown.clone(),
        ranks,
        traces,
        algorithm,
        channels: c.count(&at("channels"), &tr.channels, 1, 64)?.unwrap_or(1) as u32,
        chunk: c
            .positive(&at("chunk"), &tr.chunk, Dimension::Size)?
            .unwrap_or(DEFAULT_CHUNK),
        group: gpus_per_node,
        sl: c.count(&at("sl"), &tr.sl, 0, 15)?.unwrap_or(0) as u8,
        start: Time(
            c.quantity(&at("start"), &tr.start, Dimension::Time)?
                .unwrap_or(0),
        ),
    };
    chakra::expand(&job, &mut Workload::default()).map_err(bad)?;
    Ok(Traffic::Chakra(job))
}

/// Refuses the first key of `keys` that is present: `traffic[i].key: not a key of kind
/// "kind"` and `why`.
fn reject_stray(
    i: usize,
    kind: &str,
    keys: &[(&str, bool)],
    why: &str,
) -> Result<(), ScenarioError> {
    match keys.iter().find(|(_, present)| *present) {
        Some((k, _)) => Err(invalid(format!(
            "traffic[{i}].{k}: not a key of kind \"{kind}\"{why}"
        ))),
        None => Ok(()),
    }
}

/// The `[host]` table: data paths and the endpoint model.
fn parse_host(
    c: &Ctx,
    f: &FileHost,
    servers: u32,
    _link: BitRate,
) -> Result<HostConfig, ScenarioError> {
    let key = |k: &str| format!("host.{k}");
    let path = |k: &str, v: &Spanned<String>| {
        DataPath::parse(v.get_ref()).ok_or_else(|| {
            invalid(format!(
                "line {}: {k} = \"{}\": expected one of {:?}",
                c.line(v.span()),
                v.get_ref(),
                DataPath::NAMES
            ))
        })
    };
    let mut h = HostConfig::default();
    if let Some(p) = &f.data_path {
        h.data_path = path(&key("data_path"), p)?;
    }
    let generation = c
        .count(&key("pcie_generation"), &f.pcie_generation, 3, 6)?
        .unwrap_or(5) as u32;
    let lanes = c
        .count(&key("pcie_lanes"), &f.pcie_lanes, 1, 32)?
        .unwrap_or(16) as u32;
    h.pcie = pcie_rate(generation, lanes).expect("generation checked");
    h.uplink = c
        .positive(&key("pcie_uplink"), &f.pcie_uplink, Dimension::Rate)?
        .map_or(h.pcie, BitRate);
    if let Some(t) = c.quantity(&key("pcie_latency"), &f.pcie_latency, Dimension::Time)? {
        h.pcie_latency = Time(t);
    }
    if let Some(g) = c.count(&key("gpus_per_pcie_switch"), &f.gpus_per_pcie_switch, 1, 64)? {
        h.gpus_per_pcie_switch = g as u32;
    }
    if let Some(r) = c.positive(
        &key("host_memory_bandwidth"),
        &f.host_memory_bandwidth,
        Dimension::Rate,
    )? {
        h.host_memory = BitRate(r);
    }
    if let Some(r) = c.positive(
        &key("cpu_copy_bandwidth"),
        &f.cpu_copy_bandwidth,
        Dimension::Rate,
    )? {
        h.cpu_copy = BitRate(r);
    }
    if let Some(t) = c.quantity(&key("cpu_overhead"), &f.cpu_overhead, Dimension::Time)? {
        h.cpu_overhead = Time(t);
    }
    if let Some(t) = c.quantity(&key("copy_latency"), &f.copy_latency, Dimension::Time)? {
        h.copy_latency = Time(t);
    }
    if let Some(b) = c.positive(&key("chunk"), &f.chunk, Dimension::Size)? {
        h.chunk = b;
    }
    for (i, n) in f.node.iter().enumerate() {
        let k = key(&format!("node[{i}].index"));
        let server = c
            .count(
                &k,
                &Some(n.index.clone()),
                0,
                servers.saturating_sub(1) as u64,
            )?
            .expect("given");
        h.overrides.push((
            server as u32,
            path(&key(&format!("node[{i}].data_path")), &n.data_path)?,
        ));
    }
    Ok(h)
}

/// The hierarchical algorithm takes ranks server by server: each run of `gpus`
/// consecutive ranks must be the GPUs of one server.
fn check_server_groups(ranks: &[HostId], gpus: u32) -> Result<(), String> {
    for chunk in ranks.chunks(gpus.max(1) as usize) {
        let server = chunk[0].0 / gpus.max(1);
        if chunk.len() != gpus as usize || chunk.iter().any(|h| h.0 / gpus != server) {
            return Err(format!(
                "hierarchical: ranks must come server by server, {gpus} GPUs of one server at a time (gpus_per_node = {gpus})"
            ));
        }
    }
    Ok(())
}

/// Reads the file a `key = "path"` entry names, relative to `base`. Returns the path as
/// written and the text.
fn read_named(
    base: &Path,
    key: &str,
    path: &Spanned<String>,
    c: &Ctx,
) -> Result<(String, String), ScenarioError> {
    let shown = path.get_ref().clone();
    let full = base.join(&shown);
    let text = std::fs::read_to_string(&full).map_err(|e| {
        invalid(format!(
            "line {}: {key} = \"{shown}\": cannot read {}: {e}",
            c.line(path.span()),
            full.display()
        ))
    })?;
    Ok((shown, text))
}

/// A `flow-file` traffic entry: an ns-3 flow file. Its src and dst are ns-3 node ids when
/// the topology is a file too, host indices otherwise.
fn flow_file(
    c: &Ctx,
    base: &Path,
    i: usize,
    tr: &FileTraffic,
    topology: &TopologySpec,
) -> Result<Traffic, ScenarioError> {
    let stray = [
        ("src", tr.src.is_some()),
        ("dst", tr.dst.is_some()),
        ("senders", tr.senders.is_some()),
        ("hosts", tr.hosts.is_some()),
        ("size", tr.size.is_some()),
        ("start", tr.start.is_some()),
        ("sl", tr.sl.is_some()),
    ];
    reject_stray(
        i,
        "flow-file",
        &stray,
        " (the file gives every flow's fields)",
    )?;
    let key = format!("traffic[{i}].path");
    let path = tr
        .path
        .as_ref()
        .ok_or_else(|| invalid(format!("{key}: required by kind \"flow-file\"")))?;
    let (shown, text) = read_named(base, &key, path, c)?;
    let bad = |m: String| invalid(format!("{key} = \"{shown}\": {m}"));
    let hosts = topology_hosts(topology);
    let host = |node: u32, which: &str, line: usize| -> Result<HostId, ScenarioError> {
        let index = match topology {
            TopologySpec::File { graph, .. } => graph.host_index(node),
            _ => (node < hosts).then_some(node),
        };
        index.map(HostId).ok_or_else(|| {
            bad(format!(
                "flow {line}: {which} = {node} is not a host of the topology ({})",
                match topology {
                    TopologySpec::File { .. } => "a switch, or beyond the last node".to_string(),
                    _ => format!("hosts 0 to {}", hosts - 1),
                }
            ))
        })
    };
    let flows = ns3::parse_flows(&text).map_err(bad)?;
    let mut messages = Vec::with_capacity(flows.len());
    for (n, f) in flows.iter().enumerate() {
        let (src, dst) = (host(f.src, "src", n + 1)?, host(f.dst, "dst", n + 1)?);
        if src == dst {
            return Err(bad(format!("flow {}: src = dst = {}", n + 1, f.src)));
        }
        messages.push(Message {
            src,
            dst,
            size: f.size,
            start: f.start,
            sl: f.priority,
            local: None,
        });
    }
    Ok(Traffic::Listed {
        source: shown,
        messages,
    })
}

fn reject_keys(keys: &[(&str, &Q)], kind: &str) -> Result<(), ScenarioError> {
    match keys.iter().find(|(_, v)| v.is_some()) {
        Some((k, _)) => Err(invalid(format!(
            "{k}: not a key of topology kind \"{kind}\""
        ))),
        None => Ok(()),
    }
}
