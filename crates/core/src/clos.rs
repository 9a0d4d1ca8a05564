//! Cluster designs: the smallest one-, two- or three-tier Clos network of switches of a
//! given radix that connects a number of hosts, non-blocking or as oversubscribed as
//! asked, in the fat-tree style (hosts fill leaves in order) or rail-optimized (GPU `g`
//! of each server on rail leaf `g` of its group of servers), as real AI clusters are
//! built (NVIDIA DGX SuperPOD reference architectures; Al-Fares et al. 2008 for the
//! three-tier fat-tree).
//!
//! Oversubscription applies at the leaves only (down ports : up ports); aggregation
//! switches are non-blocking. A full k-ary fat-tree comes out exactly: k^3/4 hosts on
//! k^2/2 leaves, k^2/2 aggregation switches and k^2/4 cores.

use crate::topology::{Topology, TopologyError};
use crate::units::{BitRate, Time};

/// Why no Clos network can be planned for a request.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ClosError {
    #[error("a switch of {radix} ports cannot build a Clos network (at least 4)")]
    Radix { radix: u32 },
    #[error("{hosts} GPUs are not whole servers of {gpus_per_node}")]
    Servers { hosts: u32, gpus_per_node: u32 },
    #[error("oversubscription {ratio}: must be between 1 and 64")]
    Oversubscription { ratio: f64 },
    #[error("{gpus} GPUs per server need {gpus} rail leaves per group; a three-tier design of {radix}-port switches fits at most {} rails per pod", radix / 2)]
    Rails { gpus: u32, radix: u32 },
    #[error("{hosts} hosts need {pods} pods of {per_pod} leaves; three tiers of {radix}-port switches hold at most {radix} pods")]
    Pods {
        hosts: u32,
        pods: u32,
        per_pod: u32,
        radix: u32,
    },
}

/// For callers that report errors as sentences.
impl From<ClosError> for String {
    fn from(e: ClosError) -> String {
        e.to_string()
    }
}

/// How hosts are spread over leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosStyle {
    /// Hosts fill leaves in order.
    FatTree,
    /// GPU `g` of every server in a group of servers shares rail leaf `g` of the group.
    RailOptimized,
}

impl ClosStyle {
    pub fn name(self) -> &'static str {
        match self {
            ClosStyle::FatTree => "fat-tree",
            ClosStyle::RailOptimized => "rail-optimized",
        }
    }
}

/// What to build: hosts (one NIC port each), servers of `gpus_per_node` hosts, switches
/// of `radix` ports, and the leaves' down : up ratio (1.0 = non-blocking).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClosRequest {
    pub hosts: u32,
    pub gpus_per_node: u32,
    pub radix: u32,
    pub style: ClosStyle,
    pub oversubscription: f64,
}

/// A planned design: switches per tier (0 = leaves), which leaf each host hangs off, and
/// the switch-to-switch links (lower tier's switch, upper tier's switch), one per cable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosPlan {
    pub switches: Vec<u32>,
    pub host_leaf: Vec<u32>,
    /// Per tier boundary t (between tier t and t + 1): (switch in tier t, switch in t + 1).
    pub links: Vec<Vec<(u32, u32)>>,
}

impl ClosPlan {
    pub fn tiers(&self) -> usize {
        self.switches.len()
    }

    /// The leaves' down : up ratio the design has (host links over leaf uplinks), or
    /// `None` for one switch.
    pub fn oversubscription(&self) -> Option<f64> {
        let up = self.links.first()?.len();
        Some(self.host_leaf.len() as f64 / up as f64)
    }

    /// Builds the planned network: hosts first (in host order), then switches tier by
    /// tier; every link at `rate` with propagation `delay`.
    pub fn build(
        &self,
        gpus_per_node: u32,
        rate: BitRate,
        delay: Time,
    ) -> Result<Topology, TopologyError> {
        let mut t = Topology::empty();
        let hosts: Vec<_> = self.host_leaf.iter().map(|_| t.add_host()).collect();
        let tiers: Vec<Vec<_>> = self
            .switches
            .iter()
            .enumerate()
            .map(|(tier, &n)| (0..n).map(|_| t.add_switch(tier as u8)).collect())
            .collect();
        for (h, &leaf) in hosts.iter().zip(&self.host_leaf) {
            t.connect(*h, tiers[0][leaf as usize], rate, delay);
        }
        for (tier, links) in self.links.iter().enumerate() {
            for &(lo, hi) in links {
                t.connect(
                    tiers[tier][lo as usize],
                    tiers[tier + 1][hi as usize],
                    rate,
                    delay,
                );
            }
        }
        t.set_gpus_per_node(gpus_per_node)?;
        Ok(t)
    }
}

