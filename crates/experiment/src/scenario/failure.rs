//! `[[failure]]`: a link or a whole switch down at a time, and back up at another. Nodes
//! are the topology's node ids (`check` lists them). Each fabric's detection and re-route
//! times are its own keys, `failure_detection` and `reroute_time` in
//! `[fabric.infiniband]` and `[fabric.rocev2]`.

use super::reader::{invalid, Ctx, Field, Raw};
use super::ScenarioError;
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{NodeId, PortId, Time};
use fabricsim_fabric::driver::failure::Failure;
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFailure {
    at: Field,
    until: Field,
    link: Option<Vec<Spanned<Raw>>>,
    switch: Field,
}

/// What fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedPart {
    /// The link between two nodes.
    Link(u32, u32),
    Switch(u32),
}

/// A `[[failure]]` entry as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailureSpec {
    pub at: Time,
    pub until: Option<Time>,
    pub part: FailedPart,
}

impl FailureSpec {
    /// The failure on `topo`: the ports it takes down; an error names the entry `i`.
    pub fn on(&self, topo: &Topology, i: usize) -> Result<Failure, String> {
        let nodes = topo.nodes().len() as u32;
        let check = |n: u32, key: &str| {
            if n < nodes {
                Ok(NodeId(n))
            } else {
                Err(format!(
                    "failure[{i}].{key}: node {n} is not in the topology (nodes 0 to {}; `fabricsim check` lists them)",
                    nodes - 1
                ))
            }
        };
        let both = |p: PortId| [p, topo.port(p).peer];
        let (ports, switch) = match self.part {
            FailedPart::Link(a, b) => {
                let (na, nb) = (check(a, "link")?, check(b, "link")?);
                let port = topo
                    .node_ports(na)
                    .iter()
                    .copied()
                    .find(|&p| topo.port(topo.port(p).peer).node == nb)
                    .ok_or_else(|| {
                        format!("failure[{i}].link = [{a}, {b}]: no link joins nodes {a} and {b} (`fabricsim check` lists the links)")
                    })?;
                let host_end = [na, nb]
                    .into_iter()
                    .find(|n| matches!(topo.nodes()[n.index()], NodeKind::Host(_)));
                if let (Some(h), None) = (host_end, self.until) {
                    return Err(format!(
                        "failure[{i}].link = [{a}, {b}]: node {} is a host and this its only link, so its traffic would wait for ever; give `until`",
                        h.0
                    ));
                }
                (both(port).to_vec(), None)
            }
            FailedPart::Switch(s) => {
                let n = check(s, "switch")?;
                if !matches!(topo.nodes()[n.index()], NodeKind::Switch { .. }) {
                    return Err(format!("failure[{i}].switch = {s}: node {s} is a host"));
                }
                let ports = topo.node_ports(n).iter().flat_map(|&p| both(p)).collect();
                (ports, Some(n))
            }
        };
        Ok(Failure {
            ports,
            at: self.at,
            until: self.until,
            switch,
        })
    }
}

/// Why InfiniBand cannot run `failures`, if it cannot: a switch failing for good, whose
/// packets only a transport retransmission (not modelled there) would recover.
pub fn infiniband_refusal(failures: &[FailureSpec]) -> Option<String> {
    let i = failures
        .iter()
        .position(|f| matches!(f.part, FailedPart::Switch(_)) && f.until.is_none())?;
    Some(format!(
        "failure[{i}]: a switch failure on InfiniBand needs `until`: the model has no transport retransmission (the ack timeout) to recover what a dead switch held"
    ))
}

/// Reads every `[[failure]]`.
pub(super) fn parse(c: &Ctx, entries: &[FileFailure]) -> Result<Vec<FailureSpec>, ScenarioError> {
    entries
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let at = c
                .time(&format!("failure[{i}].at"), &f.at)?
                .ok_or_else(|| invalid(format!("failure[{i}]: at is required")))?;
            let until = c.time(&format!("failure[{i}].until"), &f.until)?;
            if let Some(u) = until {
                if u <= at {
                    return Err(invalid(format!(
                        "failure[{i}].until = \"{u}\": must come after at = \"{at}\""
                    )));
                }
            }
            let node = |v: &Spanned<Raw>, key: &str| {
                c.entry(&format!("failure[{i}].{key}"), v, 0, u32::MAX as u64)
            };
            let part = match (&f.link, &f.switch) {
                (Some(l), None) if l.len() == 2 => {
                    let (a, b) = (node(&l[0], "link")?, node(&l[1], "link")?);
                    if a == b {
                        return Err(invalid(format!(
                            "failure[{i}].link = [{a}, {b}]: a link joins two nodes"
                        )));
                    }
                    FailedPart::Link(a as u32, b as u32)
                }
                (Some(l), None) => {
                    return Err(invalid(format!(
                        "failure[{i}].link: {} nodes; give the two ends, as [12, 40]",
                        l.len()
                    )))
                }
                (None, Some(s)) => FailedPart::Switch(node(s, "switch")? as u32),
                _ => {
                    return Err(invalid(format!(
                        "failure[{i}]: give one of link = [a, b] or switch = n"
                    )))
                }
            };
            Ok(FailureSpec { at, until, part })
        })
        .collect()
}

/// The failures as `[[failure]]` tables.
pub(super) fn write_toml(failures: &[FailureSpec], s: &mut String) {
    for f in failures {
        let what = match f.part {
            FailedPart::Link(a, b) => format!("link = [{a}, {b}]"),
            FailedPart::Switch(n) => format!("switch = {n}"),
        };
        let _ = writeln!(s, "\n[[failure]]\nat = \"{}\"\n{what}", f.at);
        if let Some(u) = f.until {
            let _ = writeln!(s, "until = \"{u}\"");
        }
    }
}

/// The nodes and links of `topo`, as `check` lists them for `[[failure]]` entries: each
/// switch with its tier and the nodes it links to (hosts as ranges).
pub fn describe_nodes(topo: &Topology) -> String {
    let mut s = String::new();
    let hosts = topo.host_count();
    let _ = writeln!(
        s,
        "# nodes (for [[failure]]): hosts 0 to {} are nodes {} to {}",
        hosts.saturating_sub(1),
        topo.host_node(fabricsim_core::units::HostId(0)).0,
        topo.host_node(fabricsim_core::units::HostId(hosts.saturating_sub(1)))
            .0
    );
    for (n, kind) in topo.nodes().iter().enumerate() {
        let NodeKind::Switch { tier } = kind else {
            continue;
        };
        let mut peers: Vec<u32> = topo
            .node_ports(NodeId(n as u32))
            .iter()
            .map(|&p| topo.port(topo.port(p).peer).node.0)
            .collect();
        peers.sort_unstable();
        let _ = writeln!(
            s,
            "#   switch {n} (tier {tier}): links to {}",
            ranges(&peers)
        );
    }
    s
}

/// Sorted numbers as "0-7, 40, 41".
fn ranges(v: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", v[i], v[j])
        } else if j == i + 1 {
            format!("{}, {}", v[i], v[j])
        } else {
            v[i].to_string()
        });
        i = j + 1;
    }
    parts.join(", ")
}
