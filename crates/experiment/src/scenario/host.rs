//! `[host]`: the hosts' data paths (GPUDirect RDMA, RDMA from host memory, CPU-staged)
//! and the endpoint model: PCIe, host memory, CPU copies, per-server overrides.

use super::reader::{invalid, Ctx, Field, Raw};
use super::ScenarioError;
use fabricsim_core::units::{BitRate, ByteSize, Dimension, Time};
use fabricsim_fabric::workload::datapath::{
    pcie_rate, DataPath, HostConfig, DEFAULT_MAX_PAYLOAD, NICS,
};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileHost {
    data_path: Option<Spanned<String>>,
    nic: Option<Spanned<String>>,
    nic_message_rate: Field,
    pcie_generation: Field,
    pcie_lanes: Field,
    pcie_max_payload: Field,
    pcie_uplink: Field,
    pcie_latency: Field,
    gpus_per_pcie_switch: Field,
    host_memory_bandwidth: Field,
    cpu_copy_bandwidth: Field,
    cpu_overhead: Field,
    copy_latency: Field,
    chunk: Field,
    #[serde(default)]
    node: Vec<FileHostNode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHostNode {
    index: Spanned<Raw>,
    data_path: Spanned<String>,
}

fn key(k: &str) -> String {
    format!("host.{k}")
}

/// Reads `[host]` for a cluster of `servers` servers whose NICs run at `nic_rate`.
pub(super) fn parse(
    c: &Ctx,
    f: &FileHost,
    servers: u32,
    nic_rate: BitRate,
) -> Result<HostConfig, ScenarioError> {
    let path = |k: &str, v: &Spanned<String>| c.named(k, v, DataPath::parse, &DataPath::NAMES);
    let mut h = HostConfig::default();
    if let Some(p) = &f.data_path {
        h.data_path = path(&key("data_path"), p)?;
    }
    if let Some(n) = &f.nic {
        let names: Vec<&str> = NICS.iter().map(|m| m.name).collect();
        let nic = c.named(
            &key("nic"),
            n,
            |s| NICS.iter().find(|m| m.name == s).copied(),
            &names,
        )?;
        if nic_rate > nic.max_rate {
            return Err(invalid(format!(
                "host.nic = \"{}\": its ports run at up to {}, below the NIC rate {nic_rate}",
                nic.name, nic.max_rate
            )));
        }
        h.nic = Some(nic);
    }
    let generation = c
        .count(&key("pcie_generation"), &f.pcie_generation, 3, 6)?
        .or(h.nic.map(|n| n.pcie_generation as u64))
        .unwrap_or(5) as u32;
    let lanes = c
        .count(&key("pcie_lanes"), &f.pcie_lanes, 1, 32)?
        .or(h.nic.map(|n| n.pcie_lanes as u64))
        .unwrap_or(16) as u32;
    let payload = match c.count(&key("pcie_max_payload"), &f.pcie_max_payload, 128, 4096)? {
        Some(p) if !p.is_power_of_two() => {
            return Err(c.err(
                &key("pcie_max_payload"),
                f.pcie_max_payload.as_ref().expect("given"),
                "must be a power of two from 128 to 4096 (PCIe's maximum payload sizes)",
            ))
        }
        Some(p) => p as u32,
        None => DEFAULT_MAX_PAYLOAD,
    };
    h.pcie = pcie_rate(generation, lanes, payload).expect("generation checked");
    (h.pcie_generation, h.pcie_lanes, h.pcie_max_payload) = (generation, lanes, payload);
    h.uplink = c
        .link_rate(&key("pcie_uplink"), &f.pcie_uplink)?
        .unwrap_or(h.pcie);
    if let Some(t) = c.time(&key("pcie_latency"), &f.pcie_latency)? {
        h.pcie_latency = t;
    }
    if let Some(g) = c.count(&key("gpus_per_pcie_switch"), &f.gpus_per_pcie_switch, 1, 64)? {
        h.gpus_per_pcie_switch = g as u32;
    }
    if let Some(r) = c.link_rate(&key("host_memory_bandwidth"), &f.host_memory_bandwidth)? {
        h.host_memory = r;
    }
    if let Some(r) = c.link_rate(&key("cpu_copy_bandwidth"), &f.cpu_copy_bandwidth)? {
        h.cpu_copy = r;
    }
    // Messages per second per NIC: 1,000 to 10^10 (one every 100 ps).
    if let Some(r) = c.number(&key("nic_message_rate"), &f.nic_message_rate, 1e3, 1e10)? {
        h.message_interval = Some(Time((1e12 / r).ceil() as u64));
    }
    if let Some(t) = c.time(&key("cpu_overhead"), &f.cpu_overhead)? {
        h.cpu_overhead = t;
    }
    if let Some(t) = c.time(&key("copy_latency"), &f.copy_latency)? {
        h.copy_latency = t;
    }
    if let Some(b) = c.positive(&key("chunk"), &f.chunk, Dimension::Size)? {
        h.chunk = b;
    }
    for (i, n) in f.node.iter().enumerate() {
        let k = key(&format!("node[{i}].index"));
        let server = c.entry(&k, &n.index, 0, servers.saturating_sub(1) as u64)?;
        let p = path(&key(&format!("node[{i}].data_path")), &n.data_path)?;
        h.overrides.push((server as u32, p));
    }
    Ok(h)
}

/// `[host]` and its `[[host.node]]` overrides, every default filled in.
pub(super) fn write_toml(h: &HostConfig, s: &mut String) {
    let _ = writeln!(
        s,
        "\n[host]\n{}data_path = \"{}\"\npcie_generation = {}\npcie_lanes = {}\npcie_max_payload = {}\n# PCIe links {} each way\npcie_uplink = \"{}\"\npcie_latency = \"{}\"\ngpus_per_pcie_switch = {}\nhost_memory_bandwidth = \"{}\"\ncpu_copy_bandwidth = \"{}\"\ncpu_overhead = \"{}\"\ncopy_latency = \"{}\"\nchunk = \"{}\"",
        h.nic.map(|n| format!("nic = \"{}\"\n", n.name)).unwrap_or_default()
            + &h.message_interval
                .map(|t| format!("nic_message_rate = {:e}\n", 1e12 / t.ps() as f64))
                .unwrap_or_default(),
        h.data_path.name(),
        h.pcie_generation,
        h.pcie_lanes,
        h.pcie_max_payload,
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