/// Round-robin wiring of lower switches with `ups[l]` uplinks each onto `m` upper
/// switches: the uplinks in order, the k-th of them all to upper switch k mod m, so each
/// upper switch gets at most ceil(total / m) links and a lower switch with at least m
/// uplinks reaches every upper one.
fn spread(ups: &[u32], m: u32) -> Vec<(u32, u32)> {
    let mut links = Vec::with_capacity(ups.iter().sum::<u32>() as usize);
    for (l, &up) in ups.iter().enumerate() {
        for _ in 0..up {
            let k = links.len() as u32;
            links.push((l as u32, k % m));
        }
    }
    links
}

/// Plans the smallest design for `r`; errors name what does not fit.
pub fn plan(r: &ClosRequest) -> Result<ClosPlan, ClosError> {
    let radix = r.radix;
    if radix < 4 {
        return Err(ClosError::Radix { radix });
    }
    if r.gpus_per_node == 0 || !r.hosts.is_multiple_of(r.gpus_per_node) {
        return Err(ClosError::Servers {
            hosts: r.hosts,
            gpus_per_node: r.gpus_per_node,
        });
    }
    if !(r.oversubscription >= 1.0 && r.oversubscription <= 64.0) {
        return Err(ClosError::Oversubscription {
            ratio: r.oversubscription,
        });
    }
    if r.style == ClosStyle::FatTree && r.hosts <= radix {
        return Ok(ClosPlan {
            switches: vec![1],
            host_leaf: vec![0; r.hosts as usize],
            links: Vec::new(),
        });
    }
    // Leaf ports split down : up = oversubscription : 1.
    let down = ((radix as f64 * r.oversubscription / (1.0 + r.oversubscription)).floor() as u32)
        .clamp(1, radix - 1);
    let servers = r.hosts / r.gpus_per_node;
    let (host_leaf, leaves, leaves_per_group) = match r.style {
        ClosStyle::FatTree => {
            let leaves = r.hosts.div_ceil(down);
            let host_leaf = (0..r.hosts).map(|h| h / down).collect();
            (host_leaf, leaves, 1)
        }
        ClosStyle::RailOptimized => {
            let g = r.gpus_per_node;
            if g > radix / 2 {
                return Err(ClosError::Rails { gpus: g, radix });
            }
            // Groups as even as whole servers allow, so no leaf is left nearly empty.
            let groups = servers.div_ceil(down);
            let group = servers.div_ceil(groups);
            let host_leaf = (0..r.hosts).map(|h| (h / g / group) * g + h % g).collect();
            (host_leaf, groups * g, g)
        }
    };
    // Uplinks per leaf: enough for the hosts a leaf carries at the ratio asked.
    let uplinks =
        |hosts: u32| ((hosts as f64 / r.oversubscription).ceil() as u32).clamp(1, radix - down);
    // Each leaf's uplinks follow its own hosts (a last, partly filled leaf or group gets
    // fewer), so the design is as oversubscribed as asked.
    let mut on_leaf = vec![0u32; leaves as usize];
    for &l in &host_leaf {
        on_leaf[l as usize] += 1;
    }
    let leaf_ups: Vec<u32> = on_leaf.into_iter().map(uplinks).collect();
    if leaves <= radix {
        let spines = leaf_ups.iter().sum::<u32>().div_ceil(radix);
        return Ok(ClosPlan {
            switches: vec![leaves, spines],
            host_leaf,
            links: vec![spread(&leaf_ups, spines)],
        });
    }
    // Three tiers: pods of whole groups of leaves. Each pod has as many aggregation
    // switches as its leaves' uplinks fill at half their ports (a full pod: `up`, each
    // with one link to every leaf; a partial pod: fewer); every aggregation switch has as
    // many links up as down, spread over the fewest cores that hold them all. For full
    // pods this is the k-ary fat-tree's planes: aggregation switch a of every pod reaches
    // the same cores.
    let per_pod = (radix / 2 / leaves_per_group) * leaves_per_group;
    let pods = leaves.div_ceil(per_pod);
    if pods > radix {
        return Err(ClosError::Pods {
            hosts: r.hosts,
            pods,
            per_pod,
            radix,
        });
    }
    let mut leaf_agg = Vec::new();
    let mut agg_ups: Vec<u32> = Vec::new();
    for p in 0..pods {
        let first = (p * per_pod) as usize;
        let ups = &leaf_ups[first..(first + per_pod as usize).min(leaves as usize)];
        let aggs = ups.iter().sum::<u32>().div_ceil(radix / 2);
        let base = agg_ups.len() as u32;
        agg_ups.resize(agg_ups.len() + aggs as usize, 0);
        for (l, a) in spread(ups, aggs) {
            leaf_agg.push((first as u32 + l, base + a));
            agg_ups[(base + a) as usize] += 1;
        }
    }
    let cores = agg_ups.iter().sum::<u32>().div_ceil(radix);
    Ok(ClosPlan {
        switches: vec![leaves, agg_ups.len() as u32, cores],
        host_leaf,
        links: vec![leaf_agg, spread(&agg_ups, cores)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{NodeKind, Routes};
    use crate::units::{HostId, NodeId};

    fn request(hosts: u32, g: u32, radix: u32, style: ClosStyle, o: f64) -> ClosRequest {
        ClosRequest {
            hosts,
            gpus_per_node: g,
            radix,
            style,
            oversubscription: o,
        }
    }

    /// No switch uses more ports than it has, every host reaches every other, and the
    /// leaves' up : down ratio is what was asked.
    fn check(r: &ClosRequest) -> ClosPlan {
        let p = plan(r).unwrap();
        let t = p
            .build(r.gpus_per_node, BitRate::gbps(400), Time::ZERO)
            .unwrap();
        for (n, k) in t.nodes().iter().enumerate() {
            if let NodeKind::Switch { .. } = k {
                assert!(t.node_ports(NodeId(n as u32)).len() <= r.radix as usize);
            }
        }
        Routes::minimal(&t).unwrap();
        p
    }

    #[test]
    fn a_full_k_ary_fat_tree_comes_out_exactly() {
        for k in [4u32, 8, 16] {
            let p = check(&request(k * k * k / 4, 1, k, ClosStyle::FatTree, 1.0));
            assert_eq!(p.switches, vec![k * k / 2, k * k / 2, k * k / 4]);
            assert_eq!(p.links[0].len() as u32, k * k * k / 4);
            assert_eq!(p.links[1].len() as u32, k * k * k / 4);
        }
    }

    #[test]
    fn a_full_two_tier_leaf_spine_has_radix_leaves_and_half_radix_spines() {
        let p = check(&request(64 * 32, 8, 64, ClosStyle::FatTree, 1.0));
        assert_eq!(p.switches, vec![64, 32]);
        // Each leaf has one link to every spine.
        let mut per_pair = std::collections::BTreeSet::new();
        for &l in &p.links[0] {
            assert!(per_pair.insert(l), "duplicate leaf-spine pair {l:?}");
        }
    }

    #[test]
    fn rail_optimized_puts_gpu_g_of_a_group_on_one_leaf() {
        // 32 servers of 8 GPUs on 64-port switches: one group, 8 rail leaves, 4 spines.
        let r = request(256, 8, 64, ClosStyle::RailOptimized, 1.0);
        let p = check(&r);
        assert_eq!(p.switches, vec![8, 4]);
        assert_eq!(p.host_leaf[3], p.host_leaf[8 * 31 + 3]);
        assert_ne!(p.host_leaf[3], p.host_leaf[4]);
        // 4096 GPUs: 16 groups of 32 servers = 128 leaves, three tiers on 64 ports
        // (4 pods of 32 leaves, 32 aggs each), two tiers on 128 ports.
        let p = check(&request(4096, 8, 64, ClosStyle::RailOptimized, 1.0));
        assert_eq!(p.switches, vec![128, 128, 64]);
        let p = check(&request(4096, 8, 128, ClosStyle::RailOptimized, 1.0));
        assert_eq!(p.switches, vec![64, 32]);
    }

    /// A partial pod gets only the aggregation switches its leaves' uplinks fill (one
    /// more per pod at most than they need at k/2 each), and the cores only the ports
    /// all U leaf uplinks need again: ceil(U / k).
    #[test]
    fn a_partial_pod_gets_the_smallest_clos_that_holds_it() {
        for (hosts, style) in [
            (2056, ClosStyle::FatTree),
            (2056, ClosStyle::RailOptimized),
            (3000, ClosStyle::FatTree),
        ] {
            let p = check(&request(hosts, 8, 64, style, 1.0));
            let up = p.links[0].len() as u32;
            let pods = p.switches[0].div_ceil(32);
            let aggs = p.switches[1];
            assert!(
                aggs >= up.div_ceil(32) && aggs < up.div_ceil(32) + pods,
                "{hosts} {style:?}: {:?}",
                p.switches
            );
            assert_eq!(p.switches[2], up.div_ceil(64), "{hosts} {style:?}");
            assert_eq!(p.links[1].len() as u32, up, "as many links up as down");
            // Every aggregation switch has as many links up as down.
            let mut balance = vec![0i64; p.switches[1] as usize];
            for &(_, a) in &p.links[0] {
                balance[a as usize] += 1;
            }
            for &(a, _) in &p.links[1] {
                balance[a as usize] -= 1;
            }
            assert!(balance.iter().all(|&b| b == 0), "{hosts} {style:?}");
        }
        // 2,056 GPUs: 65 leaves, 65 aggregation switches, 33 cores (the planes of a
        // k-ary fat-tree would take 64 cores and 96 aggregation switches).
        assert_eq!(
            check(&request(2056, 8, 64, ClosStyle::FatTree, 1.0)).switches,
            vec![65, 65, 33]
        );
    }

    #[test]
    fn oversubscription_takes_uplinks_away() {
        let p = check(&request(96, 1, 16, ClosStyle::FatTree, 3.0));
        // 12 down, 4 up per leaf: 8 leaves, 32 uplinks on 2 spines.
        assert_eq!(p.switches, vec![8, 2]);
        assert_eq!(p.links[0].len(), 32);
    }

    #[test]
    fn the_design_is_as_oversubscribed_as_asked_within_one_uplink_per_leaf() {
        for style in [ClosStyle::RailOptimized, ClosStyle::FatTree] {
            for (gpus, radix) in [(64, 64), (128, 64), (1024, 64), (2056, 64), (4096, 128)] {
                for asked in [1.0, 2.0, 3.0] {
                    let p = check(&request(gpus, 8, radix, style, asked));
                    let Some(got) = p.oversubscription() else {
                        assert_eq!(p.tiers(), 1, "only one switch has no uplinks");
                        continue;
                    };
                    // Each leaf rounds its uplinks up, by less than one: the ratio is at
                    // most the one asked and at least what one more uplink per leaf gives.
                    let leaves = p.switches[0] as f64;
                    let floor = gpus as f64 / (gpus as f64 / asked + leaves);
                    assert!(
                        got <= asked + 1e-9 && got >= floor,
                        "{style:?} {gpus} GPUs, radix {radix}, {asked}:1 asked: {got:.3}:1 (floor {floor:.3})"
                    );
                }
            }
        }
    }

    #[test]
    fn a_cluster_that_fits_one_switch_has_one_tier_and_too_big_is_refused() {
        let p = check(&request(48, 8, 64, ClosStyle::FatTree, 1.0));
        assert_eq!(p.switches, vec![1]);
        let t = p.build(8, BitRate::gbps(400), Time::ZERO).unwrap();
        assert!(t.same_server(HostId(0), HostId(7)));
        let err = plan(&request(8 * 8 * 8 / 4 + 1, 1, 8, ClosStyle::FatTree, 1.0)).unwrap_err();
        assert!(matches!(err, ClosError::Pods { radix: 8, .. }), "{err}");
        assert!(err.to_string().contains("at most 8 pods"), "{err}");
    }
}
