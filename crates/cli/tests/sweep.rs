//! `fabricsim sweep`: points validated before any runs, run on every core, resumed after
//! `kill -9` with only the missing points, failures recorded without stopping the
//! others, and the same points under a real Slurm (started by .ci/slurm-up in CI) giving
//! bit-identical results.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fabricsim"))
}

fn tmpdir(name: &str) -> common::Scratch {
    common::Scratch::new("sweep", name)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// The files in DIR/points, sorted, with their bytes.
fn points(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.join("points"))
        .map(|r| {
            r.map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

const SIZES: [&str; 4] = [
    "--set",
    "traffic.0.size=64KiB,1MiB,4MiB,16MiB",
    "--set",
    "fabric.kind=infiniband,rocev2",
];

#[test]
fn a_sweep_runs_every_point_and_joins_them() {
    let d = tmpdir("local");
    let out_dir = d.join("s");
    let f = example("sweep-nccl-sizes.toml");
    let mut args = vec!["sweep", &f[..]];
    let o = out_dir.to_str().unwrap().to_string();
    args.extend(SIZES);
    args.extend(["--out", &o, "--jobs", "2", "--plot", "busbw_gbps"]);
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = points(&out_dir);
    assert_eq!(files.len(), 8);
    let csv = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[..4],
        ["point", "traffic.0.size", "fabric.kind", "fabric"]
    );
    let busbw_col = header.iter().position(|h| *h == "busbw_gbps").unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 8);
    // Cross product, the last key fastest; each point ran on the fabric it set.
    assert_eq!(
        (rows[1][1], rows[1][2], rows[1][3]),
        ("64KiB", "rocev2", "rocev2")
    );
    assert_eq!((rows[6][1], rows[6][2]), ("16MiB", "infiniband"));
    // Each point's file is the run of its own scenario: `run --json` of the edited file
    // gives the same figures.
    let v: serde_json::Value = serde_json::from_slice(&files[5].1).unwrap();
    assert_eq!(v["parameters"]["traffic.0.size"], "4MiB");
    assert_eq!(v["fabric"], "rocev2");
    let text = std::fs::read_to_string(example("sweep-nccl-sizes.toml"))
        .unwrap()
        .replace("kind = \"infiniband\"", "kind = \"rocev2\"")
        .replace("size = \"16MiB\"", "size = \"4MiB\"");
    let f = d.join("p5.toml");
    std::fs::write(&f, text).unwrap();
    let alone: serde_json::Value =
        serde_json::from_slice(&run(&["run", f.to_str().unwrap(), "--json"]).stdout).unwrap();
    for k in [
        "sim_time_ns",
        "events",
        "fct_ns",
        "collectives",
        "pfc_pause_frames",
    ] {
        assert_eq!(v[k], alone[k], "{k}");
    }
    // Bus bandwidth grows with the size on each fabric (nccl-tests' curve).
    let busbw: Vec<f64> = rows.iter().map(|r| r[busbw_col].parse().unwrap()).collect();
    assert!(busbw[0] < busbw[2] && busbw[2] < busbw[4] && busbw[4] < busbw[6]);
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("id=\"plot-busbw_gbps\"") && html.contains("<svg"));
    assert!(out_dir.join("plot-busbw_gbps.svg").is_file());
}

/// `fabricsim sweep FILE ARGS --out DIR` exits 2 saying `needle`, and writes nothing.
fn refused(file: &str, args: &[&str], needle: &str) {
    let d = tmpdir("refused");
    let o = d.join("s");
    let out = run(&[&["sweep", file], args, &["--out", o.to_str().unwrap()]].concat());
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains(needle), "{args:?}: {e}");
    assert!(!o.exists(), "nothing ran, nothing written");
}

#[test]
fn every_point_is_validated_before_any_runs() {
    let f = example("sweep-ecn-incast.toml");
    refused(
        &f,
        &["--set", "fabric.rocev2.ecn.kmin=20KB,100KB,lots"],
        "point p0002 (fabric.rocev2.ecn.kmin=lots): fabric.rocev2.ecn.kmin = \"lots\"",
    );
    refused(
        &f,
        &["--set", "seed=1,2", "--set", "fabric.kind=rocev2", "--zip"],
        "--zip",
    );
    refused(
        &f,
        &["--set", "seed=1,2", "--plot", "speed"],
        "--plot speed",
    );
    refused(
        &f,
        &["--set", "traffic.7.size=1MiB"],
        "traffic has entries 0 to 1",
    );
}

