use super::*;
use crate::workload::{Message, Pipeline};

/// Bytes host `rank` receives in `w`.
fn received_by(w: &Workload, rank: u32) -> u64 {
    w.messages
        .iter()
        .filter(|m| m.dst == HostId(rank))
        .map(|m| m.size)
        .sum()
}

fn collective(op: CollectiveOp, algorithm: CollectiveAlgorithm, n: u32) -> Collective {
    Collective {
        op,
        algorithm,
        ranks: (0..n).map(HostId).collect(),
        size: 8 << 20,
        start: Time::ZERO,
        channels: 1,
        chunk: 1 << 20,
        protocol: NcclProtocol::Simple,
        sl: 0,
        root: 0,
        group: 1,
    }
}

fn bytes_sent_by(w: &Workload, rank: u32) -> u64 {
    w.messages
        .iter()
        .filter(|m| m.src == HostId(rank))
        .map(|m| m.size)
        .sum()
}

#[test]
fn each_rank_sends_what_the_bus_factor_says() {
    use CollectiveAlgorithm as A;
    use CollectiveOp as O;
    // busbw / algbw = bytes each rank sends / size, for the bandwidth-optimal algorithms.
    // Counted by hand for 8 ranks: all-reduce sends 7 of 8 blocks to reduce and 7 to
    // share (14/8 of the buffer); reduce-scatter, all-gather and all-to-all each send
    // 7 of 8 blocks once (7/8).
    for (op, alg, eighths) in [
        (O::AllReduce, A::Ring, 14.0),
        (O::ReduceScatter, A::Ring, 7.0),
        (O::AllGather, A::Ring, 7.0),
        (O::AllToAll, A::Direct, 7.0),
        (O::AllReduce, A::HalvingDoubling, 14.0),
        (O::ReduceScatter, A::HalvingDoubling, 7.0),
        (O::AllGather, A::HalvingDoubling, 7.0),
    ] {
        let c = collective(op, alg, 8);
        c.validate().unwrap();
        let mut w = Workload::default();
        expand(&c, &mut w);
        let expected = c.size as f64 * eighths / 8.0;
        assert_eq!(
            op.bus_factor(8),
            eighths / 8.0,
            "{op:?}: nccl-tests' factor"
        );
        for r in 0..8 {
            let sent = bytes_sent_by(&w, r) as f64;
            assert!(
                (sent - expected).abs() <= 8.0,
                "{op:?} {alg:?} rank {r}: {sent} vs {expected}"
            );
        }
    }
}

#[test]
fn compact_rings_send_what_the_full_expansion_sends_in_one_message_per_edge() {
    use CollectiveAlgorithm as A;
    for (alg, group) in [(A::Ring, 1), (A::Hierarchical, 4)] {
        let mut c = collective(CollectiveOp::AllReduce, alg, 16);
        c.group = group;
        let mut full = Workload::default();
        expand(&c, &mut full);
        let mut compact = Workload {
            compact: true,
            ..Workload::default()
        };
        expand(&c, &mut compact);
        // Ring: one edge per rank; hierarchical: three rings per rank.
        let rings = if alg == A::Ring { 1 } else { 3 };
        assert_eq!(compact.messages.len(), 16 * rings, "{alg:?}");
        assert_eq!(compact.pipelined.len(), compact.messages.len());
        for r in 0..16 {
            let (a, b) = (bytes_sent_by(&full, r), bytes_sent_by(&compact, r));
            // To a byte per step: the compact edge carries the average block.
            assert!(a.abs_diff(b) <= 2 * 15, "{alg:?} rank {r}: {a} vs {b}");
        }
    }
}

#[test]
fn compact_edges_are_fed_by_the_edges_that_bring_their_sender_the_data() {
    use CollectiveAlgorithm as A;
    for (alg, group) in [
        (A::Ring, 1),
        (A::Hierarchical, 4),
        (A::Tree, 4),
        (A::Tree, 1),
    ] {
        let mut c = collective(CollectiveOp::AllReduce, alg, 16);
        c.group = group;
        let mut w = Workload {
            compact: true,
            ..Workload::default()
        };
        expand(&c, &mut w);
        assert!(
            w.feeds.windows(2).all(|f| f[0].0 <= f[1].0),
            "{alg:?}: by edge"
        );
        for &(edge, up) in &w.feeds {
            let (e, u) = (w.messages[edge as usize], w.messages[up as usize]);
            assert_eq!(u.dst, e.src, "{alg:?}: {edge} fed by {up}");
        }
        for &(i, p) in &w.pipelined {
            let feeds = w.feeds.iter().filter(|f| f.0 == i).count();
            match p {
                // A ring edge: the one edge into its sender.
                Pipeline::Ring { .. } => assert_eq!(feeds, 1, "{alg:?}: ring edge {i}"),
                // A tree edge: after its feeds; only edges up from leaves have none.
                Pipeline::Chain { .. } => {
                    assert!(w.feeds.iter().all(|f| f.0 != i || f.1 < i));
                }
            }
        }
        let unfed = w
            .pipelined
            .iter()
            .filter(|(i, _)| !w.feeds.iter().any(|f| f.0 == *i))
            .count();
        // Only the up edges of the two trees' leaves: a heap of 16 ranks has 8 leaves;
        // on 4 servers of 4, each server's chain ends in one.
        let leaves = match (alg, group) {
            (A::Tree, 1) => 2 * 8,
            (A::Tree, _) => 2 * 4,
            _ => 0,
        };
        assert_eq!(unfed, leaves, "{alg:?} over servers of {group}");
    }
}

