//! Property test over random small topologies and traffic: every byte delivered exactly
//! once, no VL buffer ever above its size, and bytes sent = delivered + in flight at
//! every check.

mod common;
use common::*;
use fabricsim_core::units::Time;
use proptest::prelude::*;

fn topology_strategy() -> impl Strategy<Value = (String, u32)> {
    prop_oneof![
        (2u32..10).prop_map(|h| (format!("kind = \"single-switch\"\nhosts = {h}"), h)),
        (2u32..4, 1u32..4, 1u32..3).prop_map(|(per_leaf, leaves, spines)| {
            let hosts = (per_leaf * leaves).max(2);
            (format!("kind = \"leaf-spine\"\nhosts = {hosts}\nleaves = {leaves}\nspines = {spines}\nuplink_rate = \"200Gbps\""), hosts)
        }),
        Just(("kind = \"fat-tree\"\nk = 4".to_string(), 16)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn conservation_and_exactly_once(
        (topo, hosts) in topology_strategy(),
        flows in proptest::collection::vec((0u32..64, 0u32..64, 1u64..300_000, 0u64..20_000), 1..12),
        adaptive in any::<bool>(),
        vls in 1u8..3,
        buffer_blocks in 66u32..400,
        ack_every in 1u32..9,
        seed in 0u64..1000,
    ) {
        let mut text = format!(
            "seed = {seed}\n[fabric]\nmtu = 1024\n[fabric.infiniband]\nadaptive_routing = {adaptive}\nvirtual_lanes = {vls}\nvl_buffer = {}\nack_every = {ack_every}\n[topology]\n{topo}\n",
            buffer_blocks * 64
        );
        for (i, (s, d, size, start)) in flows.iter().enumerate() {
            let (src, mut dst) = (s % hosts, d % hosts);
            if dst == src { dst = (dst + 1) % hosts; }
            text += &format!("[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = {size}\nstart = \"{start}ns\"\nsl = {}\n", i % 4);
        }
        text += "[[traffic]]\nkind = \"permutation\"\nsize = \"20KiB\"\n";
        let s = scenario(&text);
        let (mut sim, msgs) = simulation(&s);
        let mut t = Time::ZERO;
        while !sim.is_finished() {
            t += Time::from_ns(700);
            sim.run_until(t);
            let a = sim.audit();
            prop_assert_eq!(a.sent_payload, a.delivered_payload + a.in_flight_payload, "conservation at {}", t);
            prop_assert_eq!(a.buffer_overflows, 0, "a VL buffer went above its size");
            prop_assert_eq!(a.lost_frames, 0, "every frame in the pool is on a link or queued");
        }
        let r = sim.report();
        prop_assert_eq!(r.duplicates, 0);
        for (f, m) in r.flows.iter().zip(&msgs.messages) {
            prop_assert_eq!(f.delivered_bytes, m.size, "flow {}->{} delivered exactly its bytes", m.src, m.dst);
            prop_assert!(f.finish.is_some() && f.acked.is_some());
        }
        let a = sim.audit();
        prop_assert_eq!(a.in_flight_payload, 0);
    }
}
