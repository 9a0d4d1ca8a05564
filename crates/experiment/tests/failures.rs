//! Link and switch failures (issue 37): a lone flow waits exactly the configured
//! detection plus re-route, every flow completes after a failure on both fabrics, bytes
//! are accounted for, a failed RoCEv2 switch's packets are resent, and what a fabric
//! cannot recover is refused by name.

mod common;
use common::scenario;
use fabricsim_experiment::runner::{self, RunRequest};
use fabricsim_experiment::scenario::Scenario;

/// Two leaves (nodes 4 and 5) of two hosts, two spines (nodes 6 and 7), 100G.
fn small(fabric: &str, extra: &str, failures: &str, traffic: &str) -> Scenario {
    scenario(&format!(
        "[fabric]\nkind = \"{fabric}\"\nlink_rate = \"100Gbps\"\n[fabric.{fabric}]\nfailure_detection = \"100us\"\nreroute_time = \"200us\"\n{extra}\
         [topology]\nkind = \"leaf-spine\"\nhosts = 4\nleaves = 2\nspines = 2\n{failures}{traffic}"
    ))
}

const ONE_FLOW: &str = "[[traffic]]\nkind = \"flow\"\nsrc = 0\ndst = 2\nsize = \"16MiB\"\n";

fn finish_ns(s: &Scenario) -> u64 {
    let out = runner::run(s, None, false).unwrap();
    out.report.flows[0].finish.expect("the flow completes").ps() / 1000
}

#[test]
fn a_lone_flow_waits_the_detection_and_reroute_time_within_a_packet_time() {
    // One uplink of leaf 4 fails at 200 us; the flow used it or the other one. On the one
    // it used, it waits 100 + 200 us; otherwise nothing changes. (RoCEv2 without DCQCN:
    // with it, the queue that built behind the dead port cuts the rate after the
    // re-route, a further delay the test below reports rather than bounds.)
    let packet_ns = 4096 * 8 / 100 + 1;
    for (fabric, extra) in [
        ("infiniband", ""),
        ("rocev2", "congestion_control = \"none\"\n"),
    ] {
        let healthy = finish_ns(&small(fabric, extra, "", ONE_FLOW));
        let delays: Vec<i64> = [6, 7]
            .map(|spine| {
                let f = format!("[[failure]]\nat = \"200us\"\nlink = [4, {spine}]\n");
                finish_ns(&small(fabric, extra, &f, ONE_FLOW)) as i64 - healthy as i64
            })
            .to_vec();
        let used = delays.iter().filter(|&&d| d != 0).count();
        assert_eq!(used, 1, "{fabric}: delays {delays:?}");
        let d = delays.iter().copied().find(|&d| d != 0).unwrap();
        assert!(
            (d - 300_000).abs() <= packet_ns,
            "{fabric}: delayed {d} ns, configured 300,000 ns"
        );
    }
}

#[test]
fn a_link_back_up_before_the_reroute_costs_only_its_downtime() {
    // Down from 200 us to 250 us, before the routes change: the flow waits 50 us.
    for (fabric, extra) in [
        ("infiniband", ""),
        ("rocev2", "congestion_control = \"none\"\n"),
    ] {
        let healthy = finish_ns(&small(fabric, extra, "", ONE_FLOW));
        let worst = [6, 7]
            .map(|spine| {
                let f = format!(
                    "[[failure]]\nat = \"200us\"\nuntil = \"250us\"\nlink = [4, {spine}]\n"
                );
                finish_ns(&small(fabric, extra, &f, ONE_FLOW)) as i64 - healthy as i64
            })
            .into_iter()
            .max()
            .unwrap();
        assert!(
            (worst - 50_000).abs() <= 330,
            "{fabric}: delayed {worst} ns"
        );
    }
}

#[test]
fn every_flow_completes_after_an_uplink_fails_on_both_fabrics() {
    let a2a = "[[traffic]]\nkind = \"collective\"\nop = \"all-to-all\"\nsize = \"4MiB\"\n";
    let fail = "[[failure]]\nat = \"50us\"\nlink = [5, 6]\n";
    for fabric in ["infiniband", "rocev2"] {
        let s = small(fabric, "", fail, a2a);
        let (sum, _) = runner::execute(&s, &RunRequest::default()).unwrap();
        assert_eq!(sum.flows.completed, sum.flows.count, "{fabric}");
        assert_eq!(sum.drops, 0, "{fabric}: a link failure loses nothing");
        let impact = sum.failure_impact.expect("compared with a healthy run");
        assert!(impact.flows_delayed > 0, "{fabric}: {impact:?}");
        let (m, h) = (
            impact.makespan_ns.unwrap(),
            impact.healthy_makespan_ns.unwrap(),
        );
        // At most the stall of the failure and then one uplink fewer for the rest.
        assert!(
            m > h && m < h + 300_000 + 2 * h,
            "{fabric}: {m} against {h}"
        );
    }
}

#[test]
fn a_failed_rocev2_switch_loses_its_packets_and_the_senders_resend_them() {
    let a2a = "[[traffic]]\nkind = \"collective\"\nop = \"all-to-all\"\nsize = \"4MiB\"\n";
    let fail = "[[failure]]\nat = \"100us\"\nswitch = 6\n";
    let s = small("rocev2", "", fail, a2a);
    let out = runner::run(&s, None, false).unwrap();
    let r = &out.report;
    assert!(
        r.flows.iter().all(|f| f.finish.is_some()),
        "every flow completes"
    );
    assert!(r.drops > 0, "packets inside the spine are lost");
    assert!(
        r.retransmitted_packets >= r.drops,
        "{} drops, {} resent",
        r.drops,
        r.retransmitted_packets
    );
    assert!(r.flows.iter().all(|f| f.delivered_bytes == f.bytes));
}

#[test]
fn what_a_fabric_cannot_recover_and_bad_failures_are_refused_by_name() {
    let parse = |fabric: &str, failure: &str| {
        Scenario::parse(
            &format!("[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"leaf-spine\"\nhosts = 4\nleaves = 2\nspines = 2\n[[failure]]\n{failure}\n{ONE_FLOW}"),
            "t",
        )
        .map_err(|e| e.to_string())
    };
    for (fabric, failure, needle) in [
        ("infiniband", "at = \"1us\"\nswitch = 6", "needs `until`"),
        (
            "rocev2",
            "at = \"1us\"\nlink = [4, 5]",
            "no link joins nodes 4 and 5",
        ),
        ("rocev2", "at = \"1us\"\nlink = [0, 4]", "node 0 is a host"),
        (
            "rocev2",
            "at = \"1us\"\nlink = [4, 99]",
            "failure[0].link: node 99",
        ),
        (
            "rocev2",
            "at = \"1us\"\nswitch = 2",
            "failure[0].switch = 2: node 2 is a host",
        ),
        (
            "rocev2",
            "at = \"5us\"\nuntil = \"1us\"\nlink = [4, 6]",
            "failure[0].until",
        ),
        ("rocev2", "link = [4, 6]", "failure[0]: at is required"),
        ("rocev2", "at = \"1us\"", "give one of link"),
    ] {
        let e = parse(fabric, failure).unwrap_err();
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
    assert!(parse("infiniband", "at = \"1us\"\nuntil = \"9us\"\nswitch = 6").is_ok());
    let mut s = parse("rocev2", "at = \"1us\"\nlink = [4, 6]").unwrap();
    let e = s
        .set_level(fabricsim_experiment::scenario::Level::Flow)
        .unwrap_err()
        .to_string();
    assert!(e.contains("failure"), "{e}");
}
