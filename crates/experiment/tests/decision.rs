//! The decision layer against what can be counted by hand: cluster designs and their
//! bills of materials against closed forms, and a recommendation that flips exactly
//! where it says it would.

mod common;

use common::scenario;
use fabricsim_experiment::compare;
use fabricsim_experiment::decision::bom;
use fabricsim_experiment::scenario::{FabricKind, Scenario};

/// A switch of `ports` x 400G for both fabrics, so a k-ary design can be asked for.
fn k_port_switches(ports: u32) -> String {
    let entry = |name: &str, fabric: &str| {
        format!(
            "[catalog.{name}]\nkind = \"switch\"\nfabric = \"{fabric}\"\nports = {ports}\nport_rate = \"400Gbps\"\nprice_usd = 1000\nwatts = 100\nsource = \"test\"\nyear = 2026\n"
        )
    };
    entry("k-ib", "infiniband") + &entry("k-eth", "rocev2")
}

/// The cluster `[cluster]` keys `extra` on switches of `ports` ports, with one flow.
fn cluster(ports: u32, extra: &str) -> Scenario {
    scenario(&format!(
        "[cluster]\nswitch = {{ infiniband = \"k-ib\", rocev2 = \"k-eth\" }}\n{extra}\n{}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n",
        k_port_switches(ports)
    ))
}

fn counts(s: &Scenario) -> bom::Counts {
    let topo = s.build_topology().unwrap();
    let optic = s.catalog.get(bom::SWITCH_OPTIC).unwrap().ports;
    bom::count(&topo, &s.hardware, optic)
}

/// A full k-ary fat-tree (k^3/4 hosts of one GPU, k/2 servers to a rack, so each leaf's
/// hosts share its rack): 5k^2/4 switches in three tiers, k^3/4 NICs on copper, the
/// k^3/4 + k^3/4 switch links optical, each end of them on half a twin-port optic.
#[test]
fn a_k_ary_fat_tree_bill_matches_its_closed_form() {
    for k in [4u32, 8, 16] {
        let hosts = k * k * k / 4;
        let s = cluster(
            k,
            &format!(
                "gpus = {hosts}\ngpus_per_node = 1\nstyle = \"fat-tree\"\nservers_per_rack = {}",
                k / 2
            ),
        );
        let c = counts(&s);
        assert_eq!(c.switches, vec![k * k / 2, k * k / 2, k * k / 4], "k = {k}");
        assert_eq!(c.nics, hosts);
        assert_eq!(c.links, vec![hosts, hosts, hosts]);
        assert_eq!(c.copper_cables, hosts);
        assert_eq!(c.optical_links, 2 * hosts);
        assert_eq!(c.nic_transceivers, 0);
        // Every switch has an even number of optical ports: half a module each.
        assert_eq!(c.switch_transceivers, 2 * hosts);
        assert_eq!(c.fibers, 2 * hosts);
        assert_eq!(c.aocs, 0);
    }
}

/// Rail-optimized servers of 8 GPUs, 4 servers to a rack: a rail leaf serves GPU g of
/// servers in many racks, so every link is optical.
#[test]
fn rail_optimized_bills_match_their_closed_forms() {
    // (GPUs, radix) -> (switches per tier); links follow from non-blocking leaves.
    let cases: [(u32, u32, &[u32]); 4] = [
        (128, 64, &[8, 2]),
        (512, 64, &[16, 8]),
        (4096, 64, &[128, 128, 64]),
        (4096, 128, &[64, 32]),
    ];
    for (gpus, radix, switches) in cases {
        let s = cluster(radix, &format!("gpus = {gpus}\nservers_per_rack = 4"));
        let c = counts(&s);
        assert_eq!(c.switches, switches, "{gpus} GPUs on {radix} ports");
        // Non-blocking: every tier boundary carries as many links as there are GPUs.
        assert!(c.links.iter().all(|&l| l == gpus), "{:?}", c.links);
        let links: u32 = c.links.iter().sum();
        assert_eq!(c.copper_cables, 0);
        assert_eq!(c.optical_links, links);
        assert_eq!(c.nic_transceivers, gpus);
        // Switch ports: one per host link, two per switch link; a module serves two.
        assert_eq!(c.switch_transceivers, (gpus + 2 * (links - gpus)) / 2);
        assert_eq!(c.fibers, links);
        // Both fabrics' designs are built from their own switch.
        let ib = Scenario {
            fabric: FabricKind::Infiniband,
            ..s.clone()
        };
        assert_eq!(counts(&ib).switches, switches);
    }
}

