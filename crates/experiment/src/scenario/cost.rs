//! `[cost]`: what money and energy cost, overriding the defaults and the catalog's GPU.

use super::reader::{Ctx, Field, RangeField};
use super::ScenarioError;
use crate::catalog::{Confidence, Range};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileCost {
    lifetime_years: RangeField,
    electricity_usd_per_kwh: RangeField,
    pue: RangeField,
    gpu_usd: RangeField,
    gpu_watts: Field,
    support_share_per_year: RangeField,
    runs_per_job: Field,
    software: Option<Vec<Spanned<String>>>,
    staff_usd_per_year: Option<FilePerFabric>,
    licences_usd_per_year: Option<FilePerFabric>,
}

/// A yearly figure per fabric.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePerFabric {
    infiniband: RangeField,
    rocev2: RangeField,
}

/// What running a fabric costs a year beyond energy and support, per fabric
/// (InfiniBand, RoCEv2): zero unless the scenario sets it.
#[derive(Clone, Debug, PartialEq)]
pub struct Operations {
    /// People to run and tune the fabric (`staff_usd_per_year`).
    pub staff_usd_per_year: [SettingRange; 2],
    /// Licences and software support: UFM, a NOS (`licences_usd_per_year`).
    pub licences_usd_per_year: [SettingRange; 2],
}

impl Default for Operations {
    fn default() -> Self {
        let none = SettingRange {
            range: Range::point(0.0),
            confidence: Confidence::Placeholder,
            source: "no published figure found: zero unless the scenario sets it",
        };
        Operations {
            staff_usd_per_year: [none; 2],
            licences_usd_per_year: [none; 2],
        }
    }
}

impl Operations {
    /// A fabric's base operating lines a year (index 0 InfiniBand, 1 RoCEv2).
    pub fn usd_per_year(&self, fabric: usize) -> f64 {
        self.staff_usd_per_year[fabric].range.base + self.licences_usd_per_year[fabric].range.base
    }
}

/// A money-model setting's range and how sure it is; a value the scenario sets is the
/// user's own, a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SettingRange {
    pub range: Range,
    pub confidence: Confidence,
    pub source: &'static str,
}

/// The ranges of the settings the verdict samples.
#[derive(Clone, Debug, PartialEq)]
pub struct CostRanges {
    /// `[cost] gpu_usd`'s range; `None`: the catalog GPU's.
    pub gpu_usd: Option<SettingRange>,
    pub lifetime_years: SettingRange,
    pub electricity_usd_per_kwh: SettingRange,
    pub pue: SettingRange,
    pub support_share_per_year: SettingRange,
}

impl Default for CostRanges {
    fn default() -> Self {
        let r = |low, base, high| Range { low, base, high };
        CostRanges {
            gpu_usd: None,
            lifetime_years: SettingRange {
                range: r(3.0, 5.0, 5.0),
                confidence: Confidence::Estimate,
                source: "GPU TCO calculators amortise over 3 to 5 years (2025-26, docs/REFERENCE.md section 8)",
            },
            electricity_usd_per_kwh: SettingRange {
                range: r(0.078, 0.08, 0.08),
                confidence: Confidence::Estimate,
                source: "SemiAnalysis \"100,000 H100 clusters\" (2024), $0.078-0.08 per kWh",
            },
            pue: SettingRange {
                range: r(1.1, 1.3, 1.58),
                confidence: Confidence::Sourced,
                source: "Uptime Institute surveys (2023-24): liquid-cooled halls from 1.1, industry average 1.56-1.58",
            },
            support_share_per_year: SettingRange {
                range: r(0.05, 0.10, 0.15),
                confidence: Confidence::Placeholder,
                source: "no published figure found: half to one and a half times fabricsim's 10 % placeholder",
            },
        }
    }
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
    /// The ranges the verdict samples (a setting the scenario gives is a point).
    pub ranges: CostRanges,
    /// Staff and licences per fabric, a year.
    pub operations: Operations,
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
            ranges: CostRanges::default(),
            operations: Operations::default(),
        }
    }
}

