//! `collective` and `training` entries: NCCL-style collectives over ranks, and
//! data-, tensor- and pipeline-parallel training jobs.

use super::{host_list, Common, Entry};
use crate::scenario::nccl;
use crate::scenario::reader::invalid;
use crate::scenario::{ScenarioError, NO_NVLS};
use fabricsim_core::units::{ByteSize, Dimension, HostId, Time};
use fabricsim_fabric::workload::collective::NcclProtocol;
use fabricsim_fabric::workload::collective::{by_server, whole_servers};
use fabricsim_fabric::workload::{
    Collective, CollectiveAlgorithm, CollectiveOp, Traffic, Training,
};
use std::fmt::Write as _;

impl Entry<'_> {
    /// `algorithm`, or `default`.
    pub(super) fn algorithm(
        &self,
        default: CollectiveAlgorithm,
    ) -> Result<CollectiveAlgorithm, ScenarioError> {
        match &self.tr.algorithm {
            None => Ok(default),
            Some(a) => self.c.named(
                &self.at("algorithm"),
                a,
                CollectiveAlgorithm::parse,
                &CollectiveAlgorithm::NAMES,
            ),
        }
    }

    /// `channels` and `chunk` (default the protocol's step: NCCL's 512 KiB for Simple).
    /// Channels default to `[nccl] channels`, else to 1, but for a tree over whole servers to one per GPU of a
    /// server: each channel's tree is headed by another GPU, so that, as NCCL's
    /// channels do, the trees use every NIC.
    fn channels_and_chunk(
        &self,
        protocol: NcclProtocol,
        algorithm: CollectiveAlgorithm,
        ranks: &[HostId],
    ) -> Result<(u32, u64), ScenarioError> {
        let (c, tr) = (self.c, self.tr);
        let gpn = self.set.gpus_per_node;
        let default = if let Some(n) = self.set.nccl.channels {
            n
        } else if algorithm == CollectiveAlgorithm::Tree && by_server(ranks, gpn) {
            gpn
        } else {
            1
        };
        Ok((
            c.count(&self.at("channels"), &tr.channels, 1, 64)?
                .unwrap_or(default as u64) as u32,
            c.positive(&self.at("chunk"), &tr.chunk, Dimension::Size)?
                .unwrap_or(protocol.default_chunk()),
        ))
    }

    /// An all-reduce's algorithm: the entry's `algorithm`, else `[nccl]`'s choice for
    /// `bytes` over `ranks` (noted for `check`), else `default`.
    fn all_reduce_algorithm(
        &self,
        ranks: &[HostId],
        bytes: u64,
        default: CollectiveAlgorithm,
    ) -> Result<CollectiveAlgorithm, ScenarioError> {
        match (&self.tr.algorithm, self.set.nccl.algorithm) {
            (None, Some(choice)) => {
                let (a, why) = nccl::resolve(choice, ranks, bytes, &self.set.hardware);
                self.set.choices.borrow_mut().push(format!(
                    "traffic[{}]: {} ({why})",
                    self.i,
                    a.name()
                ));
                Ok(a)
            }
            _ => self.algorithm(default),
        }
    }

    /// The hierarchical and NVLS algorithms' ranks must come server by server; NVLS
    /// needs NVLink SHARP in the servers.
    pub(super) fn check_groups(
        &self,
        algorithm: CollectiveAlgorithm,
        ranks: &[HostId],
        what: &str,
    ) -> Result<(), ScenarioError> {
        let fail = |m: String| invalid(format!("traffic[{}] ({what}): {m}", self.i));
        if matches!(
            algorithm,
            CollectiveAlgorithm::Hierarchical | CollectiveAlgorithm::Nvls
        ) {
            check_server_groups(algorithm.name(), ranks, self.set.gpus_per_node).map_err(fail)?;
        }
        if algorithm == CollectiveAlgorithm::Nvls && !self.set.hardware.nvls {
            return Err(fail(format!("algorithm nvls: {NO_NVLS}")));
        }
        Ok(())
    }

    pub(super) fn collective(
        &self,
        Common { size, start, sl }: Common,
    ) -> Result<Traffic, ScenarioError> {
        let (c, i, tr) = (self.c, self.i, self.tr);
        let op_text = tr.op.as_ref().ok_or_else(|| {
            invalid(format!(
                "traffic[{i}] (collective): op is required, one of {:?}",
                CollectiveOp::NAMES
            ))
        })?;
        let op = c.named(
            &self.at("op"),
            op_text,
            CollectiveOp::parse,
            &CollectiveOp::NAMES,
        )?;
        let ranks = self.hosts_or_all(&tr.ranks, "ranks")?;
        let algorithm = if op == CollectiveOp::AllReduce {
            self.all_reduce_algorithm(&ranks, size, op.default_algorithm())?
        } else {
            self.algorithm(op.default_algorithm())?
        };
        let protocol = match &tr.protocol {
            None => NcclProtocol::Simple,
            Some(p) => c.named(
                &self.at("protocol"),
                p,
                NcclProtocol::parse,
                &NcclProtocol::NAMES,
            )?,
        };
        let (channels, chunk) = self.channels_and_chunk(protocol, algorithm, &ranks)?;
        let collective = Collective {
            op,
            algorithm,
            ranks,
            size,
            start,
            channels,
            chunk,
            protocol,
            sl,
            root: c
                .count(&self.at("root"), &tr.root, 0, u32::MAX as u64)?
                .unwrap_or(0) as u32,
            group: self.set.gpus_per_node,
        };
        self.check_groups(algorithm, &collective.ranks, "collective")?;
        collective
            .validate()
            .map_err(|m| invalid(format!("traffic[{i}] (collective): {m}")))?;
        Ok(Traffic::Collective(collective))
    }

    pub(super) fn training(
        &self,
        Common { size, start, sl }: Common,
    ) -> Result<Traffic, ScenarioError> {
        let (c, i, tr) = (self.c, self.i, self.tr);
        let ranks = self.hosts_or_all(&tr.ranks, "ranks")?;
        let count = |k: &str, v, max: u64, default: u32| -> Result<u32, ScenarioError> {
            Ok(c.count(&self.at(k), v, 1, max)?
                .map_or(default, |n| n as u32))
        };
        let buckets = count("buckets", &tr.buckets, 4096, 4)?;
        let algorithm =
            self.all_reduce_algorithm(&ranks, size / buckets as u64, CollectiveAlgorithm::Ring)?;
        self.check_groups(algorithm, &ranks, "training")?;
        let time = |k: &str, v, default: Time| -> Result<Time, ScenarioError> {
            Ok(c.time(&self.at(k), v)?.unwrap_or(default))
        };
        let iterations = count("iterations", &tr.iterations, 1000, 3)?;
        let forward = time("forward", &tr.forward, Time::from_us(100))?;
        let backward = time("backward", &tr.backward, Time::from_us(200))?;
        let (channels, chunk) = self.channels_and_chunk(NcclProtocol::Simple, algorithm, &ranks)?;
        let job = Training {
            ranks,
            gradient: size,
            buckets,
            iterations,
            forward,
            backward,
            overlap: tr.overlap.unwrap_or(true),
            algorithm,
            channels,
            chunk,
            group: self.set.gpus_per_node,
            sl,
            start,
            job_iterations: c
                .count(
                    &self.at("job_iterations"),
                    &tr.job_iterations,
                    1,
                    u64::MAX >> 1,
                )?
                .unwrap_or(100_000),
            tensor_parallel: count("tensor_parallel", &tr.tensor_parallel, 4096, 1)?,
            pipeline_parallel: count("pipeline_parallel", &tr.pipeline_parallel, 4096, 1)?,
            microbatches: count("microbatches", &tr.microbatches, 4096, 1)?,
            activation: c
                .quantity(&self.at("activation"), &tr.activation, Dimension::Size)?
                .unwrap_or(0),
        };
        job.validate()
            .map_err(|m| invalid(format!("traffic[{i}] (training): {m}")))?;
        Ok(Traffic::Training(job))
    }
}

