//! Runs a scenario: builds the model, drives it in slices with a progress bar on
//! standard error, and returns the report; [`execute`] adds what `fabricsim run` asks for
//! (a results folder, a capture, the sensitivity run).

mod beside;
mod fabric_config;
mod per_link;
pub use beside::Beside;

use crate::formats::pcap::{self, LinkType};
pub use crate::outcome::{Capture, Outcome};
use crate::output;
use crate::results::{self, Summary};
use crate::scenario::{fluid_unmodelled, FabricKind, Level, OpenLoop, Scenario};
use fabric_config::flow_config;
use fabricsim_core::topology::Topology;
use fabricsim_core::units::HostId;
use fabricsim_core::units::Time;
use fabricsim_fabric::flow::{self, Sharing, QUEUE_QUANTILES};
use fabricsim_fabric::infiniband::{self, CaptureFilter};
use fabricsim_fabric::parallel::SplitRun;
pub use fabricsim_fabric::parallel::Trial;
use fabricsim_fabric::rocev2::{self, LoadBalancing};
use fabricsim_fabric::workload::datapath::{self};
use fabricsim_fabric::workload::{build, build_with, Traffic};
use fabricsim_fabric::EventDriven;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The model a scenario runs on.
enum Model {
    Ib(Box<infiniband::Simulation>),
    Roce(Box<rocev2::Simulation>),
    Flow(Box<flow::Simulation>),
}

impl Model {
    /// What the progress bar calls it.
    fn name(&self) -> &'static str {
        match self {
            Model::Ib(_) => "InfiniBand",
            Model::Roce(_) => "RoCEv2",
            Model::Flow(_) => "flow level",
        }
    }

    fn step(&mut self, n: u64) -> bool {
        match self {
            Model::Ib(s) => s.step(n),
            Model::Roce(s) => s.step(n),
            Model::Flow(s) => s.step(n),
        }
    }
    fn events(&self) -> u64 {
        match self {
            Model::Ib(s) => s.events(),
            Model::Roce(s) => s.events(),
            Model::Flow(s) => s.events(),
        }
    }
    fn now(&self) -> Time {
        match self {
            Model::Ib(s) => s.now(),
            Model::Roce(s) => s.now(),
            Model::Flow(s) => s.now(),
        }
    }
}

/// Events processed between looks at the wall clock.
const SLICE: u64 = 1 << 18;

/// Builds and runs `scenario`; refuses one whose traffic makes no message. `progress` shows a bar on standard error once the run
/// has lasted a second.
pub fn run(
    scenario: &Scenario,
    capture: Option<CaptureFilter>,
    progress: bool,
) -> Result<Outcome, String> {
    run_threaded(scenario, capture, progress, 1, Trial::GiveUpIfSparse)
}

