//! `[fabric.infiniband]`: virtual lanes, VL buffers and arbitration, adaptive routing,
//! HCA timings, the credit-loop check and IB congestion control.

use super::reader::{invalid, Ctx, Field, Raw};
use super::ScenarioError;
use fabricsim_core::proto::ibcc::CcParams;
use fabricsim_core::units::{ByteSize, Dimension};
use fabricsim_fabric::infiniband::{default_sl_to_vl, IbCc, IbConfig};
use serde::Deserialize;
use std::fmt::Write as _;
use toml::Spanned;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileIb {
    virtual_lanes: Field,
    adaptive_routing: Option<bool>,
    congestion_control: Option<bool>,
    vl_buffer: Field,
    vl_weights: Option<Vec<Spanned<Raw>>>,
    sl_to_vl: Option<Vec<Spanned<Raw>>>,
    ack_every: Field,
    credit_refresh: Field,
    hca_tx_latency: Field,
    hca_rx_latency: Field,
    fecn_threshold: Field,
    ccti_increase: Field,
    ccti_limit: Field,
    ccti_timer: Field,
    cct_step: Field,
    deadlock_check: Field,
    failure_detection: Field,
    reroute_time: Field,
}

fn key(k: &str) -> String {
    format!("fabric.infiniband.{k}")
}

/// A designed cluster's InfiniBand (`[cluster]` with `gpus`) routes adaptively unless the
/// file says otherwise, as an AI fabric is run: NCCL asks for adaptive routing on
/// InfiniBand by default (NCCL_IB_ADAPTIVE_ROUTING, since 2.16; docs/REFERENCE.md section
/// 10). The switches' side (AR groups set by the subnet manager) is assumed enabled, as
/// NVIDIA's AI reference designs do: unverified as an operator's default. A hand-written
/// topology keeps static routing unless asked.
pub(super) fn route_designs_adaptively(f: &FileIb, ib: &mut IbConfig) {
    if f.adaptive_routing.is_none() {
        ib.adaptive_routing = true;
    }
}

/// Whether the file sets the HCA's send or receive latency.
pub(super) fn sets_nic_latency(f: &FileIb) -> bool {
    f.hca_tx_latency.is_some() || f.hca_rx_latency.is_some()
}

/// Reads `[fabric.infiniband]` into `ib` (starting from its defaults).
pub(super) fn parse(c: &Ctx, f: &FileIb, ib: &mut IbConfig) -> Result<(), ScenarioError> {
    if let Some(v) = c.count(&key("virtual_lanes"), &f.virtual_lanes, 1, 15)? {
        ib.virtual_lanes = v as u8;
        ib.sl_to_vl = default_sl_to_vl(ib.virtual_lanes);
        ib.vl_weights = vec![255; v as usize];
    }
    ib.adaptive_routing = f.adaptive_routing.unwrap_or(false);
    if let Some(b) = c.positive(&key("vl_buffer"), &f.vl_buffer, Dimension::Size)? {
        if b % 64 != 0 || !(4160..=128 * 1024).contains(&b) {
            return Err(c.err(
                &key("vl_buffer"),
                f.vl_buffer.as_ref().expect("parsed"),
                "must be a multiple of 64 bytes from 4160 B (one MTU packet) to 128 KiB (2048 credit blocks)",
            ));
        }
        ib.vl_buffer = b as u32;
    }
    arbitration(c, f, ib)?;
    if let Some(a) = c.count(&key("ack_every"), &f.ack_every, 1, 1 << 20)? {
        ib.ack_every = a as u32;
    }
    if let Some(t) = c.positive_time(&key("credit_refresh"), &f.credit_refresh)? {
        ib.credit_refresh = t;
    }
    if let Some(t) = c.time(&key("failure_detection"), &f.failure_detection)? {
        ib.failures.detection = t;
    }
    if let Some(t) = c.time(&key("reroute_time"), &f.reroute_time)? {
        ib.failures.reroute = t;
    }
    if let Some(t) = c.positive_time(&key("deadlock_check"), &f.deadlock_check)? {
        ib.deadlock_check = t;
    }
    if let Some(t) = c.time(&key("hca_tx_latency"), &f.hca_tx_latency)? {
        ib.hca_tx_latency = t;
    }
    if let Some(t) = c.time(&key("hca_rx_latency"), &f.hca_rx_latency)? {
        ib.hca_rx_latency = t;
    }
    ib.congestion_control = congestion_control(c, f)?;
    Ok(())
}

