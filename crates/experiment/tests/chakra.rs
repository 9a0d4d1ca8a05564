//! Chakra execution traces: traces written by the project's own encoder run, and give the
//! same times as the equivalent built-in collectives; sends meet their receives.

mod common;
use common::scenario;
use fabricsim_experiment::formats::chakra::{
    attr, encode, Node, COMM_COLL_NODE, COMM_RECV_NODE, COMM_SEND_NODE, COMP_NODE,
};
use fabricsim_experiment::results::collective_results;
use fabricsim_experiment::runner;
use fabricsim_experiment::scenario::Scenario;

/// A fresh folder, removed when dropped.
fn folder(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("fabricsim-chakra-{name}-"))
        .tempdir()
        .unwrap()
}

fn comp(id: u64, us: u64, deps: Vec<u64>) -> Node {
    Node {
        id,
        name: format!("comp{id}"),
        r#type: COMP_NODE,
        duration_micros: us,
        data_deps: deps,
        ..Default::default()
    }
}

fn coll(id: u64, comm_type: i64, size: i64, deps: Vec<u64>) -> Node {
    Node {
        id,
        name: format!("coll{id}"),
        r#type: COMM_COLL_NODE,
        data_deps: deps,
        attr: vec![attr("comm_type", comm_type), attr("comm_size", size)],
        ..Default::default()
    }
}

fn load(dir: &std::path::Path) -> Scenario {
    let text = "[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"chakra\"\npath = \"traces\"\n";
    Scenario::parse_in(text, "chakra", dir).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_trace_of_collectives_matches_the_built_in_collectives() {
    let scratch = folder("coll");
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    // Every rank: 50 us of compute, a 16 MiB all-reduce, 20 us of compute, a 4 MiB
    // all-gather.
    for r in 0..8 {
        let nodes = vec![
            comp(1, 50, vec![]),
            coll(2, 0, 16 << 20, vec![1]),
            comp(3, 20, vec![2]),
            coll(4, 2, 4 << 20, vec![3]),
        ];
        std::fs::write(dir.join(format!("traces/llm.{r}.et")), encode(&nodes)).unwrap();
    }
    let s = load(dir);
    let out = runner::run(&s, None, false).unwrap();
    let got = collective_results(&out);
    assert_eq!(got.len(), 2);
    // The same all-reduce as a built-in collective starting after the 50 us of compute.
    let builtin = scenario("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"collective\"\nop = \"all-reduce\"\nsize = \"16MiB\"\nstart = \"50us\"\n");
    let want = collective_results(&runner::run(&builtin, None, false).unwrap());
    assert_eq!(
        got[0].time_ns, want[0].time_ns,
        "bit-identical all-reduce time"
    );
    assert_eq!(got[0].op, "all-reduce");
    // The all-gather starts 20 us after the all-reduce ends at each rank.
    let ar_end = out.report.flows[..8 * 2 * 7 * 4]
        .iter()
        .filter_map(|f| f.finish)
        .max()
        .unwrap();
    let ag_first_start = out.report.flows[8 * 2 * 7 * 4..]
        .iter()
        .map(|f| f.start)
        .min()
        .unwrap();
    assert!(ag_first_start <= ar_end + fabricsim_core::units::Time::from_us(20));
    assert!(ag_first_start >= ar_end - fabricsim_core::units::Time::from_us(20));
    assert_eq!(got[1].op, "all-gather");
    assert!(got[1].time_ns.is_some());
}

#[test]
fn sends_meet_their_receives_after_compute() {
    let scratch = folder("p2p");
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    for r in 0..8u64 {
        let mut nodes = vec![comp(1, 10, vec![])];
        if r == 0 {
            nodes.push(Node {
                id: 2,
                name: "send".into(),
                r#type: COMM_SEND_NODE,
                data_deps: vec![1],
                attr: vec![
                    attr("comm_dst", 1),
                    attr("comm_size", 1 << 20),
                    attr("comm_tag", 5),
                ],
                ..Default::default()
            });
        }
        if r == 1 {
            nodes.push(Node {
                id: 2,
                name: "recv".into(),
                r#type: COMM_RECV_NODE,
                data_deps: vec![1],
                attr: vec![
                    attr("comm_src", 0),
                    attr("comm_size", 1 << 20),
                    attr("comm_tag", 5),
                ],
                ..Default::default()
            });
        }
        std::fs::write(dir.join(format!("traces/p2p.{r}.et")), encode(&nodes)).unwrap();
    }
    let s = load(dir);
    let out = runner::run(&s, None, false).unwrap();
    let f = &out.report.flows;
    assert_eq!(f.len(), 1);
    assert_eq!((f[0].src, f[0].dst, f[0].bytes), (0, 1, 1 << 20));
    assert_eq!(f[0].start, fabricsim_core::units::Time::from_us(10));
    assert!(f[0].finish.is_some());
    // A receive with no send is an input error naming the rank.
    std::fs::write(dir.join("traces/p2p.0.et"), encode(&[comp(1, 10, vec![])])).unwrap();
    let err = Scenario::parse_in("[topology]\nkind = \"single-switch\"\nhosts = 8\n[[traffic]]\nkind = \"chakra\"\npath = \"traces\"\n", "x", dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("traffic[0].path") && err.contains("rank 1"),
        "{err}"
    );
}