/// As [`run`], on up to `threads` threads: a run at packet level is split over them (see
/// `fabricsim_fabric::parallel`) unless it asks for what only one thread can give, or
/// (with [`Trial::GiveUpIfSparse`]) its first windows show too few events to gain from
/// threads; why is said on standard error when `progress`. The results are the same for
/// any `threads`.
pub fn run_threaded(
    scenario: &Scenario,
    capture: Option<CaptureFilter>,
    progress: bool,
    threads: usize,
    trial: Trial,
) -> Result<Outcome, String> {
    let (flow_level, level_reason) = scenario.runs_at_flow_level();
    if flow_level && capture.is_some() {
        return Err("--pcap: captures are packet level only; this scenario runs at flow level (give --level packet)".into());
    }
    let topo = scenario.build_topology()?;
    let failing;
    let scenario = if scenario.failures.is_empty() {
        scenario
    } else {
        failing = with_failures(scenario, &topo)?;
        &failing
    };
    let mut workload = build_with(
        &scenario.traffic,
        scenario.seed,
        flow_level,
        scenario.nccl.connections,
    );
    if workload.messages.is_empty() {
        return Err(format!(
            "scenario {}: its [[traffic]] entries make no message, nothing to run",
            scenario.name
        ));
    }
    if let Some(h) = &scenario.host {
        datapath::apply(&mut workload, h, topo.host_count(), scenario.gpus_per_node);
    }
    let (mut probe, mut probed) = (0, 1);
    let mut per_link = None;
    let mut per_link_refused: Option<String> = None;
    let mut unmodelled: Option<String> = None;
    let how = SplitRun {
        threads,
        trial,
        stop_at: scenario.stop_at,
    };
    // The model, and the wall time of a run already finished (split over threads), or
    // why it goes on one thread.
    let (mut sim, finished) = match scenario.fabric {
        _ if flow_level => {
            let mut cfg = flow_config(scenario);
            if per_link::open_loop(&workload) {
                // Open-loop traffic: per-link packet simulations, or (`open_loop =
                // "fluid"`, over budget) max-min sharing with the probe's correction.
                cfg.dcqcn = None;
            }
            let mtu = cfg.mtu;
            let open_loop = (scenario.open_loop == OpenLoop::PerLink
                && per_link::open_loop(&workload))
            .then(|| topo.clone());
            let mut flow = flow::Simulation::new(cfg, topo, &workload, scenario.stop_at)?;
            if let Some(topo) = open_loop {
                let paths = flow.network_paths();
                let sprayed = scenario.fabric == FabricKind::Rocev2
                    && scenario.roce.load_balancing == LoadBalancing::Spray;
                match per_link::plan(&topo, &workload, &paths, mtu, sprayed) {
                    None => per_link_refused = Some("some messages spread over several paths by adaptive routing, which one port's simulation cannot hold".to_string()),
                    Some(p) if p.packets() > per_link::PACKET_BUDGET => {
                        per_link_refused = Some(format!(
                            "its ports' simulations would carry {} packets, over the {} the budget allows",
                            p.packets(),
                            per_link::PACKET_BUDGET
                        ))
                    }
                    Some(p) => {
                        flow.track_bottlenecks();
                        per_link = Some(p);
                    }
                }
            }
            if per_link.is_none() {
                // The scenario's check let it through as held by per-link simulations:
                // refused where flow level was asked for, warned of under `auto`.
                if let Some(why) = fluid_unmodelled(scenario) {
                    let here = per_link_refused
                        .as_deref()
                        .unwrap_or("its messages wait for others");
                    let why = format!("{why}, and here {here}");
                    if !matches!(scenario.level, Level::Auto(_)) {
                        return Err(format!("{why}: give --level packet"));
                    }
                    unmodelled = Some(format!(
                        "flow level: warning: {why}; the fluid runs without it"
                    ));
                }
            }
            if scenario.fabric == FabricKind::Rocev2
                && per_link.is_none()
                && flow.config().dcqcn.is_none()
            {
                probe = probe_size(&workload);
                flow.set_sharing(sharing_probe(scenario, probe)?);
                probed = flow.sharing().last().map_or(1, |p| p.load);
            }
            (Model::Flow(Box::new(flow)), Err(None))
        }
        FabricKind::Infiniband => {
            let why_not = infiniband::parallel::why_not_split(&scenario.ib, &topo, &workload);
            let split = split_run(
                threads,
                capture.is_some(),
                why_not.map(str::to_string),
                progress,
                "InfiniBand",
                |bar| {
                    infiniband::parallel::run(
                        scenario.ib.clone(),
                        topo.clone(),
                        &workload,
                        how,
                        bar,
                    )
                    .map_err(String::from)
                },
            )?;
            match split {
                Split::Ran(ib, wall) => (Model::Ib(Box::new(ib)), Ok(wall)),
                Split::OneThread(why) => {
                    let mut ib = infiniband::Simulation::new(
                        scenario.ib.clone(),
                        topo,
                        &workload,
                        scenario.stop_at,
                    )?;
                    if let Some(f) = capture {
                        ib.capture(f);
                    }
                    (Model::Ib(Box::new(ib)), Err(why))
                }
            }
        }
        FabricKind::Rocev2 => {
            // The ECN draws and ECMP hash follow the scenario seed (and --seed).
            let cfg = rocev2::RoceConfig {
                seed: scenario.seed,
                ..scenario.roce.clone()
            };
            let sparse = || {
                let ceiling = rocev2::parallel::events_per_window_ceiling(&cfg, &topo, &workload)?;
                Some(format!(
                    "its receivers' links bound it to {ceiling:.1} events per window of its \
                     lookahead, too few to gain from threads"
                ))
            };
            let why_not = match rocev2::parallel::why_not_split(&cfg, &topo, &workload) {
                Some(why) => Some(why.to_string()),
                None if trial == Trial::GiveUpIfSparse && threads > 1 => sparse(),
                None => None,
            };
            let split = split_run(
                threads,
                capture.is_some(),
                why_not,
                progress,
                "RoCEv2",
                |bar| {
                    rocev2::parallel::run(cfg.clone(), topo.clone(), &workload, how, bar)
                        .map_err(String::from)
                },
            )?;
            match split {
                Split::Ran(roce, wall) => (Model::Roce(Box::new(roce)), Ok(wall)),
                Split::OneThread(why) => {
                    let mut roce = rocev2::Simulation::new(cfg, topo, &workload, scenario.stop_at)?;
                    if let Some(f) = capture {
                        roce.capture(f);
                    }
                    (Model::Roce(Box::new(roce)), Err(why))
                }
            }
        }
    };
    let split_over = if finished.is_ok() { threads } else { 1 };
    let wall_seconds = match finished {
        Ok(wall) => wall,
        Err(one_thread) => drive(&mut sim, progress, one_thread),
    };
    // Flow level's bottleneck of each message, for the per-link simulations.
    let bottlenecks = match &sim {
        Model::Flow(s) => s.bottleneck_hops(),
        _ => Vec::new(),
    };
    // What each model gives: its report, capture, rate samples, windows and notes.
    let (mut report, captured, rates, windows, mut notes) = match sim {
        Model::Ib(s) => (
            s.report(),
            Capture::Infiniband(s.captured().to_vec()),
            Vec::new(),
            s.windows(),
            None,
        ),
        Model::Roce(s) => (
            s.report(),
            Capture::Ethernet(s.captured().to_vec()),
            s.rate_samples().to_vec(),
            s.windows(),
            None,
        ),
        Model::Flow(s) => (
            s.report(),
            match scenario.fabric {
                FabricKind::Infiniband => Capture::Infiniband(Vec::new()),
                FabricKind::Rocev2 => Capture::Ethernet(Vec::new()),
            },
            Vec::new(),
            0,
            Some(flow_notes(&s, probe, probed, scenario)),
        ),
    };
    let mut wall_seconds = wall_seconds;
    if let Some(plan) = &per_link {
        let started = Instant::now();
        let ran = per_link::apply(plan, scenario, &bottlenecks, threads, &mut report)?;
        wall_seconds += started.elapsed().as_secs_f64();
        notes.get_or_insert_with(Vec::new).push(format!(
            "flow level: the messages start on their own (open loop), so each of the {} ports two of them may share at once was simulated at packet level with their traffic ({} distinct simulations, {} packets; {} of them with messages that flow level holds at a port before theirs sent in parts spread over the delay that port gave them), and each message completes at its ideal time plus the largest delay one of them gave it (Parsimon's decomposition)",
            plan.ports(),
            ran.sims,
            ran.packets,
            ran.shaped
        ));
    }
    if let Some(why) = per_link_refused {
        notes.get_or_insert_with(Vec::new).push(format!(
            "flow level: the messages start on their own (open loop), but {why}: max-min sharing times them instead (less sure: BENCHMARKS.md)"
        ));
    }
    if let Some(warning) = unmodelled {
        notes.get_or_insert_with(Vec::new).push(warning);
    }
    if progress {
        for note in notes.iter().flatten() {
            say_once(note);
        }
    }
    Ok(Outcome {
        report,
        wall_seconds,
        captured,
        rates,
        collectives: workload.collectives,
        trainings: workload.trainings,
        entries: workload.entries,
        data_paths: workload.data_paths,
        flow_level: notes.is_some(),
        flow_notes: notes.unwrap_or_default(),
        level_reason,
        threads: split_over,
        windows,
    })
}

