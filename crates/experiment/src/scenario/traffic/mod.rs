//! `[[traffic]]` entries: single flows, incasts and permutations here; collectives and
//! training jobs in [`jobs`]; ns-3 flow files and Chakra traces in [`files`]. Each kind
//! refuses the keys of the others.

mod files;
mod jobs;

use super::reader::{invalid, reject_present, Ctx, Field, Raw};
use super::topology::TopologySpec;
use super::ScenarioError;
use fabricsim_core::units::{ByteSize, Dimension, HostId, Time};
use fabricsim_fabric::workload::Traffic;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;
use toml::Spanned;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTraffic {
    kind: Spanned<String>,
    src: Field,
    dst: Field,
    senders: Option<Vec<Spanned<Raw>>>,
    hosts: Option<Vec<Spanned<Raw>>>,
    size: Field,
    start: Field,
    sl: Field,
    path: Option<Spanned<String>>,
    op: Option<Spanned<String>>,
    algorithm: Option<Spanned<String>>,
    ranks: Option<Vec<Spanned<Raw>>>,
    channels: Field,
    chunk: Field,
    protocol: Option<Spanned<String>>,
    root: Field,
    buckets: Field,
    iterations: Field,
    forward: Field,
    backward: Field,
    overlap: Option<bool>,
    job_iterations: Field,
    tensor_parallel: Field,
    pipeline_parallel: Field,
    microbatches: Field,
    activation: Field,
}

/// What every traffic entry is read against.
pub(super) struct Setting<'a> {
    pub base: &'a Path,
    pub topology: &'a TopologySpec,
    pub gpus_per_node: u32,
    /// `[nccl]`: the algorithm for all-reduces that name none (None: the v1 defaults),
    /// the channels of collectives that give none.
    pub nccl: super::nccl::NcclSettings,
    pub hardware: super::nccl::Hardware,
    /// Why each all-reduce got the algorithm `[nccl]` gave it, for `check`.
    pub choices: std::cell::RefCell<Vec<String>>,
}

/// One `[[traffic]]` entry being read: its index, its keys and the setting.
struct Entry<'a> {
    c: &'a Ctx<'a>,
    i: usize,
    tr: &'a FileTraffic,
    set: &'a Setting<'a>,
    hosts: u32,
}

/// The keys every kind but the file-driven ones shares.
struct Common {
    size: u64,
    start: Time,
    sl: u8,
}

/// Reads every `[[traffic]]` entry, in order.
pub(super) fn parse(
    c: &Ctx,
    entries: &[FileTraffic],
    set: &Setting,
) -> Result<Vec<Traffic>, ScenarioError> {
    let hosts = set.topology.hosts();
    entries
        .iter()
        .enumerate()
        .map(|(i, tr)| {
            Entry {
                c,
                i,
                tr,
                set,
                hosts,
            }
            .parse()
        })
        .collect()
}