/// With active optical cables there are no transceivers; with copper too short for the
/// rack, the rack's links go optical.
#[test]
fn optics_and_copper_reach_change_the_bill() {
    let base = "gpus = 64\ngpus_per_node = 1\nstyle = \"fat-tree\"\nservers_per_rack = 4\n";
    let s = cluster(8, &format!("{base}optics = \"aoc\""));
    let c = counts(&s);
    assert_eq!(
        (c.nic_transceivers, c.switch_transceivers, c.fibers),
        (0, 0, 0)
    );
    assert_eq!(c.aocs, c.optical_links);
    assert_eq!(c.copper_cables, 64);
    let short = cluster(8, &format!("{base}dac_reach = \"1m\"\nrack_cable = \"2m\""));
    let c = counts(&short);
    assert_eq!(c.copper_cables, 0);
    assert_eq!(c.nic_transceivers, 64);
}

/// The two fabrics get different designs when their switches differ: 2,048 GPUs are two
/// tiers of 128-port switches but three of 64-port ones.
#[test]
fn designs_differ_by_switch_radix() {
    let s = scenario(
        "[cluster]\ngpus = 4096\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n",
    );
    let tiers = |f: FabricKind| {
        counts(&Scenario {
            fabric: f,
            ..s.clone()
        })
        .switches
        .len()
    };
    assert_eq!(
        (tiers(FabricKind::Infiniband), tiers(FabricKind::Rocev2)),
        (3, 2)
    );
}

/// A collective where InfiniBand is faster, on an InfiniBand network made dearer: the
/// GPU price at which both cost the same per job is where the answer changes.
#[test]
fn the_recommendation_flips_at_the_gpu_price_it_names() {
    let text = |gpu_usd: Option<f64>| {
        format!(
            "[topology]\nkind = \"fat-tree\"\nk = 4\n[catalog.quantum-2-qm9700]\nprice_usd = 120000\n{}[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\nsize = \"16MiB\"\n",
            gpu_usd.map_or(String::new(), |p| format!("[cost]\ngpu_usd = {p}\n"))
        )
    };
    let c = compare::run_both(&scenario(&text(None)), false, 2).unwrap();
    let (ib, roce) = (&c.runs[0].cost, &c.runs[1].cost);
    let (ti, tr) = (ib.job_hours.unwrap(), roce.job_hours.unwrap());
    assert!(ti < tr, "InfiniBand's ring is faster here: {ti} vs {tr}");
    assert!(ib.capex_usd > roce.capex_usd);
    let p = c
        .recommendation
        .flip_points
        .gpu_usd
        .expect("a GPU price flips it");
    let decide = |price: f64| {
        let c = compare::run_both(&scenario(&text(Some(price))), false, 2).unwrap();
        let [a, b] = [&c.runs[0].cost, &c.runs[1].cost].map(|k| k.job_cost_usd.unwrap());
        (c.recommendation.fabric, a, b)
    };
    let (below, a, b) = decide(p * 0.95);
    assert_eq!(
        below, "rocev2",
        "cheap GPUs: the cheaper network wins ({a} vs {b})"
    );
    let (above, a, b) = decide(p * 1.05);
    assert_eq!(
        above, "infiniband",
        "dear GPUs: the faster network wins ({a} vs {b})"
    );
    // At the flip price both jobs cost the same.
    let (_, a, b) = decide(p);
    assert!((a - b).abs() < 1e-9 * a, "{a} vs {b}");
    // And at the time ratio it names, too: C_ib = T_ib (G g + n_ib) equals
    // r* T_ib (G g + n_roce).
    let r = c.recommendation.flip_points.rocev2_time_ratio.unwrap();
    let g = ib.gpus as f64 * ib.gpu_usd_per_hour;
    let lhs = ti * (g + ib.network_usd_per_hour);
    let rhs = r * ti * (g + roce.network_usd_per_hour);
    assert!((lhs - rhs).abs() < 1e-9 * lhs);
}