/// A point that fails at run time (a switch buffer smaller than its PFC headroom) is
/// recorded with its error; the others run and the sweep exits 3.
#[test]
fn a_failed_point_is_recorded_and_the_others_run() {
    let d = tmpdir("failed");
    let o = d.join("s");
    let f = example("sweep-ecn-incast.toml");
    let args = [
        "sweep",
        &f,
        "--set",
        "fabric.rocev2.switch_buffer=1MiB,16MiB",
        "--out",
        o.to_str().unwrap(),
    ];
    let out = run(&args);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(o.join("failed/p0000.json")).unwrap()).unwrap();
    assert!(
        failed["error"].as_str().unwrap().contains("headroom"),
        "{failed}"
    );
    assert_eq!(failed["parameters"]["fabric.rocev2.switch_buffer"], "1MiB");
    assert_eq!(points(&o).len(), 1);
    assert_eq!(
        std::fs::read_to_string(o.join("results.csv"))
            .unwrap()
            .lines()
            .count(),
        2
    );
    // The same sweep into the folder again retries only the failed point.
    let again = run(&args);
    assert!(String::from_utf8_lossy(&again.stdout)
        .contains("2 points: 1 run, 1 already finished, 1 failed"));
    // A different sweep into the same folder is refused.
    let other = run(&[
        "sweep",
        &example("sweep-ecn-incast.toml"),
        "--set",
        "seed=3",
        "--out",
        o.to_str().unwrap(),
    ]);
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stderr).contains("holds a different sweep"));
    // So is a folder of someone else's files, which a sweep never writes among.
    let mine = d.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("notes.txt"), "mine").unwrap();
    let foreign = run(&[
        "sweep",
        &example("sweep-ecn-incast.toml"),
        "--set",
        "seed=3",
        "--out",
        mine.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&foreign.stderr);
    assert_eq!(foreign.status.code(), Some(2), "{err}");
    assert!(err.contains("holds other files (notes.txt)"), "{err}");
    assert_eq!(
        std::fs::read_dir(&mine).unwrap().count(),
        1,
        "nothing written"
    );
}

