//! `fabricsim sweep`: one scenario over the cross product (or the zip) of values given to
//! its keys, addressed by their dotted TOML path (`fabric.kind`, `fabric.rocev2.ecn.kmin`,
//! `traffic.0.size`), or over the rows of a sweep table. Every point is validated before
//! any runs. Points run on all cores, or as a Slurm job array ([`slurm`]); each finished
//! point is one file, `DIR/points/ID.json`, written atomically, so a second run of the
//! same sweep skips what finished and `kill -9` loses only the points that were running.
//! `DIR/results.csv` joins the finished points' parameters and headline figures.

pub mod plot;
pub mod slurm;

use crate::catalog::Catalog;
use crate::output;
use crate::results::Summary;
use crate::runner::{self, RunRequest};
use crate::scenario::Scenario;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// What to sweep: the scenario file and the values of each key.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSpec {
    pub file: PathBuf,
    /// `(key, values)` in the order given.
    pub sets: Vec<(String, Vec<String>)>,
    /// Pair the i-th values of every key instead of taking their cross product.
    pub zip: bool,
}

/// One point of the sweep: its parameters and the scenario they make.
#[derive(Clone, Debug)]
pub struct Point {
    /// `p` + the point's index, zero-padded: stable for the same sweep.
    pub id: String,
    pub parameters: Vec<(String, String)>,
    pub scenario: Scenario,
}

/// Parses `KEY=V1,V2,...`.
pub fn parse_set(arg: &str) -> Result<(String, Vec<String>), String> {
    let (key, values) = arg
        .split_once('=')
        .ok_or_else(|| format!("--set {arg}: expected KEY=V1,V2,..."))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(format!(
            "--set {arg}: the key must be a dotted TOML path like fabric.rocev2.ecn.kmin"
        ));
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(String::is_empty) {
        return Err(format!("--set {arg}: an empty value"));
    }
    Ok((key.to_string(), values))
}

/// Reads a sweep table: a CSV file whose header names the keys and whose rows are the
/// points (values may be quoted to hold commas; blank lines and lines starting with `#`
/// are skipped).
pub fn read_table(path: &Path) -> Result<Vec<Vec<(String, String)>>, String> {
    let at = || format!("--table {}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", at()))?;
    // Blank lines become comments, keeping the line numbers.
    let text = text
        .lines()
        .map(|l| if l.trim().is_empty() { "#" } else { l })
        .collect::<Vec<_>>()
        .join("\n");
    let mut reader = table_reader(true).from_reader(text.as_bytes());
    let keys: Vec<String> = match reader.headers() {
        Ok(h) if !h.is_empty() => h.iter().map(String::from).collect(),
        Ok(_) => return Err(format!("{}: empty; the first line names the keys", at())),
        Err(e) => return Err(format!("{}: {e}", at())),
    };
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| format!("{}: {e}", at()))?;
        if record.len() != keys.len() {
            return Err(format!(
                "{} line {}: {} values for {} keys",
                at(),
                line_of(&text, record.position().map_or(0, |p| p.byte() as usize)),
                record.len(),
                keys.len()
            ));
        }
        rows.push(
            keys.iter()
                .cloned()
                .zip(record.iter().map(String::from))
                .collect(),
        );
    }
    Ok(rows)
}

