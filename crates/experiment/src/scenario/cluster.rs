//! `[cluster]`: what the buyer has (GPUs, servers, NICs, the style of network, its
//! oversubscription and the switch model of each fabric, from the catalog). With
//! `gpus`, each fabric gets its own design, the smallest Clos network of its switch
//! (`fabricsim_core::clos`), in place of `[topology]`; without, the keys choose the
//! hardware a hand-written `[topology]` is costed with.

use super::reader::{invalid, reject_present, Ctx, Field};
use super::{FabricKind, ScenarioError};
use crate::catalog::{Catalog, ItemKind};
use fabricsim_core::clos::{self, ClosPlan, ClosRequest, ClosStyle};
use fabricsim_core::units::{BitRate, Dimension};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCluster {
    gpus: Field,
    gpus_per_node: Field,
    nic_rate: Field,
    style: Option<Spanned<String>>,
    oversubscription: Field,
    #[serde(default)]
    switch: FileSwitches,
    nic: Option<Spanned<String>>,
    gpu: Option<Spanned<String>>,
    servers_per_rack: Field,
    dac_reach: Field,
    rack_cable: Field,
    optics: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileSwitches {
    infiniband: Option<Spanned<String>>,
    rocev2: Option<Spanned<String>>,
}

/// Default switch per fabric: a 64 x 400G NDR switch of the Quantum-2 class, and a
/// 51.2 Tb/s Ethernet switch of the Spectrum-4 class as 128 x 400G (catalog entries).
const DEFAULT_SWITCH: [&str; 2] = ["quantum-2-qm9700", "spectrum-4-sn5600"];
/// Servers per rack: 4 servers of about 10.2 kW each make a rack of about 41 kW
/// (docs/REFERENCE.md section 8, GPU server power); unverified, set yours.
const DEFAULT_SERVERS_PER_RACK: u64 = 4;
/// Cable length between a server and a switch in its own rack: 2 m, unverified.
const DEFAULT_RACK_CABLE_MM: u64 = 2_000;

/// How links that leave a rack are made optical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optics {
    /// A transceiver at each end (the NIC's single-port, the switch's twin-port) and a
    /// fiber between.
    Transceivers,
    /// One active optical cable per link.
    Aoc,
}

/// The hardware a network is built and costed with: catalog entry names and the rack
/// layout that decides copper or optics.
#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    /// Switch entry per fabric: `[infiniband, rocev2]`.
    pub switch: [String; 2],
    /// The NIC the network's bill counts, one per GPU.
    pub nic: String,
    /// The NIC a GPU entry's price includes (`includes_nic`): the cluster's `nic`, also
    /// when a compare candidate fits another one (the server is bought with this one).
    pub server_nic: String,
    pub gpu: String,
    pub servers_per_rack: u32,
    /// Copper reaches this far (mm); a link inside a rack longer than it goes optical.
    pub dac_reach_mm: u64,
    pub rack_cable_mm: u64,
    pub optics: Optics,
}

impl Hardware {
    pub fn switch_for(&self, fabric: FabricKind) -> &str {
        &self.switch[fabric as usize]
    }
}

/// A `[cluster]` with `gpus`: both fabrics' designs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterDesigns {
    pub gpus: u32,
    pub gpus_per_node: u32,
    pub nic_rate: BitRate,
    pub style: ClosStyle,
    pub oversubscription: f64,
    /// Per fabric: `[infiniband, rocev2]`; a fabric's switch that cannot build the
    /// cluster has the reason instead (refused when that fabric runs).
    pub plans: [Result<ClosPlan, String>; 2],
}

/// `[cluster]` read.
pub(super) struct ClusterSection {
    pub hardware: Hardware,
    pub designs: Option<ClusterDesigns>,
}

