//! compare's third candidate, "rocev2-adaptive" (SCENARIO.md v3 `[compare] candidates`):
//! Ethernet with adaptive routing on RoCEv2's design, with its own bill (BlueField-3
//! SuperNICs in place of the ConnectX-7), its own runs, a share of the verdict, and the
//! recommendation naming the cheapest of the three.

mod common;

use common::scenario;
use fabricsim_experiment::compare::{self, Comparison};
use fabricsim_experiment::scenario::Scenario;
use fabricsim_fabric::rocev2::LoadBalancing;
use serde_json::Value;

/// A ring all-reduce across the four leaves of a 4:1 leaf-spine beside a permutation:
/// each ring connection hashes onto one uplink for its life under ECMP, and collides.
fn text(compare_keys: &str) -> String {
    format!(
        "seed = 3\n[topology]\nkind = \"leaf-spine\"\nhosts = 32\nleaves = 4\nspines = 2\n\
         [compare]\ncandidates = [\"infiniband\", \"rocev2\", \"rocev2-adaptive\"]\nsamples = 2000\n{compare_keys}\n\
         [[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nalgorithm = \"ring\"\n\
         ranks = [0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27]\nsize = \"8MiB\"\n\
         [[traffic]]\nkind = \"permutation\"\nhosts = [4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31]\nsize = \"4MiB\"\n"
    )
}

fn run(text: &str) -> Comparison {
    compare::run_both(&scenario(text), false, 2).unwrap()
}

