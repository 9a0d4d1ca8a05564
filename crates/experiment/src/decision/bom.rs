//! The bill of materials of a built network: switches per tier, NICs, and every link's
//! two ends (copper inside a rack within the DAC's reach, else optics: a transceiver at
//! each end and a fiber, or an active optical cable), priced from the catalog.

use crate::catalog::{Catalog, Confidence, Item, Per};
use crate::scenario::{FabricKind, Hardware, Optics};
use fabricsim_core::topology::{NodeKind, Topology};
use fabricsim_core::units::{HostId, NodeId};
use serde::Serialize;

/// The catalog entries links are made of (overridable by their names).
pub const DAC: &str = "dac-400g";
pub const NIC_OPTIC: &str = "osfp-400g-sr4";
pub const SWITCH_OPTIC: &str = "osfp-800g-2xsr4";
pub const FIBER: &str = "mpo-fiber";
pub const AOC: &str = "aoc-400g";

/// What a network is made of, counted from its topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Switches per tier, 0 = next to the hosts.
    pub switches: Vec<u32>,
    pub nics: u32,
    /// Links per tier boundary: hosts to tier 0, tier 0 to tier 1, ...
    pub links: Vec<u32>,
    pub copper_cables: u32,
    pub optical_links: u32,
    /// Single-port transceivers at NICs.
    pub nic_transceivers: u32,
    /// Switch-side transceivers (each serves the switch optic's `ports`).
    pub switch_transceivers: u32,
    pub fibers: u32,
    pub aocs: u32,
}

/// Which rack each host and switch sits in: host h in server h / gpus_per_node, servers
/// `servers_per_rack` to a rack; a switch in a rack only if every host it serves is in
/// that rack and it serves no other switch's hosts (top of rack). All other switches
/// sit in network racks: their links to other switches leave the rack.
fn rack_of_switch(topo: &Topology, hw: &Hardware) -> Vec<Option<u32>> {
    let per_rack = topo.gpus_per_node() * hw.servers_per_rack;
    let mut rack: Vec<Option<Option<u32>>> = vec![None; topo.nodes().len()];
    for h in 0..topo.host_count() {
        let host_rack = h / per_rack;
        let sw = topo.port(topo.port(topo.host_port(HostId(h))).peer).node;
        let r = &mut rack[sw.index()];
        *r = match *r {
            None => Some(Some(host_rack)),
            Some(Some(x)) if x == host_rack => Some(Some(x)),
            _ => Some(None),
        };
    }
    rack.into_iter().map(Option::flatten).collect()
}

/// Counts the parts of `topo` built with `hw`; `switch_optic_ports` is how many switch
/// ports one switch-side transceiver serves.
pub fn count(topo: &Topology, hw: &Hardware, switch_optic_ports: u32) -> Counts {
    let tier_of = |n: NodeId| match topo.nodes()[n.index()] {
        NodeKind::Switch { tier } => Some(tier as usize),
        NodeKind::Host(_) => None,
    };
    let switch_tiers: Vec<usize> = (0..topo.nodes().len() as u32)
        .filter_map(|n| tier_of(NodeId(n)))
        .collect();
    let tiers = switch_tiers.iter().max().map_or(0, |t| t + 1);
    let mut c = Counts {
        switches: vec![0; tiers],
        nics: topo.host_count(),
        links: vec![0; tiers],
        copper_cables: 0,
        optical_links: 0,
        nic_transceivers: 0,
        switch_transceivers: 0,
        fibers: 0,
        aocs: 0,
    };
    for t in switch_tiers {
        c.switches[t] += 1;
    }
    let racks = rack_of_switch(topo, hw);
    let copper_in_rack = hw.rack_cable_mm <= hw.dac_reach_mm;
    let mut optical_ports = vec![0u32; topo.nodes().len()];
    for (i, p) in topo.ports().iter().enumerate() {
        let peer = topo.port(p.peer);
        if i > p.peer.index() {
            continue; // Each link once, from its lower port.
        }
        let (a, b) = (p.node, peer.node);
        let (ta, tb) = (tier_of(a), tier_of(b));
        let host_link = ta.is_none() || tb.is_none();
        let boundary = if host_link {
            0
        } else {
            ta.min(tb).expect("switches") + 1
        };
        if boundary < c.links.len() {
            c.links[boundary] += 1;
        }
        let copper = host_link && copper_in_rack && {
            let sw = if ta.is_none() { b } else { a };
            racks[sw.index()].is_some()
        };
        if copper {
            c.copper_cables += 1;
            continue;
        }
        c.optical_links += 1;
        for end in [a, b] {
            if tier_of(end).is_some() {
                optical_ports[end.index()] += 1;
            } else if hw.optics == Optics::Transceivers {
                c.nic_transceivers += 1;
            }
        }
    }
    match hw.optics {
        Optics::Transceivers => {
            c.fibers = c.optical_links;
            c.switch_transceivers = optical_ports
                .iter()
                .map(|&p| p.div_ceil(switch_optic_ports.max(1)))
                .sum();
        }
        Optics::Aoc => c.aocs = c.optical_links,
    }
    c
}