/// Reads `[cluster]` (absent: the default hardware, no designs). `link_rate` is
/// `fabric.link_rate` (the default NIC rate); `fabric` the scenario's own fabric, whose
/// design must exist (the other's is needed only by `compare`).
pub(super) fn parse(
    c: &Ctx,
    f: Option<&FileCluster>,
    catalog: &Catalog,
    link_rate: BitRate,
    fabric: FabricKind,
) -> Result<ClusterSection, ScenarioError> {
    let empty = FileCluster::default();
    let f = f.unwrap_or(&empty);
    let name = |key: &str, v: &Option<Spanned<String>>, default: &str, kind: ItemKind, fabric| {
        let n = v.as_ref().map_or(default, |s| s.get_ref().as_str());
        catalog
            .require(&format!("cluster.{key}"), n, kind, fabric)
            .map(|i| i.name.clone())
            .map_err(invalid)
    };
    let switch = [
        name(
            "switch.infiniband",
            &f.switch.infiniband,
            DEFAULT_SWITCH[0],
            ItemKind::Switch,
            Some(FabricKind::Infiniband),
        )?,
        name(
            "switch.rocev2",
            &f.switch.rocev2,
            DEFAULT_SWITCH[1],
            ItemKind::Switch,
            Some(FabricKind::Rocev2),
        )?,
    ];
    let nic = name("nic", &f.nic, "connectx-7-400g", ItemKind::Nic, None)?;
    let gpu = name("gpu", &f.gpu, "h100-sxm", ItemKind::Gpu, None)?;
    let dac = catalog
        .get("dac-400g")
        .and_then(|d| d.reach_mm)
        .unwrap_or(0);
    let optics = match c.choice("cluster.optics", &f.optics, &["transceivers", "aoc"])? {
        Some("aoc") => Optics::Aoc,
        _ => Optics::Transceivers,
    };
    let hardware = Hardware {
        switch,
        server_nic: nic.clone(),
        nic,
        gpu,
        servers_per_rack: c
            .count("cluster.servers_per_rack", &f.servers_per_rack, 1, 1024)?
            .unwrap_or(DEFAULT_SERVERS_PER_RACK) as u32,
        dac_reach_mm: c
            .quantity("cluster.dac_reach", &f.dac_reach, Dimension::Length)?
            .unwrap_or(dac),
        rack_cable_mm: c
            .positive("cluster.rack_cable", &f.rack_cable, Dimension::Length)?
            .unwrap_or(DEFAULT_RACK_CABLE_MM),
        optics,
    };
    if f.gpus.is_none() {
        let stray = [
            ("gpus_per_node", f.gpus_per_node.is_some()),
            ("nic_rate", f.nic_rate.is_some()),
            ("style", f.style.is_some()),
            ("oversubscription", f.oversubscription.is_some()),
        ];
        reject_present(
            &stray,
            "cluster.",
            "a [cluster] without `gpus` (set gpus to have fabricsim design the network)",
        )?;
        return Ok(ClusterSection {
            hardware,
            designs: None,
        });
    }
    let designs = designs(c, f, catalog, &hardware, link_rate, fabric)?;
    Ok(ClusterSection {
        hardware,
        designs: Some(designs),
    })
}

