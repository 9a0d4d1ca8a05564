//! The tuned settings as real equipment takes them: SONiC's config_db JSON (buffer
//! profile, PFC, WRED/ECN), NVIDIA NVUE commands for a Spectrum switch under Cumulus
//! Linux, and the ConnectX NIC side (mlnx_qos trust and PFC; DCQCN through the mlx5
//! driver's sysfs). Each mapping names its source; one not confirmed says so.

use fabricsim_core::units::Time;
use fabricsim_core::wire::roce::DATA_PRIORITY;
use fabricsim_fabric::rocev2::RoceConfig;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// The WRED profile, buffer profile and PFC map, named as SONiC names them.
const WRED: &str = "AZURE_LOSSLESS";
const PROFILE: &str = "pg_lossless_fabricsim_profile";

/// SONiC's config_db JSON for the lossless priority on each of `ports` (Ethernet0 ...):
/// BUFFER_PROFILE (xon = the per-queue reserve, xoff = the PFC headroom at `rate`,
/// dynamic_th = -alpha_shift), BUFFER_PG, PORT_QOS_MAP's pfc_enable, WRED_PROFILE
/// (green thresholds in bytes, probability in percent, ecn_all) and QUEUE. Table and
/// field names: SONiC's QoS and buffer documentation (CumulusNetworks/docs, SONiC 202012
/// "QoS and Buffers"; sonic-wred-profile YANG). The xon-as-reserve mapping is
/// fabricsim's reading, unconfirmed.
pub fn sonic_config_db(r: &RoceConfig, headroom: u64, ports: usize) -> String {
    let prio = DATA_PRIORITY;
    let names: Vec<String> = (0..ports.max(1))
        .map(|i| format!("Ethernet{}", i * 8))
        .collect();
    let mut db = Map::new();
    db.insert(
        "BUFFER_PROFILE".into(),
        json!({ PROFILE: {
            "pool": "ingress_lossless_pool",
            "xon": r.reserve.to_string(),
            "xoff": headroom.to_string(),
            "size": (r.reserve + headroom).to_string(),
            "dynamic_th": format!("-{}", r.alpha_shift),
        }}),
    );
    let per_port = |f: &dyn Fn(&str) -> (String, Value)| -> Value {
        Value::Object(names.iter().map(|p| f(p)).collect())
    };
    if r.pfc {
        db.insert(
            "BUFFER_PG".into(),
            per_port(&|p| (format!("{p}|{prio}"), json!({ "profile": PROFILE }))),
        );
        db.insert(
            "PORT_QOS_MAP".into(),
            per_port(&|p| (p.to_string(), json!({ "pfc_enable": prio.to_string() }))),
        );
    }
    if let Some(e) = &r.ecn {
        db.insert(
            "WRED_PROFILE".into(),
            json!({ WRED: {
                "wred_green_enable": "true",
                "ecn": "ecn_all",
                "green_min_threshold": e.red.kmin.to_string(),
                "green_max_threshold": e.red.kmax.to_string(),
                "green_drop_probability": percent(e.red.pmax).to_string(),
            }}),
        );
        db.insert(
            "QUEUE".into(),
            per_port(&|p| (format!("{p}|{prio}"), json!({ "wred_profile": WRED }))),
        );
    }
    serde_json::to_string_pretty(&Value::Object(db)).expect("serialises") + "\n"
}

/// A marking probability as the whole percent SONiC and NVUE take (at least 1).
pub fn percent(p: f64) -> u64 {
    ((p * 100.0).round() as u64).clamp(1, 100)
}