/// `kill -9` mid-sweep loses only the points that were running: the rerun runs exactly
/// the missing ones, keeps the finished files as they were, and leaves no partial file.
#[test]
fn a_killed_sweep_reruns_only_the_missing_points() {
    let d = tmpdir("kill");
    let o = d.join("s");
    let f = example("sweep-nccl-sizes.toml");
    let args = [
        "sweep",
        &f,
        "--set",
        "seed=1,2,3,4,5,6,7,8",
        "--set",
        "traffic.0.size=48MiB",
        "--jobs",
        "1",
        "--out",
        o.to_str().unwrap(),
    ];
    let mut child = bin()
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while points(&o)
        .iter()
        .filter(|(n, _)| n.ends_with(".json") && !n.starts_with('.'))
        .count()
        < 2
    {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no point finished"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the sweep ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The running point's process dies with it (PR_SET_PDEATHSIG).
    std::thread::sleep(Duration::from_millis(300));
    let before: Vec<(String, Vec<u8>)> = points(&o)
        .into_iter()
        .filter(|(n, _)| !n.starts_with('.'))
        .collect();
    assert!(
        before.len() >= 2 && before.len() < 8,
        "{} points finished",
        before.len()
    );
    let out = bin().args(args).output().unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    let want = format!(
        "8 points: {} run, {} already finished, 0 failed",
        8 - before.len(),
        before.len()
    );
    assert!(said.contains(&want), "{said} (wanted {want})");
    let after = points(&o);
    assert_eq!(
        after.len(),
        8,
        "every point, and no temporary file: {:?}",
        after.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    for (name, bytes) in &before {
        assert_eq!(
            &after.iter().find(|(n, _)| n == name).unwrap().1,
            bytes,
            "{name} kept"
        );
    }
}

/// Slurm must be up in CI (.ci/run starts it); elsewhere the test says it skipped.
fn slurm_up() -> bool {
    let up = Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .map(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("idle"))
        .unwrap_or(false);
    if !up {
        assert!(
            std::env::var_os("CI").is_none(),
            "Slurm is not up in CI (.ci/slurm-up)"
        );
        eprintln!("skipped: no Slurm here (.ci/slurm-up starts one)");
    }
    up
}

/// The same sweep locally and as a Slurm job array of 4 tasks (2 points each, at most 2
/// at once) gives bit-identical point files and results.csv.
#[test]
#[cfg_attr(not(tool_slurm), ignore = "Slurm is not installed")]
fn a_sweep_under_slurm_matches_the_local_one_bit_for_bit() {
    let d = tmpdir("slurm");
    let (local, array) = (d.join("local"), d.join("array"));
    let f = example("sweep-nccl-sizes.toml");
    let mut args = vec!["sweep", &f[..]];
    args.extend(SIZES);
    let local_out = run(&[&args[..], &["--out", local.to_str().unwrap()]].concat());
    assert!(local_out.status.success());
    // The script alone: an array of 4 tasks, throttled, with the options asked for.
    let array_args = [
        "--out",
        array.to_str().unwrap(),
        "--per-task",
        "2",
        "--max-running",
        "2",
    ];
    let script_only = run(&[
        &args[..],
        &array_args,
        &["--slurm-script", "--time", "10:00", "--mem", "1G"],
    ]
    .concat());
    assert!(script_only.status.success());
    let script = std::fs::read_to_string(array.join("sweep.sbatch")).unwrap();
    for line in [
        "#SBATCH --array=0-3%2",
        "#SBATCH --time=10:00",
        "#SBATCH --mem=1G",
        "--task \"$SLURM_ARRAY_TASK_ID\"",
    ] {
        assert!(script.contains(line), "{line} in\n{script}");
    }
    if !slurm_up() {
        return;
    }
    let submitted = run(&[&args[..], &array_args, &["--slurm", "--wait"]].concat());
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    assert!(String::from_utf8_lossy(&submitted.stdout).contains("8 of 8 points finished"));
    let logs = std::fs::read_dir(array.join("slurm")).unwrap().count();
    assert_eq!(logs, 4, "one log per array task");
    assert_eq!(points(&local), points(&array));
    assert_eq!(
        std::fs::read(local.join("results.csv")).unwrap(),
        std::fs::read(array.join("results.csv")).unwrap()
    );
    // --collect joins the same results again from the folder alone.
    std::fs::remove_file(array.join("results.csv")).unwrap();
    let collected = run(&["sweep", array.to_str().unwrap(), "--collect"]);
    assert!(collected.status.success());
    assert_eq!(
        std::fs::read(local.join("results.csv")).unwrap(),
        std::fs::read(array.join("results.csv")).unwrap()
    );
}

/// A sweep table: the header names the keys, each row is one point.
#[test]
fn a_sweep_table_gives_one_point_per_row() {
    let d = tmpdir("table");
    let table = d.join("points.csv");
    std::fs::write(
        &table,
        "fabric.kind,traffic.0.size\ninfiniband,1MiB\n# a comment\nrocev2,\"2MiB\"\n",
    )
    .unwrap();
    let o = d.join("s");
    let out = run(&[
        "sweep",
        &example("sweep-nccl-sizes.toml"),
        "--table",
        table.to_str().unwrap(),
        "--out",
        o.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(o.join("results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().skip(1).collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[0].starts_with("p0000,infiniband,1MiB,infiniband,"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].starts_with("p0001,rocev2,2MiB,rocev2,"),
        "{}",
        rows[1]
    );
    std::fs::write(&table, "fabric.kind,traffic.0.size\ninfiniband\n").unwrap();
    let bad = run(&[
        "sweep",
        &example("sweep-nccl-sizes.toml"),
        "--table",
        table.to_str().unwrap(),
        "--out",
        d.join("t").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line 2: 1 values for 2 keys"));
}

/// A tune whose trials run as Slurm job arrays (one per batch) gives the same files as
/// the same tune run here, bit for bit.
#[test]
fn a_tune_under_slurm_matches_the_local_one_bit_for_bit() {
    if !slurm_up() {
        return;
    }
    let d = tmpdir("tune-slurm");
    let file = d.join("incast.toml");
    std::fs::write(
        &file,
        "seed = 7\n[fabric]\nkind = \"rocev2\"\nlink_rate = \"400Gbps\"\n[fabric.rocev2]\ndcqcn_preset = \"paper\"\n[topology]\nkind = \"single-switch\"\nhosts = 5\n[[traffic]]\nkind = \"incast\"\nsenders = [1, 2, 3, 4]\ndst = 0\nsize = \"1MiB\"\n",
    )
    .unwrap();
    let tune = |out: &str, slurm: bool| {
        let out = d.join(out);
        let mut args = vec![
            "tune",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--budget",
            "8",
            "--objective",
            "goodput",
        ];
        if slurm {
            args.extend(["--slurm", "--max-running", "4"]);
        }
        let o = run(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        out
    };
    let (here, there) = (tune("local", false), tune("slurm", true));
    for f in [
        "trials.csv",
        "tuned.toml",
        "tune.json",
        "report.html",
        "sonic-config_db.json",
    ] {
        assert_eq!(
            std::fs::read(here.join(f)).unwrap(),
            std::fs::read(there.join(f)).unwrap(),
            "{f}"
        );
    }
    assert!(
        there.join("slurm/t0000.sbatch").is_file(),
        "the batches' scripts are kept"
    );
}