/// How a packet-level run went: split over threads (the model and its wall time), or on
/// one thread, with why when threads were offered but not used.
enum Split<M> {
    Ran(M, f64),
    OneThread(Option<String>),
}

/// A packet-level run split over `threads` by `split` (given the progress bar's update),
/// with its wall time; or why it goes on one thread: a capture is asked for (it keeps
/// frames in sending order), `why_not` gives a reason, or the split run gave up its
/// trial. The reason goes into the run's progress line, which long runs show.
fn split_run<M>(
    threads: usize,
    capture: bool,
    why_not: Option<String>,
    progress: bool,
    label: &'static str,
    split: impl FnOnce(&mut dyn FnMut(u64, Time)) -> Result<Option<M>, String>,
) -> Result<Split<M>, String> {
    if threads <= 1 {
        return Ok(Split::OneThread(None));
    }
    let why_not = why_not.or(capture.then(|| "a capture keeps frames in sending order".into()));
    if let Some(why) = why_not {
        return Ok(Split::OneThread(Some(why)));
    }
    let started = Instant::now();
    let mut bar = Bar::new(progress, label, None);
    let run = split(&mut |events, now| bar.update(events, now))?;
    bar.finish();
    Ok(match run {
        Some(m) => Split::Ran(m, started.elapsed().as_secs_f64()),
        None => Split::OneThread(Some(format!(
            "its first windows held fewer than {} events each, or its first thread waited \
             for the others longer than it worked (a busy core, say): one thread is faster",
            fabricsim_fabric::parallel::MIN_EVENTS_PER_WINDOW
        ))),
    })
}

