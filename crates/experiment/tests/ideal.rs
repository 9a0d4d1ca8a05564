//! The ideal FCT behind every slowdown: a flow alone on a fabric whose links differ in
//! rate and delay completes no sooner than its ideal and at most one packet time later,
//! on every path length, on both fabrics.

use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;

/// A three-tier tree (ns-3 topology format): hosts 0 and 1 on leaf 4, host 2 on leaf 5,
/// host 3 on leaf 6; leaves 4 and 5 under aggregation 7, leaf 6 under aggregation 8;
/// both under core 9. Every link has its own rate and delay; no delay is so long that
/// the 64 KiB InfiniBand VL buffer's credit loop (buffer / round trip) would hold a flow
/// below its path's slowest link, which the ideal (unbounded buffers) leaves out.
const TREE: &str = "10 6 9\n4 5 6 7 8 9\n\
0 4 100Gbps 10ns 0\n\
1 4 200Gbps 300ns 0\n\
2 5 400Gbps 1us 0\n\
3 6 200Gbps 40ns 0\n\
4 7 400Gbps 700ns 0\n\
5 7 800Gbps 15ns 0\n\
6 8 1600Gbps 500ns 0\n\
7 9 800Gbps 1us 0\n\
8 9 400Gbps 120ns 0\n";

/// A folder holding tree.topo, removed when dropped.
fn folder() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("fabricsim-ideal-")
        .tempdir()
        .unwrap();
    std::fs::write(d.path().join("tree.topo"), TREE).unwrap();
    d
}

/// One flow of `size` from `src` to `dst` alone on the tree; returns (FCT, ideal) in ps.
/// RoCEv2 runs without DCQCN: a lone flow from a faster NIC into a slower link fills the
/// leaf's queue, and DCQCN's rate cuts then leave that link idle at times (slowdown 1.09
/// for 3 MiB from host 1 to host 0), an effect of congestion control, not of the path.
fn alone(fabric: &str, src: u32, dst: u32, size: &str) -> (u64, u64) {
    let cc = if fabric == "rocev2" {
        "[fabric.rocev2]\ncongestion_control = \"none\"\n"
    } else {
        ""
    };
    let text = format!(
        "[fabric]\nkind = \"{fabric}\"\nmtu = 4096\n{cc}[topology]\nkind = \"file\"\npath = \"tree.topo\"\n[[traffic]]\nkind = \"flow\"\nsrc = {src}\ndst = {dst}\nsize = \"{size}\"\n"
    );
    let s = Scenario::parse_in(&text, "ideal", folder().path()).unwrap();
    let f = runner::run(&s, None, false).unwrap().report.flows[0].clone();
    ((f.finish.expect("completes") - f.start).ps(), f.ideal.ps())
}

#[test]
fn a_lone_flow_takes_its_ideal_within_one_packet_time() {
    // 2 links (same leaf), 4 (same aggregation), 6 (through the core); both directions.
    let pairs = [(0, 1), (1, 0), (0, 2), (2, 0), (0, 3), (3, 1), (2, 3)];
    for fabric in ["infiniband", "rocev2"] {
        for &(src, dst) in &pairs {
            for size in ["1KiB", "4KiB", "100KiB", "3MiB"] {
                let (fct, ideal) = alone(fabric, src, dst, size);
                // One full packet (4 KiB payload + headers) at the slowest link, 100 Gb/s.
                let packet_ps = 4200 * 80;
                assert!(
                    fct >= ideal && fct - ideal <= packet_ps,
                    "{fabric} {src}->{dst} {size}: FCT {fct} ps vs ideal {ideal} ps (slowdown {:.4})",
                    fct as f64 / ideal as f64
                );
            }
        }
    }
}
