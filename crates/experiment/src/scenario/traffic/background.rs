//! `background` entries: flows from a flow-size distribution at a load (storage,
//! inference, other tenants), drawn when the run's workload is built.

use super::Entry;
use crate::scenario::reader::invalid;
use crate::scenario::ScenarioError;
use fabricsim_core::units::BitRate;
use fabricsim_fabric::workload::background::{Background, Distribution};
use fabricsim_fabric::workload::Traffic;
use std::fmt::Write as _;

/// Loads are fractions of the NIC rate below this (a load of 1 never drains).
const MAX_LOAD: f64 = 0.99;

impl Entry<'_> {
    /// A `background` entry: `distribution`, `load` (of each host's NIC rate `rate`),
    /// `duration`, and optionally `hosts` (default every host, or the job's), `start`, `sl`.
    pub(super) fn background(&self, rate: BitRate) -> Result<Traffic, ScenarioError> {
        let (c, i, tr) = (self.c, self.i, self.tr);
        let stray = [
            ("src", tr.src.is_some()),
            ("dst", tr.dst.is_some()),
            ("senders", tr.senders.is_some()),
            ("size", tr.size.is_some()),
        ];
        self.reject("background", &stray, " (sizes come from the distribution)")?;
        let d = tr.distribution.as_ref().ok_or_else(|| {
            invalid(format!(
                "traffic[{i}] (background): distribution is required, one of {:?}",
                Distribution::NAMES
            ))
        })?;
        let distribution = c.named(
            &self.at("distribution"),
            d,
            Distribution::parse,
            &Distribution::NAMES,
        )?;
        let load = c
            .number(&self.at("load"), &tr.load, 1e-6, MAX_LOAD)?
            .ok_or_else(|| invalid(format!("traffic[{i}] (background): load is required (a fraction of each host's NIC rate, below {MAX_LOAD})")))?;
        let duration = c
            .positive_time(&self.at("duration"), &tr.duration)?
            .ok_or_else(|| invalid(format!("traffic[{i}] (background): duration is required (how long flows keep arriving)")))?;
        let hosts = self.hosts_or_all(&tr.hosts, "hosts")?;
        if hosts.len() < 2 {
            return Err(invalid(format!(
                "traffic[{i}].hosts: background traffic needs at least 2 hosts"
            )));
        }
        Ok(Traffic::Background(Background {
            distribution,
            load,
            rate,
            hosts,
            start: c.time(&self.at("start"), &tr.start)?.unwrap_or_default(),
            duration,
            sl: c.count(&self.at("sl"), &tr.sl, 0, 15)?.unwrap_or(0) as u8,
        }))
    }
}

/// A background entry as read.
pub(super) fn write_toml(b: &Background, all: u32, s: &mut String) -> std::fmt::Result {
    writeln!(
        s,
        "\n[[traffic]]\nkind = \"background\"\ndistribution = \"{}\"\nload = {:?}\nduration = \"{}\"\n{}\nstart = \"{}\"\nsl = {}",
        b.distribution.name(),
        b.load,
        b.duration,
        super::host_list("hosts", &b.hosts, all),
        b.start,
        b.sl
    )
}