/// Flows per port the sharing probe measures (`sharing_probe`, up to the largest switch
/// the scenario's buffer admits); beyond the last, its share is used and the run says it
/// left the calibrated range.
const PROBE_FANS: [u32; 6] = [2, 4, 8, 16, 32, 64];

/// The probe's message size: the median network message of the workload, within
/// 64 KiB to 4 MiB (DCQCN's cuts and recovery play out within the first few megabytes;
/// a longer transfer runs on at the rate it recovered to, so the share of a 4 MiB probe
/// stands for it). A project choice, checked by `fabricsim calibrate` (the byte-weighted
/// median was tried: on a web-search mix it probes with the long messages all starting
/// together, and flow level's p50 slowdown came out +71 % against packet level, where
/// the median gives +6 %).
fn probe_size(w: &fabricsim_fabric::workload::Workload) -> u64 {
    let mut sizes: Vec<u64> = w
        .messages
        .iter()
        .filter(|m| m.local.is_none() && m.src != m.dst)
        .map(|m| m.size)
        .collect();
    sizes.sort_unstable();
    let median = sizes.get(sizes.len() / 2).copied().unwrap_or(1 << 20);
    median.clamp(64 << 10, 4 << 20)
}

/// How a RoCEv2 port under a load of N is shared at packet level, measured on the
/// scenario's own RoCEv2 settings (rate, buffer, PFC, ECN, DCQCN): N senders into one
/// host on one switch, with messages of `size` and of four times it. Each gives the time
/// T the last message took beyond the lone message's fixed latency, against F, the N
/// messages' time at line rate; the line T = F / steady + transient through both points
/// gives the steady share and the transient (DCQCN's first cuts and slow recovery; below
/// zero where the smaller size stayed under the ECN threshold). A third run measures the
/// queue a message arriving at the loaded port meets ([`queue_probe`]). A calibration
/// run the model redoes for every flow-level RoCEv2 run.
fn sharing_probe(scenario: &Scenario, size: u64) -> Result<Vec<Sharing>, String> {
    let mut points = Vec::with_capacity(PROBE_FANS.len());
    for n in PROBE_FANS {
        let (Some(a), Some(b)) = (
            incast_probe(scenario, n, size, &[])?,
            incast_probe(scenario, n, 4 * size, &[])?,
        ) else {
            break;
        };
        let Some(queue) = queue_probe(scenario, n, size, &b)? else {
            break;
        };
        let ((fa, ta), (fb, tb)) = ((a.fair, a.last), (b.fair, b.last));
        // The larger transfer takes longer: the line rises.
        let steady = (fb - fa) / (tb - ta).max(1.0);
        points.push(Sharing {
            load: n,
            steady,
            transient: ta - fa / steady,
            small_fair: fa,
            small_share: (fa / ta).min(1.0),
            queue,
        });
    }
    Ok(points)
}

/// Messages of one packet the queue probe sends into the loaded port.
const QUEUE_VICTIMS: u64 = 32;

/// The queue a message arriving at a port loaded N times over meets while the port is
/// loaded, as [`QUEUE_QUANTILES`] quantiles: N senders of a long message (four times
/// `size`, at least 2 MiB) into one host on one switch, as in [`incast_probe`] (`four`:
/// that incast of four times `size`, already run), then the same again with a further
/// host sending one-packet messages to that host evenly over the time the first run's
/// incast lasted. The quantiles of their delays beyond their ideal FCT, in
/// picoseconds, over those that started before the incast ended (DCQCN's cuts can
/// empty the queue for a while, PFC can pause the sender: all of it counts).
fn queue_probe(
    scenario: &Scenario,
    n: u32,
    size: u64,
    four: &IncastProbe,
) -> Result<Option<[f64; QUEUE_QUANTILES]>, String> {
    let long = queue_probe_size(size);
    let lasted = if long == 4 * size {
        four.end
    } else {
        match incast_probe(scenario, n, long, &[])? {
            Some(alone) => alone.end,
            None => return Ok(None),
        }
    }
    .ps();
    let victims: Vec<Time> = (0..QUEUE_VICTIMS)
        .map(|k| Time(lasted * k / QUEUE_VICTIMS))
        .collect();
    let Some(run) = incast_probe(scenario, n, long, &victims)? else {
        return Ok(None);
    };
    let mut waits: Vec<f64> = run
        .victims
        .iter()
        .filter(|v| v.start < run.end)
        .map(|v| v.extra)
        .collect();
    if waits.is_empty() {
        return Ok(Some([0.0; QUEUE_QUANTILES]));
    }
    waits.sort_by(f64::total_cmp);
    Ok(Some(std::array::from_fn(|q| {
        let at = (2 * q + 1) * waits.len() / (2 * QUEUE_QUANTILES);
        waits[at]
    })))
}

