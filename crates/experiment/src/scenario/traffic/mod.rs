//! `[[traffic]]` entries: single flows, incasts and permutations here; collectives and
//! training jobs in [`jobs`]; ns-3 flow files and Chakra traces in [`files`]. Each kind
//! refuses the keys of the others.

mod background;
mod files;
mod jobs;

use super::reader::{invalid, reject_present, Ctx, Field, Raw};
use super::topology::TopologySpec;
use super::{Job, Scenario, ScenarioError};
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
    job: Option<Spanned<String>>,
    distribution: Option<Spanned<String>>,
    load: Field,
    duration: Field,
}

/// What every traffic entry is read against.
pub(super) struct Setting<'a> {
    pub base: &'a Path,
    /// `[[job]]`s: an entry naming one numbers its hosts inside it.
    pub jobs: &'a [Job],
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
    /// Hosts the entry may name: the topology's, or its job's.
    hosts: u32,
    /// The job the entry belongs to, whose ranks its host numbers are.
    job: Option<&'a Job>,
}

/// The keys every kind but the file-driven ones shares.
struct Common {
    size: u64,
    start: Time,
    sl: u8,
}

/// Reads every `[[traffic]]` entry, in order, with the index of the job owning each.
/// An entry of a job is read in the job's numbering, then placed on the job's hosts.
pub(super) fn parse(
    c: &Ctx,
    entries: &[FileTraffic],
    set: &Setting,
) -> Result<(Vec<Traffic>, Vec<Option<usize>>), ScenarioError> {
    let mut traffic = Vec::with_capacity(entries.len());
    let mut owners = Vec::with_capacity(entries.len());
    for (i, tr) in entries.iter().enumerate() {
        let owner = match &tr.job {
            None => None,
            Some(name) => Some(
                set.jobs
                    .iter()
                    .position(|j| &j.name == name.get_ref())
                    .ok_or_else(|| {
                        let names: Vec<&str> = set.jobs.iter().map(|j| j.name.as_str()).collect();
                        c.unexpected(
                            &format!("traffic[{i}].job"),
                            name,
                            &format!("the name of a [[job]], one of {names:?}"),
                        )
                    })?,
            ),
        };
        let job = owner.map(|j| &set.jobs[j]);
        let entry = Entry {
            c,
            i,
            tr,
            set,
            hosts: job.map_or(set.topology.hosts(), |j| j.hosts.len() as u32),
            job,
        };
        let t = entry.parse()?;
        let t = match job {
            Some(j) => {
                let placed = t.map_hosts(|r| j.host(r));
                entry.check_placed(&placed)?;
                placed
            }
            None => t,
        };
        traffic.push(t);
        owners.push(owner);
    }
    Ok((traffic, owners))
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
        if kind != "background" {
            let own = [
                ("distribution", tr.distribution.is_some()),
                ("load", tr.load.is_some()),
                ("duration", tr.duration.is_some()),
            ];
            self.reject(kind, &own, " (only of \"background\")")?;
        }
        match kind {
            "flow-file" => return self.flow_file(),
            "chakra" => return self.chakra(),
            "background" => return self.background(self.set.hardware.nic),
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
                "\"flow\", \"incast\", \"permutation\", \"background\", \"flow-file\", \"collective\", \"training\" or \"chakra\"",
            )),
        }
    }

    /// An entry of a job once placed: a hierarchical collective's ranks must still come
    /// server by server (hosts listed by `placement = "list"` may not).
    fn check_placed(&self, placed: &Traffic) -> Result<(), ScenarioError> {
        let (algorithm, ranks, what) = match placed {
            Traffic::Collective(c) => (c.algorithm, &c.ranks, "collective"),
            Traffic::Training(j) => (j.algorithm, &j.ranks, "training"),
            _ => return Ok(()),
        };
        self.check_groups(algorithm, ranks, what).map_err(|e| {
            invalid(format!(
                "{e}, on the hosts job \"{}\" was placed on",
                self.job.map_or("", |j| j.name.as_str())
            ))
        })
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

/// Every `[[traffic]]` entry, every default filled in; an entry of a job in the job's
/// numbering, with its `job` key.
pub(super) fn write_toml(scenario: &Scenario, s: &mut String) {
    let all = scenario.host_count();
    for (t, owner) in scenario.traffic.iter().zip(&scenario.traffic_jobs) {
        match owner.map(|j| &scenario.jobs[j]) {
            None => write_entry(t, all, s),
            Some(job) => {
                let local = t.map_hosts(|h| job.rank(h).expect("a job's entry stays on its hosts"));
                let mut one = String::new();
                write_entry(&local, job.hosts.len() as u32, &mut one);
                let head = "[[traffic]]\n";
                let at = one.find(head).map_or(0, |p| p + head.len());
                one.insert_str(at, &format!("job = {}\n", super::quoted(&job.name)));
                s.push_str(&one);
            }
        }
    }
}

/// One entry as TOML; `all` hosts make the default host list.
fn write_entry(t: &Traffic, all: u32, s: &mut String) {
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
        Traffic::Background(b) => background::write_toml(b, all, s),
    };
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