/// NVUE commands for a Spectrum switch under Cumulus Linux: ECN on the lossless traffic
/// class (`nv set qos congestion-control default-global traffic-class ...`: min and max
/// threshold in bytes, probability in percent, ecn enable) and PFC on its switch
/// priority (`nv set qos pfc default-global switch-priority ...`), per the Cumulus Linux
/// NVUE command reference. The shared buffer's alpha and the per-queue reserve have no
/// NVUE command fabricsim could confirm: they are written as comments.
pub fn nvue(r: &RoceConfig) -> String {
    let p = DATA_PRIORITY;
    let mut s = String::from("# RoCEv2 settings tuned by fabricsim, as NVUE commands\n");
    if r.pfc {
        let _ = writeln!(s, "nv set qos pfc default-global switch-priority {p}");
        let _ = writeln!(s, "nv set qos pfc default-global tx enable");
        let _ = writeln!(s, "nv set qos pfc default-global rx enable");
    }
    let cc = "nv set qos congestion-control default-global traffic-class";
    match &r.ecn {
        Some(e) => {
            let _ = writeln!(s, "{cc} {p} ecn enable");
            let _ = writeln!(s, "{cc} {p} min-threshold {}", e.red.kmin);
            let _ = writeln!(s, "{cc} {p} max-threshold {}", e.red.kmax);
            let _ = writeln!(s, "{cc} {p} probability {}", percent(e.red.pmax));
        }
        None => {
            let _ = writeln!(s, "{cc} {p} ecn disable");
        }
    }
    let _ = writeln!(
        s,
        "# unconfirmed: the shared buffer's dynamic threshold alpha = 1/{} (2^-{}) and {} bytes reserved per ingress queue; set them in the switch's buffer configuration",
        1u64 << r.alpha_shift,
        r.alpha_shift,
        r.reserve
    );
    s.push_str("nv config apply\n");
    s
}

/// The ConnectX side as a shell script taking the interface: `mlnx_qos` trusts DSCP and
/// enables PFC on the lossless priority (the MLNX_OFED `mlnx_qos` tool); DCQCN's reaction
/// and notification points through the mlx5 driver's sysfs, /sys/class/net/DEV/ecn/
/// roce_rp and roce_np (names as the firmware's parameters, NVIDIA DOCA "DCQCN CC
/// Parameters": rpg_* rates in Mb/s, times in us; dce_tcp_g as 1024 - 1024 g).
/// rpg_byte_reset's unit is unconfirmed (bytes here).
pub fn mlnx_qos(r: &RoceConfig) -> String {
    let p = DATA_PRIORITY as usize;
    let mut pfc = ["0"; 8];
    if r.pfc {
        pfc[p] = "1";
    }
    let mut s = String::from(
        "#!/bin/sh\n# RoCEv2 NIC settings tuned by fabricsim, for a ConnectX interface\nset -e\nDEV=${1:?usage: mlnx_qos.sh INTERFACE}\n",
    );
    let _ = writeln!(
        s,
        "mlnx_qos -i \"$DEV\" --trust dscp --pfc {}",
        pfc.join(",")
    );
    let rp = "/sys/class/net/$DEV/ecn/roce_rp";
    let np = "/sys/class/net/$DEV/ecn/roce_np";
    match &r.dcqcn {
        None => {
            if let Some(cc) = &r.ack_cc {
                let _ = writeln!(
                    s,
                    "# {}: not a ConnectX sysfs setting (NICs run it as programmable congestion control, set by the vendor's tools); DCQCN is turned off here",
                    cc.name().to_uppercase()
                );
            }
            let _ = writeln!(s, "echo 0 > {rp}/enable/{p}");
            let _ = writeln!(s, "echo 0 > {np}/enable/{p}");
        }
        Some(d) => {
            let c = &d.params;
            let us = |t: Time| t.ps().div_ceil(1_000_000);
            let mbps = |b: fabricsim_core::units::BitRate| b.bps().div_ceil(1_000_000);
            let _ = writeln!(s, "echo 1 > {rp}/enable/{p}");
            let _ = writeln!(s, "echo 1 > {np}/enable/{p}");
            for (name, v) in [
                ("dce_tcp_g", (1024.0 - 1024.0 * c.g).round() as u64),
                ("dce_tcp_rtt", us(c.alpha_period)),
                ("rpg_time_reset", us(c.increase_period)),
                ("rpg_byte_reset", c.byte_counter.unwrap_or(0)),
                ("rpg_threshold", c.fast_recovery_steps as u64),
                ("rpg_ai_rate", mbps(c.rate_ai)),
                ("rpg_hai_rate", mbps(c.rate_hai)),
                ("rpg_min_rate", mbps(c.min_rate)),
                ("rate_reduce_monitor_period", us(c.rate_decrease_period)),
            ] {
                let _ = writeln!(s, "echo {v} > {rp}/{name}");
            }
            let _ = writeln!(
                s,
                "echo {} > {np}/min_time_between_cnps",
                us(d.cnp_interval)
            );
        }
    }
    s
}
