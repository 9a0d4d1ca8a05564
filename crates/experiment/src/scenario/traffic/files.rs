//! `flow-file` entries (the ns-3 RDMA model's flow lists) and `chakra` entries (a folder
//! of execution traces): the files give what other kinds write in the scenario.

use super::{host_list, Entry};
use crate::formats::{chakra as chakra_format, ns3};
use crate::scenario::reader::{invalid, MAX_SIZE};
use crate::scenario::topology::TopologySpec;
use crate::scenario::ScenarioError;
use fabricsim_core::units::{ByteSize, Dimension, HostId, Time};
use fabricsim_fabric::workload::chakra::{self, ChakraJob};
use fabricsim_fabric::workload::collective::DEFAULT_CHUNK;
use fabricsim_fabric::workload::{CollectiveAlgorithm, Message, Traffic, Workload};
use std::fmt::Write as _;

impl Entry<'_> {
    /// Which of the keys a file-driven kind takes from its file are given.
    fn endpoints_and_size(&self) -> [(&'static str, bool); 5] {
        let tr = self.tr;
        [
            ("src", tr.src.is_some()),
            ("dst", tr.dst.is_some()),
            ("senders", tr.senders.is_some()),
            ("hosts", tr.hosts.is_some()),
            ("size", tr.size.is_some()),
        ]
    }

    /// A `flow-file` entry: an ns-3 flow file. Its src and dst are ns-3 node ids when the
    /// topology is a file too, host indices otherwise.
    pub(super) fn flow_file(&self) -> Result<Traffic, ScenarioError> {
        let tr = self.tr;
        let own = [("start", tr.start.is_some()), ("sl", tr.sl.is_some())];
        let stray = self.endpoints_and_size().into_iter().chain(own);
        self.reject(
            "flow-file",
            &stray.collect::<Vec<_>>(),
            " (the file gives every flow's fields)",
        )?;
        let key = self.at("path");
        let path = tr
            .path
            .as_ref()
            .ok_or_else(|| invalid(format!("{key}: required by kind \"flow-file\"")))?;
        let (shown, text) = self.c.read_named(self.set.base, &key, path)?;
        let bad = |m: String| invalid(format!("{key} = \"{shown}\": {m}"));
        let flows = ns3::parse_flows(&text).map_err(bad)?;
        let mut messages = Vec::with_capacity(flows.len());
        for (n, f) in flows.iter().enumerate() {
            let src = self.flow_host(f.src, "src", n + 1).map_err(bad)?;
            let dst = self.flow_host(f.dst, "dst", n + 1).map_err(bad)?;
            if src == dst {
                return Err(bad(format!("flow {}: src = dst = {}", n + 1, f.src)));
            }
            if f.size > MAX_SIZE {
                return Err(bad(format!(
                    "flow {}: size = {} B: at most 512 GiB",
                    n + 1,
                    f.size
                )));
            }
            messages.push(Message {
                src,
                dst,
                size: f.size,
                start: f.start,
                sl: f.priority,
                local: None,
            });
        }
        Ok(Traffic::Listed {
            source: shown,
            messages,
        })
    }

    /// The host a flow file's node id names.
    fn flow_host(&self, node: u32, which: &str, line: usize) -> Result<HostId, String> {
        let topology = self.set.topology;
        let index = match topology {
            TopologySpec::File { graph, .. } if self.job.is_none() => graph.host_index(node),
            _ => (node < self.hosts).then_some(node),
        };
        index.map(HostId).ok_or_else(|| {
            format!(
                "flow {line}: {which} = {node} is not a host of the topology ({})",
                match topology {
                    TopologySpec::File { .. } if self.job.is_none() =>
                        "a switch, or beyond the last node".to_string(),
                    _ => format!("hosts 0 to {}", self.hosts - 1),
                }
            )
        })
    }

    /// A `chakra` entry: a folder of execution traces, one `<name>.<rank>.et` per rank;
    /// rank i runs on `ranks[i]` (default host i). Checked by expanding it once here, so
    /// a trace that cannot run is an input error.
    pub(super) fn chakra(&self) -> Result<Traffic, ScenarioError> {
        let (c, tr) = (self.c, self.tr);
        let own = [("op", tr.op.is_some()), ("root", tr.root.is_some())];
        let stray = self.endpoints_and_size().into_iter().chain(own);
        self.reject(
            "chakra",
            &stray.collect::<Vec<_>>(),
            " (the traces give it)",
        )?;
        let path = tr.path.as_ref().ok_or_else(|| {
            invalid(format!(
                "{}: required by kind \"chakra\" (a folder of traces)",
                self.at("path")
            ))
        })?;
        let shown = path.get_ref().clone();
        let bad = |m: String| {
            invalid(format!(
                "line {}: {} = \"{shown}\": {m}",
                c.line(path.span()),
                self.at("path")
            ))
        };
        let traces = chakra_format::read_folder(&self.set.base.join(&shown)).map_err(bad)?;
        let hosts = self.hosts;
        let ranks: Vec<HostId> = match &tr.ranks {
            Some(list) => list
                .iter()
                .map(|v| c.host(&self.at("ranks"), v, hosts))
                .collect::<Result<_, _>>()?,
            None => (0..traces.len() as u32).map(HostId).collect(),
        };
        if ranks.len() != traces.len() || ranks.iter().any(|h| h.0 >= hosts) {
            return Err(bad(format!(
                "{} traces for {} ranks on {hosts} hosts: give one host per trace in ranks",
                traces.len(),
                ranks.len()
            )));
        }
        let job = ChakraJob {
            source: shown.clone(),
            ranks,
            traces,
            algorithm: self.algorithm(CollectiveAlgorithm::Ring)?,
            channels: c
                .count(&self.at("channels"), &tr.channels, 1, 64)?
                .unwrap_or(1) as u32,
            chunk: c
                .positive(&self.at("chunk"), &tr.chunk, Dimension::Size)?
                .unwrap_or(DEFAULT_CHUNK),
            group: self.set.gpus_per_node,
            sl: c.count(&self.at("sl"), &tr.sl, 0, 15)?.unwrap_or(0) as u8,
            start: c.time(&self.at("start"), &tr.start)?.unwrap_or(Time::ZERO),
        };
        chakra::expand(&job, &mut Workload::default()).map_err(|e| bad(e.to_string()))?;
        Ok(Traffic::Chakra(job))
    }
}

/// A chakra or flow-file entry, as read.
pub(super) fn write_toml(t: &Traffic, all: u32, s: &mut String) -> std::fmt::Result {
    match t {
        Traffic::Chakra(job) => writeln!(
            s,
            "\n[[traffic]]\nkind = \"chakra\"\npath = {}\n{}\nalgorithm = \"{}\"\nchannels = {}\nchunk = \"{}\"\nstart = \"{}\"\nsl = {}\n# {} traces, {} nodes",
            crate::scenario::quoted(&job.source),
            host_list("ranks", &job.ranks, all),
            job.algorithm.name(),
            job.channels,
            ByteSize(job.chunk),
            job.start,
            job.sl,
            job.traces.len(),
            job.traces.iter().map(Vec::len).sum::<usize>()
        ),
        Traffic::Listed { source, messages } => writeln!(
            s,
            "\n[[traffic]]\nkind = \"flow-file\"\npath = {}\n# {} flows",
            crate::scenario::quoted(source),
            messages.len()
        ),
        _ => Ok(()),
    }
}
