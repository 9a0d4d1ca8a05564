//! Execution traces in the shape of MLCommons Chakra (one node graph per rank: compute,
//! collectives, sends and receives with their dependencies) turned into messages.
//!
//! Each rank runs its nodes in dependency order. A node's completion is a *frontier*: the
//! messages whose arrival it waits for, each with the compute time that follows, plus a
//! fixed offset from the job's start for work that waits for no message. Compute nodes
//! push the frontier forward by their duration; a send becomes an RDMA WRITE posted at its
//! frontier; a receive completes when its matching send (same source, destination and tag,
//! in order) has arrived; the k-th collective node of every rank forms one collective over
//! all ranks, expanded by [`super::collective`] with each rank's frontier as its start.
//! Process groups are not modelled: every collective spans every rank.

use super::collective::{expand_after, expand_all_reduce_after, NcclProtocol};
use super::{
    Collective, CollectiveAlgorithm, CollectiveError, CollectiveOp, Frontier, Message, Workload,
};
use fabricsim_core::units::{HostId, Time};
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

/// What a trace node does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EtKind {
    Compute {
        duration: Time,
    },
    Collective {
        op: CollectiveOp,
        size: u64,
    },
    Send {
        peer: u32,
        size: u64,
        tag: i64,
    },
    Recv {
        peer: u32,
        size: u64,
        tag: i64,
    },
    /// Anything else (metadata, memory, ...): passes its dependencies through.
    Other,
}

/// One node of a rank's trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtNode {
    pub id: u64,
    pub kind: EtKind,
    /// Control and data dependencies together (ids of this rank's nodes).
    pub deps: Vec<u64>,
}

/// Why a job's traces cannot run: the rank and node that cannot proceed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("rank {rank}: two nodes share an id")]
    DuplicateId { rank: usize },
    #[error("rank {rank}: node {node} depends on unknown node {dependency}")]
    UnknownDependency {
        rank: usize,
        node: u64,
        dependency: u64,
    },
    #[error("rank {rank}: the dependencies form a cycle")]
    Cycle { rank: usize },
    #[error("rank {rank}: node {node} sends to rank {peer}, which has no trace")]
    NoPeer { rank: usize, node: u64, peer: u32 },
    #[error("rank {rank}: collective node {node} ({kind}) does not match rank 0's node {first} ({first_kind})")]
    Mismatch {
        rank: usize,
        node: u64,
        kind: String,
        first: u64,
        first_kind: String,
    },
    #[error("collective node {node}: {error}")]
    Collective { node: u64, error: CollectiveError },
    #[error("rank {rank} cannot run node {node} ({kind}): a receive without a matching send, or collectives that differ between ranks")]
    Stuck {
        rank: usize,
        node: u64,
        kind: String,
    },
}

/// A job given as one trace per rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChakraJob {
    /// Where the traces came from, for reports.
    pub source: String,
    /// The host of each rank.
    pub ranks: Vec<HostId>,
    pub traces: Vec<Vec<EtNode>>,
    pub algorithm: CollectiveAlgorithm,
    pub channels: u32,
    pub chunk: u64,
    pub group: u32,
    pub sl: u8,
    pub start: Time,
}

/// Orders each rank's nodes so dependencies come first; errors on unknown ids or cycles.
fn topological(rank: usize, nodes: &[EtNode]) -> Result<Vec<usize>, TraceError> {
    let index: BTreeMap<u64, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id, i)).collect();
    if index.len() != nodes.len() {
        return Err(TraceError::DuplicateId { rank });
    }
    let mut waiting = vec![0usize; nodes.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        for d in &n.deps {
            let &j = index.get(d).ok_or(TraceError::UnknownDependency {
                rank,
                node: n.id,
                dependency: *d,
            })?;
            waiting[i] += 1;
            dependents[j].push(i);
        }
    }
    let mut ready: VecDeque<usize> = (0..nodes.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(i) = ready.pop_front() {
        order.push(i);
        for &j in &dependents[i] {
            waiting[j] -= 1;
            if waiting[j] == 0 {
                ready.push_back(j);
            }
        }
    }
    if order.len() != nodes.len() {
        return Err(TraceError::Cycle { rank });
    }
    Ok(order)
}

