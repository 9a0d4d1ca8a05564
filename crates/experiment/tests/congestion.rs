//! IB congestion control: FECN marking, BECN return and CCT injection delay replace
//! hop-by-hop credit backpressure (congestion spreading) with source throttling.

mod common;
use common::*;
use fabricsim_experiment::runner;

fn incast(cc: &str) -> fabricsim_fabric::report::RunReport {
    let s = scenario(&format!(
        "[fabric.infiniband]\n{cc}\n[topology]\nkind = \"fat-tree\"\nk = 4\n[[traffic]]\nkind = \"incast\"\nsenders = [4, 8, 12, 13]\ndst = 0\nsize = \"4MiB\"\n[[traffic]]\nkind = \"flow\"\nsrc = 5\ndst = 1\nsize = \"4MiB\"\n"
    ));
    runner::run(&s, None, false).unwrap().report
}

fn stall_ps(r: &fabricsim_fabric::report::RunReport) -> u64 {
    r.ports.iter().map(|p| p.credit_stall.ps()).sum()
}

#[test]
fn congestion_control_throttles_sources_instead_of_spreading_backpressure() {
    let off = incast("congestion_control = false");
    let on = incast("congestion_control = true\nfecn_threshold = \"32KiB\"");
    assert_eq!(off.congestion_marks + off.congestion_notifications, 0);
    assert!(
        on.congestion_marks > 0 && on.congestion_notifications > 0,
        "marks {} becns {}",
        on.congestion_marks,
        on.congestion_notifications
    );
    assert!(
        on.congestion_notifications <= on.congestion_marks,
        "one BECN per marked packet at most"
    );
    assert!(on.flows.iter().all(|f| f.finish.is_some()));
    let (s_on, s_off) = (stall_ps(&on), stall_ps(&off));
    eprintln!(
        "credit stall: {:.1} us with CC, {:.1} us without",
        s_on as f64 / 1e6,
        s_off as f64 / 1e6
    );
    assert!(
        s_on * 4 < s_off,
        "CC must cut credit stalls (backpressure) by at least 4x: {s_on} vs {s_off} ps"
    );
}

#[test]
fn a_threshold_above_any_queue_marks_nothing_and_changes_nothing() {
    let off = incast("congestion_control = false");
    let idle = incast("congestion_control = true\nfecn_threshold = \"1GiB\"");
    assert_eq!(idle.congestion_marks, 0);
    assert_eq!(
        idle.flows, off.flows,
        "CC with no marks must not perturb the run"
    );
}