/// `vl_weights` (one per VL) and `sl_to_vl` (16 entries).
fn arbitration(c: &Ctx, f: &FileIb, ib: &mut IbConfig) -> Result<(), ScenarioError> {
    if let Some(ws) = &f.vl_weights {
        if ws.len() != ib.virtual_lanes as usize {
            return Err(invalid(format!(
                "{}: {} weights given for {} virtual lanes",
                key("vl_weights"),
                ws.len(),
                ib.virtual_lanes
            )));
        }
        ib.vl_weights = ws
            .iter()
            .map(|w| c.entry(&key("vl_weights"), w, 1, 255).map(|v| v as u32))
            .collect::<Result<_, _>>()?;
    }
    if let Some(map) = &f.sl_to_vl {
        if map.len() != 16 {
            return Err(invalid(format!(
                "{}: needs 16 entries (one per SL), got {}",
                key("sl_to_vl"),
                map.len()
            )));
        }
        for (i, v) in map.iter().enumerate() {
            let last_vl = ib.virtual_lanes as u64 - 1;
            ib.sl_to_vl[i] = c.entry(&key("sl_to_vl"), v, 0, last_vl)? as u8;
        }
    }
    Ok(())
}

/// IB congestion control: its parameters only with `congestion_control = true`.
fn congestion_control(c: &Ctx, f: &FileIb) -> Result<Option<IbCc>, ScenarioError> {
    if f.congestion_control != Some(true) {
        let cc_keys = [
            &f.fecn_threshold,
            &f.ccti_increase,
            &f.ccti_limit,
            &f.ccti_timer,
            &f.cct_step,
        ];
        if cc_keys.iter().any(|k| k.is_some()) {
            return Err(invalid(
                "fabric.infiniband: congestion-control parameters given but congestion_control is not true; they would do nothing".into(),
            ));
        }
        return Ok(None);
    }
    let mut cc = IbCc::default();
    let d = CcParams::default();
    cc.fecn_threshold = c
        .quantity(&key("fecn_threshold"), &f.fecn_threshold, Dimension::Size)?
        .unwrap_or(cc.fecn_threshold);
    cc.source.ccti_increase = c
        .count(&key("ccti_increase"), &f.ccti_increase, 1, 16383)?
        .map_or(d.ccti_increase, |v| v as u32);
    cc.source.ccti_limit = c
        .count(&key("ccti_limit"), &f.ccti_limit, 1, 16383)?
        .map_or(d.ccti_limit, |v| v as u32);
    cc.source.ccti_timer = c
        .positive_time(&key("ccti_timer"), &f.ccti_timer)?
        .unwrap_or(d.ccti_timer);
    cc.source.cct_step = c.time(&key("cct_step"), &f.cct_step)?.unwrap_or(d.cct_step);
    Ok(Some(cc))
}

/// `[fabric.infiniband]` with every default filled in.
pub(super) fn write_toml(ib: &IbConfig, s: &mut String) {
    let _ = writeln!(
        s,
        "\n[fabric.infiniband]\nvirtual_lanes = {}\nadaptive_routing = {}\ncongestion_control = {}\nvl_buffer = \"{}\"\nvl_weights = {:?}\nsl_to_vl = {:?}\nack_every = {}\ncredit_refresh = \"{}\"\ndeadlock_check = \"{}\"\nhca_tx_latency = \"{}\"\nhca_rx_latency = \"{}\"",
        ib.virtual_lanes,
        ib.adaptive_routing,
        ib.congestion_control.is_some(),
        ByteSize(ib.vl_buffer as u64),
        ib.vl_weights,
        ib.sl_to_vl,
        ib.ack_every,
        ib.credit_refresh,
        ib.deadlock_check,
        ib.hca_tx_latency,
        ib.hca_rx_latency
    );
    let _ = writeln!(
        s,
        "failure_detection = \"{}\"   # estimate: after it and reroute_time, routes avoid a failed link\nreroute_time = \"{}\"",
        ib.failures.detection, ib.failures.reroute
    );
    if let Some(cc) = &ib.congestion_control {
        let _ = writeln!(
            s,
            "fecn_threshold = \"{}\"\nccti_increase = {}\nccti_limit = {}\nccti_timer = \"{}\"\ncct_step = \"{}\"",
            ByteSize(cc.fecn_threshold),
            cc.source.ccti_increase,
            cc.source.ccti_limit,
            cc.source.ccti_timer,
            cc.source.cct_step
        );
    }
}
