//! Exit statuses a script can trust: 0 for a clean, complete run; 3 for a run that ended
//! with flows unfinished; 2 for bad input (here: nothing to run); a closed standard output
//! ends the process quietly with 141.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabricsim"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_complete_run_exits_0_and_an_unfinished_one_3() {
    let clean = run(&["run", path(&example("incast-8to1.toml"))]);
    assert_eq!(clean.status.code(), Some(0));
    for (name, why) in [
        ("rocev2-pfc-deadlock.toml", "stopped by a deadlock"),
        ("rocev2-pause-storm.toml", "stop_at reached"),
        ("infiniband-credit-loop.toml", "stopped by a deadlock"),
    ] {
        let out = run(&["run", path(&example(name)), "--json"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{name}: {err}");
        assert!(
            err.contains("unfinished") && err.contains(why),
            "{name}: {err}"
        );
        // The summary is still complete JSON on standard output.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["flows"]["completed"].as_u64() < v["flows"]["count"].as_u64());
    }
    let compare = run(&["compare", path(&example("rocev2-pfc-deadlock.toml"))]);
    assert_eq!(compare.status.code(), Some(3));
}

#[test]
fn nothing_to_run_is_bad_input() {
    let d = common::Scratch::new("exits", "nothing");
    for (name, text) in [
        ("empty.toml", ""),
        ("topology.toml", "[topology]\nhosts = 4\n"),
    ] {
        let f = d.join(name);
        std::fs::write(&f, text).unwrap();
        for cmd in ["run", "compare"] {
            let out = run(&[cmd, path(&f)]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{cmd} {name}: {err}");
            assert!(err.contains("no [[traffic]]"), "{err}");
        }
    }
    // Entries that make no message: an empty flow file.
    std::fs::write(d.join("none.flows"), "0\n").unwrap();
    let f = d.join("empty-flows.toml");
    std::fs::write(
        &f,
        "[[traffic]]\nkind = \"flow-file\"\npath = \"none.flows\"\n",
    )
    .unwrap();
    for cmd in ["run", "compare"] {
        let out = run(&[cmd, path(&f)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.contains("make no message"), "{err}");
    }
}

#[test]
fn a_closed_pipe_ends_the_run_quietly() {
    let mut child = bin()
        .args([
            "compare",
            path(&example("leaf-spine-oversubscribed.toml")),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn the_simulated_time_covers_every_completion() {
    let out = run(&["run", path(&example("incast-8to1.toml")), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sim_ns = v["sim_time_ns"].as_u64().unwrap();
    let fct_max = v["fct_ns"]["max"].as_u64().unwrap();
    // Every flow of the example starts at 0, so the last finish is the largest FCT.
    assert!(
        sim_ns >= fct_max,
        "sim_time_ns {sim_ns} < last finish {fct_max}"
    );
}

#[test]
fn a_run_that_cannot_fit_in_memory_is_refused_up_front() {
    // With a budget of 1 MiB (FABRICSIM_MEMORY, as a batch job's limit would set it), the
    // incast example does not fit: refused before it starts, unless forced.
    let f = example("incast-8to1.toml");
    let out = bin()
        .args(["run", path(&f)])
        .env("FABRICSIM_MEMORY", "1MiB")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("MB are available") && err.contains("--force"),
        "{err}"
    );
    let forced = bin()
        .args(["run", path(&f), "--force"])
        .env("FABRICSIM_MEMORY", "1MiB")
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0));
    let bad = bin()
        .args(["run", path(&f)])
        .env("FABRICSIM_MEMORY", "lots")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("FABRICSIM_MEMORY = \"lots\""));
    // `check` states the estimate.
    let check = run(&["check", path(&f)]);
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains("# estimated run on InfiniBand at packet level: about"),
        "{text}"
    );
}

#[test]
fn flow_level_refusals_exit_2_naming_why() {
    for (name, level, why) in [
        ("incast-8to1.toml", "fluid", "--level fluid"),
        ("rocev2-pause-storm.toml", "flow", "pause_storm"),
        ("rocev2-pfc-deadlock.toml", "flow", "cycle"),
    ] {
        let out = run(&["run", path(&example(name)), "--level", level]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(why), "{name}: {err}");
    }
    let flow = run(&[
        "run",
        path(&example("incast-8to1.toml")),
        "--level",
        "flow",
        "--json",
    ]);
    assert_eq!(flow.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&flow.stdout).unwrap();
    assert_eq!(v["level"], "flow");
}

#[test]
fn threads_must_be_a_positive_count() {
    for bad in ["0", "two"] {
        let out = run(&["run", path(&example("incast-8to1.toml")), "--threads", bad]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--threads {bad}: {err}");
        assert!(err.contains("--threads"), "{err}");
    }
}

/// A training job's +1 us run goes beside the main one only if both fit: with memory for
/// one run (by the estimate `check` prints), they run one after the other, and say so.
/// The memory `check` estimates for the scenario in `f`, in MB.
fn estimated_mb(f: &Path) -> u64 {
    let check = String::from_utf8(run(&["check", path(f)]).stdout).unwrap();
    check
        .split(" level: about ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("check states the estimate")
}

/// `run --threads 2` of `f` with memory for one and a half of its estimated runs; checks
/// that it succeeds and returns its output and standard error.
fn run_on_two_threads_with_room_for_one_and_a_half(f: &Path) -> (std::process::Output, String) {
    let mb = estimated_mb(f);
    let out = bin()
        .args(["run", path(f), "--json", "--threads", "2"])
        .env("FABRICSIM_MEMORY", format!("{}MiB", mb.max(1) * 3 / 2))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    (out, err)
}

#[test]
fn runs_that_fit_only_alone_run_one_at_a_time() {
    let (out, err) =
        run_on_two_threads_with_room_for_one_and_a_half(&example("training-data-parallel.toml"));
    assert!(err.contains("one at a time"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["training"][0]["extra_job_seconds_per_us_per_exchange"]
            .as_f64()
            .unwrap()
            > 0.0
    );
}

#[test]
fn a_split_run_whose_copies_do_not_fit_runs_on_one_thread() {
    // A RoCEv2 run splits over its threads with a copy of its state in each: with memory
    // for one and a half runs, two threads do not fit.
    let (_, err) =
        run_on_two_threads_with_room_for_one_and_a_half(&example("bench-incast-127to1.toml"));
    assert!(err.contains("a split run keeps a copy"), "{err}");
}
