//! The sweep library in one process: points from --set values, run on threads, each
//! point's file the run of its own scenario.

use fabricsim_experiment::catalog::Catalog;
use fabricsim_experiment::runner::{self, RunRequest};
use fabricsim_experiment::sweep::{self, Runner, SweepSpec};
use std::path::Path;

#[test]
fn in_process_points_are_the_runs_of_their_scenarios() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sweep-nccl-sizes.toml");
    let spec = SweepSpec {
        file: file.clone(),
        sets: vec![sweep::parse_set("fabric.kind=infiniband,rocev2").unwrap()],
        zip: false,
    };
    let points = sweep::points(
        &file,
        sweep::combinations(&spec).unwrap(),
        &Catalog::builtin(),
    )
    .unwrap();
    let scratch = tempfile::Builder::new()
        .prefix("fabricsim-sweep-lib-")
        .tempdir()
        .unwrap();
    let dir = scratch.path().join("sweep");
    sweep::prepare(&dir, &sweep::manifest(&file, &points)).unwrap();
    let done = sweep::run_local(&dir, &points, 2, Runner::InProcess).unwrap();
    assert_eq!((done.ran, done.skipped, done.failed.len()), (2, 0, 0));
    for p in &points {
        let (summary, _) = runner::execute(&p.scenario, &RunRequest::default()).unwrap();
        let file =
            std::fs::read_to_string(dir.join("points").join(format!("{}.json", p.id))).unwrap();
        assert_eq!(file, sweep::point_json(p, &summary), "{}", p.id);
    }
    assert_eq!(sweep::collect(&dir).unwrap(), 2);
    let again = sweep::run_local(&dir, &points, 2, Runner::InProcess).unwrap();
    assert_eq!((again.ran, again.skipped), (0, 2));
    let _ = std::fs::remove_dir_all(&dir);
}