/// Appends the job's messages to `w`; returns the collectives it ran, each with its range
/// of messages. Errors name the rank and node that cannot proceed.
pub fn expand(
    job: &ChakraJob,
    w: &mut Workload,
) -> Result<Vec<(Collective, Range<u32>)>, TraceError> {
    let n = job.traces.len();
    let orders: Vec<Vec<usize>> = job
        .traces
        .iter()
        .enumerate()
        .map(|(r, t)| topological(r, t))
        .collect::<Result<_, _>>()?;
    let mut done: Vec<BTreeMap<u64, Frontier>> = vec![BTreeMap::new(); n];
    let mut pos = vec![0usize; n];
    let mut sends: BTreeMap<(u32, u32, i64), VecDeque<u32>> = BTreeMap::new();
    let mut collectives = Vec::new();
    loop {
        let mut progressed = false;
        // Each rank runs until it finishes or waits at a collective or an unmatched receive.
        for r in 0..n {
            while let Some(&i) = orders[r].get(pos[r]) {
                let node = &job.traces[r][i];
                let mut base = Frontier::default();
                for d in &node.deps {
                    base.join(&done[r][d]);
                }
                let frontier = match &node.kind {
                    EtKind::Compute { duration } => base.delayed(*duration),
                    EtKind::Other => base,
                    EtKind::Send { peer, size, tag } => {
                        let dst = *job.ranks.get(*peer as usize).ok_or(TraceError::NoPeer {
                            rank: r,
                            node: node.id,
                            peer: *peer,
                        })?;
                        let m = w.push(
                            Message {
                                src: job.ranks[r],
                                dst,
                                size: *size,
                                start: job.start + base.offset,
                                sl: job.sl,
                                local: None,
                            },
                            base.deps,
                            None,
                        );
                        sends
                            .entry((r as u32, *peer, *tag))
                            .or_default()
                            .push_back(m);
                        Frontier::on(&[m])
                    }
                    EtKind::Recv { peer, tag, .. } => {
                        let Some(m) = sends
                            .get_mut(&(*peer, r as u32, *tag))
                            .and_then(VecDeque::pop_front)
                        else {
                            break;
                        };
                        base.join(&Frontier::on(&[m]));
                        base
                    }
                    EtKind::Collective { .. } => break,
                };
                done[r].insert(node.id, frontier);
                pos[r] += 1;
                progressed = true;
            }
        }
        // Every rank at a collective: run it.
        let at: Vec<Option<&EtNode>> = (0..n)
            .map(|r| orders[r].get(pos[r]).map(|&i| &job.traces[r][i]))
            .collect();
        if at.iter().all(|a| {
            matches!(
                a,
                Some(EtNode {
                    kind: EtKind::Collective { .. },
                    ..
                })
            )
        }) {
            let nodes: Vec<&EtNode> = at.into_iter().flatten().collect();
            let EtKind::Collective { op, size } = nodes[0].kind else {
                unreachable!("checked above")
            };
            if let Some(odd) = nodes.iter().position(|x| x.kind != nodes[0].kind) {
                return Err(TraceError::Mismatch {
                    rank: odd,
                    node: nodes[odd].id,
                    kind: format!("{:?}", nodes[odd].kind),
                    first: nodes[0].id,
                    first_kind: format!("{:?}", nodes[0].kind),
                });
            }
            let mut ready = Vec::with_capacity(n);
            let mut offset = Time::ZERO;
            for (r, node) in nodes.iter().enumerate() {
                let mut base = Frontier::default();
                for d in &node.deps {
                    base.join(&done[r][d]);
                }
                // Work that waits for no message shifts the collective's start.
                offset = offset.max(base.offset);
                ready.push(base.deps);
            }
            let c = Collective {
                op,
                algorithm: if op == CollectiveOp::AllToAll {
                    CollectiveAlgorithm::Direct
                } else {
                    job.algorithm
                },
                ranks: job.ranks.clone(),
                size,
                start: job.start + offset,
                channels: job.channels,
                chunk: job.chunk,
                protocol: NcclProtocol::Simple,
                sl: job.sl,
                root: 0,
                group: job.group,
            };
            c.validate().map_err(|error| TraceError::Collective {
                node: nodes[0].id,
                error,
            })?;
            let first = w.messages.len() as u32;
            let finished = if op == CollectiveOp::AllReduce {
                expand_all_reduce_after(&c, w, &ready)
            } else {
                expand_after(&c, w, &ready)
            };
            collectives.push((c, first..w.messages.len() as u32));
            for (r, node) in nodes.iter().enumerate() {
                done[r].insert(node.id, Frontier::on(&finished[r]));
                pos[r] += 1;
            }
            progressed = true;
        }
        if (0..n).all(|r| pos[r] == orders[r].len()) {
            return Ok(collectives);
        }
        if !progressed {
            let r = (0..n)
                .find(|&r| pos[r] < orders[r].len())
                .expect("some rank is stuck");
            let node = &job.traces[r][orders[r][pos[r]]];
            return Err(TraceError::Stuck {
                rank: r,
                node: node.id,
                kind: format!("{:?}", node.kind),
            });
        }
    }
}