/// Both fabrics' designs for a `[cluster]` with `gpus`.
fn designs(
    c: &Ctx,
    f: &FileCluster,
    catalog: &Catalog,
    hw: &Hardware,
    link_rate: BitRate,
    fabric: FabricKind,
) -> Result<ClusterDesigns, ScenarioError> {
    let gpus = c
        .count("cluster.gpus", &f.gpus, 2, 1 << 20)?
        .expect("given") as u32;
    let gpus_per_node = c
        .count("cluster.gpus_per_node", &f.gpus_per_node, 1, 64)?
        .unwrap_or(8) as u32;
    if !gpus.is_multiple_of(gpus_per_node) {
        return Err(invalid(format!(
            "cluster.gpus = {gpus}: not whole servers of gpus_per_node = {gpus_per_node}"
        )));
    }
    let nic_rate = c
        .link_rate("cluster.nic_rate", &f.nic_rate)?
        .unwrap_or(link_rate);
    let style = match c.choice("cluster.style", &f.style, &["rail-optimized", "fat-tree"])? {
        Some("fat-tree") => ClosStyle::FatTree,
        _ => ClosStyle::RailOptimized,
    };
    // 1.0 = non-blocking.
    let oversubscription = c
        .number("cluster.oversubscription", &f.oversubscription, 1.0, 64.0)?
        .unwrap_or(1.0);
    let plan_for = |fabric: FabricKind| -> Result<ClosPlan, String> {
        let key = format!("cluster.switch.{}", fabric.name());
        let item = catalog.get(hw.switch_for(fabric)).expect("checked");
        let radix = item.ports_at(nic_rate).ok_or_else(|| {
            format!(
                "{key} = \"{}\": its {} ports cannot run at cluster.nic_rate = \"{nic_rate}\"",
                item.name,
                item.port_rate.expect("a switch has a port rate")
            )
        })?;
        clos::plan(&ClosRequest {
            hosts: gpus,
            gpus_per_node,
            radix,
            style,
            oversubscription,
        })
        .map_err(|m| {
            format!(
                "cluster.gpus = {gpus} on {key} = \"{}\" ({radix} ports): {m}",
                item.name
            )
        })
    };
    let plans = [
        plan_for(FabricKind::Infiniband),
        plan_for(FabricKind::Rocev2),
    ];
    if let Err(m) = &plans[fabric as usize] {
        return Err(invalid(m.clone()));
    }
    Ok(ClusterDesigns {
        gpus,
        gpus_per_node,
        nic_rate,
        style,
        oversubscription,
        plans,
    })
}

/// One line per tier of a design: switches and links up to the next tier.
pub fn describe(plan: &ClosPlan) -> String {
    let names: &[&str] = match plan.tiers() {
        1 => &["switch"],
        2 => &["leaf", "spine"],
        _ => &["leaf", "aggregation", "core"],
    };
    let mut s = format!("{} tier(s):", plan.tiers());
    for (t, n) in plan.switches.iter().enumerate() {
        let up = plan
            .links
            .get(t)
            .map_or(String::new(), |l| format!(", {} links up", l.len()));
        let _ = write!(s, " {n} {}{up};", names[t]);
    }
    let _ = write!(s, " {} host links", plan.host_leaf.len());
    if let Some(ratio) = plan.oversubscription() {
        let _ = write!(
            s,
            "; leaves {ratio:.2}:1 oversubscribed (host links : uplinks)"
        );
    }
    s
}

/// `[cluster]` with every default filled in, and each design as a comment.
pub(super) fn write_toml(hw: &Hardware, d: Option<&ClusterDesigns>, s: &mut String) {
    let _ = writeln!(s, "\n[cluster]");
    if let Some(d) = d {
        let _ = writeln!(
            s,
            "gpus = {}\ngpus_per_node = {}\nnic_rate = \"{}\"\nstyle = \"{}\"\noversubscription = {:?}",
            d.gpus, d.gpus_per_node, d.nic_rate, d.style.name(), d.oversubscription
        );
    }
    let _ = writeln!(
        s,
        "switch = {{ infiniband = \"{}\", rocev2 = \"{}\" }}\nnic = \"{}\"\ngpu = \"{}\"\nservers_per_rack = {}\ndac_reach = \"{}mm\"\nrack_cable = \"{}mm\"\noptics = \"{}\"",
        hw.switch[0],
        hw.switch[1],
        hw.nic,
        hw.gpu,
        hw.servers_per_rack,
        hw.dac_reach_mm,
        hw.rack_cable_mm,
        match hw.optics {
            Optics::Transceivers => "transceivers",
            Optics::Aoc => "aoc",
        }
    );
    if let Some(d) = d {
        for (fabric, plan) in [FabricKind::Infiniband, FabricKind::Rocev2]
            .iter()
            .zip(&d.plans)
        {
            match plan {
                Ok(plan) => {
                    let _ = writeln!(s, "# {} design: {}", fabric.name(), describe(plan));
                }
                Err(m) => {
                    let _ = writeln!(s, "# {} design: none: {m}", fabric.name());
                }
            }
        }
    }
}
