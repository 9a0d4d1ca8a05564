//! Data-parallel training jobs: iterations of compute (forward, then backward producing
//! gradient buckets) and one all-reduce per bucket. With overlap, a bucket's all-reduce
//! starts as soon as backward has produced it; NCCL runs a communicator's collectives in
//! order, so each bucket also waits for the previous bucket's all-reduce. A rank starts
//! the next iteration's compute once its last all-reduce of this one has completed.

use super::collective::{expand_all_reduce_after, share};
use super::{Collective, CollectiveAlgorithm, CollectiveOp, Dep, Workload};
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
}

impl Training {
    pub fn validate(&self) -> Result<(), String> {
        if self.iterations == 0 || self.buckets == 0 || self.job_iterations == 0 {
            return Err("iterations, buckets and job_iterations must be at least 1".into());
        }
        if !matches!(
            self.algorithm,
            CollectiveAlgorithm::Ring | CollectiveAlgorithm::Hierarchical
        ) {
            return Err(format!(
                "algorithm \"{}\": training all-reduces run \"ring\" or \"hierarchical\"",
                self.algorithm.name()
            ));
        }
        self.bucket(0).validate()
    }

    /// Compute time of an iteration.
    pub fn compute(&self) -> Time {
        self.forward + self.backward
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
    let n = t.ranks.len();
    let mut previous: Vec<Vec<u32>> = vec![Vec::new(); n];
    let mut ranges = Vec::with_capacity(t.iterations as usize);
    for k in 0..t.iterations {
        let first = w.messages.len() as u32;
        let mut this: Vec<Vec<u32>> = vec![Vec::new(); n];
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
            let done = expand_all_reduce_after(&c, w, &ready);
            for (r, d) in done.iter().enumerate() {
                this[r].extend(d);
            }
            last_bucket = done;
        }
        previous = this;
        ranges.push(first..w.messages.len() as u32);
    }
    ranges
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
        assert_eq!(
            w.after[i1].len(),
            2,
            "the rank's last message of each bucket"
        );
    }
}