/// Reads `[cost]` (absent: the defaults).
pub(super) fn parse(c: &Ctx, f: Option<&FileCost>) -> Result<CostSettings, ScenarioError> {
    let mut s = CostSettings::default();
    let Some(f) = f else { return Ok(s) };
    // A setting is a number (a point) or [low, base, high]: the user's own either way.
    let mine = |range: Range| SettingRange {
        range,
        confidence: Confidence::Sourced,
        source: "set in the scenario",
    };
    let r = &mut s.ranges;
    for (key, v, lo, hi, base, range) in [
        (
            "cost.lifetime_years",
            &f.lifetime_years,
            0.1,
            50.0,
            &mut s.lifetime_years,
            &mut r.lifetime_years,
        ),
        (
            "cost.electricity_usd_per_kwh",
            &f.electricity_usd_per_kwh,
            0.0,
            10.0,
            &mut s.electricity_usd_per_kwh,
            &mut r.electricity_usd_per_kwh,
        ),
        ("cost.pue", &f.pue, 1.0, 5.0, &mut s.pue, &mut r.pue),
        (
            "cost.support_share_per_year",
            &f.support_share_per_year,
            0.0,
            1.0,
            &mut s.support_share_per_year,
            &mut r.support_share_per_year,
        ),
    ] {
        if let Some(x) = c.range(key, v, lo, hi)? {
            *base = x.base;
            *range = mine(x);
        }
    }
    if let Some(x) = c.range("cost.gpu_usd", &f.gpu_usd, 0.0, 1e7)? {
        s.gpu_usd = Some(x.base);
        r.gpu_usd = Some(mine(x));
    }
    s.gpu_watts = c.number("cost.gpu_watts", &f.gpu_watts, 0.0, 1e5)?;
    if let Some(x) = c.number("cost.runs_per_job", &f.runs_per_job, 1.0, 1e12)? {
        s.runs_per_job = x;
    }
    for (key, file, lines) in [
        (
            "cost.staff_usd_per_year",
            &f.staff_usd_per_year,
            &mut s.operations.staff_usd_per_year,
        ),
        (
            "cost.licences_usd_per_year",
            &f.licences_usd_per_year,
            &mut s.operations.licences_usd_per_year,
        ),
    ] {
        let Some(file) = file else { continue };
        for (i, (fabric, v)) in [("infiniband", &file.infiniband), ("rocev2", &file.rocev2)]
            .into_iter()
            .enumerate()
        {
            if let Some(range) = c.range(&format!("{key}.{fabric}"), v, 0.0, 1e10)? {
                lines[i] = SettingRange {
                    range,
                    confidence: Confidence::Sourced,
                    source: "set in the scenario",
                };
            }
        }
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
    let r = &s.ranges;
    let _ = writeln!(
        out,
        "\n[cost]   # a setting with a range is [low, base, high]; the verdict samples it\nlifetime_years = {}\nelectricity_usd_per_kwh = {}\npue = {}\nsupport_share_per_year = {}\nruns_per_job = {:?}",
        range_toml(r.lifetime_years.range),
        range_toml(r.electricity_usd_per_kwh.range),
        range_toml(r.pue.range),
        range_toml(r.support_share_per_year.range),
        s.runs_per_job
    );
    if let Some(x) = &r.gpu_usd {
        let _ = writeln!(out, "gpu_usd = {}", range_toml(x.range));
    }
    if let Some(x) = s.gpu_watts {
        let _ = writeln!(out, "gpu_watts = {x:?}");
    }
    if !s.software.is_empty() {
        let _ = writeln!(out, "software = {:?}", s.software);
    }
    let o = &s.operations;
    for (key, lines) in [
        ("staff_usd_per_year", &o.staff_usd_per_year),
        ("licences_usd_per_year", &o.licences_usd_per_year),
    ] {
        let r = |i: usize| {
            let x = lines[i].range;
            if x.is_point() {
                format!("{:?}", x.base)
            } else {
                format!("[{:?}, {:?}, {:?}]", x.low, x.base, x.high)
            }
        };
        let _ = writeln!(
            out,
            "{key} = {{ infiniband = {}, rocev2 = {} }}",
            r(0),
            r(1)
        );
    }
}

/// A range as TOML: its base if a point, else `[low, base, high]`.
fn range_toml(x: Range) -> String {
    if x.is_point() {
        format!("{:?}", x.base)
    } else {
        format!("[{:?}, {:?}, {:?}]", x.low, x.base, x.high)
    }
}