/// The line number of the record the reader placed at `byte` of `text`: the reader puts a
/// record after skipped lines at the first of them, so those are counted past.
fn line_of(text: &str, byte: usize) -> usize {
    let before = text[..byte].matches('\n').count() + 1;
    let skipped = text[byte..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .count();
    before + skipped
}

/// How fabricsim reads CSV: fields trimmed, rows of any length (checked by the caller),
/// lines starting with `#` skipped; the first row a header if `header`.
pub(crate) fn table_reader(header: bool) -> csv::ReaderBuilder {
    let mut b = csv::ReaderBuilder::new();
    b.has_headers(header)
        .flexible(true)
        .trim(csv::Trim::All)
        .comment(Some(b'#'));
    b
}

/// The parameter sets of `spec`: the cross product (the last key varying fastest) or,
/// with `zip`, the i-th values of every key together.
pub fn combinations(spec: &SweepSpec) -> Result<Vec<Vec<(String, String)>>, String> {
    if spec.sets.is_empty() {
        return Err("sweep: nothing to sweep; give --set KEY=V1,V2,... or --table FILE".into());
    }
    if spec.zip {
        let n = spec.sets[0].1.len();
        if let Some((k, v)) = spec.sets.iter().find(|(_, v)| v.len() != n) {
            return Err(format!(
                "--zip: --set {k} has {} values, {} has {n}; zipped keys need as many values each",
                v.len(),
                spec.sets[0].0
            ));
        }
        return Ok((0..n)
            .map(|i| {
                spec.sets
                    .iter()
                    .map(|(k, v)| (k.clone(), v[i].clone()))
                    .collect()
            })
            .collect());
    }
    let mut out: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, values) in &spec.sets {
        out = out
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.push((k.clone(), v.clone()));
                    q
                })
            })
            .collect();
    }
    Ok(out)
}

/// A value as written on the command line, as TOML: a number, boolean, array or inline
/// table where it parses as one, else a string (so `400Gbps` needs no quotes).
pub(crate) fn toml_value(text: &str) -> toml::Value {
    match toml::from_str::<toml::Table>(&format!("v = {text}")) {
        Ok(mut t) => t.remove("v").expect("parsed"),
        Err(_) => toml::Value::String(text.trim_matches('"').to_string()),
    }
}

/// Sets the dotted `key` of `doc` to `value`, creating tables on the way; a number
/// indexes an array (`traffic.0.size`), which must have that entry.
pub(crate) fn set_key(doc: &mut toml::Table, key: &str, value: toml::Value) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last().expect("a key has a part");
    let mut table = doc;
    let mut walked = String::new();
    let mut parts = path.iter().peekable();
    while let Some(&part) = parts.next() {
        if !walked.is_empty() {
            walked.push('.');
        }
        walked.push_str(part);
        let entry = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let next = match entry {
            toml::Value::Table(t) => t,
            toml::Value::Array(items) => {
                let index_part = parts.next().ok_or_else(|| {
                    format!("--set {key}: {walked} is a list; give an index, as {walked}.0")
                })?;
                let i: usize = index_part.parse().map_err(|_| {
                    format!("--set {key}: {walked} is a list; {index_part} is not an index")
                })?;
                let len = items.len();
                let item = items.get_mut(i).ok_or_else(|| {
                    format!(
                        "--set {key}: {walked} has entries 0 to {}",
                        len.saturating_sub(1)
                    )
                })?;
                walked.push('.');
                walked.push_str(index_part);
                item.as_table_mut()
                    .ok_or_else(|| format!("--set {key}: {walked} is not a table"))?
            }
            _ => return Err(format!("--set {key}: {walked} is a value, not a table")),
        };
        table = next;
    }
    table.insert(last.to_string(), value);
    Ok(())
}

