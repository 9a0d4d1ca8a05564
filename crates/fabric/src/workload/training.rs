//! Training jobs: iterations of compute and communication.
//!
//! Data parallel only (the default): forward, then backward producing gradient buckets,
//! one all-reduce per bucket. With overlap, a bucket's all-reduce starts as soon as
//! backward has produced it; NCCL runs a communicator's collectives in order, so each
//! bucket also waits for the previous bucket's all-reduce. A rank starts the next
//! iteration's compute once its last all-reduce of this one has completed.
//!
//! With tensor (T) and pipeline (P) parallelism and M microbatches, ranks are laid out
//! Megatron-style (rank = stage x D x T + replica x T + tensor index, D = n / (T x P)) and
//! each iteration runs a GPipe schedule: every stage does the forward of microbatches
//! 0..M (each followed by an all-reduce of the activations over its tensor group, then a
//! send of the activations to the next stage), then the backward of M-1..0 (the same
//! with activation gradients sent back a stage); then each rank's gradient shard
//! (gradient / (T x P)) is all-reduced over the D replicas, bucket after bucket.
//! `forward` and `backward` are then one microbatch's compute on one stage.

use super::collective::{expand_all_reduce_after, share, NcclProtocol};
use super::{
    Collective, CollectiveAlgorithm, CollectiveError, CollectiveOp, Dep, Frontier, Message,
    Workload,
};
use fabricsim_core::units::{HostId, Time};
use std::ops::Range;

/// A data-parallel training job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Training {
    pub ranks: Vec<HostId>,
    /// Gradient bytes reduced per iteration (the model's gradients, on every rank).
    pub gradient: u64,
    pub buckets: u32,
    /// Iterations simulated at packet level.
    pub iterations: u32,
    pub forward: Time,
    pub backward: Time,
    /// Bucket all-reduces overlap the rest of backward.
    pub overlap: bool,
    /// Ring or hierarchical all-reduce.
    pub algorithm: CollectiveAlgorithm,
    pub channels: u32,
    pub chunk: u64,
    /// GPUs per server (hierarchical).
    pub group: u32,
    pub sl: u8,
    pub start: Time,
    /// Iterations of the whole job, for the projection.
    pub job_iterations: u64,
    /// Tensor-parallel group size (consecutive ranks).
    pub tensor_parallel: u32,
    /// Pipeline stages.
    pub pipeline_parallel: u32,
    pub microbatches: u32,
    /// Activation bytes of one microbatch at a stage boundary (sent between stages, and
    /// all-reduced over the tensor group after each stage's forward and backward).
    pub activation: u64,
}

