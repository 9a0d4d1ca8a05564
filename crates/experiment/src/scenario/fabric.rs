//! `[fabric]`: which fabric, the link rate and delay, the MTU and the switch latency
//! shared by both fabric tables.

use super::reader::{Ctx, Field};
use super::{infiniband, rocev2, Scenario, ScenarioError};
use fabricsim_core::units::{BitRate, Dimension, Time};
use fabricsim_fabric::infiniband::IbConfig;
use fabricsim_fabric::rocev2::RoceConfig;
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

/// Default link rate: NDR 400 Gb/s per 4x port, modelled at the data rate (Linux
/// drivers/infiniband/core/verbs.c, `ib_rate_to_mbps`: IB_RATE_400_GBPS).
const DEFAULT_LINK_RATE: BitRate = BitRate::gbps(400);
/// Default propagation: 5 m of cable at 5 ns per metre.
const DEFAULT_LINK_DELAY: Time = Time::from_ns(25);
/// The longest link: 1 ms of propagation, 200 km of fibre (a run's events grow with it).
const MAX_LINK_DELAY: Time = Time::from_us(1_000);
/// Propagation per metre of cable, in picoseconds: about 5 ns/m, a signal at two thirds
/// of the speed of light (the velocity factor of fibre and twinax copper).
const PS_PER_METRE: u64 = 5_000;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFabric {
    kind: Option<Spanned<String>>,
    pub link_rate: Field,
    mtu: Field,
    pub switch_latency: Field,
    link_delay: Field,
    cable_length: Field,
    #[serde(default)]
    pub infiniband: infiniband::FileIb,
    #[serde(default)]
    pub rocev2: rocev2::FileRoce,
}

pub use fabricsim_fabric::FabricKind;

/// `[fabric]` and `[fabric.infiniband]` read; `roce` still needs its own table, which
/// depends on the topology's hosts.
pub(super) struct Fabric {
    pub kind: FabricKind,
    pub link_rate: BitRate,
    pub link_delay: Time,
    pub ib: IbConfig,
    pub roce: RoceConfig,
}

/// Reads `[fabric]` and `[fabric.infiniband]`.
pub(super) fn parse(c: &Ctx, f: &FileFabric) -> Result<Fabric, ScenarioError> {
    let kind = match &f.kind {
        None => FabricKind::Infiniband,
        Some(k) => match k.get_ref().as_str() {
            "infiniband" => FabricKind::Infiniband,
            "rocev2" => FabricKind::Rocev2,
            _ => {
                return Err(c.unexpected("fabric.kind", k, "\"infiniband\" or \"rocev2\""));
            }
        },
    };
    let link_rate = c
        .link_rate("fabric.link_rate", &f.link_rate)?
        .unwrap_or(DEFAULT_LINK_RATE);
    let cable_mm = c.quantity("fabric.cable_length", &f.cable_length, Dimension::Length)?;
    let link_delay = match (c.time("fabric.link_delay", &f.link_delay)?, cable_mm) {
        (Some(_), Some(_)) => {
            return Err(super::reader::invalid(
                "fabric.link_delay and fabric.cable_length both given: set one".into(),
            ))
        }
        (Some(d), None) => d,
        (None, Some(mm)) => Time(mm.saturating_mul(PS_PER_METRE) / 1000),
        (None, None) => DEFAULT_LINK_DELAY,
    };
    if link_delay > MAX_LINK_DELAY {
        let (key, v) = match &f.link_delay {
            Some(v) => ("fabric.link_delay", v),
            None => (
                "fabric.cable_length",
                f.cable_length.as_ref().expect("given"),
            ),
        };
        return Err(c.err(
            key,
            v,
            "one hop's propagation must be at most 1 ms (200 km of fibre)",
        ));
    }
    let mut ib = IbConfig::default();
    let mut roce = RoceConfig {
        // Cable length for the headroom rule: as given, or from the delay at 5 ns/m.
        cable_mm: cable_mm.unwrap_or(link_delay.ps() * 1000 / PS_PER_METRE),
        ..RoceConfig::default()
    };
    if let Some(mtu) = mtu(c, f, kind)? {
        ib.mtu = mtu;
        roce.mtu = mtu;
    }
    if let Some(l) = c.time("fabric.switch_latency", &f.switch_latency)? {
        ib.switch_latency = l;
        roce.switch_latency = l;
    }
    infiniband::parse(c, &f.infiniband, &mut ib)?;
    Ok(Fabric {
        kind,
        link_rate,
        link_delay,
        ib,
        roce,
    })
}

/// `fabric.mtu`, one of the fabric's MTUs.
fn mtu(c: &Ctx, f: &FileFabric, kind: FabricKind) -> Result<Option<u32>, ScenarioError> {
    let Some(m) = &f.mtu else { return Ok(None) };
    let mtu = c
        .count("fabric.mtu", &f.mtu, 1, u32::MAX as u64)?
        .expect("given") as u32;
    let allowed: &[u32] = match kind {
        FabricKind::Infiniband => &[256, 512, 1024, 2048, 4096],
        FabricKind::Rocev2 => &[1024, 2048, 4096],
    };
    if !allowed.contains(&mtu) {
        return Err(c.err(
            "fabric.mtu",
            m,
            &format!("a {} MTU must be one of {allowed:?}", kind.name()),
        ));
    }
    Ok(Some(mtu))
}

/// `[fabric]` and the scenario's fabric table, every default filled in; with a
/// `[cluster]` design, which `compare` runs on both fabrics, both tables, and each
/// fabric's switch latency when the two differ (each from its switch's catalog entry).
pub(super) fn write_toml(sc: &Scenario, s: &mut String) {
    let cluster = matches!(sc.topology, super::TopologySpec::Cluster(_));
    let latency = if cluster && sc.ib.switch_latency != sc.roce.switch_latency {
        format!(
            "# switch_latency: {} on InfiniBand, {} on RoCEv2 (each fabric's switch in the catalog)",
            sc.ib.switch_latency, sc.roce.switch_latency
        )
    } else {
        format!(
            "switch_latency = \"{}\"",
            match sc.fabric {
                FabricKind::Infiniband => sc.ib.switch_latency,
                FabricKind::Rocev2 => sc.roce.switch_latency,
            }
        )
    };
    let _ = writeln!(
        s,
        "\n[fabric]\nkind = \"{}\"\nlink_rate = \"{}\"\nmtu = {}\n{latency}\nlink_delay = \"{}\"",
        sc.fabric.name(),
        sc.link_rate,
        sc.ib.mtu,
        sc.link_delay
    );
    if cluster || sc.fabric == FabricKind::Infiniband {
        infiniband::write_toml(&sc.ib, s);
    }
    if cluster || sc.fabric == FabricKind::Rocev2 {
        rocev2::write_toml(&sc.roce, sc.link_rate, s);
    }
}