impl Entry<'_> {
    /// `traffic[i].key`.
    fn at(&self, k: &str) -> String {
        format!("traffic[{}].{k}", self.i)
    }

    /// Refuses the first present key of `keys`, which kind `kind` does not take.
    fn reject(&self, kind: &str, keys: &[(&str, bool)], why: &str) -> Result<(), ScenarioError> {
        let prefix = format!("traffic[{}].", self.i);
        reject_present(keys, &prefix, &format!("kind \"{kind}\"{why}"))
    }

    fn parse(&self) -> Result<Traffic, ScenarioError> {
        let (c, i, tr) = (self.c, self.i, self.tr);
        let kind = tr.kind.get_ref().as_str();
        match kind {
            "flow-file" => return self.flow_file(),
            "chakra" => return self.chakra(),
            _ => {}
        }
        let path = [("path", tr.path.is_some())];
        self.reject(kind, &path, " (only of \"flow-file\" and \"chakra\")")?;
        let common = Common {
            size: c
                .positive(&self.at("size"), &tr.size, Dimension::Size)?
                .ok_or_else(|| invalid(format!("traffic[{i}]: size is required")))?,
            start: c.time(&self.at("start"), &tr.start)?.unwrap_or(Time::ZERO),
            sl: c.count(&self.at("sl"), &tr.sl, 0, 15)?.unwrap_or(0) as u8,
        };
        self.reject_stray(kind)?;
        match kind {
            "flow" => self.flow(common),
            "incast" => self.incast(common),
            "permutation" => self.permutation(common),
            "collective" => self.collective(common),
            "training" => self.training(common),
            _ => Err(c.unexpected(
                &self.at("kind"),
                &tr.kind,
                "\"flow\", \"incast\", \"permutation\", \"flow-file\", \"collective\", \"training\" or \"chakra\"",
            )),
        }
    }

    /// Refuses the keys of other kinds.
    fn reject_stray(&self, kind: &str) -> Result<(), ScenarioError> {
        let tr = self.tr;
        let training_keys = [
            ("buckets", tr.buckets.is_some()),
            ("iterations", tr.iterations.is_some()),
            ("forward", tr.forward.is_some()),
            ("backward", tr.backward.is_some()),
            ("overlap", tr.overlap.is_some()),
            ("job_iterations", tr.job_iterations.is_some()),
            ("tensor_parallel", tr.tensor_parallel.is_some()),
            ("pipeline_parallel", tr.pipeline_parallel.is_some()),
            ("microbatches", tr.microbatches.is_some()),
            ("activation", tr.activation.is_some()),
        ];
        let collective_keys = [
            ("op", tr.op.is_some()),
            ("algorithm", tr.algorithm.is_some()),
            ("ranks", tr.ranks.is_some()),
            ("channels", tr.channels.is_some()),
            ("chunk", tr.chunk.is_some()),
            ("root", tr.root.is_some()),
            ("protocol", tr.protocol.is_some()),
        ];
        if kind != "training" {
            self.reject(kind, &training_keys, " (only of \"training\")")?;
        } else {
            let implied = [("op", tr.op.is_some()), ("root", tr.root.is_some())];
            self.reject(kind, &implied, " (its all-reduces are implied)")?;
            let simple = [("protocol", tr.protocol.is_some())];
            self.reject(
                kind,
                &simple,
                " (its all-reduces run NCCL's Simple protocol)",
            )?;
        }
        if kind != "collective" && kind != "training" {
            self.reject(kind, &collective_keys, " (only of \"collective\")")?;
        }
        let (src, dst) = (("src", tr.src.is_some()), ("dst", tr.dst.is_some()));
        let senders = ("senders", tr.senders.is_some());
        let hosts = ("hosts", tr.hosts.is_some());
        let stray: &[(&str, bool)] = match kind {
            "flow" => &[senders, hosts],
            "incast" => &[src, hosts],
            "permutation" => &[src, dst, senders],
            "collective" | "training" => &[src, dst, senders, hosts],
            _ => &[],
        };
        self.reject(kind, stray, "")
    }

    /// A required host key.
    fn need(&self, v: &Field, k: &str) -> Result<HostId, ScenarioError> {
        let v = v.as_ref().ok_or_else(|| {
            invalid(format!(
                "traffic[{}] ({}): {k} is required",
                self.i,
                self.tr.kind.get_ref()
            ))
        })?;
        self.c.host(&self.at(k), v, self.hosts)
    }

    /// A list of distinct hosts.
    fn host_list(&self, list: &[Spanned<Raw>], k: &str) -> Result<Vec<HostId>, ScenarioError> {
        let hs = list
            .iter()
            .map(|v| self.c.host(&self.at(k), v, self.hosts))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sorted: Vec<u32> = hs.iter().map(|h| h.0).collect();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(invalid(format!(
                "traffic[{}].{k}: host {} is listed twice",
                self.i, w[0]
            )));
        }
        Ok(hs)
    }

    /// The list under `k`, or every host.
    fn hosts_or_all(
        &self,
        list: &Option<Vec<Spanned<Raw>>>,
        k: &str,
    ) -> Result<Vec<HostId>, ScenarioError> {
        match list {
            Some(list) => self.host_list(list, k),
            None => Ok((0..self.hosts).map(HostId).collect()),
        }
    }

    fn flow(&self, Common { size, start, sl }: Common) -> Result<Traffic, ScenarioError> {
        let (src, dst) = (
            self.need(&self.tr.src, "src")?,
            self.need(&self.tr.dst, "dst")?,
        );
        if src == dst {
            return Err(invalid(format!(
                "traffic[{}]: src = dst = {src}; a flow needs two hosts",
                self.i
            )));
        }
        Ok(Traffic::Flow {
            src,
            dst,
            size,
            start,
            sl,
        })
    }

    fn incast(&self, Common { size, start, sl }: Common) -> Result<Traffic, ScenarioError> {
        let i = self.i;
        let dst = self.need(&self.tr.dst, "dst")?;
        let list = self
            .tr
            .senders
            .as_deref()
            .ok_or_else(|| invalid(format!("traffic[{i}] (incast): senders is required")))?;
        let senders = self.host_list(list, "senders")?;
        if senders.is_empty() || senders.contains(&dst) {
            return Err(invalid(format!(
                "traffic[{i}].senders: must be non-empty and exclude dst = {dst}"
            )));
        }
        Ok(Traffic::Incast {
            senders,
            dst,
            size,
            start,
            sl,
        })
    }

    fn permutation(&self, Common { size, start, sl }: Common) -> Result<Traffic, ScenarioError> {
        let hosts = self.hosts_or_all(&self.tr.hosts, "hosts")?;
        if hosts.len() < 2 {
            return Err(invalid(format!(
                "traffic[{}].hosts: a permutation needs at least 2 hosts",
                self.i
            )));
        }
        Ok(Traffic::Permutation {
            hosts,
            size,
            start,
            sl,
        })
    }
}

