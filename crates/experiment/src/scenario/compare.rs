//! `[compare]`: the candidates compare weighs and how its verdict samples the ranges.
//! Beside InfiniBand and RoCEv2 (ECMP per QP, as the scenario configures it), a
//! scenario may ask for two more: "rocev2-tuned" (RoCEv2 with the tuner's settings) and
//! "rocev2-adaptive" (Ethernet whose switches route each packet adaptively, or spray it,
//! and whose NICs place packets that arrive out of order: Spectrum-4 switches with
//! BlueField-3 SuperNICs, as Spectrum-X sells it).

use super::reader::{invalid, Ctx, Field};
use super::{Hardware, Scenario, ScenarioError};
use crate::catalog::{Catalog, ItemKind};
use fabricsim_core::units::BitRate;
use fabricsim_fabric::rocev2::{LoadBalancing, LossRecovery};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

/// `[compare]`: how the verdict samples the ranges, and the candidates beyond the two.
#[derive(Clone, Debug, PartialEq)]
pub struct CompareSettings {
    /// The share of the sampled ranges a fabric must be cheapest in for the verdict to
    /// name it (SCENARIO.md v3 `threshold`, default 0.8); below it, "too close to call".
    pub threshold: f64,
    /// Points sampled from the ranges (default 20,000: a share's standard error is then
    /// at most 0.35 %).
    pub samples: u32,
    /// `candidates` names "rocev2-tuned": compare tunes RoCEv2 first, as `--tune` does.
    pub tuned_candidate: bool,
    /// `candidates` names "rocev2-adaptive": its load balancing and equipment.
    pub adaptive: Option<AdaptiveCandidate>,
}

impl Default for CompareSettings {
    fn default() -> Self {
        CompareSettings {
            threshold: 0.8,
            samples: 20_000,
            tuned_candidate: false,
            adaptive: None,
        }
    }
}

/// The candidate "rocev2-adaptive": the RoCEv2 scenario (its congestion control, PFC,
/// NCCL connections) with another load balancing, NIC and switch, on RoCEv2's design.
#[derive(Clone, Debug, PartialEq)]
pub struct AdaptiveCandidate {
    /// `adaptive_load_balancing`: "adaptive" (default; by egress queue depth, as
    /// Spectrum-X) or "spray" (per packet).
    pub load_balancing: LoadBalancing,
    /// `adaptive_nic`: the catalog NIC that places packets out of order (default
    /// "bluefield-3-supernic-400g").
    pub nic: String,
    /// `adaptive_switch`: the catalog switch (default "spectrum-4-sn5600"); it must have
    /// the RoCEv2 switch's ports and rate, so that the candidate has RoCEv2's design.
    pub switch: String,
}

/// The candidate names of `[compare] candidates` (SCENARIO.md v3).
pub const INFINIBAND: &str = "infiniband";
pub const ROCEV2: &str = "rocev2";
pub const ROCEV2_TUNED: &str = "rocev2-tuned";
pub const ROCEV2_ADAPTIVE: &str = "rocev2-adaptive";
const CANDIDATES: [&str; 4] = [INFINIBAND, ROCEV2, ROCEV2_TUNED, ROCEV2_ADAPTIVE];
const DEFAULT_ADAPTIVE_NIC: &str = "bluefield-3-supernic-400g";
const DEFAULT_ADAPTIVE_SWITCH: &str = "spectrum-4-sn5600";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCompare {
    threshold: Field,
    samples: Field,
    candidates: Option<Spanned<Vec<String>>>,
    adaptive_load_balancing: Option<Spanned<String>>,
    adaptive_nic: Option<Spanned<String>>,
    adaptive_switch: Option<Spanned<String>>,
}

/// What `[compare]` is checked against: the catalog, the cluster's hardware and NIC
/// rate, and RoCEv2's loss recovery.
pub(super) struct CompareContext<'a> {
    pub catalog: &'a Catalog,
    pub hardware: &'a Hardware,
    pub nic_rate: BitRate,
    pub loss_recovery: LossRecovery,
}

/// Reads `[compare]` (absent: the defaults).
pub(super) fn parse(
    c: &Ctx,
    f: Option<&FileCompare>,
    x: &CompareContext,
) -> Result<CompareSettings, ScenarioError> {
    let mut s = CompareSettings::default();
    let Some(f) = f else { return Ok(s) };
    if let Some(v) = c.number("compare.threshold", &f.threshold, 0.5, 1.0)? {
        s.threshold = v;
    }
    if let Some(n) = c.count("compare.samples", &f.samples, 100, 10_000_000)? {
        s.samples = n as u32;
    }
    let names: &[String] = f.candidates.as_ref().map_or(&[], |l| l.get_ref());
    if let Some(list) = &f.candidates {
        let line = c.line(list.span());
        let shown = format!("{names:?}");
        if let Some(bad) = names.iter().find(|n| !CANDIDATES.contains(&n.as_str())) {
            return Err(invalid(format!(
                "line {line}: compare.candidates = {shown}: \"{bad}\" is not a candidate fabricsim compares (it compares {})",
                CANDIDATES.join(", ")
            )));
        }
        if !names.iter().any(|n| n == INFINIBAND) || !names.iter().any(|n| n == ROCEV2) {
            return Err(invalid(format!(
                "line {line}: compare.candidates = {shown}: compare always runs infiniband and rocev2; name both"
            )));
        }
        s.tuned_candidate = names.iter().any(|n| n == ROCEV2_TUNED);
    }
    if names.iter().any(|n| n == ROCEV2_ADAPTIVE) {
        s.adaptive = Some(adaptive(c, f, x)?);
    } else if let Some((key, v)) = [
        ("adaptive_load_balancing", &f.adaptive_load_balancing),
        ("adaptive_nic", &f.adaptive_nic),
        ("adaptive_switch", &f.adaptive_switch),
    ]
    .into_iter()
    .find_map(|(k, v)| v.as_ref().map(|v| (k, v)))
    {
        return Err(invalid(format!(
            "line {}: compare.{key} = \"{}\": set while compare.candidates does not name \"{ROCEV2_ADAPTIVE}\"; it would do nothing",
            c.line(v.span()),
            v.get_ref()
        )));
    }
    Ok(s)
}