/// The queue probe's message size for a probe of `size`: four times it, at least 2 MiB
/// (long enough for the queue to build and DCQCN to act).
fn queue_probe_size(size: u64) -> u64 {
    (4 * size).max(2 << 20)
}

/// What one packet-level incast probe measured, in picoseconds.
struct IncastProbe {
    /// The N messages' time at line rate.
    fair: f64,
    /// The time the last took beyond the fixed latency.
    last: f64,
    /// When the last finished.
    end: Time,
    victims: Vec<Victim>,
}

/// A one-packet message sent into the probe's loaded port: when it started, and how
/// much longer than its ideal FCT it took (picoseconds).
struct Victim {
    start: Time,
    extra: f64,
}

/// One probe of [`sharing_probe`]: N senders of `size` into one host on one switch, and
/// with `victims`, one more host sending a message of one packet (1 KiB at most) to
/// that host at each of those times. None where a switch of that many ports cannot fit
/// its headroom into the scenario's buffer.
fn incast_probe(
    scenario: &Scenario,
    n: u32,
    size: u64,
    victims: &[Time],
) -> Result<Option<IncastProbe>, String> {
    let wire = flow_config(scenario).wire_bytes(size);
    let hosts = n + 1 + u32::from(!victims.is_empty());
    let topo = fabricsim_core::topology::Topology::single_switch(
        hosts,
        scenario.link_rate,
        scenario.link_delay,
    )?;
    let mut traffic = vec![Traffic::Incast {
        senders: (1..=n).map(HostId).collect(),
        dst: HostId(0),
        size,
        start: Time::ZERO,
        sl: 0,
    }];
    let victim = (scenario.roce.mtu as u64).min(1 << 10);
    traffic.extend(victims.iter().map(|&start| Traffic::Flow {
        src: HostId(n + 1),
        dst: HostId(0),
        size: victim,
        start,
        sl: 0,
    }));
    let workload = build(&traffic, scenario.seed);
    let cfg = rocev2::RoceConfig {
        seed: scenario.seed,
        ..scenario.roce.clone()
    };
    let Ok(mut sim) = rocev2::Simulation::new(cfg, topo, &workload, None) else {
        return Ok(None);
    };
    sim.run();
    let report = sim.report();
    let (incast, victims) = report.flows.split_at(n as usize);
    let Some(end) = incast.iter().filter_map(|f| f.finish).max() else {
        return Ok(None);
    };
    let link = scenario.link_rate.serialization(wire);
    let fixed = report.flows[0].ideal.saturating_sub(link);
    let measured = end.saturating_sub(fixed).ps() as f64;
    let victims = victims
        .iter()
        .filter_map(|v| {
            let fct = v.finish? - v.start;
            Some(Victim {
                start: v.start,
                extra: fct.saturating_sub(v.ideal).ps() as f64,
            })
        })
        .collect();
    Ok(Some(IncastProbe {
        fair: link.ps() as f64 * n as f64,
        last: measured,
        end,
        victims,
    }))
}

/// What a flow-level run's figures rest on beyond the fair share: on RoCEv2 (a `probe`
/// size), the share of line rate ports shared by several flows kept, as packet level
/// measured it; and where the run left the range the probe measured (up to `probed`
/// flows per port).
fn flow_notes(sim: &flow::Simulation, probe: u64, probed: u32, scenario: &Scenario) -> Vec<String> {
    let mut notes = algorithm_notes(scenario);
    notes.extend(sharing_notes(sim, probe, probed));
    if sim.config().dcqcn.is_some() {
        let errs = crate::flow_error::recorded_range("rocev2", |_| true)
            .map(|(lo, hi)| {
                format!(
                    "; flow level on RoCEv2 errs from {:+.0} % to {:+.0} % against packet level on examples/calibration (its record.json)",
                    lo * 100.0,
                    hi * 100.0
                )
            })
            .unwrap_or_default();
        notes.push(format!(
            "flow level on RoCEv2: DCQCN runs as a fluid (each switch port's queue, RED's marks drawn per flow every {} ns, the packet model's reaction point per connection); PFC's pauses of other flows and a message's wait behind a queue it meets are left out{errs}: run at packet level where it matters",
            flow::DCQCN_TICK.ps() / 1000
        ));
    }
    notes
}

