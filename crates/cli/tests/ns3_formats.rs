//! The ns-3 RDMA model's topology and flow files: a file topology and flow list give the
//! same run as the equivalent built-in topology and traffic, on both fabrics; bad files
//! are named and exit 2.

mod common;

use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;
use std::path::Path;
use std::process::Command;

fn tmpdir(name: &str) -> common::Scratch {
    common::Scratch::new("ns3", name)
}

/// Hosts 0-3 on switch 4 at 400 Gb/s with 25 ns links: the built-in single-switch layout.
const STAR: &str = "5 1 4\n4\n0 4 400Gbps 0.000025ms 0\n1 4 400Gbps 25ns 0\n2 4 400Gbps 0.000025ms 0\n3 4 400Gbps 0.000025ms 0\n";
/// A 3:1 incast into host 0, starting at 0 and 1 us.
const FLOWS: &str =
    "3\n1 0 3 100 1048576 0\n2 0 3 100 1048576 0.000001\n3 0 3 100 1048576 0.000001\n";

fn built_in(fabric: &str) -> String {
    format!("[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"single-switch\"\nhosts = 4\n[[traffic]]\nkind = \"flow\"\nsrc = 1\ndst = 0\nsize = \"1MiB\"\n[[traffic]]\nkind = \"incast\"\nsenders = [2, 3]\ndst = 0\nsize = \"1MiB\"\nstart = \"1us\"\n")
}

fn from_files(fabric: &str) -> String {
    format!("[fabric]\nkind = \"{fabric}\"\n[topology]\nkind = \"file\"\npath = \"star.topo\"\n[[traffic]]\nkind = \"flow-file\"\npath = \"star.flows\"\n")
}

#[test]
fn file_topology_and_flows_match_the_built_in_equivalent() {
    let d = tmpdir("same");
    std::fs::write(d.join("star.topo"), STAR).unwrap();
    std::fs::write(d.join("star.flows"), FLOWS).unwrap();
    for fabric in ["infiniband", "rocev2"] {
        let a = Scenario::parse(&built_in(fabric), "a").unwrap();
        let b = Scenario::parse_in(&from_files(fabric), "b", &d).unwrap();
        assert_eq!(b.traffic.len(), 1);
        let ra = runner::run(&a, None, false).unwrap().report;
        let rb = runner::run(&b, None, false).unwrap().report;
        assert!(ra.flows.iter().all(|f| f.finish.is_some()));
        assert_eq!(ra.flows, rb.flows, "{fabric}: same flows, same results");
        assert_eq!(ra.events, rb.events, "{fabric}");
    }
}

fn expect_exit_2(dir: &Path, topo: &str, flows: &str, needles: &[&str]) {
    std::fs::write(dir.join("star.topo"), topo).unwrap();
    std::fs::write(dir.join("star.flows"), flows).unwrap();
    let scenario = dir.join("s.toml");
    std::fs::write(&scenario, from_files("rocev2")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fabricsim"))
        .args(["check", scenario.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "error should mention {n:?}: {err}");
    }
}

#[test]
fn bad_ns3_files_are_named_and_exit_2() {
    let d = tmpdir("bad");
    expect_exit_2(
        &d,
        &STAR.replace("1 4 400Gbps 25ns 0", "1 4 400Gbps 25ns 0.001"),
        FLOWS,
        &["topology.path", "star.topo", "line 4", "error_rate = 0.001"],
    );
    expect_exit_2(
        &d,
        &STAR.replace("1 4 400Gbps", "1 4 400"),
        FLOWS,
        &["topology.path", "line 4", "\"400\""],
    );
    expect_exit_2(
        &d,
        STAR,
        &FLOWS.replace("3 0 3 100", "4 0 3 100"),
        &["traffic[0].path", "star.flows", "src = 4", "not a host"],
    );
    expect_exit_2(
        &d,
        STAR,
        "4\n1 0 3 100 10 0\n",
        &["traffic[0].path", "1 flows given, line 1 says 4"],
    );
    // A header claiming billions of nodes is refused, not allocated.
    expect_exit_2(
        &d,
        "4000000000 1000000000 4000000000\n",
        FLOWS,
        &["topology.path", "line 1", "at most 1048576 nodes"],
    );
    // Two islands: named with the file, before any run starts.
    expect_exit_2(
        &d,
        "4 2 2\n2 3\n0 2 400Gbps 25ns 0\n1 3 400Gbps 25ns 0\n",
        "1\n1 0 3 100 10 0\n",
        &["topology.path = \"star.topo\"", "cannot reach"],
    );
    std::fs::remove_file(d.join("star.topo")).unwrap();
    let scenario = d.join("s.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_fabricsim"))
        .args(["run", scenario.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("topology.path = \"star.topo\"") && err.contains("cannot read"),
        "{err}"
    );
}

/// A topology file's hosts set the NIC rate (DCQCN's steps, PFC headroom and the ECN scale
/// follow it); a fabric.link_rate that says otherwise is refused, not silently used.
#[test]
fn a_file_topology_s_host_rate_is_the_nic_rate() {
    let d = tmpdir("nicrate");
    let slow = STAR.replace("400Gbps", "100Gbps");
    std::fs::write(d.join("star.topo"), &slow).unwrap();
    std::fs::write(d.join("star.flows"), FLOWS).unwrap();
    let s = Scenario::parse_in(&from_files("rocev2"), "s", &d).unwrap();
    assert_eq!(s.link_rate.bps(), 100_000_000_000);
    let conflicting = from_files("rocev2").replace(
        "kind = \"rocev2\"",
        "kind = \"rocev2\"\nlink_rate = \"400Gbps\"",
    );
    let e = Scenario::parse_in(&conflicting, "c", &d)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fabric.link_rate = \"400Gbps\": the topology file's hosts link at 100Gbps"),
        "{e}"
    );
}