/// Every `[[traffic]]` entry, every default filled in.
/// `all` is the topology's host count: a list of every host in order is the default and
/// is written as a comment, not as thousands of numbers.
pub(super) fn write_toml(traffic: &[Traffic], all: u32, s: &mut String) {
    for t in traffic {
        let _ = match t {
            Traffic::Flow { src, dst, size, start, sl } => writeln!(
                s,
                "\n[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                ByteSize(*size)
            ),
            Traffic::Incast { senders, dst, size, start, sl } => writeln!(
                s,
                "\n[[traffic]]\nkind = \"incast\"\nsenders = {:?}\ndst = {dst}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                ids(senders),
                ByteSize(*size)
            ),
            Traffic::Permutation { hosts, size, start, sl } => writeln!(
                s,
                "\n[[traffic]]\nkind = \"permutation\"\n{}\nsize = \"{}\"\nstart = \"{start}\"\nsl = {sl}",
                host_list("hosts", hosts, all),
                ByteSize(*size)
            ),
            Traffic::Collective(_) | Traffic::Training(_) => jobs::write_toml(t, all, s),
            Traffic::Chakra(_) | Traffic::Listed { .. } => files::write_toml(t, all, s),
        };
    }
}

/// Host indices as numbers, for TOML lists.
fn ids(hosts: &[HostId]) -> Vec<u32> {
    hosts.iter().map(|h| h.0).collect()
}

/// `key = [hosts]`, or, when `hosts` is every one of `all` hosts in order (the
/// default), a comment saying so.
fn host_list(key: &str, hosts: &[HostId], all: u32) -> String {
    let every = hosts.len() == all as usize && hosts.iter().zip(0..).all(|(h, i)| h.0 == i);
    if every && all > 1 {
        format!(
            "# {key}: every host in order, 0 to {} (the default)",
            all - 1
        )
    } else {
        format!("{key} = {:?}", ids(hosts))
    }
}