/// What the job costs is GPUs x their hourly cost plus the network's hourly cost, over
/// the job's hours; the lifetime cost is capital plus yearly energy and support.
#[test]
fn job_and_lifetime_costs_follow_the_money_model() {
    let s = scenario("[cluster]\ngpus = 64\n[cost]\nlifetime_years = 4\nelectricity_usd_per_kwh = 0.1\npue = 1.5\ngpu_usd = 35040\ngpu_watts = 1000\nsupport_share_per_year = 0.2\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 9\nsize = \"1MiB\"\n");
    let c = compare::run_both(&s, false, 2).unwrap();
    for run in &c.runs {
        let k = &run.cost;
        let capex: f64 = k.bom.iter().map(|l| l.count as f64 * l.unit_usd).sum();
        let kw: f64 = k.bom.iter().map(|l| l.count as f64 * l.watts).sum::<f64>() / 1000.0;
        assert!((k.capex_usd - capex).abs() < 1e-6);
        assert!((k.power_kw - kw * 1.5).abs() < 1e-9);
        let opex = kw * 1.5 * 8760.0 * 0.1 + 0.2 * capex;
        assert!((k.opex_usd_per_year - opex).abs() < 1e-6 * opex);
        assert!((k.lifetime_usd - (capex + 4.0 * opex)).abs() < 1e-6 * capex);
        // $35,040 over 4 years is $1 an hour; 1 kW x 1.5 x $0.1 is $0.15 an hour.
        assert!((k.gpu_usd_per_hour - 1.15).abs() < 1e-12);
        let hours = run.summary.sim_time_ns as f64 * 1e-9 / 3600.0;
        let want = hours * (64.0 * 1.15 + k.lifetime_usd / (4.0 * 8760.0));
        assert!((k.job_cost_usd.unwrap() - want).abs() < 1e-9 * want);
    }
}

/// A GPU listed with its NIC (the catalog's `includes_nic`) costs its price less one
/// NIC's, since the network's bill counts every NIC: each dollar is counted once. A GPU
/// price given in `[cost]` is the GPU's alone.
#[test]
fn the_bill_counts_each_nic_once() {
    let flow = "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 9\nsize = \"1MiB\"\n";
    let money = "lifetime_years = 4\nelectricity_usd_per_kwh = 0.1\npue = 1.5\ngpu_watts = 1000\n";
    let listed = scenario(&format!(
        "[cluster]\ngpus = 64\n[catalog.h100-sxm]\nprice_usd = 37040\nincludes_nic = true\n[catalog.connectx-7-400g]\nprice_usd = 2000\n[cost]\n{money}{flow}"
    ));
    let own = scenario(&format!(
        "[cluster]\ngpus = 64\n[catalog.connectx-7-400g]\nprice_usd = 2000\n[cost]\ngpu_usd = 37040\n{money}{flow}"
    ));
    let [a, b] = [&listed, &own].map(|s| compare::run_both(s, false, 2).unwrap());
    for (c, gpu_alone) in [(&a, 35_040.0), (&b, 37_040.0)] {
        for run in &c.runs {
            let k = &run.cost;
            let want = gpu_alone / (4.0 * 8760.0) + 1.0 * 1.5 * 0.1;
            assert!(
                (k.gpu_usd_per_hour - want).abs() < 1e-12,
                "{} vs {want}",
                k.gpu_usd_per_hour
            );
            let nics = k.bom.iter().find(|l| l.group == "nics").unwrap();
            assert_eq!(
                (nics.count, nics.unit_usd),
                (64, 2000.0),
                "the network counts every NIC"
            );
        }
    }
}

