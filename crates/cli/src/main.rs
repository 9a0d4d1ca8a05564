//! The `fabricsim` command line. Standard output carries results only; progress and
//! errors go to standard error. Exit status: 0 for a clean, complete run; 3 for a run that
//! ended with flows unfinished (a deadlock, `stop_at`, a pause storm), a sweep with a failed
//! point or a validation case out of tolerance; 2 for bad input; 141
//! (as after SIGPIPE), quietly, when standard output is closed early.

#![forbid(unsafe_code)]

mod tune;

use clap::{Parser, Subcommand, ValueEnum};
use fabricsim_experiment::catalog::Catalog;
use fabricsim_experiment::formats::pcap::LinkType;
use fabricsim_experiment::runner::{self, PcapRequest, RunRequest};
use fabricsim_experiment::scenario::{FabricKind, Level, Scenario};
use fabricsim_experiment::{
    bench, calibrate, collective_sweep, compare, estimate, heap, report, results, sweep, validate,
};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `check` lists the nodes and links of networks up to this many hosts.
const NODES_LISTED_UP_TO_HOSTS: u32 = 1024;
/// Counts the heap once `bench` asks it to, for its measured memory.
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

#[derive(Parser)]
#[command(
    name = "fabricsim",
    version,
    about = "Packet-level InfiniBand and RoCEv2 fabric simulator for AI clusters"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum PcapLink {
    /// InfiniBand: ERF records (link type 197), which tshark 4.0 decodes (the default).
    Erf,
    /// InfiniBand: LINKTYPE_INFINIBAND (247), raw packets, for newer readers.
    Infiniband,
    /// RoCEv2: Ethernet frames (link type 1), the only choice and the default.
    Ethernet,
}