/// Writes `note` on standard error unless this process already has (a command's runs,
/// a training job's +1 us twin among them, often have the same to say).
fn say_once(note: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|s| s == note) {
        eprintln!("fabricsim: {note}");
        said.push(note.to_string());
    }
}

/// Flow level's compact trees agree with packet level where latency decides, less well
/// where bandwidth does (issue 32), and its NVLS trees on RoCEv2 less still: a run with a
/// tree or NVLS all-reduce says so, with the calibration record's error for that
/// algorithm's cases on this fabric.
fn algorithm_notes(scenario: &Scenario) -> Vec<String> {
    use fabricsim_fabric::workload::CollectiveAlgorithm as A;
    let runs = |a: A| {
        scenario.traffic.iter().any(|t| match t {
            Traffic::Collective(c) => c.algorithm == a,
            Traffic::Training(j) => j.algorithm == a,
            _ => false,
        })
    };
    let fabric = scenario.fabric.name();
    let recorded = |case: &str, what: &str| {
        crate::flow_error::recorded_range(fabric, |r| r.case.contains(case))
            .map(|(lo, hi)| {
                format!(
                    "; on examples/calibration's {what} {:+.0} % to {:+.0} % against packet level",
                    lo * 100.0,
                    hi * 100.0
                )
            })
            .unwrap_or_default()
    };
    let label = scenario.fabric.label();
    let mut notes = Vec::new();
    if runs(A::Tree) {
        notes.push(format!(
            "flow level on {label}: tree all-reduces are within 5 % of packet level where latency decides, less close where bandwidth does (a compact tree's pipeline of large pieces; issue 32){}, and further off at scale (tree training iterations measured once against packet level: RoCEv2 +18 % at 1,024 GPUs and +25 % at 2,048, InfiniBand -1.4 % at 1,024; BENCHMARKS.md): run at packet level where it matters",
            recorded("tree", "trees")
        ));
    }
    if runs(A::Nvls) {
        notes.push(format!(
            "flow level on {label}: NVLS all-reduces share each GPU's NVLink as packet level does; across servers their trees' edges meet RoCEv2's sharing correction at their NICs' line rate (issue 32){}: run at packet level where it matters",
            recorded("nvls", "NVLS case")
        ));
    }
    notes
}

/// The RoCEv2 sharing correction's notes (see `flow_notes`).
fn sharing_notes(sim: &flow::Simulation, probe: u64, probed: u32) -> Vec<String> {
    let load = sim.peak_load();
    let Some(at) = sim.sharing_at(load).filter(|_| probe > 0) else {
        return Vec::new();
    };
    let errs = match crate::flow_error::recorded_range("rocev2", |_| true) {
        Some((lo, hi)) => format!(
            "flow level on RoCEv2 errs from {:+.0} % to {:+.0} % against packet level on examples/calibration (its record.json)",
            lo * 100.0,
            hi * 100.0
        ),
        None => "flow level on RoCEv2 has no calibration record".to_string(),
    };
    let mut notes = vec![format!(
        "flow level on RoCEv2: ports were loaded up to {load:.1} times their line rate (what their flows' senders could send); at that load DCQCN and PFC keep {:.0} % of it once settled, after a transient of {:.0} us, and a message arriving there waits {:.0} us behind its queue at the median ({:.0} us at the highest quantile), as packet level measured on incasts of {} KiB and {} KiB (the queue on one of {} KiB) with this scenario's RoCEv2 settings; {errs}: run at packet level where it matters",
        at.steady * 100.0,
        at.transient / 1e6,
        at.queue[QUEUE_QUANTILES / 2] / 1e6,
        at.queue[QUEUE_QUANTILES - 1] / 1e6,
        probe >> 10,
        (4 * probe) >> 10,
        queue_probe_size(probe) >> 10
    )];
    if load > probed as f64 {
        notes.push(format!(
            "flow level on RoCEv2: a port was loaded {load:.1} times its line rate, beyond the {probed}:1 incast the probe measured (its sharing is used): outside the calibrated range"
        ));
    }
    notes
}

