//! `[fabric.rocev2]`: PFC and the shared buffer, ECN marking, DCQCN and its overrides,
//! loss recovery, NIC timings; its pathology keys are in [`super::pathologies`].

use super::pathologies::{self, FilePauseStorm};
use super::reader::{invalid, Ctx, Field};
use super::ScenarioError;
use fabricsim_core::proto::dcqcn::DcqcnPreset;
use fabricsim_core::proto::ecn::RedParams;
use fabricsim_core::proto::hpcc::HpccParams;
use fabricsim_core::proto::timely::TimelyParams;
use fabricsim_core::units::{BitRate, ByteSize, Dimension};
use fabricsim_core::wire::roce::IpVersion;
use fabricsim_fabric::rocev2::{
    hpcc_ecn, AckCc, DcqcnConfig, EcnConfig, LoadBalancing, LossRecovery, RoceConfig,
    DEFAULT_FLOWLET_GAP,
};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileRoce {
    pfc: Option<bool>,
    switch_buffer: Field,
    headroom: Field,
    reserve: Field,
    alpha_shift: Field,
    ecn: Option<FileEcn>,
    congestion_control: Option<Spanned<String>>,
    dcqcn_preset: Option<Spanned<String>>,
    loss_recovery: Option<Spanned<String>>,
    load_balancing: Option<Spanned<String>>,
    flowlet_gap: Field,
    ip: Option<Spanned<String>>,
    ack_every: Field,
    rto_exponent: Field,
    nic_tx_latency: Field,
    nic_rx_latency: Field,
    cnp_interval: Field,
    dcqcn_g: Option<f64>,
    alpha_period: Field,
    increase_period: Field,
    byte_counter: Field,
    fast_recovery_steps: Field,
    rate_ai: Field,
    rate_hai: Field,
    min_rate: Field,
    rate_decrease_period: Field,
    hpcc_eta: Option<f64>,
    hpcc_max_stage: Field,
    hpcc_rate_ai: Field,
    swift_base_target: Field,
    timely_t_low: Field,
    timely_t_high: Field,
    pub pfc_watchdog: Field,
    pub pfc_watchdog_restore: Field,
    pub deadlock_check: Field,
    pub rate_sample: Field,
    failure_detection: Field,
    reroute_time: Field,
    #[serde(default)]
    pub pause_storm: Vec<FilePauseStorm>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileEcn {
    enabled: Option<bool>,
    kmin: Field,
    kmax: Field,
    pmax: Option<f64>,
    scale_from: Field,
}

pub(super) fn key(k: &str) -> String {
    format!("fabric.rocev2.{k}")
}

/// The DCQCN keys (besides `dcqcn_g`) that override a preset, with their values.
fn dcqcn_timing_keys(f: &FileRoce) -> [(&'static str, &Field); 9] {
    [
        ("alpha_period", &f.alpha_period),
        ("increase_period", &f.increase_period),
        ("byte_counter", &f.byte_counter),
        ("fast_recovery_steps", &f.fast_recovery_steps),
        ("rate_ai", &f.rate_ai),
        ("rate_hai", &f.rate_hai),
        ("min_rate", &f.min_rate),
        ("rate_decrease_period", &f.rate_decrease_period),
        ("cnp_interval", &f.cnp_interval),
    ]
}

/// How the file departs from RoCEv2 as its vendors recommend running it: PFC on the
/// RDMA priority, ECN marking, DCQCN at the ConnectX firmware's defaults (NVIDIA DOCA
/// "DCQCN CC Parameters"; docs/PARAMETERS.md). Each departure in words.
pub(super) fn departures(f: &FileRoce) -> Vec<String> {
    let mut v = Vec::new();
    let selective =
        f.loss_recovery.as_ref().map(|l| l.get_ref().as_str()) == Some("selective-repeat");
    if f.pfc == Some(false) {
        v.push(if selective {
            "RoCEv2 without PFC (`pfc = false`: lossy, selective repeat recovers drops)".into()
        } else {
            "RoCEv2 without PFC (`pfc = false`: lossy, go-back-N recovers drops)".into()
        });
    }
    if selective {
        v.push("selective repeat (IRN) in place of RoCE's go-back-N".into());
    }
    match &f.ecn {
        Some(e) if e.enabled == Some(false) => {
            v.push("RoCEv2 without ECN marking (`ecn = { enabled = false }`)".into())
        }
        Some(_) => v.push("RoCEv2's ECN thresholds as the scenario sets them".into()),
        None => {}
    }
    let cc = f.congestion_control.as_ref().map(|c| c.get_ref().as_str());
    match cc {
        Some("none") => v.push("RoCEv2 without congestion control (`congestion_control = \"none\"`, as Meta ran its 400G clusters: docs/REFERENCE.md 8b)".into()),
        Some(other @ ("hpcc" | "swift" | "timely")) => v.push(format!(
            "{} in place of DCQCN (`congestion_control = \"{other}\"`)",
            other.to_uppercase()
        )),
        _ => {}
    }
    if let Some(p) = f.dcqcn_preset.as_ref().map(|p| p.get_ref().as_str()) {
        if p != "connectx" {
            v.push(format!(
                "DCQCN with the `{p}` preset, not the ConnectX firmware's defaults"
            ));
        }
    }
    let tuned = dcqcn_timing_keys(f);
    let mut keys: Vec<&str> = tuned
        .iter()
        .filter(|(_, x)| x.is_some())
        .map(|(k, _)| *k)
        .collect();
    if f.dcqcn_g.is_some() {
        keys.insert(0, "dcqcn_g");
    }
    if !keys.is_empty() {
        v.push(format!(
            "DCQCN's {} as the scenario sets them",
            keys.join(", ")
        ));
    }
    v
}

/// Whether the file sets the NIC's send or receive latency.
pub(super) fn sets_nic_latency(f: &FileRoce) -> bool {
    f.nic_tx_latency.is_some() || f.nic_rx_latency.is_some()
}

/// Reads `[fabric.rocev2]` into `roce` (starting from its defaults); `hosts` bounds the
/// pause storms' hosts.
pub(super) fn parse(
    c: &Ctx,
    f: &FileRoce,
    roce: &mut RoceConfig,
    link_rate: BitRate,
    hosts: u32,
) -> Result<(), ScenarioError> {
    roce.pfc = f.pfc.unwrap_or(true);
    if let Some(t) = c.time(&key("failure_detection"), &f.failure_detection)? {
        roce.failures.detection = t;
    }
    if let Some(t) = c.time(&key("reroute_time"), &f.reroute_time)? {
        roce.failures.reroute = t;
    }
    if let Some(b) = c.positive(&key("switch_buffer"), &f.switch_buffer, Dimension::Size)? {
        roce.switch_buffer = b;
    }
    if let Some(h) = c.quantity(&key("headroom"), &f.headroom, Dimension::Size)? {
        if !roce.pfc {
            return Err(invalid(format!(
                "{}: set while pfc = false; it would do nothing",
                key("headroom")
            )));
        }
        roce.headroom = Some(h);
    }
    if let Some(r) = c.quantity(&key("reserve"), &f.reserve, Dimension::Size)? {
        roce.reserve = r;
    }
    if let Some(a) = c.count(&key("alpha_shift"), &f.alpha_shift, 0, 16)? {
        roce.alpha_shift = a as u32;
    }
    if let Some(ip) = c.choice(&key("ip"), &f.ip, &["ipv4", "ipv6"])? {
        roce.ip = if ip == "ipv6" {
            IpVersion::V6
        } else {
            IpVersion::V4
        };
    }
    roce.load_balancing = load_balancing(c, f)?;
    roce.loss_recovery = loss_recovery(c, f, roce.load_balancing)?;
    pathologies::parse(c, f, roce, hosts)?;
    if let Some(a) = c.count(&key("ack_every"), &f.ack_every, 1, 1 << 20)? {
        roce.ack_every = a as u32;
    }
    if let Some(t) = c.count(&key("rto_exponent"), &f.rto_exponent, 0, 31)? {
        roce.rto_exponent = t as u32;
    }
    if let Some(t) = c.time(&key("nic_tx_latency"), &f.nic_tx_latency)? {
        roce.nic_tx_latency = t;
    }
    if let Some(t) = c.time(&key("nic_rx_latency"), &f.nic_rx_latency)? {
        roce.nic_rx_latency = t;
    }
    if let Some(e) = &f.ecn {
        roce.ecn = ecn(c, e)?;
    }
    roce.ack_cc = ack_cc(c, f, link_rate)?;
    roce.dcqcn = dcqcn(c, f, link_rate)?;
    if roce.needs_base_rtt() {
        // HPCC, Swift, TIMELY and IRN react to every packet's ACK (the ns-3 model's
        // L2_ACK_INTERVAL 1; IRN ACKs every packet): a window smaller than `ack_every`
        // packets would wait for an ACK that never comes.
        if roce.ack_every != 1 && f.ack_every.is_some() {
            return Err(invalid(format!(
                "{} = {}: congestion_control = \"{}\" with loss_recovery = \"{}\" needs an ACK per packet (1)",
                key("ack_every"),
                roce.ack_every,
                roce.ack_cc.as_ref().map_or("dcqcn", |a| a.name()),
                roce.loss_recovery.name()
            )));
        }
        roce.ack_every = 1;
    }
    Ok(())
}

/// `loss_recovery`: go-back-N (RoCE's) or IRN's selective repeat, which treats
/// reordering as loss and so is refused beside adaptive routing and spraying.
fn loss_recovery(c: &Ctx, f: &FileRoce, lb: LoadBalancing) -> Result<LossRecovery, ScenarioError> {
    let lr = c.choice(
        &key("loss_recovery"),
        &f.loss_recovery,
        &LossRecovery::NAMES,
    )?;
    if lr != Some("selective-repeat") {
        return Ok(LossRecovery::GoBackN);
    }
    if lb.places_out_of_order() {
        return Err(invalid(format!(
            "{} = \"selective-repeat\": with load_balancing = \"{}\" packets arrive out of order, which selective repeat's NAKs would report as losses; use \"ecmp\" or \"flowlet\"",
            key("loss_recovery"),
            lb.name()
        )));
    }
    Ok(LossRecovery::SelectiveRepeat)
}

/// The keys of HPCC, Swift and TIMELY, with the algorithm each belongs to.
fn ack_cc_keys(f: &FileRoce) -> [(&'static str, &'static str, bool); 6] {
    [
        ("hpcc_eta", "hpcc", f.hpcc_eta.is_some()),
        ("hpcc_max_stage", "hpcc", f.hpcc_max_stage.is_some()),
        ("hpcc_rate_ai", "hpcc", f.hpcc_rate_ai.is_some()),
        ("swift_base_target", "swift", f.swift_base_target.is_some()),
        ("timely_t_low", "timely", f.timely_t_low.is_some()),
        ("timely_t_high", "timely", f.timely_t_high.is_some()),
    ]
}

/// `congestion_control = "hpcc" | "swift" | "timely"` with their keys (each refused under
/// another algorithm), at the defaults their sources give (docs/PARAMETERS.md).
fn ack_cc(c: &Ctx, f: &FileRoce, link_rate: BitRate) -> Result<Option<AckCc>, ScenarioError> {
    let cc = f.congestion_control.as_ref().map(|c| c.get_ref().as_str());
    let cc = cc.filter(|n| ["hpcc", "swift", "timely"].contains(n));
    if let Some((k, owner, _)) = ack_cc_keys(f)
        .into_iter()
        .find(|(_, o, set)| *set && Some(*o) != cc)
    {
        return Err(invalid(format!(
            "{}: set while congestion_control is not \"{owner}\"; it would do nothing",
            key(k)
        )));
    }
    Ok(match cc {
        Some("hpcc") => {
            let mut p = HpccParams::ns3(link_rate);
            if let Some(eta) = f.hpcc_eta {
                if !(eta > 0.0 && eta <= 1.0) {
                    return Err(invalid(format!(
                        "{} = {eta}: must be in (0, 1]",
                        key("hpcc_eta")
                    )));
                }
                p.eta = eta;
            }
            if let Some(n) = c.count(&key("hpcc_max_stage"), &f.hpcc_max_stage, 0, 1000)? {
                p.max_stage = n as u32;
            }
            if let Some(r) = c.rate(&key("hpcc_rate_ai"), &f.hpcc_rate_ai)? {
                p.rate_ai = r;
            }
            Some(AckCc::Hpcc(p))
        }
        Some("swift") => Some(AckCc::Swift {
            base_target: c.positive_time(&key("swift_base_target"), &f.swift_base_target)?,
        }),
        Some("timely") => {
            let mut p = TimelyParams::ns3(link_rate);
            if let Some(t) = c.positive_time(&key("timely_t_low"), &f.timely_t_low)? {
                p.t_low = t;
            }
            if let Some(t) = c.positive_time(&key("timely_t_high"), &f.timely_t_high)? {
                p.t_high = t;
            }
            if p.t_high <= p.t_low {
                return Err(invalid(format!(
                    "{}: needs timely_t_low < timely_t_high (got {} and {})",
                    key("timely_t_high"),
                    p.t_low,
                    p.t_high
                )));
            }
            Some(AckCc::Timely(p))
        }
        _ => None,
    })
}

/// `load_balancing` (ECMP per QP by default) and, for flowlets, `flowlet_gap`.
fn load_balancing(c: &Ctx, f: &FileRoce) -> Result<LoadBalancing, ScenarioError> {
    let lb = c.choice(
        &key("load_balancing"),
        &f.load_balancing,
        &LoadBalancing::NAMES,
    )?;
    let gap = c.positive_time(&key("flowlet_gap"), &f.flowlet_gap)?;
    if gap.is_some() && lb != Some("flowlet") {
        return Err(invalid(format!(
            "{}: set while load_balancing is not \"flowlet\"; it would do nothing",
            key("flowlet_gap")
        )));
    }
    Ok(match lb.unwrap_or("ecmp") {
        "flowlet" => LoadBalancing::Flowlet {
            gap: gap.unwrap_or(DEFAULT_FLOWLET_GAP),
        },
        "adaptive" => LoadBalancing::Adaptive,
        "spray" => LoadBalancing::Spray,
        _ => LoadBalancing::Ecmp,
    })
}

/// `ecn = { ... }`: RED thresholds, or `enabled = false` for none.
fn ecn(c: &Ctx, e: &FileEcn) -> Result<Option<EcnConfig>, ScenarioError> {
    if e.enabled == Some(false) {
        return Ok(None);
    }
    let d = hpcc_ecn();
    let red = RedParams {
        kmin: c
            .quantity(&key("ecn.kmin"), &e.kmin, Dimension::Size)?
            .unwrap_or(d.red.kmin),
        kmax: c
            .quantity(&key("ecn.kmax"), &e.kmax, Dimension::Size)?
            .unwrap_or(d.red.kmax),
        pmax: e.pmax.unwrap_or(d.red.pmax),
    };
    if red.kmax < red.kmin || !(0.0..=1.0).contains(&red.pmax) {
        return Err(invalid(format!(
            "{}: needs kmin <= kmax and 0 <= pmax <= 1 (got kmin {} B, kmax {} B, pmax {})",
            key("ecn"),
            red.kmin,
            red.kmax,
            red.pmax
        )));
    }
    // Thresholds written in the file hold on every port unless scale_from is given.
    let explicit = e.kmin.is_some() || e.kmax.is_some();
    let scale_from = match c.rate(&key("ecn.scale_from"), &e.scale_from)? {
        Some(r) => Some(r),
        None if explicit => None,
        None => d.scale_from,
    };
    Ok(Some(EcnConfig { red, scale_from }))
}

/// `congestion_control`: DCQCN (the default, with the ConnectX firmware's parameters, a
/// preset and overrides), or `"none"`, `"hpcc"`, `"swift"` or `"timely"`, where any DCQCN
/// key is refused.
fn dcqcn(c: &Ctx, f: &FileRoce, link_rate: BitRate) -> Result<Option<DcqcnConfig>, ScenarioError> {
    let cc = c.choice(
        &key("congestion_control"),
        &f.congestion_control,
        &["none", "dcqcn", "hpcc", "swift", "timely"],
    )?;
    let preset = c.choice(&key("dcqcn_preset"), &f.dcqcn_preset, &DcqcnPreset::NAMES)?;
    if let Some(other) = cc.filter(|n| *n != "dcqcn") {
        let overrides = dcqcn_timing_keys(f);
        let given = overrides.iter().find(|(_, v)| v.is_some()).map(|(k, _)| *k);
        let given =
            given.or((preset.is_some() || f.dcqcn_g.is_some()).then_some("dcqcn_preset / dcqcn_g"));
        if let Some(k) = given {
            return Err(invalid(format!(
                "{}: set while congestion_control = \"{other}\"; it would do nothing",
                key(k)
            )));
        }
        return Ok(None);
    }
    let preset = DcqcnPreset::parse(preset.unwrap_or("connectx")).expect("validated");
    let mut d = DcqcnConfig::preset(preset, link_rate);
    dcqcn_overrides(c, f, &mut d)?;
    Ok(Some(d))
}

/// The DCQCN keys that override the preset's parameters.
fn dcqcn_overrides(c: &Ctx, f: &FileRoce, d: &mut DcqcnConfig) -> Result<(), ScenarioError> {
    let p = &mut d.params;
    if let Some(g) = f.dcqcn_g {
        if !(g > 0.0 && g <= 1.0) {
            return Err(invalid(format!(
                "{} = {g}: must be in (0, 1]",
                key("dcqcn_g")
            )));
        }
        p.g = g;
    }
    if let Some(t) = c.positive_time(&key("alpha_period"), &f.alpha_period)? {
        p.alpha_period = t;
    }
    if let Some(t) = c.positive_time(&key("increase_period"), &f.increase_period)? {
        p.increase_period = t;
    }
    if let Some(b) = c.positive(&key("byte_counter"), &f.byte_counter, Dimension::Size)? {
        p.byte_counter = Some(b);
    }
    if let Some(n) = c.count(&key("fast_recovery_steps"), &f.fast_recovery_steps, 0, 1000)? {
        p.fast_recovery_steps = n as u32;
    }
    if let Some(r) = c.rate(&key("rate_ai"), &f.rate_ai)? {
        p.rate_ai = r;
    }
    if let Some(r) = c.rate(&key("rate_hai"), &f.rate_hai)? {
        p.rate_hai = r;
    }
    if let Some(r) = c.rate(&key("min_rate"), &f.min_rate)? {
        p.min_rate = r;
    }
    if let Some(t) = c.time(&key("rate_decrease_period"), &f.rate_decrease_period)? {
        p.rate_decrease_period = t;
    }
    if let Some(t) = c.time(&key("cnp_interval"), &f.cnp_interval)? {
        d.cnp_interval = t;
    }
    Ok(())
}

/// `[fabric.rocev2]` with every default filled in.
pub(super) fn write_toml(r: &RoceConfig, link_rate: BitRate, s: &mut String) {
    let _ = writeln!(
        s,
        "\n[fabric.rocev2]\nip = \"{}\"\npfc = {}\nswitch_buffer = \"{}\"\nreserve = \"{}\"\nalpha_shift = {}\nloss_recovery = \"{}\"\nack_every = {}\nrto_exponent = {}   # {}\nnic_tx_latency = \"{}\"\nnic_rx_latency = \"{}\"",
        if r.ip == IpVersion::V6 { "ipv6" } else { "ipv4" },
        r.pfc,
        ByteSize(r.switch_buffer),
        ByteSize(r.reserve),
        r.alpha_shift,
        r.loss_recovery.name(),
        r.ack_every,
        r.rto_exponent,
        r.rto(u32::MAX),
        r.nic_tx_latency,
        r.nic_rx_latency
    );
    let _ = writeln!(
        s,
        "failure_detection = \"{}\"   # estimate: after it and reroute_time, routes avoid a failed link\nreroute_time = \"{}\"",
        r.failures.detection, r.failures.reroute
    );
    let _ = writeln!(s, "load_balancing = \"{}\"", r.load_balancing.name());
    if let LoadBalancing::Flowlet { gap } = r.load_balancing {
        let _ = writeln!(s, "flowlet_gap = \"{gap}\"");
    }
    if r.pfc {
        let _ = writeln!(
            s,
            "headroom = \"{}\"{}",
            ByteSize(r.headroom_for(link_rate)),
            if r.headroom.is_none() {
                "   # the mlx5 rule at link_rate"
            } else {
                ""
            }
        );
    }
    pathologies::write_keys(r, s);
    write_congestion_toml(r, s);
    pathologies::write_storms(r, s);
}

/// `congestion_control` with DCQCN's parameters, and `ecn`.
fn write_congestion_toml(r: &RoceConfig, s: &mut String) {
    match (&r.dcqcn, &r.ack_cc) {
        (None, None) => {
            let _ = writeln!(s, "congestion_control = \"none\"");
        }
        (None, Some(AckCc::Hpcc(p))) => {
            let _ = writeln!(
                s,
                "congestion_control = \"hpcc\"\nhpcc_eta = {}\nhpcc_max_stage = {}\nhpcc_rate_ai = \"{}\"",
                p.eta, p.max_stage, p.rate_ai
            );
        }
        (None, Some(AckCc::Swift { base_target })) => {
            let _ = writeln!(s, "congestion_control = \"swift\"");
            match base_target {
                Some(t) => {
                    let _ = writeln!(s, "swift_base_target = \"{t}\"");
                }
                None => {
                    let _ = writeln!(s, "# swift_base_target: the network's base RTT + 2 us");
                }
            }
        }
        (None, Some(AckCc::Timely(p))) => {
            let _ = writeln!(
                s,
                "congestion_control = \"timely\"\ntimely_t_low = \"{}\"\ntimely_t_high = \"{}\"",
                p.t_low, p.t_high
            );
        }
        (Some(d), _) => {
            let p = &d.params;
            let _ = writeln!(
                s,
                "congestion_control = \"dcqcn\"\ndcqcn_preset = \"{}\"\ndcqcn_g = {}\nalpha_period = \"{}\"\nincrease_period = \"{}\"\n{}fast_recovery_steps = {}\nrate_ai = \"{}\"\nrate_hai = \"{}\"\nmin_rate = \"{}\"\nrate_decrease_period = \"{}\"\ncnp_interval = \"{}\"",
                d.preset.name(),
                p.g,
                p.alpha_period,
                p.increase_period,
                p.byte_counter.map_or("# byte_counter: off\n".to_string(), |b| format!("byte_counter = {b}\n")),
                p.fast_recovery_steps,
                p.rate_ai,
                p.rate_hai,
                p.min_rate,
                p.rate_decrease_period,
                d.cnp_interval
            );
        }
    }
    match &r.ecn {
        None => {
            let _ = writeln!(s, "ecn = {{ enabled = false }}");
        }
        Some(e) => {
            let _ = writeln!(
                s,
                "ecn = {{ kmin = \"{}\", kmax = \"{}\", pmax = {}{} }}",
                ByteSize(e.red.kmin),
                ByteSize(e.red.kmax),
                e.red.pmax,
                e.scale_from
                    .map_or(String::new(), |r| format!(", scale_from = \"{r}\""))
            );
        }
    }
}
