//! `[cost]`: what money and energy cost, overriding the defaults and the catalog's GPU.

use super::reader::{Ctx, Field};
use super::ScenarioError;
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCost {
    lifetime_years: Field,
    electricity_usd_per_kwh: Field,
    pue: Field,
    gpu_usd: Field,
    gpu_watts: Field,
    support_share_per_year: Field,
    runs_per_job: Field,
    software: Option<Vec<Spanned<String>>>,
}

/// The money model's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct CostSettings {
    /// Years over which equipment is amortised. Default 5: unverified (GPU TCO
    /// calculators use 3 to 5; docs/REFERENCE.md section 8 quotes "owned over 3+ years").
    pub lifetime_years: f64,
    /// Default $0.08 per kWh: SemiAnalysis "100,000 H100 clusters" (2024), $0.078-0.08.
    pub electricity_usd_per_kwh: f64,
    /// Default 1.3: Uptime Institute surveys (2023-24), liquid-cooled AI halls 1.1-1.25,
    /// industry average 1.56-1.58.
    pub pue: f64,
    /// A GPU's price and power, overriding the catalog's GPU entry.
    pub gpu_usd: Option<f64>,
    pub gpu_watts: Option<f64>,
    /// Yearly support and maintenance as a share of the network's capital cost. Default
    /// 0.10: unverified, a placeholder for a vendor support contract; set yours.
    pub support_share_per_year: f64,
    /// Without a training job, the job is the scenario's traffic run this many times.
    pub runs_per_job: f64,
    /// Catalog software lines (`kind = "software"`) added to each fabric they fit.
    pub software: Vec<String>,
}

impl Default for CostSettings {
    fn default() -> Self {
        CostSettings {
            lifetime_years: 5.0,
            electricity_usd_per_kwh: 0.08,
            pue: 1.3,
            gpu_usd: None,
            gpu_watts: None,
            support_share_per_year: 0.10,
            runs_per_job: 1.0,
            software: Vec::new(),
        }
    }
}

/// Reads `[cost]` (absent: the defaults).
pub(super) fn parse(c: &Ctx, f: Option<&FileCost>) -> Result<CostSettings, ScenarioError> {
    let mut s = CostSettings::default();
    let Some(f) = f else { return Ok(s) };
    if let Some(x) = c.number("cost.lifetime_years", &f.lifetime_years, 0.1, 50.0)? {
        s.lifetime_years = x;
    }
    if let Some(x) = c.number(
        "cost.electricity_usd_per_kwh",
        &f.electricity_usd_per_kwh,
        0.0,
        10.0,
    )? {
        s.electricity_usd_per_kwh = x;
    }
    if let Some(x) = c.number("cost.pue", &f.pue, 1.0, 5.0)? {
        s.pue = x;
    }
    s.gpu_usd = c.number("cost.gpu_usd", &f.gpu_usd, 0.0, 1e7)?;
    s.gpu_watts = c.number("cost.gpu_watts", &f.gpu_watts, 0.0, 1e5)?;
    if let Some(x) = c.number(
        "cost.support_share_per_year",
        &f.support_share_per_year,
        0.0,
        1.0,
    )? {
        s.support_share_per_year = x;
    }
    if let Some(x) = c.number("cost.runs_per_job", &f.runs_per_job, 1.0, 1e12)? {
        s.runs_per_job = x;
    }
    s.software = f
        .software
        .iter()
        .flatten()
        .map(|n| n.get_ref().clone())
        .collect();
    Ok(s)
}

/// `[cost]` with every default filled in.
pub(super) fn write_toml(s: &CostSettings, out: &mut String) {
    let _ = writeln!(
        out,
        "\n[cost]\nlifetime_years = {:?}\nelectricity_usd_per_kwh = {:?}\npue = {:?}\nsupport_share_per_year = {:?}\nruns_per_job = {:?}",
        s.lifetime_years, s.electricity_usd_per_kwh, s.pue, s.support_share_per_year, s.runs_per_job
    );
    if let Some(x) = s.gpu_usd {
        let _ = writeln!(out, "gpu_usd = {x:?}");
    }
    if let Some(x) = s.gpu_watts {
        let _ = writeln!(out, "gpu_watts = {x:?}");
    }
    if !s.software.is_empty() {
        let _ = writeln!(out, "software = {:?}", s.software);
    }
}