/// The scenario `text` with `parameters` set, parsed and validated; errors name the point.
pub(crate) fn point_scenario(
    text: &str,
    stem: &str,
    base: &Path,
    catalog: &Catalog,
    parameters: &[(String, String)],
    id: &str,
) -> Result<Scenario, String> {
    let shown = || {
        parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut doc: toml::Table =
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    for (k, v) in parameters {
        set_key(&mut doc, k, toml_value(v))?;
    }
    let edited = toml::to_string(&doc).map_err(|e| format!("point {id} ({}): {e}", shown()))?;
    Scenario::parse_with(&edited, stem, base, catalog).map_err(|e| {
        // Lines would count in the edited text, not the user's file: leave them out.
        let msg = e.to_string();
        let msg = match msg.strip_prefix("line ").and_then(|r| r.split_once(": ")) {
            Some((n, rest)) if n.bytes().all(|b| b.is_ascii_digit()) => rest.to_string(),
            _ => msg,
        };
        format!("point {id} ({}): {msg}", shown())
    })
}

/// Every point of the sweep (`rows`, from [`combinations`] or [`read_table`]), each
/// validated; the first bad one is the error.
pub fn points(
    file: &Path,
    rows: Vec<Vec<(String, String)>>,
    catalog: &Catalog,
) -> Result<Vec<Point>, String> {
    // The file as written first, so its own errors carry their lines.
    Scenario::load_with(file, catalog).map_err(|e| e.to_string())?;
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read scenario file {}: {e}", file.display()))?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = file.parent().unwrap_or(Path::new("."));
    let width = rows.len().saturating_sub(1).to_string().len().max(4);
    rows.into_iter()
        .enumerate()
        .map(|(i, parameters)| {
            let id = format!("p{i:0width$}");
            let scenario = point_scenario(&text, &stem, base, catalog, &parameters, &id)
                .map_err(|e| format!("{}: {e}", file.display()))?;
            Ok(Point {
                id,
                parameters,
                scenario,
            })
        })
        .collect()
}

/// The sweep's manifest, DIR/sweep.json: the scenario, its text's digest, the keys and
/// every point's parameters. A second run into DIR must bring the same manifest.
pub fn manifest(file: &Path, points: &[Point]) -> String {
    let text = std::fs::read(file).unwrap_or_default();
    let list: Vec<Value> = points
        .iter()
        .map(|p| {
            let mut m = Map::new();
            m.insert("id".into(), Value::String(p.id.clone()));
            m.insert("parameters".into(), parameters_json(&p.parameters));
            Value::Object(m)
        })
        .collect();
    let keys: Vec<Value> = points
        .first()
        .map(|p| {
            p.parameters
                .iter()
                .map(|(k, _)| Value::String(k.clone()))
                .collect()
        })
        .unwrap_or_default();
    let mut m = Map::new();
    // Absolute, so the array tasks (started elsewhere) write the same manifest.
    m.insert(
        "scenario".into(),
        Value::String(slurm::absolute(file).display().to_string()),
    );
    m.insert(
        "scenario_fnv1a64".into(),
        Value::String(format!("{:016x}", fnv1a(&text))),
    );
    m.insert("keys".into(), Value::Array(keys));
    m.insert("points".into(), Value::Array(list));
    serde_json::to_string_pretty(&Value::Object(m)).expect("serialises") + "\n"
}

/// FNV-1a, 64 bits: a stable digest of the scenario text (no hash-map order involved).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn parameters_json(parameters: &[(String, String)]) -> Value {
    let mut m = Map::new();
    for (k, v) in parameters {
        m.insert(k.clone(), Value::String(v.clone()));
    }
    Value::Object(m)
}

/// Prepares DIR for the sweep: writes its manifest, or checks that the one there is the
/// same sweep's (another scenario text, keys or values is another sweep). Creates
/// DIR/points.
pub fn prepare(dir: &Path, manifest: &str) -> Result<(), String> {
    output::claim_folder(dir, "sweep.json", manifest, "points", "sweep")
}

/// DIR/points/ID.json.
fn point_path(dir: &Path, id: &str) -> PathBuf {
    dir.join("points").join(format!("{id}.json"))
}

/// DIR/failed/ID.json.
fn failed_path(dir: &Path, id: &str) -> PathBuf {
    dir.join("failed").join(format!("{id}.json"))
}

/// A point's file: its id and parameters, then the run summary without the wall-clock
/// figures (so the same point gives the same bytes wherever it ran).
pub fn point_json(p: &Point, summary: &Summary) -> String {
    let Value::Object(mut m) = serde_json::to_value(summary).expect("serialises") else {
        unreachable!("a summary is an object")
    };
    m.remove("wall_seconds");
    m.remove("events_per_second");
    m.insert("point".into(), Value::String(p.id.clone()));
    m.insert("parameters".into(), parameters_json(&p.parameters));
    serde_json::to_string_pretty(&Value::Object(m)).expect("serialises") + "\n"
}

/// Runs one point and records it: its file in points/, or its error in failed/.
fn run_point(dir: &Path, p: &Point) -> Result<(), String> {
    let result =
        runner::execute(&p.scenario, &RunRequest::default()).map(|(s, _)| point_json(p, &s));
    match result {
        Ok(json) => {
            output::write_file(&point_path(dir, &p.id), json.as_bytes())
                .map_err(|e| format!("{}: {e}", p.id))?;
            let _ = std::fs::remove_file(failed_path(dir, &p.id));
            Ok(())
        }
        Err(e) => {
            record_failure(dir, p, &e);
            Err(format!("{}: {e}", p.id))
        }
    }
}

