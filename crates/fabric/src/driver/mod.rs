//! What the fabrics share: the run loop over their event handlers, a link's frames in
//! flight, the ideal completion time of a message on an empty fabric, capture filters and
//! deadlock detection over a wait-for graph.

mod build_error;
mod deadlock;
pub mod failure;
mod flows;
mod ideal;
mod lifecycle;
mod run;
mod ties;
mod wire;

pub use build_error::BuildError;
pub use deadlock::{deadlock_hop, has_cycle, WaitGraph};
pub use flows::{ecmp_hash, udp_source_port, CaptureFilter};
pub use ideal::{ideal_fct, pipeline_time, static_path, PacketTrain};
pub(crate) use lifecycle::tracked_by_fields;
pub use lifecycle::{
    current_on_connection, Dependencies, Lifecycle, NvlinkDomains, Progress, Tracked,
};
pub use run::{grid_line_after, link_lookahead, lookahead, EventDriven};
pub(crate) use run::{schedule_posts, LifecycleEvent, Merged, MessageFabric, RunState};
pub use ties::Ties;
pub use wire::{prefetch_above_slots, Wire};

#[cfg(test)]
mod tests {
    use super::{has_cycle, pipeline_time, PacketTrain, WaitGraph};
    use fabricsim_core::topology::Port;
    use fabricsim_core::units::{BitRate, NodeId, PortId, Time};
    use proptest::prelude::*;

    /// Every packet stepped through every link: the definition `pipeline_time` shortens.
    fn stepped(links: &[Port], switch_latency: Time, sizes: &[u64]) -> Time {
        let mut finish = vec![Time::ZERO; links.len()];
        for &bytes in sizes {
            let mut ready = Time::ZERO;
            for (i, l) in links.iter().enumerate() {
                finish[i] = finish[i].max(ready) + l.rate.serialization(bytes);
                ready = finish[i] + l.delay + switch_latency;
            }
        }
        finish[links.len() - 1] + links[links.len() - 1].delay
    }

    fn link(gbps: u64, delay_ns: u64) -> Port {
        Port {
            node: NodeId(0),
            local: 0,
            peer: PortId(0),
            rate: BitRate::gbps(gbps),
            delay: Time::from_ns(delay_ns),
        }
    }

    #[test]
    fn cycles_are_found_and_chains_are_not() {
        assert!(has_cycle(&mut vec![(1, 2), (2, 3), (3, 1)]));
        assert!(has_cycle(&mut vec![(5, 5)]));
        assert!(has_cycle(&mut vec![(0, 1), (1, 0)]));
        // A tree of pauses toward an incast's root, and a diamond: no cycle.
        assert!(!has_cycle(&mut vec![
            (1, 0),
            (2, 0),
            (3, 1),
            (4, 1),
            (5, 2)
        ]));
        assert!(!has_cycle(&mut vec![(0, 1), (0, 2), (1, 3), (2, 3)]));
        assert!(!has_cycle(&mut Vec::new()));
        // A cycle reached only through a long chain.
        let mut chain: Vec<(u32, u32)> = (0..100).map(|i| (i, i + 1)).collect();
        assert!(!has_cycle(&mut chain.clone()));
        chain.push((100, 50));
        assert!(has_cycle(&mut chain));
    }

    #[test]
    fn one_link_is_serialisation_plus_propagation() {
        let train = PacketTrain {
            first: 4122,
            middle: 4122,
            middle_count: 8,
            last: Some(1000),
        };
        let t = pipeline_time(&[link(400, 25)], Time::from_ns(150), &train);
        // 10 packets back to back on one 400 Gb/s link (20 ps per byte), then 25 ns.
        assert_eq!(t.ps(), (9 * 4122 + 1000) * 20 + 25_000);
    }

    proptest! {
        #[test]
        fn pipelining_matches_stepping_every_packet(
            hops in prop::collection::vec((prop::sample::select(vec![25u64, 100, 200, 400, 800, 1600]), 0u64..2000), 1..7),
            first in 60u64..4200, middle in 60u64..4200, last in 60u64..4200,
            middle_count in 0u64..200, latency_ns in 0u64..1000,
        ) {
            let links: Vec<Port> = hops.iter().map(|&(g, d)| link(g, d)).collect();
            let train = PacketTrain { first, middle, middle_count, last: Some(last) };
            let mut sizes = vec![first];
            sizes.extend(std::iter::repeat_n(middle, middle_count as usize));
            sizes.push(last);
            let latency = Time::from_ns(latency_ns);
            prop_assert_eq!(pipeline_time(&links, latency, &train), stepped(&links, latency, &sizes));
        }
    }

    /// Three queues in a ring, each waiting on a buffer held by the next queue.
    fn ring(leak: bool) -> WaitGraph {
        let mut g = WaitGraph {
            waits_on: vec![Some(1), Some(2), Some(0), None],
            holds: vec![vec![(0, 10)], vec![(1, 10)], vec![(2, 10)], vec![]],
            occupancy: vec![10, 10, 10],
        };
        if leak {
            // Part of buffer 2 sits in queue 3, which is not blocked: it will drain.
            g.holds[3].push((2, 5));
            g.occupancy[2] = 15;
        }
        g
    }

    #[test]
    fn a_closed_ring_is_a_deadlock_and_a_leaking_one_is_not() {
        let cycle = ring(false).find_deadlock().expect("closed ring");
        assert_eq!(cycle.len(), 3);
        assert!(ring(true).find_deadlock().is_none());
    }

    #[test]
    fn a_chain_into_a_free_buffer_is_not_a_deadlock() {
        let g = WaitGraph {
            waits_on: vec![Some(1), Some(2)],
            holds: vec![vec![(0, 4)], vec![(1, 4)]],
            occupancy: vec![4, 4, 0],
        };
        assert!(g.find_deadlock().is_none());
    }
}
