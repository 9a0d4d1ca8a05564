//! The results folder is never half-written: a run killed with SIGKILL at any point of
//! its life, writing included, leaves the folder holding one run's complete, consistent
//! set (the old one or the new one), and two runs into one folder never mix.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// 1,024 hosts, a permutation: about half a second, with 1,024 flow rows and 6,144 port
/// rows to write. The seed changes the permutation, so each seed's files differ.
const SCENARIO: &str = "[topology]\nkind = \"fat-tree\"\nk = 16\n[[traffic]]\nkind = \"permutation\"\nsize = \"128KiB\"\n";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabricsim"))
}

fn tmpdir(name: &str) -> common::Scratch {
    common::Scratch::new("kill", name)
}

fn run_into(scenario: &Path, seed: u32, out: &Path) -> Command {
    let mut c = bin();
    c.args([
        "run",
        scenario.to_str().unwrap(),
        "--seed",
        &seed.to_string(),
    ])
    .args(["--out", out.to_str().unwrap()])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    c
}

/// A folder's files: (name, contents), by name.
type Files = Vec<(String, Vec<u8>)>;

/// The files of a folder, by name.
fn files(dir: &Path) -> Files {
    let mut v: Files = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The seed of the run whose complete set `dir` holds; panics on a partial or mixed set.
fn consistent_seed(dir: &Path, reference: &[(u32, Files)]) -> u32 {
    let got = files(dir);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["flows.csv", "ports.csv", "summary.json"],
        "a complete set"
    );
    let summary: serde_json::Value = serde_json::from_slice(&got[2].1).unwrap();
    let seed = summary["seed"].as_u64().unwrap() as u32;
    let (_, want) = reference.iter().find(|(s, _)| *s == seed).unwrap();
    assert_eq!(got[0], want[0], "flows.csv of seed {seed}");
    assert_eq!(got[1], want[1], "ports.csv of seed {seed}");
    seed
}

#[test]
fn a_run_killed_at_any_point_leaves_one_complete_set() {
    let d = tmpdir("points");
    let scenario = d.join("s.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    // Each seed's complete set, written by an uninterrupted run; the last one timed.
    let mut reference = Vec::new();
    let mut full = Duration::ZERO;
    for seed in 1..=3 {
        let dir = d.join(format!("ref{seed}"));
        let started = Instant::now();
        assert!(run_into(&scenario, seed, &dir).status().unwrap().success());
        full = started.elapsed();
        reference.push((seed, files(&dir)));
    }
    let out = d.join("out");
    assert!(run_into(&scenario, 1, &out).status().unwrap().success());
    let mut seen = Vec::new();
    // Kill points spread over the run, most near its end, where it writes; the last two
    // well after it, so that some run ends even when the other test in this binary
    // slows this one down (the reference time is measured, not guaranteed).
    for (i, frac) in [
        0.3, 0.7, 0.85, 0.9, 0.95, 0.97, 0.99, 1.0, 1.02, 1.05, 1.1, 1.3, 3.0, 6.0,
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 2 + (i as u32 % 2);
        let mut child = run_into(&scenario, seed, &out).spawn().unwrap();
        std::thread::sleep(full.mul_f64(frac));
        let _ = child.kill();
        child.wait().unwrap();
        seen.push(consistent_seed(&out, &reference));
    }
    // Runs that outlived their kill point replaced the set; those killed early did not.
    assert!(seen.iter().any(|&s| s != 1), "some runs finished: {seen:?}");
    let beside: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".out.") && n.ends_with(".new"))
        .collect();
    assert!(
        beside.len() <= 1,
        "at most the last killed writer's folder: {beside:?}"
    );
}

#[test]
fn two_runs_into_one_folder_never_mix() {
    let d = tmpdir("two");
    let scenario = d.join("s.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let mut reference = Vec::new();
    for seed in [4, 5] {
        let dir = d.join(format!("ref{seed}"));
        assert!(run_into(&scenario, seed, &dir).status().unwrap().success());
        reference.push((seed, files(&dir)));
    }
    let out = d.join("out");
    for _ in 0..3 {
        let a = run_into(&scenario, 4, &out).spawn().unwrap();
        let b = run_into(&scenario, 5, &out).spawn().unwrap();
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        // Each either wrote its whole set or said the folder was busy (exit 2).
        for r in [&a, &b] {
            assert!(
                matches!(r.status.code(), Some(0) | Some(2)),
                "{:?}",
                r.status
            );
        }
        assert!(a.status.success() || b.status.success());
        consistent_seed(&out, &reference);
    }
}