#[test]
fn dependencies_point_backwards_and_follow_the_data() {
    let c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Ring, 4);
    let mut w = Workload::default();
    expand(&c, &mut w);
    for (i, deps) in w.after.iter().enumerate() {
        for d in deps.iter().map(|d| d.msg) {
            assert!((d as usize) < i, "message {i} waits for a later one");
            // A message waits for data that reached its sender.
            let (m, dep) = (w.messages[i], w.messages[d as usize]);
            assert_eq!(dep.dst, m.src, "{i} after {d}");
        }
        // It follows the sender's previous message to the same peer.
        if let Some(f) = w.follows[i] {
            let (m, prev) = (w.messages[i], w.messages[f as usize]);
            assert!((f as usize) < i && (prev.src, prev.dst) == (m.src, m.dst));
        }
    }
    // 2(n-1) steps x 4 ranks x 2 pieces of the 2 MiB block.
    assert_eq!(w.messages.len(), 6 * 4 * 2);
}

#[test]
fn tree_and_broadcast_deliver_everything_to_everyone() {
    // Tree: every non-root position sends each tree's half up once and gets it down once.
    let c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Tree, 6);
    let mut w = Workload::default();
    expand(&c, &mut w);
    let received: u64 = w
        .messages
        .iter()
        .filter(|m| m.dst == HostId(5))
        .map(|m| m.size)
        .sum();
    // Rank 5 is a leaf of the first tree (gets its half once) and the root of the
    // second (gets its two children's halves).
    assert_eq!(received, c.size / 2 + 2 * (c.size / 2));
    let b = collective(CollectiveOp::Broadcast, CollectiveAlgorithm::Ring, 5);
    let mut w = Workload::default();
    expand(&b, &mut w);
    for r in 1..5 {
        assert_eq!(received_by(&w, r), b.size);
    }
}

/// NCCL's node-aware tree on 4 servers of 4 GPUs: inside each server a chain (3 links
/// each), across servers a binary tree (3 links): each tree moves its half up and down
/// each of its 15 links once per channel, so 3 links of 15 cross servers, and each
/// channel's trees are headed by another GPU, so 4 channels use every GPU's NIC.
#[test]
fn node_aware_trees_chain_inside_servers_and_use_every_rail_across_them() {
    let mut c = collective(CollectiveOp::AllReduce, CollectiveAlgorithm::Tree, 16);
    c.group = 4;
    c.channels = 4;
    let mut w = Workload::default();
    expand(&c, &mut w);
    let server = |h: HostId| h.0 / 4;
    let across: Vec<&Message> = w
        .messages
        .iter()
        .filter(|m| server(m.src) != server(m.dst))
        .collect();
    let total: u64 = w.messages.iter().map(|m| m.size).sum();
    let crossing: u64 = across.iter().map(|m| m.size).sum();
    // Per channel and tree: 15 links up and down carrying that tree's half.
    assert_eq!(total, 2 * 15 * c.size);
    assert_eq!(crossing, 2 * 3 * c.size);
    let mut nics: Vec<u32> = across.iter().map(|m| m.src.0 % 4).collect();
    nics.sort_unstable();
    nics.dedup();
    assert_eq!(
        nics,
        vec![0, 1, 2, 3],
        "every rail carries a channel's tree"
    );
    // Every rank receives each half of each channel's data at least once.
    for r in 0..16 {
        let got = received_by(&w, r);
        assert!(got >= c.size, "rank {r} got {got}");
    }
    // Ranks not in server order: the trees fall back to trees over the ranks.
    c.ranks.swap(0, 5);
    assert!(!by_server(&c.ranks, 4));
}

#[test]
fn hierarchical_moves_a_share_per_rail_and_the_rest_over_nvlink() {
    let mut c = collective(
        CollectiveOp::AllReduce,
        CollectiveAlgorithm::Hierarchical,
        16,
    );
    c.group = 4;
    c.validate().unwrap();
    let mut w = Workload::default();
    expand(&c, &mut w);
    let server = |h: HostId| h.0 / 4;
    let (mut inter, mut intra) = (0u64, 0u64);
    for m in &w.messages {
        if server(m.src) == server(m.dst) {
            intra += m.size;
        } else {
            assert_eq!(
                m.src.0 % 4,
                m.dst.0 % 4,
                "inter-server traffic stays on its rail"
            );
            inter += m.size;
        }
    }
    // Across servers: each of the 16 GPUs sends 2(N-1)/N of its S/g share, N = 4.
    assert_eq!(inter, 16 * (2 * 3 * (c.size / 4) / 4));
    // Inside: reduce-scatter and all-gather each send (g-1)/g of S per GPU.
    assert_eq!(intra, 16 * 2 * (3 * c.size / 4));
}

#[test]
fn validation_names_what_does_not_apply() {
    let mut c = collective(CollectiveOp::AllToAll, CollectiveAlgorithm::Ring, 4);
    let err = c.validate().unwrap_err();
    assert_eq!(
        err,
        CollectiveError::Inapplicable {
            algorithm: "ring",
            op: "all-to-all"
        }
    );
    assert!(err.to_string().contains("does not apply"), "{err}");
    c = collective(
        CollectiveOp::AllReduce,
        CollectiveAlgorithm::HalvingDoubling,
        6,
    );
    let err = c.validate().unwrap_err();
    assert_eq!(err, CollectiveError::NotPowerOfTwo { ranks: 6 });
    assert!(err.to_string().contains("power-of-two"), "{err}");
}
