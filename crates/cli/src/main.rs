//! The `fabricsim` command line. Standard output carries results only; progress and
//! errors go to standard error. Bad input exits with status 2.

use clap::{Parser, Subcommand, ValueEnum};
use fabricsim::pcap::{self, LinkType};
use fabricsim::results::{self, write_atomic};
use fabricsim::scenario::{FabricKind, Scenario};
use fabricsim::{compare, experiment, heap, sweep};
use fabricsim_fabric::infiniband::{CaptureFilter, Simulation};
use std::path::PathBuf;
use std::process::ExitCode;

/// The scenario `fabricsim run` uses when given no file (also examples/default.toml).
const DEFAULT_SCENARIO: &str = include_str!("../../../examples/default.toml");
/// The benchmark's reference scenario: a 128-host k=8 fat-tree, permutation of 64 MiB.
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

const BENCH_SCENARIO: &str = include_str!("../../../examples/bench-fat-tree-k8.toml");

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
    },
    /// Run the scenario's topology and traffic on InfiniBand and on RoCEv2 (each with the
    /// file's settings for it, defaults elsewhere) and print the figures side by side.
    Compare {
        file: PathBuf,
        /// Print both JSON summaries as {"infiniband": ..., "rocev2": ...}.
        #[arg(long)]
        json: bool,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("fabricsim: {msg}");
            ExitCode::from(2)
        }
    }
}

fn load(file: &Option<PathBuf>) -> Result<Scenario, String> {
    match file {
        Some(path) => Scenario::load(path).map_err(|e| e.to_string()),
        None => Scenario::parse(DEFAULT_SCENARIO, "default").map_err(|e| e.to_string()),
    }
}

fn dispatch(cmd: Command) -> Result<(), String> {
    match cmd {
        Command::Run {
            file,
            json,
            out,
            pcap,
            pcap_count,
            pcap_flows,
            pcap_link,
            seed,
        } => {
            let mut scenario = load(&file)?;
            if let Some(s) = seed {
                scenario.seed = s;
            }
            let flow_count = fabricsim_fabric::workload::build(&scenario.traffic, scenario.seed)
                .messages
                .len() as u32;
            if let Some(bad) = pcap_flows.iter().flatten().find(|&&f| f >= flow_count) {
                return Err(format!(
                    "--pcap-flows {bad}: the scenario has flows 0 to {}",
                    flow_count.saturating_sub(1)
                ));
            }
            let allowed = LinkType::allowed(scenario.fabric);
            let link = match pcap_link {
                None => allowed[0],
                Some(PcapLink::Erf) => LinkType::Erf,
                Some(PcapLink::Infiniband) => LinkType::Infiniband,
                Some(PcapLink::Ethernet) => LinkType::Ethernet,
            };
            if !allowed.contains(&link) {
                return Err(format!(
                    "--pcap-link {}: a {} capture can be written as {}",
                    format!("{link:?}").to_lowercase(),
                    scenario.fabric.name(),
                    allowed
                        .iter()
                        .map(|l| format!("{l:?}").to_lowercase())
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
            let capture = pcap.as_ref().map(|_| CaptureFilter {
                limit: pcap_count,
                flows: pcap_flows,
            });
            let outcome = experiment::run(&scenario, capture, true)?;
            let mut summary = results::summary(&scenario, &outcome);
            if !outcome.trainings.is_empty() {
                let plus = experiment::plus_one_us_per_exchange(&scenario);
                results::add_sensitivity(&mut summary, &experiment::run(&plus, None, true)?);
            }
            if let Some(dir) = &out {
                results::write_out_dir(dir, &summary, &outcome)
                    .map_err(|e| format!("--out {}: {e}", dir.display()))?;
            }
            if let Some(path) = &pcap {
                write_atomic(path, &pcap::encode(&outcome.captured, link))
                    .map_err(|e| format!("--pcap {}: {e}", path.display()))?;
            }
            if let Some(d) = &summary.deadlock {
                let hops: Vec<String> = d
                    .cycle
                    .iter()
                    .map(|h| format!("node {} port {} -> node {}", h.node, h.port, h.to_node))
                    .collect();
                eprintln!(
                    "fabricsim: deadlock at {} ns ({}); the run stopped. Cycle of blocked egresses, each waiting on the next switch's buffer: {}",
                    d.detected_at_ns,
                    match scenario.fabric {
                        FabricKind::Infiniband => "a credit loop",
                        FabricKind::Rocev2 => "a cycle of PFC-paused queues",
                    },
                    hops.join(", ")
                );
            }
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&summary).expect("summary serialises")
                );
            } else {
                println!(
                    "{}: {} of {} flows completed in {} simulated; goodput {:.2} Gb/s; FCT p50 {} ns, p99 {} ns; {} events in {:.3} s ({:.1} M events/s)",
                    summary.scenario,
                    summary.flows.completed,
                    summary.flows.count,
                    outcome.report.sim_time,
                    summary.goodput_gbps,
                    summary.fct_ns.p50,
                    summary.fct_ns.p99,
                    summary.events,
                    summary.wall_seconds,
                    summary.events_per_second / 1e6
                );
            }
            Ok(())
        }
        Command::Check { file } => {
            let scenario = load(&Some(file))?;
            scenario.build_topology()?;
            print!("{}", scenario.effective_toml());
            Ok(())
        }
        Command::Bench { size, runs } => bench(size, runs),
        Command::Collective {
            file,
            begin,
            end,
            factor,
            op,
            algorithm,
            json,
        } => {
            let scenario = load(&Some(file))?;
            let c = sweep::template(&scenario, op.as_deref(), algorithm.as_deref())?;
            let list = sweep::sizes(
                sweep::parse_size("-b", &begin)?,
                sweep::parse_size("-e", &end)?,
                factor,
            )?;
            let rows = sweep::run(&scenario, &c, &list)?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("results serialise")
                );
            } else {
                print!("{}", sweep::table(&c, &rows));
            }
            Ok(())
        }
        Command::Compare { file, json, seed } => {
            let mut scenario = load(&Some(file))?;
            if let Some(s) = seed {
                scenario.seed = s;
            }
            let [ib, roce] = compare::run_both(&scenario)?;
            if json {
                let both = serde_json::json!({ "infiniband": ib, "rocev2": roce });
                println!(
                    "{}",
                    serde_json::to_string_pretty(&both).expect("summaries serialise")
                );
            } else {
                print!("{}", compare::table(&ib, &roce));
            }
            Ok(())
        }
    }
}