/// Writes DIR/failed/ID.json: the point, its parameters and its error. A later run of
/// the sweep tries the point again.
fn record_failure(dir: &Path, p: &Point, error: &str) {
    let mut m = Map::new();
    m.insert("point".into(), Value::String(p.id.clone()));
    m.insert("parameters".into(), parameters_json(&p.parameters));
    m.insert("error".into(), Value::String(error.to_string()));
    let _ = std::fs::create_dir_all(dir.join("failed"));
    let json = serde_json::to_string_pretty(&Value::Object(m)).expect("serialises") + "\n";
    let _ = output::write_file(&failed_path(dir, &p.id), json.as_bytes());
}

/// Removes temporary files in DIR/points left by writers that died (their process is
/// gone from this machine), so no partial file remains.
fn remove_stale_temporaries(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir.join("points"))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // `.{name}.{pid}.{n}.tmp`, as output::write_file names them.
        let mut fields = name.rsplit('.');
        let (Some("tmp"), Some(_), Some(pid)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if name.starts_with('.') && !Path::new("/proc").join(pid).exists() {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// What a sweep run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub skipped: usize,
    pub ran: usize,
    pub failed: Vec<String>,
}

/// How a local sweep runs one point (its index in the sweep, the point).
pub enum Runner<'a> {
    /// In this process, on a thread of its own.
    InProcess,
    /// In a process of its own: `command` + `--task INDEX --per-task 1` (the same sweep's
    /// command line), so a point that aborts or runs out of memory fails alone and the
    /// points share no allocator.
    Child(&'a [String]),
}

/// Runs one point in a child process; the child writes its file (or its failure).
fn run_child(dir: &Path, command: &[String], index: usize, p: &Point) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .args(["--task", &index.to_string(), "--per-task", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    // SAFETY: prctl is async-signal-safe; it only asks for SIGKILL when the parent dies,
    // so a killed sweep leaves no point running behind it.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let out = cmd
        .output()
        .map_err(|e| format!("{}: cannot start {}: {e}", p.id, command[0]))?;
    if out.status.success() && point_path(dir, &p.id).exists() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let why = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    if !failed_path(dir, &p.id).exists() {
        // The child died before it could say: record it here.
        record_failure(
            dir,
            p,
            &format!("the point's process ended with {}: {why}", out.status),
        );
    }
    Err(format!("{}: {why}", p.id))
}

/// Runs the points not yet finished in DIR, `jobs` at a time, with a progress bar on
/// standard error (points done, failed, ETA).
pub fn run_local(
    dir: &Path,
    points: &[Point],
    jobs: usize,
    runner: Runner,
) -> Result<Progress, String> {
    remove_stale_temporaries(dir).map_err(|e| format!("--out {}: {e}", dir.display()))?;
    let todo: Vec<(usize, &Point)> = points
        .iter()
        .enumerate()
        .filter(|(_, p)| !point_path(dir, &p.id).exists())
        .collect();
    let skipped = points.len() - todo.len();
    if skipped > 0 {
        eprintln!(
            "fabricsim sweep: {skipped} of {} points already finished in {}; running the other {}",
            points.len(),
            dir.display(),
            todo.len()
        );
    }
    let bar = ProgressBar::with_draw_target(Some(todo.len() as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:30} {pos}/{len} points, {msg} [{elapsed_precise}, ETA {eta}]",
        )
        .expect("static template"),
    );
    bar.set_message("0 failed");
    let failures = AtomicUsize::new(0);
    let results = runner::parallel_map(&todo, jobs, |&(index, p)| {
        let result = match runner {
            Runner::InProcess => run_point(dir, p),
            Runner::Child(command) => run_child(dir, command, index, p),
        };
        if result.is_err() {
            let n = failures.fetch_add(1, Ordering::Relaxed) + 1;
            bar.set_message(format!("{n} failed"));
        }
        bar.inc(1);
        result
    });
    bar.finish_and_clear();
    let mut failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    failed.sort();
    Ok(Progress {
        skipped,
        ran: todo.len(),
        failed,
    })
}

/// Runs task `task` of a job array: points `task x per_task ..` up to `per_task` of them,
/// skipping finished ones.
pub fn run_task(
    dir: &Path,
    points: &[Point],
    task: usize,
    per_task: usize,
) -> Result<Progress, String> {
    let start = task * per_task;
    if start >= points.len() {
        return Err(format!(
            "--task {task}: the sweep has {} points, {per_task} per task, so tasks 0 to {}",
            points.len(),
            points.len().div_ceil(per_task) - 1
        ));
    }
    let mine = &points[start..(start + per_task).min(points.len())];
    let mut progress = Progress::default();
    for p in mine {
        if point_path(dir, &p.id).exists() {
            progress.skipped += 1;
            continue;
        }
        progress.ran += 1;
        if let Err(e) = run_point(dir, p) {
            progress.failed.push(e);
        }
    }
    Ok(progress)
}

/// The headline columns of results.csv after the swept keys.
pub const HEADLINE: [&str; 23] = [
    "fabric",
    "flows",
    "completed",
    "sim_time_ns",
    "fct_p50_ns",
    "fct_p99_ns",
    "fct_max_ns",
    "goodput_gbps",
    "drops",
    "retransmitted_packets",
    "pfc_pause_frames",
    "pfc_paused_ns",
    "ecn_marked",
    "cnps",
    "busbw_gbps",
    "iteration_time_ns",
    "events",
    "collective_time_ns",
    "iteration_p99_ns",
    "job_makespan_ns",
    "job_slowdown_from_sharing",
    "failure_flows_delayed",
    "failure_max_flow_delay_ns",
];

/// The headline figures of a point file, in [`HEADLINE`] order.
fn headline(v: &Value) -> Vec<String> {
    let plain = |v: &Value| match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    vec![
        plain(&v["fabric"]),
        plain(&v["flows"]["count"]),
        plain(&v["flows"]["completed"]),
        plain(&v["sim_time_ns"]),
        plain(&v["fct_ns"]["p50"]),
        plain(&v["fct_ns"]["p99"]),
        plain(&v["fct_ns"]["max"]),
        plain(&v["goodput_gbps"]),
        plain(&v["drops"]),
        plain(&v["retransmitted_packets"]),
        plain(&v["pfc_pause_frames"]),
        plain(&v["pfc_paused_ns"]),
        plain(&v["ecn_marked"]),
        plain(&v["cnps"]),
        plain(&v["collectives"][0]["busbw_gbps"]),
        plain(&v["training"][0]["iteration_time_ns"]),
        plain(&v["events"]),
        plain(&v["collectives"][0]["time_ns"]),
        plain(&v["training"][0]["iteration_percentiles_ns"]["p99"]),
        plain(&v["jobs"][0]["makespan_ns"]),
        plain(&v["jobs"][0]["slowdown_from_sharing"]),
        plain(&v["failure_impact"]["flows_delayed"]),
        plain(&v["failure_impact"]["max_flow_delay_ns"]),
    ]
}

/// The swept keys recorded in DIR/sweep.json.
pub fn keys(dir: &Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(dir.join("sweep.json"))
        .map_err(|e| format!("{}: no sweep here (sweep.json: {e})", dir.display()))?;
    let v: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: sweep.json: {e}", dir.display()))?;
    Ok(v["keys"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|k| k.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default())
}

/// Refuses a `--plot` metric that results.csv will not have.
pub fn check_metric(metric: &str) -> Result<(), String> {
    if HEADLINE.contains(&metric) && metric != "fabric" {
        Ok(())
    } else {
        Err(format!(
            "--plot {metric}: not a headline figure; one of {}",
            HEADLINE[1..].join(", ")
        ))
    }
}

/// Writes DIR/results.csv from DIR/sweep.json and the finished points, in point order;
/// returns how many points it joined.
pub fn collect(dir: &Path) -> Result<usize, String> {
    let at = |e: String| format!("{}: {e}", dir.display());
    let keys = keys(dir)?;
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("sweep.json")).map_err(|e| at(e.to_string()))?,
    )
    .map_err(|e| at(format!("sweep.json: {e}")))?;
    let mut out = csv::Writer::from_writer(Vec::new());
    let header = ["point"].into_iter().chain(keys.iter().map(String::as_str));
    let csv_error = |e: csv::Error| at(format!("results.csv: {e}"));
    out.write_record(header.chain(HEADLINE))
        .map_err(csv_error)?;
    let mut joined = 0;
    for p in manifest["points"].as_array().into_iter().flatten() {
        let id = p["id"].as_str().unwrap_or_default();
        let Ok(text) = std::fs::read_to_string(point_path(dir, id)) else {
            continue;
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| at(format!("points/{id}.json: {e}")))?;
        let mut row = vec![id.to_string()];
        row.extend(
            keys.iter()
                .map(|k| p["parameters"][k].as_str().unwrap_or_default().to_string()),
        );
        row.extend(headline(&v));
        out.write_record(&row).map_err(csv_error)?;
        joined += 1;
    }
    let out = out.into_inner().map_err(|e| at(e.to_string()))?;
    output::write_file(&dir.join("results.csv"), &out).map_err(|e| at(e.to_string()))?;
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_set_tables_and_list_entries() {
        let mut doc: toml::Table =
            toml::from_str("[fabric]\nkind = \"infiniband\"\n[[traffic]]\nsize = 1\n").unwrap();
        set_key(&mut doc, "fabric.rocev2.ecn.kmin", toml_value("20KB")).unwrap();
        set_key(&mut doc, "traffic.0.size", toml_value("4MiB")).unwrap();
        set_key(&mut doc, "seed", toml_value("7")).unwrap();
        assert_eq!(
            doc["fabric"]["rocev2"]["ecn"]["kmin"].as_str(),
            Some("20KB")
        );
        assert_eq!(doc["traffic"][0]["size"].as_str(), Some("4MiB"));
        assert_eq!(doc["seed"].as_integer(), Some(7));
        let e = set_key(&mut doc, "traffic.3.size", toml_value("1")).unwrap_err();
        assert!(e.contains("traffic has entries 0 to 0"), "{e}");
        let e = set_key(&mut doc, "seed.x", toml_value("1")).unwrap_err();
        assert!(e.contains("seed is a value"), "{e}");
    }

    #[test]
    fn cross_product_and_zip() {
        let spec = |zip| SweepSpec {
            file: PathBuf::new(),
            sets: vec![parse_set("a=1,2").unwrap(), parse_set("b=x,y").unwrap()],
            zip,
        };
        let names = |rows: Vec<Vec<(String, String)>>| -> Vec<String> {
            rows.iter()
                .map(|r| r.iter().map(|(_, v)| v.as_str()).collect::<String>())
                .collect()
        };
        assert_eq!(
            names(combinations(&spec(false)).unwrap()),
            ["1x", "1y", "2x", "2y"]
        );
        assert_eq!(names(combinations(&spec(true)).unwrap()), ["1x", "2y"]);
        assert!(parse_set("novalue").is_err());
    }

    #[test]
    fn a_table_reads_quoted_fields_and_skips_comments_and_blank_lines() {
        let path = std::env::temp_dir().join(format!("fabricsim-table-{}.csv", std::process::id()));
        std::fs::write(
            &path,
            "x, y,z\n# a comment\n\n1,\"b,c\",\"d\"\"e\"\n  \n2, 3 ,4\n",
        )
        .unwrap();
        let rows = read_table(&path).unwrap();
        let values: Vec<Vec<&str>> = rows
            .iter()
            .map(|r| r.iter().map(|(_, v)| v.as_str()).collect())
            .collect();
        assert_eq!(values, [["1", "b,c", "d\"e"], ["2", "3", "4"]]);
        assert_eq!(rows[0][1].0, "y");
        std::fs::write(&path, "x,y\n1,2\n\n3\n").unwrap();
        let err = read_table(&path).unwrap_err();
        assert!(err.ends_with("line 4: 1 values for 2 keys"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }
}