/// The hierarchical and NVLS algorithms take ranks server by server: each run of `gpus`
/// consecutive ranks must be the GPUs of one server.
fn check_server_groups(algorithm: &str, ranks: &[HostId], gpus: u32) -> Result<(), String> {
    if gpus <= 1 || whole_servers(ranks, gpus) {
        return Ok(());
    }
    Err(format!(
        "{algorithm}: ranks must come server by server, {gpus} GPUs of one server at a time (gpus_per_node = {gpus})"
    ))
}

/// A collective or training entry, every default filled in.
pub(super) fn write_toml(t: &Traffic, all: u32, s: &mut String) -> std::fmt::Result {
    match t {
        Traffic::Collective(c) => writeln!(
            s,
            "\n[[traffic]]\nkind = \"collective\"\nop = \"{}\"\nalgorithm = \"{}\"\n{}\nsize = \"{}\"\nstart = \"{}\"\nchannels = {}\nprotocol = \"{}\"\nchunk = \"{}\"\nroot = {}\nsl = {}",
            c.op.name(),
            c.algorithm.name(),
            host_list("ranks", &c.ranks, all),
            ByteSize(c.size),
            c.start,
            c.channels,
            c.protocol.name(),
            ByteSize(c.chunk),
            c.root,
            c.sl
        ),
        Traffic::Training(t) => writeln!(
            s,
            "\n[[traffic]]\nkind = \"training\"\n{}\nsize = \"{}\"   # gradient bytes per iteration\nbuckets = {}\niterations = {}\nforward = \"{}\"\nbackward = \"{}\"\noverlap = {}\nalgorithm = \"{}\"\nchannels = {}\nchunk = \"{}\"\njob_iterations = {}\ntensor_parallel = {}\npipeline_parallel = {}\nmicrobatches = {}\nactivation = \"{}\"\nstart = \"{}\"\nsl = {}",
            host_list("ranks", &t.ranks, all),
            ByteSize(t.gradient),
            t.buckets,
            t.iterations,
            t.forward,
            t.backward,
            t.overlap,
            t.algorithm.name(),
            t.channels,
            ByteSize(t.chunk),
            t.job_iterations,
            t.tensor_parallel,
            t.pipeline_parallel,
            t.microbatches,
            ByteSize(t.activation),
            t.start,
            t.sl
        ),
        _ => Ok(()),
    }
}