/// The "rocev2-adaptive" candidate's settings, checked against the catalog and RoCEv2.
fn adaptive(
    c: &Ctx,
    f: &FileCompare,
    x: &CompareContext,
) -> Result<AdaptiveCandidate, ScenarioError> {
    let load_balancing = match c.choice(
        "compare.adaptive_load_balancing",
        &f.adaptive_load_balancing,
        &["adaptive", "spray"],
    )? {
        Some("spray") => LoadBalancing::Spray,
        _ => LoadBalancing::Adaptive,
    };
    let named = |v: &Option<Spanned<String>>, default: &str| {
        v.as_ref()
            .map_or(default.to_string(), |v| v.get_ref().clone())
    };
    let nic = named(&f.adaptive_nic, DEFAULT_ADAPTIVE_NIC);
    let switch = named(&f.adaptive_switch, DEFAULT_ADAPTIVE_SWITCH);
    let rocev2 = Some(super::FabricKind::Rocev2);
    let nic_item = x
        .catalog
        .require("compare.adaptive_nic", &nic, ItemKind::Nic, rocev2)
        .map_err(invalid)?;
    if nic_item.port_rate.is_some_and(|r| r != x.nic_rate) {
        return Err(invalid(format!(
            "compare.adaptive_nic = \"{nic}\": its ports run at {}, the cluster's NICs at {}; name a NIC of the cluster's rate",
            nic_item.port_rate.expect("checked"),
            x.nic_rate
        )));
    }
    let sw = x
        .catalog
        .require("compare.adaptive_switch", &switch, ItemKind::Switch, rocev2)
        .map_err(invalid)?;
    let own = x
        .catalog
        .get(x.hardware.switch_for(super::FabricKind::Rocev2))
        .expect("checked at load");
    if (sw.ports, sw.port_rate) != (own.ports, own.port_rate) {
        return Err(invalid(format!(
            "compare.adaptive_switch = \"{switch}\": {} ports at {:?}, while RoCEv2's switch \"{}\" has {} at {:?}; the candidate runs on RoCEv2's design, so name a switch of the same ports and rate",
            sw.ports, sw.port_rate, own.name, own.ports, own.port_rate
        )));
    }
    if x.loss_recovery == LossRecovery::SelectiveRepeat {
        return Err(invalid(format!(
            "compare.candidates names \"{ROCEV2_ADAPTIVE}\" while fabric.rocev2.loss_recovery = \"selective-repeat\": adaptive routing reorders packets, which selective repeat's NAKs would report as losses; use \"go-back-n\" or leave the candidate out"
        )));
    }
    Ok(AdaptiveCandidate {
        load_balancing,
        nic,
        switch,
    })
}

/// `[compare]` as TOML, every setting written.
pub(super) fn write_toml(c: &CompareSettings, out: &mut String) {
    let mut names = vec![INFINIBAND, ROCEV2];
    if c.tuned_candidate {
        names.push(ROCEV2_TUNED);
    }
    if c.adaptive.is_some() {
        names.push(ROCEV2_ADAPTIVE);
    }
    let _ = writeln!(
        out,
        "\n[compare]\ncandidates = {names:?}\nthreshold = {:?}\nsamples = {}",
        c.threshold, c.samples
    );
    if let Some(a) = &c.adaptive {
        let _ = writeln!(
            out,
            "adaptive_load_balancing = \"{}\"\nadaptive_nic = \"{}\"\nadaptive_switch = \"{}\"",
            a.load_balancing.name(),
            a.nic,
            a.switch
        );
    }
}

impl Scenario {
    /// The "rocev2-adaptive" candidate, if `[compare]` asks for it: this scenario on
    /// RoCEv2 with the candidate's load balancing, NIC and switch (their catalog
    /// latencies where the scenario took its latencies from the catalog).
    pub fn adaptive_candidate(&self) -> Option<Scenario> {
        let a = self.compare.adaptive.as_ref()?;
        let mut s = self.clone();
        s.fabric = super::FabricKind::Rocev2;
        s.roce.load_balancing = a.load_balancing;
        s.hardware.nic = a.nic.clone();
        s.hardware.switch[super::FabricKind::Rocev2 as usize] = a.switch.clone();
        let latency = |name: &str| s.catalog.get(name).and_then(|i| i.latency);
        if s.catalog_latency.switch[1].is_some() {
            if let Some(l) = latency(&a.switch) {
                s.roce.switch_latency = l;
                s.catalog_latency.switch[1] = Some(a.switch.clone());
            }
        }
        if s.catalog_latency.nic.is_some() {
            if let Some(l) = latency(&a.nic) {
                s.roce.nic_tx_latency = l;
                s.roce.nic_rx_latency = l;
            }
        }
        Some(s)
    }
}
