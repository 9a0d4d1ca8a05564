//! The `fabricsim` command line. Standard output carries results only; progress and
//! errors go to standard error. Exit status: 0 for a clean, complete run; 3 for a run that
//! ended with flows unfinished (a deadlock, `stop_at`, a pause storm); 2 for bad input; 141
//! (as after SIGPIPE), quietly, when standard output is closed early.

use clap::{Parser, Subcommand, ValueEnum};
use fabricsim_experiment::catalog::Catalog;
use fabricsim_experiment::formats::pcap::LinkType;
use fabricsim_experiment::runner::{self, PcapRequest, RunRequest};
use fabricsim_experiment::scenario::{FabricKind, Scenario};
use fabricsim_experiment::{bench, collective_sweep, compare, estimate, heap, report, results};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Counts the heap, for `bench`'s measured memory.
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
        /// Run even if the estimated memory exceeds what is available.
        #[arg(long)]
        force: bool,
    },
    /// Run the scenario's topology and traffic on InfiniBand and on RoCEv2 (each with the
    /// file's settings for it, defaults elsewhere) and print the figures side by side.
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
        /// Run even if the estimated memory exceeds what is available.
        #[arg(long)]
        force: bool,
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
        /// ring, tree, halving-doubling or direct.
        #[arg(long)]
        algorithm: Option<String>,
        /// Print the results as a JSON list instead of the table.
        #[arg(long)]
        json: bool,
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
    },
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
    let mut base = Catalog::builtin();
    if let Some(path) = catalog {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("--catalog {}: {e}", path.display()))?;
        base.merge_text(&text, &path.display().to_string())
            .map_err(|e| format!("--catalog {e}"))?;
    }
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

/// Refuses a run estimated not to fit in memory, unless forced.
fn fits(scenario: &Scenario, force: bool) -> Result<(), String> {
    if force {
        return Ok(());
    }
    estimate::check_fits(scenario, &estimate::estimate(scenario)?)
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
            force,
        } => {
            let scenario = load(file, seed)?;
            fits(&scenario, force)?;
            let request = RunRequest {
                out: dir,
                pcap: pcap.map(|path| PcapRequest {
                    path,
                    count: pcap_count,
                    flows: pcap_flows,
                    link: pcap_link.map(LinkType::from),
                }),
                rates: false,
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
        Command::Check { file } => {
            let scenario = load(Some(file), None)?;
            let e = estimate::estimate(&scenario)?;
            out(&(scenario.effective_toml() + &e.comment()))?;
            Ok(Completion::Complete)
        }
        Command::Bench { size, runs } => {
            out(&bench::run(size.as_deref(), runs)?)?;
            Ok(Completion::Complete)
        }
        Command::Collective {
            file,
            begin,
            end,
            factor,
            op,
            algorithm,
            json: as_json,
        } => {
            let scenario = load(Some(file), None)?;
            let c = collective_sweep::template(&scenario, op.as_deref(), algorithm.as_deref())?;
            let list = collective_sweep::sizes(
                collective_sweep::parse_size("-b", &begin)?,
                collective_sweep::parse_size("-e", &end)?,
                factor,
            )?;
            let rows = collective_sweep::run(&scenario, &c, &list)?;
            if as_json {
                out(&json(&rows))?;
            } else {
                out(&collective_sweep::table(&c, &rows))?;
            }
            Ok(Completion::Complete)
        }
        Command::Compare {
            file,
            json: as_json,
            report,
            catalog,
            seed,
            force,
        } => {
            let scenario = load_with(file, catalog, seed)?;
            for fabric in [FabricKind::Infiniband, FabricKind::Rocev2] {
                // Each fabric may have its own design: both must fit.
                let s = Scenario {
                    fabric,
                    ..scenario.clone()
                };
                fits(&s, force)?;
            }
            let c = compare::run_both(&scenario, report.is_some())?;
            if let Some(dir) = &report {
                report::write(dir, &c).map_err(|e| format!("--report {}: {e}", dir.display()))?;
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