/// Runs `sim` to its end in slices; with `progress`, a bar on standard error (events,
/// events/s, simulated time) once the run has lasted a second. Returns the wall time.
fn drive(sim: &mut Model, progress: bool, one_thread: Option<String>) -> f64 {
    let started = Instant::now();
    let mut bar = Bar::new(progress, sim.name(), one_thread);
    while !sim.step(SLICE) {
        bar.update(sim.events(), sim.now());
    }
    bar.finish();
    started.elapsed().as_secs_f64()
}

/// A run's progress line on standard error (events, events/s, simulated time), shown
/// once the run has lasted a second.
struct Bar {
    shown: bool,
    name: &'static str,
    /// Why a run offered threads goes on one, said at the end of the line.
    one_thread: Option<String>,
    started: Instant,
    bar: Option<ProgressBar>,
}

impl Bar {
    fn new(shown: bool, name: &'static str, one_thread: Option<String>) -> Self {
        Bar {
            shown,
            name,
            one_thread,
            started: Instant::now(),
            bar: None,
        }
    }

    fn update(&mut self, events: u64, now: Time) {
        let elapsed = self.started.elapsed();
        if !self.shown || elapsed < Duration::from_secs(1) {
            return;
        }
        let b = self.bar.get_or_insert_with(|| {
            let b = bars().add(ProgressBar::new_spinner());
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .expect("static template"),
            );
            b
        });
        let rate = events as f64 / elapsed.as_secs_f64();
        b.set_message(format!(
            "{}: {} events, {:.1} M events/s, simulated {:.3} us{}",
            self.name,
            events,
            rate / 1e6,
            now.ps() as f64 / 1e6,
            self.one_thread
                .as_ref()
                .map_or(String::new(), |why| format!(" (on one thread: {why})"))
        ));
        b.tick();
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// The progress bars on standard error: runs side by side (see [`run_all`]) each
/// keep a line of their own.
fn bars() -> &'static MultiProgress {
    static BARS: OnceLock<MultiProgress> = OnceLock::new();
    BARS.get_or_init(MultiProgress::new)
}

/// `scenario` with its `[[failure]]` entries placed on `topo` in both fabrics'
/// configurations.
fn with_failures(scenario: &Scenario, topo: &Topology) -> Result<Scenario, String> {
    let list = scenario.failures_on(topo)?;
    let mut s = scenario.clone();
    s.ib.failures.failures = list.clone();
    s.roce.failures.failures = list;
    Ok(s)
}

/// The scenario with one more microsecond on every message's posting (both fabrics' NIC
/// transmit latency), to measure what a microsecond per exchange costs.
pub fn plus_one_us_per_exchange(scenario: &Scenario) -> Scenario {
    let mut s = scenario.clone();
    s.ib.hca_tx_latency += Time::from_us(1);
    s.roce.nic_tx_latency += Time::from_us(1);
    s
}

/// A packet capture `fabricsim run` is asked to write.
#[derive(Clone, Debug, Default)]
pub struct PcapRequest {
    pub path: PathBuf,
    /// Capture at most this many packets.
    pub count: Option<u64>,
    /// Capture only these flows (ids as in flows.csv).
    pub flows: Option<Vec<u32>>,
    /// The link type; `None`: the fabric's default.
    pub link: Option<LinkType>,
}

/// What a run is asked for beyond the scenario: a results folder and a capture.
#[derive(Clone, Debug, Default)]
pub struct RunRequest {
    /// Write summary.json, flows.csv, ports.csv (and rates.csv) into this folder.
    pub out: Option<PathBuf>,
    pub pcap: Option<PcapRequest>,
    /// Record RoCEv2 rates (always with `out`, which writes rates.csv).
    pub rates: bool,
    /// Threads the request may use (0 or 1: one). A training job's +1 us run goes beside
    /// its main run on a second thread; the results do not depend on it.
    pub threads: usize,
}

/// `f` of every item, up to `threads` items at a time, each thread taking the next item in
/// order; the results come back in item order, so they are the same for any `threads`
/// when the calls are independent (separate simulations, say).
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if threads <= 1 || items.len() <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(items.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else {
                    break;
                };
                let r = f(item);
                *results[i].lock().expect("no panic holds it") = Some(r);
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .expect("no panic holds it")
                .expect("every item ran")
        })
        .collect()
}

/// Runs each scenario, with its capture, as [`run`] does, up to `threads` at a time (see
/// [`parallel_map`]), each run splitting over its share of the threads; the outcomes in
/// list order.
pub fn run_all(
    runs: &[(&Scenario, Option<CaptureFilter>)],
    threads: usize,
) -> Vec<Result<Outcome, String>> {
    let each = (threads / runs.len().max(1)).max(1);
    parallel_map(runs, threads, |(s, capture)| {
        run_threaded(s, capture.clone(), true, each, Trial::GiveUpIfSparse)
    })
}

