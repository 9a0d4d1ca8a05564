//! `[simulation]`: the level a scenario runs at (SCENARIO.md v2). Packet level models
//! every packet; flow level shares links max-min fairly among fluid flows and reaches
//! the largest clusters; `auto` runs packet level while its estimated wall time on this
//! machine fits a budget (or, given `flow_above_hosts`, up to that many hosts), and is
//! the default for `[cluster]` designs (SCENARIO.md v3).

use super::reader::{invalid, Ctx, Field};
use super::{Scenario, ScenarioError};
use fabricsim_core::units::Time;
use fabricsim_fabric::rocev2::LoadBalancing;
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

/// The wall-clock time `auto` lets a packet-level run take on this machine before it
/// runs flow level instead: a few minutes, so that a `compare` of two fabrics stays a
/// coffee break. A project choice, not a published figure.
pub const DEFAULT_BUDGET: Time = Time(300_000_000_000_000);

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSimulation {
    level: Option<Spanned<String>>,
    flow_above_hosts: Field,
    budget: Field,
    open_loop: Option<Spanned<String>>,
}

/// How flow level times open-loop traffic (messages that each start at a given time and
/// wait for none: incasts, permutations, flow lists, background mixes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OpenLoop {
    /// Each port two of its messages may share at once simulated on its own at packet
    /// level (Parsimon's decomposition, runner::per_link): the default.
    #[default]
    PerLink,
    /// Max-min fair fluid flows, with RoCEv2's sharing probe: faster, and blind to
    /// DCQCN's unfairness.
    Fluid,
}

impl OpenLoop {
    pub fn name(self) -> &'static str {
        match self {
            OpenLoop::PerLink => "per-link",
            OpenLoop::Fluid => "fluid",
        }
    }
}

/// Reads `simulation.open_loop` ("per-link" by default).
pub(super) fn parse_open_loop(
    c: &Ctx,
    f: Option<&FileSimulation>,
) -> Result<OpenLoop, ScenarioError> {
    let Some(f) = f else {
        return Ok(OpenLoop::default());
    };
    Ok(
        match c.choice("simulation.open_loop", &f.open_loop, &["per-link", "fluid"])? {
            Some("fluid") => OpenLoop::Fluid,
            _ => OpenLoop::PerLink,
        },
    )
}

/// The level a scenario asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Packet,
    Flow,
    /// Packet or flow level, by a rule.
    Auto(Auto),
}

/// How `auto` chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auto {
    /// Packet level while its estimated wall time on this machine's cores fits.
    Budget(Time),
    /// Flow level above this many hosts (`flow_above_hosts`, SCENARIO.md v2).
    AboveHosts(u64),
}

impl Level {
    /// Parses "packet", "flow" or "auto" (with the default budget).
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "packet" => Some(Level::Packet),
            "flow" => Some(Level::Flow),
            "auto" => Some(Level::Auto(Auto::Budget(DEFAULT_BUDGET))),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Level::Packet => "packet",
            Level::Flow => "flow",
            Level::Auto(_) => "auto",
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
    let budget = c.positive_time("simulation.budget", &f.budget)?;
    match (level.unwrap_or(default), above, budget) {
        ("auto", Some(a), Some(b)) => Err(invalid(format!(
            "simulation.flow_above_hosts = {a} and simulation.budget = \"{b}\": give one rule for \"auto\", not both"
        ))),
        ("auto", Some(a), None) => Ok(Level::Auto(Auto::AboveHosts(a))),
        ("auto", None, b) => Ok(Level::Auto(Auto::Budget(b.unwrap_or(DEFAULT_BUDGET)))),
        (l, Some(a), _) => Err(invalid(format!(
            "simulation.flow_above_hosts = {a}: only applies with level = \"auto\", not \"{l}\""
        ))),
        (l, None, Some(b)) => Err(invalid(format!(
            "simulation.budget = \"{b}\": only applies with level = \"auto\", not \"{l}\""
        ))),
        (l, None, None) => Ok(Level::parse(l).expect("a checked choice")),
    }
}

/// Why `s` cannot run at flow level, if it cannot: the mechanisms only packets show,
/// then those flow level does not model (refused when asked for, warned of at `auto`).
pub(super) fn flow_refusal(s: &Scenario) -> Option<String> {
    packets_only(s).or_else(|| flow_unmodelled(s))
}