/// Staff and licences a year add to each fabric's operating cost; a range makes them an
/// input of the verdict, with the break-even where both jobs cost the same.
#[test]
fn operating_lines_enter_the_operating_cost_and_the_verdict() {
    let text = |ops: &str| {
        format!("[cluster]\ngpus = 64\n[cost]\n{ops}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 9\nsize = \"1MiB\"\n")
    };
    let plain = compare::run_both(&scenario(&text("")), false, 2).unwrap();
    let with = compare::run_both(
        &scenario(&text(
            "staff_usd_per_year = { infiniband = 2000000, rocev2 = [0, 200000, 4000000] }\nlicences_usd_per_year = { infiniband = 30000 }",
        )),
        false,
        2,
    )
    .unwrap();
    for (f, extra) in [(0, 2_030_000.0), (1, 200_000.0)] {
        let (a, b) = (&plain.runs[f].cost, &with.runs[f].cost);
        assert!((b.opex_usd_per_year - a.opex_usd_per_year - extra).abs() < 1e-6);
        assert!((b.lifetime_usd - a.lifetime_usd - 5.0 * extra).abs() < 1e-6);
    }
    let v = &with.recommendation.across_ranges;
    let d = v
        .drivers
        .iter()
        .find(|d| d.input == "staff per year (RoCEv2)")
        .expect("a ranged operating line is an input");
    assert_eq!((d.low, d.base, d.high), (0.0, 200_000.0, 4_000_000.0));
    assert!(
        !v.drivers
            .iter()
            .any(|d| d.input.contains("(InfiniBand)") && d.input.starts_with("staff")),
        "a point is not sampled"
    );
    // At the break-even both jobs cost the same: C = T (G g + n), n linear in staff.
    {
        let e = d.breakeven.expect("some staff cost levels the two");
        let [ib, roce] = [&with.runs[0].cost, &with.runs[1].cost];
        let n_roce = roce.network_usd_per_hour + (e - 200_000.0) / 8760.0;
        let c_roce = roce.job_hours.unwrap() * (roce.gpus as f64 * roce.gpu_usd_per_hour + n_roce);
        let c_ib = ib.job_cost_usd.unwrap();
        assert!(
            (c_roce / c_ib - 1.0).abs() < 1e-6,
            "{c_roce} vs {c_ib} at {e}"
        );
    }
    // Any money setting takes a range the same way.
    let ranged = compare::run_both(
        &scenario(&text(
            "pue = [1.1, 1.2, 1.5]\ngpu_usd = [20000, 30000, 40000]",
        )),
        false,
        2,
    )
    .unwrap();
    let d = &ranged.recommendation.across_ranges.drivers;
    for (name, want) in [
        ("PUE", (1.1, 1.2, 1.5)),
        ("h100-sxm price", (20000.0, 30000.0, 40000.0)),
    ] {
        let x = d
            .iter()
            .find(|x| x.input == name)
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!((x.low, x.base, x.high), want, "{name}");
    }
    assert!((ranged.runs[0].cost.power_kw / ranged.runs[0].cost.it_power_kw - 1.2).abs() < 1e-12);
    let e = fabricsim_experiment::scenario::Scenario::parse(
        &text("staff_usd_per_year = { rocev2 = [3, 2, 1] }"),
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cost.staff_usd_per_year.rocev2 = [3, 2, 1]: must hold low <= base <= high"),
        "{e}"
    );
}

/// Bad [cluster] and [catalog] input names the key and value.
#[test]
fn cluster_errors_name_the_key() {
    let flow = "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n";
    let err = |text: &str| {
        Scenario::parse(&format!("{text}\n{flow}"), "t")
            .unwrap_err()
            .to_string()
    };
    let e = err("[cluster]\ngpus = 64\nswitch = { infiniband = \"nope\" }");
    assert!(
        e.contains("cluster.switch.infiniband = \"nope\": not in the catalog"),
        "{e}"
    );
    let e = err("[cluster]\ngpus = 64\nswitch = { rocev2 = \"quantum-2-qm9700\" }");
    assert!(
        e.contains("cluster.switch.rocev2 = \"quantum-2-qm9700\""),
        "{e}"
    );
    let e = err("[cluster]\ngpus = 60");
    assert!(e.contains("cluster.gpus = 60: not whole servers"), "{e}");
    let e = err("[cluster]\ngpus = 1048576\ngpus_per_node = 8");
    assert!(
        e.contains("cluster.gpus = 1048576") && e.contains("pods"),
        "{e}"
    );
    let e = err("[cluster]\ngpus = 64\n[topology]\nkind = \"single-switch\"");
    assert!(e.contains("[cluster] with `gpus` and [topology]"), "{e}");
    let e = err("[fabric]\nlink_rate = \"200Gbps\"\n[cluster]\ngpus = 64\nnic_rate = \"400Gbps\"");
    assert!(e.contains("cluster.nic_rate = \"400Gbps\": differs"), "{e}");
    let e = err("[cluster]\ngpus = 64\nnic_rate = \"300Gbps\"");
    assert!(e.contains("cannot run at cluster.nic_rate"), "{e}");
    let e = err("[cluster]\ngpus = 64\noversubscription = 0.5");
    assert!(e.contains("cluster.oversubscription = 0.5"), "{e}");
    let e = err("[cluster]\nstyle = \"fat-tree\"");
    assert!(
        e.contains("cluster.style: not a key of a [cluster] without `gpus`"),
        "{e}"
    );
    let e = err("[catalog.h100-sxm]\nwatts = -3");
    assert!(e.contains("catalog.h100-sxm.watts = -3"), "{e}");
    let e = err("[cost]\npue = 0.5");
    assert!(e.contains("cost.pue = 0.5"), "{e}");
    let e = err("[cost]\nsoftware = [\"h100-sxm\"]");
    assert!(e.contains("cost.software = \"h100-sxm\""), "{e}");
}