/// Why a training job cannot run as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrainingError {
    #[error("iterations, buckets and job_iterations must be at least 1")]
    NoIterations,
    #[error("tensor_parallel = {tensor} x pipeline_parallel = {pipeline} must divide the {ranks} ranks, and microbatches must be at least 1")]
    Parallelism {
        tensor: u32,
        pipeline: u32,
        ranks: u32,
    },
    #[error("activation bytes need tensor_parallel or pipeline_parallel above 1")]
    Activation,
    #[error("algorithm \"{algorithm}\": training all-reduces run \"ring\", \"tree\", \"hierarchical\" or \"nvls\"")]
    Algorithm { algorithm: &'static str },
    /// Its buckets' all-reduce cannot run.
    #[error(transparent)]
    Bucket(#[from] CollectiveError),
}

impl Training {
    /// Checks the job's shape and its buckets' all-reduce.
    pub fn validate(&self) -> Result<(), TrainingError> {
        if self.iterations == 0 || self.buckets == 0 || self.job_iterations == 0 {
            return Err(TrainingError::NoIterations);
        }
        let (t, p) = (self.tensor_parallel, self.pipeline_parallel);
        let n = self.ranks.len() as u32;
        if t == 0 || p == 0 || self.microbatches == 0 || !n.is_multiple_of(t * p) {
            return Err(TrainingError::Parallelism {
                tensor: t,
                pipeline: p,
                ranks: n,
            });
        }
        if !self.layered() && self.activation > 0 {
            return Err(TrainingError::Activation);
        }
        if !matches!(
            self.algorithm,
            CollectiveAlgorithm::Ring
                | CollectiveAlgorithm::Tree
                | CollectiveAlgorithm::Hierarchical
                | CollectiveAlgorithm::Nvls
        ) {
            return Err(TrainingError::Algorithm {
                algorithm: self.algorithm.name(),
            });
        }
        Ok(self.bucket(0).validate()?)
    }

    /// Whether tensor or pipeline parallelism (or microbatches) shape the iteration.
    fn layered(&self) -> bool {
        self.tensor_parallel > 1 || self.pipeline_parallel > 1 || self.microbatches > 1
    }

    /// Compute on the critical path of an iteration: the whole step for data parallel;
    /// for a GPipe schedule, (M + P - 1) microbatch slots of forward and of backward.
    pub fn compute(&self) -> Time {
        let slots = (self.microbatches + self.pipeline_parallel - 1) as u64;
        (self.forward + self.backward) * slots
    }

    /// Bucket `b`'s all-reduce (its start is set by the caller).
    fn bucket(&self, b: u32) -> Collective {
        Collective {
            op: CollectiveOp::AllReduce,
            algorithm: self.algorithm,
            ranks: self.ranks.clone(),
            size: share(self.gradient, self.buckets as u64, b as u64),
            start: self.start,
            channels: self.channels,
            chunk: self.chunk,
            protocol: NcclProtocol::Simple,
            sl: self.sl,
            root: 0,
            group: self.group,
        }
    }

    /// When bucket `b` is ready, from the start of the iteration's compute.
    fn bucket_ready(&self, b: u32) -> Time {
        let produced = if self.overlap {
            Time(self.backward.ps() * (b as u64 + 1) / self.buckets as u64)
        } else {
            self.backward
        };
        self.forward + produced
    }
}

/// Appends the job's messages to `w`; returns each iteration's range of messages.
pub(crate) fn expand(t: &Training, w: &mut Workload) -> Vec<Range<u32>> {
    if t.layered() {
        return expand_layered(t, w);
    }
    let n = t.ranks.len();
    let mut previous: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut ranges = Vec::with_capacity(t.iterations as usize);
    for k in 0..t.iterations {
        let first = w.messages.len() as u32;
        let mut last_bucket: Vec<Vec<u32>> = vec![Vec::new(); n];
        for b in 0..t.buckets {
            let delay = t.bucket_ready(b);
            let ready: Vec<Vec<Dep>> = (0..n)
                .map(|r| {
                    let mut d: Vec<Dep> =
                        previous[r].iter().map(|&msg| Dep { msg, delay }).collect();
                    d.extend(last_bucket[r].iter().map(|&m| Dep::from(m)));
                    d
                })
                .collect();
            let mut c = t.bucket(b);
            if k == 0 {
                // The first iteration's compute starts with the job.
                c.start = t.start + delay;
            }
            last_bucket = expand_all_reduce_after(&c, w, &ready);
        }
        // Each bucket's messages at a rank wait for the previous bucket's arrivals there,
        // so the last bucket's arrivals come after every earlier one's: the next
        // iteration waits on them alone.
        previous = last_bucket;
        ranges.push(first..w.messages.len() as u32);
    }
    ranges
}

/// One GPipe iteration after another (see the module comment).
fn expand_layered(t: &Training, w: &mut Workload) -> Vec<Range<u32>> {
    let n = t.ranks.len();
    let (tp, pp, mb) = (
        t.tensor_parallel as usize,
        t.pipeline_parallel as usize,
        t.microbatches as usize,
    );
    let dp = n / (tp * pp);
    let idx = |d: usize, s: usize, k: usize| s * dp * tp + d * tp + k;
    let mut done: Vec<Frontier> = vec![Frontier::default(); n];
    let mut ranges = Vec::with_capacity(t.iterations as usize);
    for _ in 0..t.iterations {
        let first = w.messages.len() as u32;
        // Per rank and microbatch: forward done, and activations arrived from upstream.
        let mut fwd = vec![vec![Frontier::default(); mb]; n];
        let mut arrived = vec![vec![Frontier::default(); mb]; n];
        for s in 0..pp {
            for m in 0..mb {
                for d in 0..dp {
                    let group: Vec<usize> = (0..tp).map(|k| idx(d, s, k)).collect();
                    let ready: Vec<Frontier> = group
                        .iter()
                        .map(|&r| {
                            let mut f = if m == 0 {
                                done[r].clone()
                            } else {
                                fwd[r][m - 1].clone()
                            };
                            f.join(&arrived[r][m]);
                            f.delayed(t.forward)
                        })
                        .collect();
                    let out = tensor_all_reduce(t, w, &group, ready);
                    for (k, &r) in group.iter().enumerate() {
                        if s + 1 < pp {
                            arrived[idx(d, s + 1, k)][m] =
                                stage_send(t, w, r, idx(d, s + 1, k), &out[k]);
                        }
                        fwd[r][m] = out[k].clone();
                    }
                }
            }
        }
        let mut bwd = vec![vec![Frontier::default(); mb]; n];
        let mut grads = vec![vec![Frontier::default(); mb]; n];
        for s in (0..pp).rev() {
            for m in (0..mb).rev() {
                for d in 0..dp {
                    let group: Vec<usize> = (0..tp).map(|k| idx(d, s, k)).collect();
                    let ready: Vec<Frontier> = group
                        .iter()
                        .map(|&r| {
                            let mut f = if m + 1 == mb {
                                fwd[r][mb - 1].clone()
                            } else {
                                bwd[r][m + 1].clone()
                            };
                            f.join(&grads[r][m]);
                            f.delayed(t.backward)
                        })
                        .collect();
                    let out = tensor_all_reduce(t, w, &group, ready);
                    for (k, &r) in group.iter().enumerate() {
                        if s > 0 {
                            grads[idx(d, s - 1, k)][m] =
                                stage_send(t, w, r, idx(d, s - 1, k), &out[k]);
                        }
                        bwd[r][m] = out[k].clone();
                    }
                }
            }
        }
        // Gradient shards all-reduced over the replicas, bucket after bucket.
        for s in 0..pp {
            for k in 0..tp {
                let members: Vec<usize> = (0..dp).map(|d| idx(d, s, k)).collect();
                let mut state: Vec<Frontier> = members.iter().map(|&r| bwd[r][0].clone()).collect();
                if dp > 1 {
                    let shard = t.gradient / (tp * pp) as u64;
                    for b in 0..t.buckets {
                        let mut c = t.bucket(b);
                        c.ranks = members.iter().map(|&r| t.ranks[r]).collect();
                        c.size = share(shard, t.buckets as u64, b as u64);
                        state = run_after(w, c, t.start, state);
                    }
                }
                for (j, &r) in members.iter().enumerate() {
                    done[r] = state[j].clone();
                }
            }
        }
        ranges.push(first..w.messages.len() as u32);
    }
    ranges
}

/// An all-reduce of the activations over a tensor group (nothing for a group of one).
fn tensor_all_reduce(
    t: &Training,
    w: &mut Workload,
    group: &[usize],
    ready: Vec<Frontier>,
) -> Vec<Frontier> {
    if group.len() < 2 || t.activation == 0 {
        return ready;
    }
    let c = Collective {
        op: CollectiveOp::AllReduce,
        algorithm: CollectiveAlgorithm::Ring,
        ranks: group.iter().map(|&r| t.ranks[r]).collect(),
        size: t.activation,
        start: t.start,
        channels: 1,
        chunk: t.chunk,
        protocol: NcclProtocol::Simple,
        sl: t.sl,
        root: 0,
        group: 1,
    };
    run_after(w, c, t.start, ready)
}

/// Runs an all-reduce whose members start at their frontiers; returns theirs after it.
/// Work that waits for no message sets the collective's start.
fn run_after(
    w: &mut Workload,
    mut c: Collective,
    start: Time,
    ready: Vec<Frontier>,
) -> Vec<Frontier> {
    c.start = start + ready.iter().map(|f| f.offset).max().unwrap_or(Time::ZERO);
    let deps: Vec<Vec<Dep>> = ready.into_iter().map(|f| f.deps).collect();
    expand_all_reduce_after(&c, w, &deps)
        .iter()
        .map(|d| Frontier::on(d))
        .collect()
}

/// Sends a microbatch's activations (or their gradients) between stages once `after`.
fn stage_send(
    t: &Training,
    w: &mut Workload,
    from: usize,
    to: usize,
    after: &Frontier,
) -> Frontier {
    if t.activation == 0 {
        return after.clone();
    }
    let m = w.push(
        Message {
            src: t.ranks[from],
            dst: t.ranks[to],
            size: t.activation,
            start: t.start + after.offset,
            sl: t.sl,
            local: None,
        },
        after.deps.clone(),
        None,
    );
    Frontier::on(&[m])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_wait_for_compute_and_for_each_other() {
        let t = Training {
            ranks: (0..4).map(HostId).collect(),
            gradient: 4 << 20,
            buckets: 2,
            iterations: 2,
            forward: Time::from_us(10),
            backward: Time::from_us(20),
            overlap: true,
            algorithm: CollectiveAlgorithm::Ring,
            channels: 1,
            chunk: 1 << 30,
            group: 1,
            sl: 0,
            start: Time::ZERO,
            job_iterations: 100,
            tensor_parallel: 1,
            pipeline_parallel: 1,
            microbatches: 1,
            activation: 0,
        };
        t.validate().unwrap();
        let mut w = Workload::default();
        let ranges = expand(&t, &mut w);
        assert_eq!(ranges.len(), 2);
        // Iteration 0, bucket 0 starts after forward + half of backward; bucket 1 after all.
        let steps = 2 * 3 * 4; // 2(n-1) steps x 4 ranks, one piece each
        assert_eq!(w.messages[0].start, Time::from_us(20));
        assert_eq!(w.messages[steps].start, Time::from_us(30));
        // Bucket 1's first sends also wait for bucket 0 to finish at their rank.
        assert!(!w.after[steps].is_empty());
        // Iteration 1's first sends wait for iteration 0 at their rank, plus compute.
        let i1 = ranges[1].start as usize;
        assert!(w.after[i1].iter().all(|d| d.delay == Time::from_us(20)));
        // Only the last bucket's arrival at the rank: it comes after the earlier ones.
        assert_eq!(w.after[i1].len(), 1, "{:?}", w.after[i1]);
        assert!(
            w.after[i1][0].msg as usize >= steps,
            "a message of bucket 1"
        );
        assert_eq!(
            w.messages[w.after[i1][0].msg as usize].dst,
            w.messages[i1].src
        );
    }
}