/// `scenario` as a run that asks for `rates` must run it: RoCEv2 recording its rates.
pub fn recording_rates(scenario: &Scenario, rates: bool) -> Scenario {
    let mut s = scenario.clone();
    if rates && s.fabric == FabricKind::Rocev2 {
        s.roce.record_rates = true;
    }
    s
}

/// The summary of a run and, for a training job, of its +1 us run.
pub fn summarize(scenario: &Scenario, outcome: &Outcome, plus: Option<&Outcome>) -> Summary {
    let mut summary = results::summary(scenario, outcome);
    if let Some(plus) = plus {
        results::add_sensitivity(&mut summary, plus);
    }
    summary
}

/// Runs `scenario` as `fabricsim run` does: checks the capture request against the
/// scenario, runs it (and, for training jobs, a second run with 1 us more per exchange
/// for the sensitivity figure), writes the files asked for and returns the summary with
/// the outcome. Errors name the option and its value.
pub fn execute(scenario: &Scenario, request: &RunRequest) -> Result<(Summary, Outcome), String> {
    require_traffic(scenario)?;
    let capture = match &request.pcap {
        Some(p) => Some((p, capture_link(scenario, p)?)),
        None => None,
    };
    let filter = capture.map(|(p, _)| CaptureFilter {
        limit: p.count,
        flows: p.flows.clone(),
    });
    // rates.csv is written only into a results folder; other runs do not record rates.
    let scenario = &recording_rates(scenario, request.out.is_some() || request.rates);
    let beside = Beside::of(scenario);
    beside.say();
    let mut runs = vec![(scenario, filter)];
    runs.extend(beside.scenarios().into_iter().map(|s| (s, None)));
    let mut outcomes = run_all(&runs, request.threads).into_iter();
    let outcome = outcomes.next().expect("the main run")?;
    let summary = beside.summarize(scenario, &outcome, &mut outcomes)?;
    if let Some(dir) = &request.out {
        results::write_out_dir(dir, &summary, &outcome)
            .map_err(|e| format!("--out {}: {e}", dir.display()))?;
    }
    if let Some((p, link)) = capture {
        output::write_file(&p.path, &pcap::encode(&outcome.captured, link))
            .map_err(|e| format!("--pcap {}: {e}", p.path.display()))?;
    }
    Ok((summary, outcome))
}

/// Whether `scenario` holds a training job (whose summary has the +1 us sensitivity).
pub fn has_training(scenario: &Scenario) -> bool {
    scenario
        .traffic
        .iter()
        .any(|t| matches!(t, Traffic::Training(_)))
}

/// Refuses a scenario without `[[traffic]]` entries before anything is built (entries that
/// make no message, an empty flow file, are refused by [`run`] once it has built them).
pub fn require_traffic(scenario: &Scenario) -> Result<(), String> {
    if scenario.traffic.is_empty() {
        return Err(format!(
            "scenario {}: no [[traffic]] entries, nothing to run (`fabricsim collective` sweeps a file without them)",
            scenario.name
        ));
    }
    Ok(())
}

/// The capture's link type, after checking its flow ids and link type against the
/// scenario.
fn capture_link(scenario: &Scenario, p: &PcapRequest) -> Result<LinkType, String> {
    let flow_count = build(&scenario.traffic, scenario.seed).messages.len() as u32;
    if let Some(bad) = p.flows.iter().flatten().find(|&&f| f >= flow_count) {
        return Err(format!(
            "--pcap-flows {bad}: the scenario has flows 0 to {}",
            flow_count.saturating_sub(1)
        ));
    }
    if scenario.fabric == FabricKind::Rocev2 {
        if let Some(fabricsim_fabric::rocev2::AckCc::Hpcc(_)) = scenario.roce.ack_cc {
            return Err("--pcap: with congestion_control = \"hpcc\" packets carry an INT header that the capture does not write; capture without HPCC".into());
        }
    }
    let allowed = LinkType::allowed(scenario.fabric);
    let link = p.link.unwrap_or(allowed[0]);
    if !allowed.contains(&link) {
        return Err(format!(
            "--pcap-link {}: a {} capture can be written as {}",
            link.name(),
            scenario.fabric.name(),
            allowed
                .iter()
                .map(|l| l.name())
                .collect::<Vec<_>>()
                .join(" or ")
        ));
    }
    Ok(link)
}