/// A RoCEv2 run that deadlocks: the job does not finish there, so InfiniBand is named,
/// the deadlock is among the reasons, and the report (plots of a run with unfinished
/// flows included) is still drawn.
#[test]
fn a_deadlocked_run_still_gets_a_decision_and_a_report() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/rocev2-pfc-deadlock.toml");
    let c = compare::run_both(&Scenario::load(&file).unwrap(), true, 2).unwrap();
    assert!(c.runs[1].summary.deadlock.is_some());
    assert_eq!(c.runs[1].cost.job_cost_usd, None);
    assert_eq!(c.recommendation.fabric, "infiniband");
    assert!(c
        .recommendation
        .reasons
        .iter()
        .any(|r| r.contains("a PFC deadlock that stopped the run")));
    let html = fabricsim_experiment::report::html(&c);
    assert!(html.contains("Recommendation: InfiniBand") && !html.contains("plot not drawn"));
}

/// `compare` runs both fabrics at one level: under `auto`, a budget that only
/// InfiniBand's three-tier design exceeds at packet level sends both to flow level (and
/// RoCEv2's reason says why); where RoCEv2 needs packets (lossy, no PFC) each keeps its own.
#[test]
fn compare_runs_both_fabrics_at_one_level() {
    use fabricsim_experiment::estimate::{estimate, packet_wall_seconds};
    use fabricsim_experiment::scenario::Level;
    let entry = |name: &str, fabric: &str, ports: u32| {
        format!(
            "[catalog.{name}]\nkind = \"switch\"\nfabric = \"{fabric}\"\nports = {ports}\nport_rate = \"400Gbps\"\nprice_usd = 1000\nwatts = 100\nsource = \"test\"\nyear = 2026\n"
        )
    };
    let file = |simulation: &str, rocev2: &str| {
        format!(
            "{simulation}\n[cluster]\ngpus = 48\ngpus_per_node = 1\nstyle = \"fat-tree\"\nswitch = {{ infiniband = \"k-ib\", rocev2 = \"k-eth\" }}\n{}{}{rocev2}\n[[traffic]]\nkind = \"permutation\"\nsize = \"1MiB\"\n",
            entry("k-ib", "infiniband", 8),
            entry("k-eth", "rocev2", 64)
        )
    };
    // Each fabric's packet-level wall estimate, and a budget between them.
    let packet = scenario(&file("[simulation]\nlevel = \"packet\"", ""));
    let walls = packet
        .compared_fabrics()
        .map(|s| packet_wall_seconds(estimate(&s).unwrap().events).0);
    assert!(
        walls[0] > 2.0 * walls[1],
        "three tiers against one: {walls:?}"
    );
    let budget_us = ((walls[0] * walls[1]).sqrt() * 1e6).round() as u64;
    let auto = format!("[simulation]\nlevel = \"auto\"\nbudget = \"{budget_us}us\"");
    for (kind, flow) in [("infiniband", true), ("rocev2", false)] {
        let alone = scenario(&format!("[fabric]\nkind = \"{kind}\"\n{}", file(&auto, "")));
        assert_eq!(alone.runs_at_flow_level().0, flow, "{kind} alone");
    }
    let both = scenario(&file(&auto, "")).compared_fabrics();
    assert_eq!(both.each_ref().map(|s| s.level), [Level::Flow, Level::Flow]);
    let why = both[1].level_reason.as_deref().unwrap();
    assert!(
        why.starts_with("InfiniBand: ") && why.contains("beyond the budget"),
        "{why}"
    );
    assert!(why.contains("both fabrics at flow level"), "{why}");
    // Lossy RoCEv2 runs only at packet level: each fabric keeps its own level.
    let lossy = scenario(&file(&auto, "[fabric.rocev2]\npfc = false\n")).compared_fabrics();
    assert_eq!(lossy.map(|s| s.level), [Level::Flow, Level::Packet]);
}

/// A designed cluster's InfiniBand routes adaptively unless the file says otherwise; a
/// hand-written topology keeps static routing unless asked.
#[test]
fn designed_infiniband_routes_adaptively_by_default() {
    let ports = 64;
    assert!(cluster(ports, "gpus = 256").ib.adaptive_routing);
    let off = "[fabric.infiniband]\nadaptive_routing = false\n";
    let s = scenario(&format!(
        "{off}[cluster]\ngpus = 256\nswitch = {{ infiniband = \"k-ib\", rocev2 = \"k-eth\" }}\n{}\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = 4096\n",
        k_port_switches(ports)
    ));
    assert!(!s.ib.adaptive_routing);
    let plain = scenario("[topology]\nkind = \"leaf-spine\"\nhosts = 8\nleaves = 2\nspines = 2\n[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 7\nsize = 4096\n");
    assert!(!plain.ib.adaptive_routing);
}