impl From<PcapLink> for LinkType {
    fn from(l: PcapLink) -> LinkType {
        match l {
            PcapLink::Erf => LinkType::Erf,
            PcapLink::Infiniband => LinkType::Infiniband,
            PcapLink::Ethernet => LinkType::Ethernet,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Run a scenario (the built-in default when FILE is omitted).
    Run {
        file: Option<PathBuf>,
        /// Print the JSON summary on standard output.
        #[arg(long)]
        json: bool,
        /// Write summary.json, flows.csv and ports.csv into this folder.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Write the run's packets (as they leave their source HCA) to this pcap file.
        #[arg(long)]
        pcap: Option<PathBuf>,
        /// Capture at most this many packets.
        #[arg(long)]
        pcap_count: Option<u64>,
        /// Capture only these flows (comma-separated flow ids as in flows.csv).
        #[arg(long, value_delimiter = ',')]
        pcap_flows: Option<Vec<u32>>,
        /// Capture link type (default: erf for InfiniBand, ethernet for RoCEv2).
        #[arg(long, value_enum)]
        pcap_link: Option<PcapLink>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override `[simulation] level`: packet, flow, or auto (flow level above
        /// `flow_above_hosts`).
        #[arg(long)]
        level: Option<String>,
        /// Run even if the estimated memory exceeds what is available.
        #[arg(long)]
        force: bool,
        /// Threads to use (default: every core): a training job's +1 us sensitivity run
        /// goes beside its main run, and a run at packet level is split over the threads
        /// it has (unless it asks for a capture, the PFC watchdog, SHARP or a NIC message
        /// rate, or its receivers or its first windows make it too sparse to gain).
        /// Results are the same for any number.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
    },
    /// Decide between InfiniBand and RoCEv2: the scenario on both (each on its own design
    /// for a [cluster], with the file's settings for it), priced, side by side, with the
    /// recommendation and where it would flip.
    Compare {
        /// The scenario; without it, the built-in default cluster
        /// (examples/cluster-default.toml).
        file: Option<PathBuf>,
        /// Print {"infiniband": R, "rocev2": R, "recommendation": D} (SCENARIO.md v2).
        #[arg(long)]
        json: bool,
        /// Write report.html, summary.md and summary.json into this folder.
        #[arg(long)]
        report: Option<PathBuf>,
        /// A cost catalog overriding the built-in one, entry by entry and key by key.
        #[arg(long)]
        catalog: Option<PathBuf>,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Override `[simulation] level`: packet, flow, or auto (flow level above
        /// `flow_above_hosts`).
        #[arg(long)]
        level: Option<String>,
        /// Run even if the estimated memory exceeds what is available.
        #[arg(long)]
        force: bool,
        /// Threads to use (default: every core): the two fabrics run side by side (with
        /// 4 or more, training jobs' sensitivity runs too). Results are the same for any
        /// number.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        threads: Option<u32>,
        /// Tune RoCEv2 for the job's time first (`fabricsim tune`) and compare it as a
        /// third candidate, "rocev2-tuned", at its robust worst case.
        #[arg(long)]
        tune: bool,
        /// Trials the tuner may run with --tune.
        #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(8..=100_000))]
        tune_budget: u32,
    },
    /// Sweep one collective over message sizes, as nccl-tests does, on the scenario's
    /// fabric and topology (its first collective entry, or an all-reduce over every host).
    Collective {
        file: PathBuf,
        /// Smallest size (nccl-tests syntax: 8, 64K, 8M, 1G).
        #[arg(short = 'b', long = "minbytes", default_value = "8")]
        begin: String,
        /// Largest size.
        #[arg(short = 'e', long = "maxbytes", default_value = "64M")]
        end: String,
        /// Multiplication factor between sizes.
        #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
        factor: u64,
        /// The collective: all-reduce, reduce-scatter, all-gather, all-to-all, broadcast.
        #[arg(long)]
        op: Option<String>,
        /// ring, tree, halving-doubling, hierarchical, direct, sharp or nvls.
        #[arg(long)]
        algorithm: Option<String>,
        /// Override `[simulation] level`: packet, flow, or auto.
        #[arg(long)]
        level: Option<String>,
        /// Print the results as a JSON list instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Sweep a scenario over values of its keys (their cross product, or --zip), on every
    /// core or as a Slurm job array; resumable: finished points are kept and skipped.
    Sweep(SweepArgs),
    /// Search RoCEv2's PFC, ECN and congestion-control settings for this cluster and
    /// workload (no drop, no deadlock, no watchdog trip), then re-run the best on other
    /// seeds and loads: DIR/tuned.toml, DIR/trials.csv, DIR/tune.json; resumable.
    Tune(tune::TuneArgs),
    /// Run the built-in suite of scenarios that reproduce published measurements and print
    /// measured against simulated, with each source (exit status 3 if a case moved).
    Validate {
        /// Print the list of {"case", "measured", "simulated", "error", "unit", "source"}.
        #[arg(long)]
        json: bool,
        /// Write validation.html (table and simulated-against-measured plot) and
        /// validation.json into this folder.
        #[arg(long)]
        report: Option<PathBuf>,
        /// The suite's folder (default examples/validation).
        #[arg(long)]
        suite: Option<PathBuf>,
    },
    /// Run the calibration suite at packet and flow level on both fabrics and print flow
    /// level's error against packet level with its target (exit status 3 if a figure
    /// misses its target).
    Calibrate {
        /// Print the rows as a JSON list instead of the table.
        #[arg(long)]
        json: bool,
        /// The suite's folder (default examples/calibration).
        #[arg(long)]
        suite: Option<PathBuf>,
        /// Record this run: the suite's record.json, and the table in BENCHMARKS.md (two
        /// folders above the suite) between its markers.
        #[arg(long)]
        record: bool,
    },
    /// Validate a scenario and print the effective configuration, defaults filled in.
    Check { file: PathBuf },
    /// Run the reference benchmark and print events/s, ns/event, wall time and memory.
    Bench {
        /// Bytes per host instead of the reference 64 MiB (e.g. "8MiB"), for quick looks.
        #[arg(long)]
        size: Option<String>,
        /// Timed runs of the scenario; the median is reported, with the range, because a
        /// shared virtual machine's speed drifts between runs.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
        runs: u32,
        /// Instead, the flow-level scale benchmark (examples/flow-training-16k.toml) on
        /// this many GPUs (a multiple of 8).
        #[arg(long, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
        flow_gpus: Option<u32>,
        /// The fabric of the flow-level benchmark (default: InfiniBand) or of the
        /// split-run benchmark (default: RoCEv2; InfiniBand with adaptive routing).
        #[arg(long, value_enum)]
        fabric: Option<BenchFabric>,
        /// Instead, the split-run benchmark: a permutation of 2 MB per host on a k-ary
        /// fat-tree of this k (examples/bench-permutation-k24.toml), on one thread and on
        /// --threads, with the speed-up.
        #[arg(long, value_parser = clap::value_parser!(u32).range(4..=64))]
        split_k: Option<u32>,
        /// Threads for --split-k (default: every core).
        #[arg(long, value_parser = clap::value_parser!(u32).range(2..))]
        threads: Option<u32>,
    },
}

/// A fabric for `bench --flow-gpus` and `--split-k`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum BenchFabric {
    Infiniband,
    Rocev2,
}

impl BenchFabric {
    fn kind(self) -> FabricKind {
        match self {
            BenchFabric::Infiniband => FabricKind::Infiniband,
            BenchFabric::Rocev2 => FabricKind::Rocev2,
        }
    }
}

/// Exit status of a run that ended with flows unfinished.
const EXIT_UNFINISHED: u8 = 3;
/// Exit status when standard output was closed before everything was written (the
/// shell's status for a process ended by SIGPIPE).
const EXIT_BROKEN_PIPE: u8 = 141;

/// How a command ended, beyond success.
enum Failure {
    /// Bad input (or a file that cannot be written): the message, exit status 2.
    Input(String),
    /// Standard output was closed early.
    BrokenPipe,
}

impl From<String> for Failure {
    fn from(msg: String) -> Self {
        Failure::Input(msg)
    }
}

/// Whether every flow of the command's runs completed.
#[derive(PartialEq)]
enum Completion {
    Complete,
    Unfinished,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(Completion::Complete) => ExitCode::SUCCESS,
        Ok(Completion::Unfinished) => ExitCode::from(EXIT_UNFINISHED),
        Err(Failure::Input(msg)) => {
            eprintln!("fabricsim: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::BrokenPipe) => ExitCode::from(EXIT_BROKEN_PIPE),
    }
}

#[derive(clap::Args)]
struct SweepArgs {
    /// The scenario file (with --collect: the sweep's folder).
    target: PathBuf,
    /// A key (dotted TOML path: fabric.kind, fabric.rocev2.ecn.kmin, traffic.0.size) and
    /// its values; repeat for more keys.
    #[arg(long = "set", value_name = "KEY=V1,V2,...")]
    sets: Vec<String>,
    /// Pair the i-th values of every key instead of taking the cross product.
    #[arg(long)]
    zip: bool,
    /// A sweep table: a CSV file whose header names the keys, one point per row.
    #[arg(long, conflicts_with_all = ["sets", "zip"])]
    table: Option<PathBuf>,
    /// The sweep's folder: sweep.json, points/ID.json, results.csv.
    #[arg(long, required_unless_present = "collect")]
    out: Option<PathBuf>,
    /// Points run at once (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Write DIR/sweep.sbatch (a job array) and submit it with sbatch.
    #[arg(long)]
    slurm: bool,
    /// Write DIR/sweep.sbatch only.
    #[arg(long)]
    slurm_script: bool,
    /// With --slurm: wait for the array to end, then collect.
    #[arg(long)]
    wait: bool,
    /// Slurm partition, time and memory per task (Slurm's syntax).
    #[arg(long)]
    partition: Option<String>,
    #[arg(long)]
    time: Option<String>,
    #[arg(long)]
    mem: Option<String>,
    /// Array tasks running at once (--array=0-N%M).
    #[arg(long)]
    max_running: Option<usize>,
    /// Points per array task.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    per_task: u32,
    /// Run only array task K's points (what the sbatch script runs).
    #[arg(long)]
    task: Option<usize>,
    /// Join DIR's finished points into DIR/results.csv (TARGET is the folder).
    #[arg(long)]
    collect: bool,
    /// Plot a headline figure against the first swept key (repeatable): DIR/plot-METRIC.svg
    /// and DIR/report.html.
    #[arg(long)]
    plot: Vec<String>,
    /// A cost catalog overriding the built-in one.
    #[arg(long)]
    catalog: Option<PathBuf>,
}

/// The scenario in `file`, or the built-in default; `seed` overrides its seed.
fn load(file: Option<PathBuf>, seed: Option<u64>) -> Result<Scenario, String> {
    let mut scenario = match file {
        Some(path) => Scenario::load(&path),
        None => Scenario::builtin_default(),
    }
    .map_err(|e| e.to_string())?;
    if let Some(s) = seed {
        scenario.seed = s;
    }
    Ok(scenario)
}

/// The scenario in `file` (the built-in default cluster when `None`), priced with the
/// built-in catalog as the file `catalog` overrides it; `seed` overrides its seed.
fn load_with(
    file: Option<PathBuf>,
    catalog: Option<PathBuf>,
    seed: Option<u64>,
) -> Result<Scenario, String> {
    let base = self::catalog(catalog.as_ref())?;
    let mut scenario = match file {
        Some(f) => Scenario::load_with(&f, &base),
        None => Scenario::builtin_cluster(&base),
    }
    .map_err(|e| e.to_string())?;
    if let Some(s) = seed {
        scenario.seed = s;
    }
    Ok(scenario)
}

/// The catalog: the built-in one, overridden by the file `path`.
fn catalog(path: Option<&PathBuf>) -> Result<Catalog, String> {
    let mut base = Catalog::builtin();
    if let Some(path) = path {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--catalog {}: {e}", path.display()))?;
        base.merge_text(&text, &path.display().to_string())
            .map_err(|e| format!("--catalog {e}"))?;
    }
    Ok(base)
}

/// `fabricsim sweep`: validates every point, then runs them here, or writes (and submits)
/// the Slurm array, or runs one array task, or collects; results.csv and plots at the end.
fn sweep(a: SweepArgs) -> Result<Completion, Failure> {
    for m in &a.plot {
        sweep::check_metric(m)?;
    }
    if a.collect {
        let n = sweep::collect(&a.target)?;
        if !a.plot.is_empty() {
            sweep::plot::write(&a.target, &a.plot, &sweep::keys(&a.target)?)?;
        }
        out(&format!(
            "{n} finished points joined into {}\n",
            a.target.join("results.csv").display()
        ))?;
        return Ok(Completion::Complete);
    }
    let dir = a
        .out
        .clone()
        .expect("clap requires --out without --collect");
    let rows = match &a.table {
        Some(t) => sweep::read_table(t)?,
        None => {
            let sets = a
                .sets
                .iter()
                .map(|s| sweep::parse_set(s))
                .collect::<Result<Vec<_>, _>>()?;
            sweep::combinations(&sweep::SweepSpec {
                file: a.target.clone(),
                sets,
                zip: a.zip,
            })?
        }
    };
    let points = sweep::points(&a.target, rows, &catalog(a.catalog.as_ref())?)?;
    sweep::prepare(&dir, &sweep::manifest(&a.target, &points))?;
    let progress = if let Some(task) = a.task {
        sweep::run_task(&dir, &points, task, a.per_task as usize)?
    } else if a.slurm || a.slurm_script {
        return slurm(&a, &dir, points.len());
    } else {
        let jobs = a.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, |n| n.get()),
            |j| j as usize,
        );
        let command = task_command(&a, &dir)?;
        sweep::run_local(&dir, &points, jobs, sweep::Runner::Child(&command))?
    };
    if a.task.is_none() {
        sweep::collect(&dir)?;
        if !a.plot.is_empty() {
            sweep::plot::write(&dir, &a.plot, &sweep::keys(&dir)?)?;
        }
    }
    for f in &progress.failed {
        eprintln!("fabricsim sweep: point {f}");
    }
    out(&format!(
        "{} points: {} run, {} already finished, {} failed; results in {}\n",
        points.len(),
        progress.ran,
        progress.skipped,
        progress.failed.len(),
        dir.join("results.csv").display()
    ))?;
    Ok(if progress.failed.is_empty() {
        Completion::Complete
    } else {
        Completion::Unfinished
    })
}

/// The command line that runs this sweep's array tasks (absolute paths, without --task
/// and --per-task): what the Slurm script and the local child processes run.
fn task_command(a: &SweepArgs, dir: &std::path::Path) -> Result<Vec<String>, String> {
    use sweep::slurm::absolute;
    let exe = std::env::current_exe().map_err(|e| format!("the fabricsim binary's path: {e}"))?;
    let mut command = vec![
        exe.display().to_string(),
        "sweep".into(),
        absolute(&a.target).display().to_string(),
    ];
    for s in &a.sets {
        command.extend(["--set".into(), s.clone()]);
    }
    if a.zip {
        command.push("--zip".into());
    }
    if let Some(t) = &a.table {
        command.extend(["--table".into(), absolute(t).display().to_string()]);
    }
    if let Some(c) = &a.catalog {
        command.extend(["--catalog".into(), absolute(c).display().to_string()]);
    }
    command.extend(["--out".into(), absolute(dir).display().to_string()]);
    Ok(command)
}

/// `--slurm` / `--slurm-script`: writes DIR/sweep.sbatch for the array and submits it.
fn slurm(a: &SweepArgs, dir: &std::path::Path, points: usize) -> Result<Completion, Failure> {
    use sweep::slurm::{absolute, script, submit, SlurmOptions};
    let mut command = task_command(a, dir)?;
    command.extend(["--per-task".into(), a.per_task.to_string()]);
    let dir = absolute(dir);
    let options = SlurmOptions {
        partition: a.partition.clone(),
        time: a.time.clone(),
        mem: a.mem.clone(),
        max_running: a.max_running,
    };
    let tasks = points.div_ceil(a.per_task as usize);
    let text = script("sweep", &dir, &command, tasks, &options);
    std::fs::create_dir_all(dir.join("slurm"))
        .map_err(|e| format!("--out {}: {e}", dir.display()))?;
    let path = dir.join("sweep.sbatch");
    fabricsim_experiment::output::write_file(&path, text.as_bytes())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !a.slurm {
        out(&format!("{}\n", path.display()))?;
        return Ok(Completion::Complete);
    }
    let job = submit(&path, a.wait)?;
    if a.wait {
        let n = sweep::collect(&dir)?;
        if !a.plot.is_empty() {
            sweep::plot::write(&dir, &a.plot, &sweep::keys(&dir)?)?;
        }
        out(&format!(
            "job {job}: {n} of {points} points finished; results in {}\n",
            dir.join("results.csv").display()
        ))?;
        return Ok(if n == points {
            Completion::Complete
        } else {
            Completion::Unfinished
        });
    }
    out(&format!("submitted job {job}: {tasks} array tasks; `fabricsim sweep {} --collect` joins the results\n", dir.display()))?;
    Ok(Completion::Complete)
}

/// Applies `--level`, refusing an unknown level or flow level where the scenario needs
/// packets.
fn set_level(scenario: &mut Scenario, level: Option<&str>) -> Result<(), String> {
    let Some(text) = level else { return Ok(()) };
    let level = Level::parse(text)
        .ok_or_else(|| format!("--level {text}: expected packet, flow or auto"))?;
    scenario
        .set_level(level)
        .map_err(|e| format!("--level {text}: {e}"))
}

/// Says once on standard error which level `auto` chose and why, for a command whose
/// runs would each say it.
fn say_level(scenario: &Scenario) {
    if let Some(why) = scenario.runs_at_flow_level().1 {
        eprintln!("fabricsim: {why}");
    }
}

/// Refuses a run estimated not to fit in memory, unless forced; returns its estimated
/// bytes (0 when forced: nothing is estimated then).
fn fits(scenario: &Scenario, force: bool) -> Result<u64, String> {
    if force {
        return Ok(0);
    }
    let e = estimate::estimate(scenario)?;
    estimate::check_fits(scenario, &e)?;
    Ok(e.memory_bytes)
}

/// The threads a command uses: `--threads`, or every core; one if the runs it would
/// start at once (the first of `runs`, each given by its estimated bytes, one per
/// thread) do not fit in memory together, or, for a run that `splits` over the threads,
/// if its parts (each about a whole run's state, counted as one) do not.
fn threads_for(asked: Option<u32>, runs: &[u64], splits: bool) -> Result<usize, String> {
    let threads = asked.map_or_else(default_threads, |n| n as usize);
    let together: u64 = match (splits, runs.first()) {
        (true, Some(&bytes)) => bytes.saturating_mul(threads as u64),
        _ => runs.iter().take(threads).sum(),
    };
    match estimate::memory_budget()? {
        Some(free) if threads > 1 && (runs.len() > 1 || splits) && together > free => {
            eprintln!(
                "fabricsim: the runs need about {} MB side by side{} and {} MB are available: running them one at a time, on one thread",
                together >> 20,
                if splits { " (a split run keeps a copy of its state per thread)" } else { "" },
                free >> 20
            );
            Ok(1)
        }
        _ => Ok(threads),
    }
}

/// Without `--threads`: every core that other processes leave idle (so that a run split
/// over threads never waits on a busy neighbour at every window), said on standard error
/// when that is fewer than every core.
fn default_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores == 1 {
        return 1;
    }
    let idle = estimate::idle_cores();
    if idle < cores {
        eprintln!(
            "fabricsim: other processes keep {} of the {cores} cores busy: running on {idle} thread{} (--threads N to choose)",
            cores - idle,
            if idle == 1 { "" } else { "s" }
        );
    }
    idle
}

/// Writes `text` to standard output; a closed pipe ends the command quietly.
fn out(text: &str) -> Result<(), Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Failure::BrokenPipe),
        Err(e) => Err(Failure::Input(format!("standard output: {e}"))),
    }
}

fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("results serialise") + "\n"
}

/// Complete if every summary's flows all completed; notes the others on standard error.
fn completion(summaries: &[&results::Summary]) -> Completion {
    let mut all = Completion::Complete;
    for s in summaries {
        if let Some(note) = s.unfinished_note() {
            eprintln!("fabricsim: {} ({}): {note}", s.scenario, s.fabric);
            all = Completion::Unfinished;
        }
    }
    all
}

fn dispatch(cmd: Command) -> Result<Completion, Failure> {
    match cmd {
        Command::Run {
            file,
            json: as_json,
            out: dir,
            pcap,
            pcap_count,
            pcap_flows,
            pcap_link,
            seed,
            level,
            force,
            threads,
        } => {
            let mut scenario = load(file, seed)?;
            set_level(&mut scenario, level.as_deref())?;
            // Settled once, for every run `run` makes: the memory check, the threads and
            // the runs ask it again.
            let runs = scenario.runs_made();
            if let Some(why) = scenario.settle_level_for(runs) {
                eprintln!("fabricsim: {why}");
            }
            let bytes = fits(&scenario, force)?;
            // The runs beside the main one (+1 us, jobs alone, without failures) are the
            // same size as it.
            // A run at packet level splits over the threads, a copy of its state in each.
            let splits = !scenario.runs_at_flow_level().0;
            let threads = threads_for(threads, &vec![bytes; runs], splits)?;
            let request = RunRequest {
                out: dir,
                pcap: pcap.map(|path| PcapRequest {
                    path,
                    count: pcap_count,
                    flows: pcap_flows,
                    link: pcap_link.map(LinkType::from),
                }),
                rates: false,
                threads,
            };
            let (summary, outcome) = runner::execute(&scenario, &request)?;
            for note in [summary.deadlock_note(), summary.pfc_cycles_note()]
                .into_iter()
                .flatten()
            {
                eprintln!("fabricsim: {note}");
            }
            if as_json {
                out(&json(&summary))?;
            } else {
                out(&(summary.one_line(outcome.report.sim_time) + "\n"))?;
            }
            Ok(completion(&[&summary]))
        }
        Command::Sweep(args) => sweep(args),
        Command::Tune(args) => tune::run(args),
        Command::Validate {
            json: as_json,
            report,
            suite,
        } => {
            let dir = suite.unwrap_or_else(validate::default_suite);
            let results = validate::run_suite(&dir, &Catalog::builtin())?;
            if let Some(r) = &report {
                validate::write_report(r, &results)
                    .map_err(|e| format!("--report {}: {e}", r.display()))?;
            }
            if as_json {
                out(&json(&results))?;
            } else {
                out(&validate::table(&results))?;
            }
            let moved: Vec<&str> = results
                .iter()
                .filter(|r| !r.holds())
                .map(|r| r.case.as_str())
                .collect();
            if moved.is_empty() {
                Ok(Completion::Complete)
            } else {
                eprintln!(
                    "fabricsim validate: outside tolerance, beyond the {:.0} % a known miss may hold, or moved from the recorded figure: {}",
                    validate::KNOWN_MISS_BOUND * 100.0,
                    moved.join(", ")
                );
                Ok(Completion::Unfinished)
            }
        }
        Command::Calibrate {
            json: as_json,
            suite,
            record,
        } => {
            let dir = suite.unwrap_or_else(calibrate::default_suite);
            let rows = calibrate::run_suite(&dir, &Catalog::builtin())?;
            if record {
                let benchmarks = dir.join("../../BENCHMARKS.md");
                calibrate::write_record(&rows, &dir, &benchmarks)?;
                eprintln!(
                    "recorded in {} and {}",
                    calibrate::record_file(&dir).display(),
                    benchmarks.display()
                );
            }
            if as_json {
                out(&json(&rows))?;
            } else {
                out(&calibrate::table(&rows))?;
            }
            let missed: Vec<String> = rows
                .iter()
                .filter(|r| !r.within())
                .map(|r| format!("{} {} {}", r.case, r.fabric, r.metric))
                .collect();
            if missed.is_empty() {
                Ok(Completion::Complete)
            } else {
                eprintln!("fabricsim calibrate: outside target: {}", missed.join(", "));
                Ok(Completion::Unfinished)
            }
        }
        Command::Check { file } => {
            let scenario = load(Some(file), None)?;
            runner::require_traffic(&scenario)?;
            let mut text = scenario.effective_toml() + "\n";
            for s in scenario.compared() {
                text += &estimate::estimate(&s)?.comment();
            }
            // The node ids [[failure]] entries name; a large cluster's are not listed.
            if scenario.host_count() <= NODES_LISTED_UP_TO_HOSTS {
                for s in scenario.compared() {
                    text += &format!("# {} network:\n", s.fabric.label());
                    text += &fabricsim_experiment::scenario::describe_nodes(&s.build_topology()?);
                }
            }
            out(&text)?;
            Ok(Completion::Complete)
        }
        Command::Bench {
            size,
            runs,
            flow_gpus,
            fabric,
            split_k,
            threads,
        } => {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
            let threads = threads.map_or(cores, |t| t as usize);
            let report = match (flow_gpus, split_k) {
                (_, Some(k)) => bench::split(
                    k,
                    fabric.map_or(FabricKind::Rocev2, BenchFabric::kind),
                    threads,
                    runs,
                )?,
                (Some(gpus), None) => bench::flow(
                    gpus,
                    fabric.map_or(FabricKind::Infiniband, BenchFabric::kind),
                )?,
                (None, None) => bench::run(size.as_deref(), runs)?,
            };
            out(&report)?;
            Ok(Completion::Complete)
        }
        Command::Collective {
            file,
            begin,
            end,
            factor,
            op,
            algorithm,
            level,
            json: as_json,
        } => {
            let mut scenario = load(Some(file), None)?;
            set_level(&mut scenario, level.as_deref())?;
            say_level(&scenario);
            let c = collective_sweep::template(&scenario, op.as_deref(), algorithm.as_deref())?;
            let list = collective_sweep::sizes(
                collective_sweep::parse_size("-b", &begin)?,
                collective_sweep::parse_size("-e", &end)?,
                factor,
            )?;
            // The table goes out row by row as sizes finish; JSON is one list at the end.
            if !as_json {
                out(&collective_sweep::header(&c))?;
            }
            let mut rows = Vec::new();
            let mut failed: Option<Failure> = None;
            let ran = collective_sweep::run(&scenario, &c, &list, |r| {
                if as_json {
                    rows.push(r.clone());
                    return Ok(());
                }
                out(&collective_sweep::table_row(&c, r)).map_err(|f| {
                    failed = Some(f);
                    "standard output failed".to_string()
                })
            });
            if let Some(f) = failed {
                return Err(f);
            }
            ran?;
            if as_json {
                out(&json(&rows))?;
            }
            Ok(Completion::Complete)
        }
        Command::Compare {
            file,
            json: as_json,
            report,
            catalog,
            seed,
            level,
            force,
            threads,
            tune,
            tune_budget,
        } => {
            let cat = self::catalog(catalog.as_ref())?;
            let mut scenario = load_with(file.clone(), catalog, seed)?;
            set_level(&mut scenario, level.as_deref())?;
            let fabrics = scenario.compared_fabrics();
            let mut reasons: Vec<&String> = fabrics.iter().flat_map(|s| &s.level_reason).collect();
            reasons.dedup();
            reasons.iter().for_each(|why| eprintln!("fabricsim: {why}"));
            // Each fabric may have its own design: both must fit.
            let mut runs = fabrics
                .iter()
                .map(|s| fits(s, force))
                .collect::<Result<Vec<_>, _>>()?;
            // The fabrics start first; a training job's +1 us runs (the same sizes) join
            // them from four threads on.
            if runner::has_training(&scenario) {
                runs.extend_from_within(..);
            }
            let threads = threads_for(threads, &runs, false)?;
            let mut c = compare::run_both(&scenario, report.is_some(), threads)?;
            if tune || scenario.compare.tuned_candidate {
                let (tuned, tuning) = fabricsim_experiment::tune::for_compare(
                    file.as_deref(),
                    &cat,
                    tune_budget as usize,
                    threads,
                )?;
                c = c.with_tuned(tuned, tuning, threads)?;
            }
            if let Some(dir) = &report {
                report::write(dir, &c).map_err(|e| format!("--report {}: {e}", dir.display()))?;
                eprintln!(
                    "fabricsim: report written to {} (with summary.md and summary.json)",
                    dir.join("report.html").display()
                );
            }
            if as_json {
                out(&c.to_json())?;
            } else {
                out(&compare::table(&c))?;
            }
            Ok(completion(&c.summaries()))
        }
    }
}