/// A candidate's bill as (catalog entry, count), in the bill's order.
fn bill(json: &Value, candidate: &str) -> Vec<(String, u64)> {
    json[candidate]["cost"]["bom"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["catalog"].as_str().unwrap().to_string(),
                l["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn three_candidates_each_with_design_and_bill_and_the_cheapest_recommended() {
    let c = run(&text(""));
    let json: Value = serde_json::from_str(&c.to_json()).unwrap();
    for k in ["infiniband", "rocev2", "rocev2-adaptive"] {
        assert!(json[k]["design"]["switches"].as_u64().unwrap() > 0, "{k}");
        assert!(
            json[k]["cost"]["job_cost_usd"].as_f64().unwrap() > 0.0,
            "{k}"
        );
    }
    // RoCEv2's design, and its bill with the SuperNIC in place of the ConnectX-7.
    assert_eq!(json["rocev2"]["design"], json["rocev2-adaptive"]["design"]);
    let swap = |name: String| {
        if name == "connectx-7-400g" {
            "bluefield-3-supernic-400g".to_string()
        } else {
            name
        }
    };
    let expected: Vec<(String, u64)> = bill(&json, "rocev2")
        .into_iter()
        .map(|(n, k)| (swap(n), k))
        .collect();
    assert_eq!(bill(&json, "rocev2-adaptive"), expected);
    assert!(expected.contains(&("bluefield-3-supernic-400g".into(), 32)));
    // Dearer NICs: the adaptive network costs more to buy than RoCEv2's by 32 x the
    // price difference (and the same optics).
    let capex = |k: &str| json[k]["cost"]["capex_usd"].as_f64().unwrap();
    assert!((capex("rocev2-adaptive") - capex("rocev2") - 32.0 * (4000.0 - 1900.0)).abs() < 1e-6);
    // The recommendation names the cheapest job at the base values.
    let cost = |k: &str| json[k]["cost"]["job_cost_usd"].as_f64().unwrap();
    let cheapest = ["infiniband", "rocev2", "rocev2-adaptive"]
        .into_iter()
        .min_by(|a, b| cost(a).total_cmp(&cost(b)))
        .unwrap();
    let d = &json["recommendation"];
    assert_eq!(d["fabric"], cheapest);
    // Each candidate has its share of the sampled ranges, and the shares sum to one.
    let share = d["share"].as_object().unwrap();
    assert_eq!(share.len(), 3, "{share:?}");
    let sum: f64 = share.values().map(|v| v.as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    assert!(d["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r.as_str().unwrap().contains("load balancing \"adaptive\"")));
    // The table shows three columns and two ratios.
    let table = compare::table(&c);
    assert!(
        table.contains("rocev2-adaptive") && table.contains("adaptive/ib"),
        "{table}"
    );
}

/// Per-packet adaptive routing spreads what ECMP hashes onto one uplink per connection:
/// the ring finishes sooner and the busiest switch link carries less over the mean.
#[test]
fn adaptive_routing_beats_per_connection_ecmp_where_rings_collide() {
    let c = run(&text(""));
    let [ecmp, adaptive] = [&c.runs[1], c.adaptive.as_ref().unwrap()];
    let time = |r: &compare::FabricRun| r.summary.collectives[0].time_ns.unwrap();
    assert!(
        time(adaptive) < time(ecmp),
        "{} vs {}",
        time(adaptive),
        time(ecmp)
    );
    let busiest = |r: &compare::FabricRun| r.summary.link_load.as_ref().unwrap().max_over_mean;
    assert!(busiest(adaptive) < busiest(ecmp));
    // Spraying (per packet, by hash) is the other choice, and is what ran.
    let c = run(&text("adaptive_load_balancing = \"spray\""));
    let a = c.adaptive.as_ref().unwrap();
    assert_eq!(a.scenario.roce.load_balancing, LoadBalancing::Spray);
    assert!(time(a) < time(&c.runs[1]));
}

/// The candidate is the scenario's RoCEv2 with the candidate's load balancing and NIC:
/// `run` on that scenario gives the same figures as compare's candidate.
#[test]
fn the_candidate_runs_as_the_scenario_on_rocev2_with_adaptive_routing() {
    let s = scenario(&text(""));
    let a = s.adaptive_candidate().unwrap();
    assert_eq!(a.roce.load_balancing, LoadBalancing::Adaptive);
    assert_eq!(a.hardware.nic, "bluefield-3-supernic-400g");
    assert_eq!(a.hardware.server_nic, "connectx-7-400g");
    let by_hand = text("").replace(
        "[compare]",
        "[fabric]\nkind = \"rocev2\"\n[fabric.rocev2]\nload_balancing = \"adaptive\"\n[compare]",
    );
    let o = fabricsim_experiment::runner::run(&scenario(&by_hand), None, false).unwrap();
    let c = compare::run_both(&s, false, 1).unwrap();
    let cand = c.adaptive.as_ref().unwrap();
    assert_eq!(o.report.sim_time, cand.outcome.report.sim_time);
    assert_eq!(o.report.flows, cand.outcome.report.flows);
}

#[test]
fn adaptive_candidate_settings_are_checked() {
    let ok = scenario(&text("adaptive_nic = \"connectx-7-400g\""));
    assert_eq!(ok.compare.adaptive.unwrap().nic, "connectx-7-400g");
    for (keys, want) in [
        ("adaptive_nic = \"nic-x\"", "compare.adaptive_nic = \"nic-x\": not in the catalog"),
        ("adaptive_switch = \"quantum-2-qm9700\"", "compare.adaptive_switch = \"quantum-2-qm9700\": the catalog entry is a switch for infiniband"),
        ("adaptive_load_balancing = \"ecmp\"", "compare.adaptive_load_balancing = \"ecmp\": expected one of"),
    ] {
        let e = Scenario::parse(&text(keys), "t").unwrap_err().to_string();
        assert!(e.contains(want), "{keys}: {e}");
    }
    // Its keys without the candidate do nothing, and are refused.
    let without =
        text("adaptive_nic = \"bluefield-3-supernic-400g\"").replace(", \"rocev2-adaptive\"", "");
    let e = Scenario::parse(&without, "t").unwrap_err().to_string();
    assert!(
        e.contains("compare.adaptive_nic") && e.contains("does not name"),
        "{e}"
    );
    // Selective repeat would read adaptive routing's reordering as loss.
    let sr = text("").replace(
        "[compare]",
        "[fabric.rocev2]\nloss_recovery = \"selective-repeat\"\n[compare]",
    );
    let e = Scenario::parse(&sr, "t").unwrap_err().to_string();
    assert!(
        e.contains("selective-repeat") && e.contains("rocev2-adaptive"),
        "{e}"
    );
}