/// Peak resident memory of this process in bytes (Linux VmHWM), if readable.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The reference scenario with `size` per host and, if given, another VL buffer size.
fn bench_scenario(size: &str, vl_buffer: Option<&str>) -> Result<Scenario, String> {
    let mut text = BENCH_SCENARIO.replace("size = \"64MiB\"", &format!("size = \"{size}\""));
    if let Some(b) = vl_buffer {
        text = text.replace(
            "adaptive_routing = true",
            &format!("adaptive_routing = true\nvl_buffer = \"{b}\""),
        );
    }
    Scenario::parse(&text, "bench-fat-tree-k8").map_err(|e| e.to_string())
}

/// Runs `scenario`, returning its outcome and the growth of the heap's peak over the heap
/// in use before it started.
fn measured_run(scenario: &Scenario) -> Result<(experiment::Outcome, usize), String> {
    let before = heap::in_use();
    heap::reset_peak();
    let outcome = experiment::run(scenario, None, true)?;
    Ok((outcome, heap::peak().saturating_sub(before)))
}

fn bench(size: Option<String>, runs: u32) -> Result<(), String> {
    let scenario = bench_scenario(size.as_deref().unwrap_or("64MiB"), None)?;
    let (outcome, heap_growth) = measured_run(&scenario)?;
    let mut walls = vec![outcome.wall_seconds];
    for _ in 1..runs {
        let again = experiment::run(&scenario, None, true)?;
        if again.report.events != outcome.report.events {
            return Err("the benchmark's runs differ: the simulator is not deterministic".into());
        }
        walls.push(again.wall_seconds);
    }
    walls.sort_by(f64::total_cmp);
    let median = walls[walls.len() / 2];
    let r = &outcome.report;
    let rate = |wall: f64| r.events as f64 / wall;
    println!("scenario            {}", scenario.name);
    println!("hosts               128 (k=8 fat-tree), permutation");
    println!("events              {}", r.events);
    println!("runs                {runs}");
    println!("wall_seconds        {median:.3}");
    println!("events_per_second   {:.0}", rate(median));
    println!(
        "events_per_second_range {:.0} {:.0}",
        rate(walls[walls.len() - 1]),
        rate(walls[0])
    );
    println!("ns_per_event        {:.1}", median * 1e9 / r.events as f64);
    println!("simulated           {}", r.sim_time);
    println!("goodput_gbps        {:.1}", results::goodput_gbps(r));
    println!("peak_rss_bytes      {}", peak_rss().unwrap_or(0));
    println!("peak_heap_growth_bytes {heap_growth}");
    println!("peak_packets_in_flight {}", r.peak_packets_in_flight);
    // Memory per packet in flight, measured: the same 8 MiB permutation with 4x the VL
    // buffers holds more packets in flight; the extra peak heap over the extra packets
    // is what each packet costs, fixed structures cancelling out.
    let (small, small_heap) = measured_run(&bench_scenario("8MiB", Some("32KiB"))?)?;
    let (large, large_heap) = measured_run(&bench_scenario("8MiB", Some("128KiB"))?)?;
    let extra_packets = large
        .report
        .peak_packets_in_flight
        .saturating_sub(small.report.peak_packets_in_flight);
    println!(
        "bytes_per_packet_in_flight {:.0} (measured: +{} B peak heap for +{} packets with 4x VL buffers; {} B of state per packet)",
        large_heap.saturating_sub(small_heap) as f64 / extra_packets.max(1) as f64,
        large_heap.saturating_sub(small_heap),
        extra_packets,
        Simulation::bytes_per_packet_in_flight(),
    );
    Ok(())
}