/// One line of the bill: a catalog entry, how many, and what each costs and draws.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BomLine {
    pub item: String,
    pub catalog: String,
    pub count: u64,
    pub unit_usd: f64,
    /// The unit price's range in the catalog.
    pub low_usd: f64,
    pub high_usd: f64,
    pub watts: f64,
    pub source: String,
    pub confidence: Confidence,
    /// Which part of the cost it is: "switches", "nics", "optics", "cables", "software".
    pub group: &'static str,
}

impl BomLine {
    pub fn usd(&self) -> f64 {
        self.count as f64 * self.unit_usd
    }
    pub fn total_watts(&self) -> f64 {
        self.count as f64 * self.watts
    }
}

fn line(item: &Item, what: String, count: u64, group: &'static str) -> BomLine {
    BomLine {
        item: what,
        catalog: item.name.clone(),
        count,
        unit_usd: item.price_usd,
        low_usd: item.price_range.low,
        high_usd: item.price_range.high,
        watts: item.watts,
        source: item.source.clone(),
        confidence: item.confidence,
        group,
    }
}

/// The priced bill of `topo` on `fabric` (lines with a count of zero left out).
pub fn bill(
    topo: &Topology,
    fabric: FabricKind,
    hw: &Hardware,
    catalog: &Catalog,
    software: &[String],
) -> (Counts, Vec<BomLine>) {
    let get = |name: &str| {
        catalog
            .get(name)
            .expect("catalog entries are checked at load")
    };
    let switch = get(hw.switch_for(fabric));
    let switch_optic = get(SWITCH_OPTIC);
    let c = count(topo, hw, switch_optic.ports);
    let tier_names: &[&str] = match c.switches.len() {
        1 => &["switch"],
        2 => &["leaf", "spine"],
        _ => &["leaf", "aggregation", "core"],
    };
    let mut lines = Vec::new();
    for (t, &n) in c.switches.iter().enumerate() {
        let name = tier_names.get(t).copied().unwrap_or("switch");
        lines.push(line(
            switch,
            format!("{} ({name})", switch.description),
            n as u64,
            "switches",
        ));
    }
    let nic = get(&hw.nic);
    lines.push(line(nic, nic.description.clone(), c.nics as u64, "nics"));
    let dac = get(DAC);
    lines.push(line(
        dac,
        dac.description.clone(),
        c.copper_cables as u64,
        "cables",
    ));
    for (name, n, group) in [
        (NIC_OPTIC, c.nic_transceivers, "optics"),
        (SWITCH_OPTIC, c.switch_transceivers, "optics"),
        (FIBER, c.fibers, "cables"),
        (AOC, c.aocs, "optics"),
    ] {
        let i = get(name);
        lines.push(line(i, i.description.clone(), n as u64, group));
    }
    let switches: u32 = c.switches.iter().sum();
    for name in software {
        let i = get(name);
        if i.fabric.is_some_and(|f| f != fabric) {
            continue;
        }
        let n = match i.per {
            Some(Per::Nic) => c.nics,
            _ => switches,
        };
        lines.push(line(i, i.description.clone(), n as u64, "software"));
    }
    lines.retain(|l| l.count > 0);
    (c, lines)
}
