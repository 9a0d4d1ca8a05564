//! `[simulation]`: the level a scenario runs at (SCENARIO.md v2). Packet level models
//! every packet; flow level shares links max-min fairly among fluid flows and reaches
//! the largest clusters; `auto` picks flow level above a number of hosts, and is the
//! default for `[cluster]` designs (SCENARIO.md v3).

use super::reader::{invalid, Ctx, Field};
use super::{Scenario, ScenarioError};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

/// Hosts (GPUs) above which `auto` runs at flow level: packet level runs about a thousand
/// GPUs' collectives in seconds to a minute (BENCHMARKS.md). A project choice, not a
/// published figure.
pub const DEFAULT_FLOW_ABOVE: u64 = 1024;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSimulation {
    level: Option<Spanned<String>>,
    flow_above_hosts: Field,
}

/// The level a scenario asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Packet,
    Flow,
    /// Flow level above `above` hosts, packet level otherwise.
    Auto {
        above: u64,
    },
}

impl Level {
    /// Parses "packet", "flow" or "auto" (with the default threshold).
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "packet" => Some(Level::Packet),
            "flow" => Some(Level::Flow),
            "auto" => Some(Level::Auto {
                above: DEFAULT_FLOW_ABOVE,
            }),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Packet => "packet",
            Level::Flow => "flow",
            Level::Auto { .. } => "auto",
        }
    }
}

/// Reads `[simulation]`. Without a level, a `[cluster]` design (`designed`), which is
/// what a buyer sizes at thousands of GPUs, runs `auto`; anything else runs packets.
pub(super) fn parse(
    c: &Ctx,
    f: Option<&FileSimulation>,
    designed: bool,
) -> Result<Level, ScenarioError> {
    let default = if designed { "auto" } else { "packet" };
    let Some(f) = f else {
        return Ok(Level::parse(default).expect("a level"));
    };
    let level = c.choice("simulation.level", &f.level, &["packet", "flow", "auto"])?;
    let above = c.count(
        "simulation.flow_above_hosts",
        &f.flow_above_hosts,
        2,
        u32::MAX as u64,
    )?;
    match (level.unwrap_or(default), above) {
        ("auto", a) => Ok(Level::Auto {
            above: a.unwrap_or(DEFAULT_FLOW_ABOVE),
        }),
        (l, Some(a)) => Err(invalid(format!(
            "simulation.flow_above_hosts = {a}: only applies with level = \"auto\", not \"{l}\""
        ))),
        (l, None) => Ok(Level::parse(l).expect("a checked choice")),
    }
}

/// Why `s` cannot run at flow level, if it cannot: the mechanisms only packets show.
pub(super) fn flow_refusal(s: &Scenario) -> Option<String> {
    use super::FabricKind;
    if s.fabric == FabricKind::Rocev2 {
        let r = &s.roce;
        if !r.pause_storms.is_empty() {
            return Some(
                "fabric.rocev2.pause_storm: pause storms are modelled at packet level only".into(),
            );
        }
        if r.watchdog.is_some() {
            return Some("fabric.rocev2.pfc_watchdog: the PFC watchdog (and the deadlocks it breaks) is modelled at packet level only".into());
        }
        if !r.pfc {
            return Some("fabric.rocev2.pfc = false: flow level models lossless fabrics; drops and go-back-N need packet level".into());
        }
    }
    None
}

impl Scenario {
    /// Sets the level (`--level`), refusing flow level where the scenario needs packets.
    pub fn set_level(&mut self, level: Level) -> Result<(), ScenarioError> {
        if level == Level::Flow {
            if let Some(why) = flow_refusal(self) {
                return Err(invalid(format!("simulation.level = \"flow\": {why}")));
            }
        }
        self.level = level;
        Ok(())
    }

    /// Whether this scenario runs at flow level, and if `auto` chose it, why (for
    /// standard error). `auto` keeps packet level where flow level would refuse.
    pub fn runs_at_flow_level(&self) -> (bool, Option<String>) {
        match self.level {
            Level::Packet => (false, None),
            Level::Flow => (true, None),
            Level::Auto { above } => {
                let hosts = self.host_count() as u64;
                if hosts <= above {
                    return (false, None);
                }
                match flow_refusal(self) {
                    Some(why) => (false, Some(format!("simulation.level = \"auto\": {hosts} hosts, but packet level: {why}"))),
                    None => (true, Some(format!("simulation.level = \"auto\": {hosts} hosts > flow_above_hosts = {above}: running at flow level"))),
                }
            }
        }
    }
}

pub(super) fn write_toml(level: Level, s: &mut String) {
    let _ = writeln!(s, "\n[simulation]\nlevel = \"{}\"", level.name());
    if let Level::Auto { above } = level {
        let _ = writeln!(s, "flow_above_hosts = {above}");
    }
}