/// What flow level does not model in `s`: RoCEv2's flowlets, and where its fluid times
/// the traffic ([`per_link_holds`] false), HPCC, Swift and TIMELY, InfiniBand's
/// congestion control (FECN, BECN and the CCT cut senders below their fair share) and
/// unequal VL arbitration weights (the fluid shares a port fairly whatever the VL).
pub fn flow_unmodelled(s: &Scenario) -> Option<String> {
    use super::FabricKind;
    if s.fabric == FabricKind::Rocev2 {
        if let LoadBalancing::Flowlet { .. } = s.roce.load_balancing {
            return Some("fabric.rocev2.load_balancing = \"flowlet\": flowlets are not modelled at flow level (it keeps each QP's ECMP path; a ring beside a permutation measured +60 % against packet level, BENCHMARKS.md)".into());
        }
    }
    if per_link_holds(s) {
        return None;
    }
    fluid_unmodelled(s)
}

/// What flow level's fluid does not model in `s` (flowlets aside): the mechanisms that
/// only its per-link packet simulations hold.
pub fn fluid_unmodelled(s: &Scenario) -> Option<String> {
    use super::FabricKind;
    const HELD: &str = "flow level models it only by per-link packet simulations, of open-loop traffic (flows, incasts, permutations, flow lists, background mixes) without adaptive routing";
    if s.fabric == FabricKind::Rocev2 {
        return s.roce.ack_cc.as_ref().map(|cc| {
            format!(
                "fabric.rocev2.congestion_control = \"{}\": its reaction to ACKs (INT or delay) is not modelled by flow level's fluid, whose RoCEv2 sharing is calibrated for DCQCN and for none; {HELD}",
                cc.name()
            )
        });
    }
    let ib = &s.ib;
    if ib.congestion_control.is_some() {
        return Some(format!("fabric.infiniband.congestion_control = true: FECN/BECN congestion control is not modelled by flow level's fluid (flows keep their fair share); {HELD}"));
    }
    let weights = &ib.vl_weights;
    if ib.virtual_lanes > 1 && weights.iter().any(|&w| w != weights[0]) {
        return Some(format!(
            "fabric.infiniband.vl_weights = {weights:?}: VL arbitration weights are not modelled by flow level's fluid (it shares each port fairly whatever the VL); {HELD}"
        ));
    }
    None
}

/// Whether flow level times `s`'s traffic by per-link packet simulations, which run the
/// scenario's own fabric settings: open-loop traffic, `simulation.open_loop` not
/// "fluid", on paths fixed in advance (per-QP ECMP, static routes, or RoCEv2's spraying,
/// each part of a message on one of its paths; not adaptive routing). The run still
/// refuses (warns under `auto`) where its plan is over `runner::per_link::PACKET_BUDGET`.
fn per_link_holds(s: &Scenario) -> bool {
    use super::FabricKind;
    let fixed_paths = match s.fabric {
        FabricKind::Infiniband => !s.ib.adaptive_routing,
        FabricKind::Rocev2 => matches!(
            s.roce.load_balancing,
            LoadBalancing::Ecmp | LoadBalancing::Spray
        ),
    };
    s.open_loop == OpenLoop::PerLink && s.open_loop_traffic() && fixed_paths
}

/// The mechanisms only packets show in `s`, if any.
pub(crate) fn packets_only(s: &Scenario) -> Option<String> {
    use super::FabricKind;
    if !s.failures.is_empty() {
        return Some("failure: link and switch failures (and the re-routing after them) are modelled at packet level only".into());
    }
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
            return Some("fabric.rocev2.pfc = false: flow level models lossless fabrics; drops and their recovery (go-back-N, selective repeat) need packet level".into());
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
        self.level_reason = None;
        Ok(())
    }
}

pub(super) fn write_toml(level: Level, open_loop: OpenLoop, s: &mut String) {
    let _ = writeln!(s, "\n[simulation]\nlevel = \"{}\"", level.name());
    if open_loop != OpenLoop::default() {
        let _ = writeln!(s, "open_loop = \"{}\"", open_loop.name());
    }
    match level {
        Level::Auto(Auto::AboveHosts(above)) => {
            let _ = writeln!(s, "flow_above_hosts = {above}");
        }
        Level::Auto(Auto::Budget(budget)) => {
            let _ = writeln!(s, "budget = \"{budget}\"");
        }
        _ => {}
    }
}
