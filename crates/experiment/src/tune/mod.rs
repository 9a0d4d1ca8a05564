//! `fabricsim tune`: searches RoCEv2's settings (PFC's shared buffer, ECN marking, the
//! congestion control and DCQCN's rates and timers) for the scenario's own cluster and
//! workload, under constraints (no drop, no deadlock, no watchdog trip, paused time under
//! a bound), and reports the robust result: the best settings' worst case over other
//! seeds and a heavier and a lighter load, not the best trial.
//!
//! The search: a scrambled Halton start over the settings' ranges (seeded), successive
//! halving (each rung keeps a third, judged on one more seed, by its worst seed), then a
//! coordinate search around the best, its step halved when a pass finds nothing. Trials
//! run `threads` at a time; each is one file, DIR/trials/ID.json, written when it
//! finishes, so a second run into DIR resumes; the search is a function of the trials'
//! results, so the same scenario and seed give the same trials and the same answer.

mod equipment;
mod report;
mod space;

use crate::catalog::Catalog;
use crate::output;
use crate::runner::{self, RunRequest};
use crate::scenario::{FabricKind, Scenario};
use crate::sweep;
pub use equipment::percent;
pub use report::sensitivity;
use serde::{Deserialize, Serialize};
pub use space::{Knob, KNOBS};
use std::path::{Path, PathBuf};

/// What the tuner minimises (goodput: maximises).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// The job's time: a training job's projected time, else the run's simulated time.
    JobTime,
    /// The 99th percentile of the flows' slowdown (FCT over the ideal on an empty network).
    P99Fct,
    /// Delivered payload rate.
    Goodput,
}

impl Objective {
    pub const NAMES: [&'static str; 3] = ["job-time", "p99-fct", "goodput"];

    pub fn parse(s: &str) -> Option<Objective> {
        match s {
            "job-time" => Some(Objective::JobTime),
            "p99-fct" => Some(Objective::P99Fct),
            "goodput" => Some(Objective::Goodput),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Objective::JobTime => "job-time",
            Objective::P99Fct => "p99-fct",
            Objective::Goodput => "goodput",
        }
    }

    /// The figure the objective reads, as reported (lower is better except goodput).
    pub fn figure(self, f: &Figures) -> f64 {
        match self {
            Objective::JobTime => f.job_seconds,
            Objective::P99Fct => f.p99_slowdown,
            Objective::Goodput => f.goodput_gbps,
        }
    }

    /// The figure as a cost to minimise.
    fn cost(self, f: &Figures) -> f64 {
        match self {
            Objective::Goodput => -f.goodput_gbps,
            _ => self.figure(f),
        }
    }
}

/// What `tune` is asked.
#[derive(Clone, Debug)]
pub struct TuneSpec {
    pub file: PathBuf,
    pub out: PathBuf,
    /// Trials the search may run (the robustness runs come on top).
    pub budget: usize,
    pub objective: Objective,
    /// The most PFC paused time, summed over ports, a feasible trial may have (ns).
    pub max_paused_ns: Option<u64>,
    pub threads: usize,
    /// The one congestion control searched (a name of [`space::CONGESTION_CONTROLS`]),
    /// or `None`: any of them.
    pub congestion_control: Option<String>,
    /// The one loss recovery searched ("go-back-n" with PFC, "selective-repeat"
    /// without), or `None`: either.
    pub loss_recovery: Option<String>,
    /// Trials run as Slurm job arrays (one per batch, waited for) instead of here.
    pub slurm: Option<SlurmRun>,
}

/// How trials run on Slurm: `command` is this tune's own command line (absolute
/// paths), which with `--batch ID --task K` runs one trial of a batch.
#[derive(Clone, Debug)]
pub struct SlurmRun {
    pub command: Vec<String>,
    pub options: sweep::slurm::SlurmOptions,
}

impl TuneSpec {
    /// `x` with the congestion control and loss recovery fixed where the spec fixes them.
    fn fix(&self, mut x: Vec<f64>) -> Vec<f64> {
        if let Some(u) = (self.congestion_control.as_deref()).and_then(space::congestion_control_at)
        {
            x[0] = u;
        }
        match self.loss_recovery.as_deref() {
            Some("go-back-n") => x[space::KNOBS.len() - 1] = 0.25,
            Some("selective-repeat") => x[space::KNOBS.len() - 1] = 0.75,
            _ => {}
        }
        x
    }
}

/// A trial's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub job_seconds: f64,
    pub p99_slowdown: f64,
    pub goodput_gbps: f64,
    pub fct_p99_ns: u64,
    pub completed: bool,
    pub drops: u64,
    pub pfc_pause_frames: u64,
    pub pfc_paused_ns: u64,
    pub deadlock: bool,
    pub watchdog_trips: u64,
    pub cnps: u64,
}

/// One trial: settings (a point of the unit cube, and the scenario keys it makes), the
/// seed and load it ran at, and its figures or why it could not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub id: String,
    /// "baseline", "start", "halving", "refine" or "robust".
    pub phase: String,
    pub x: Vec<f64>,
    pub parameters: Vec<(String, String)>,
    pub seed: u64,
    /// Traffic sizes (and loads) scaled by this.
    pub load: f64,
    pub figures: Option<Figures>,
    pub error: Option<String>,
}

impl Trial {
    /// Trial number `k`, not yet run: settings `x` (the scenario's own if empty) at
    /// `seed` and `load`.
    fn new(k: usize, phase: &str, x: &[f64], seed: u64, load: f64) -> Trial {
        Trial {
            id: format!("t{k:04}"),
            phase: phase.into(),
            x: x.to_vec(),
            parameters: if x.is_empty() {
                Vec::new()
            } else {
                space::parameters(x)
            },
            seed,
            load,
            figures: None,
            error: None,
        }
    }

    /// Why the trial is not feasible, or `None`.
    pub fn infeasible(&self, max_paused_ns: Option<u64>) -> Option<String> {
        let Some(f) = &self.figures else {
            return Some(self.error.clone().unwrap_or_else(|| "did not run".into()));
        };
        if !f.completed {
            return Some("flows left unfinished".into());
        }
        if f.drops > 0 {
            return Some(format!("{} drops", f.drops));
        }
        if f.deadlock {
            return Some("a PFC deadlock".into());
        }
        if f.watchdog_trips > 0 {
            return Some(format!("{} PFC watchdog trips", f.watchdog_trips));
        }
        match max_paused_ns {
            Some(m) if f.pfc_paused_ns > m => Some(format!(
                "{} us paused, above the bound of {} us",
                f.pfc_paused_ns as f64 / 1e3,
                m as f64 / 1e3
            )),
            _ => None,
        }
    }
}

/// The tuner's answer.
#[derive(Clone, Debug, Serialize)]
pub struct Tuned {
    pub objective: Objective,
    pub baseline: Trial,
    /// The best trial of the search.
    pub best: Trial,
    /// The best settings on other seeds and loads; the tuned result is their worst.
    pub robust: Vec<Trial>,
    /// The objective's figure at its worst over `best` and `robust`, and whether all of
    /// them were feasible.
    pub worst_figure: f64,
    /// The same over the runs at the scenario's own load (its seed and the two others):
    /// what a job of this size gets at worst (a heavier load makes any job longer).
    pub worst_figure_same_load: f64,
    pub robust_feasible: bool,
    pub trials: usize,
}

/// The scenario text and what a trial is built from.
struct Base {
    text: String,
    stem: String,
    dir: PathBuf,
    catalog: Catalog,
    seed: u64,
}

impl Base {
    /// The scenario file, validated as written.
    fn load(file: &Path, catalog: &Catalog) -> Result<Base, String> {
        let scenario = Scenario::load_with(file, catalog).map_err(|e| e.to_string())?;
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("cannot read scenario file {}: {e}", file.display()))?;
        Ok(Base {
            text,
            stem: file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dir: file.parent().unwrap_or(Path::new(".")).to_path_buf(),
            catalog: catalog.clone(),
            seed: scenario.seed,
        })
    }

    /// The scenario for settings `parameters` at `seed` and `load`.
    fn scenario(
        &self,
        parameters: &[(String, String)],
        seed: u64,
        load: f64,
    ) -> Result<Scenario, String> {
        let mut doc: toml::Table = toml::from_str(&self.text).map_err(|e| e.to_string())?;
        space::apply(&mut doc, parameters)?;
        sweep::set_key(&mut doc, "seed", toml::Value::Integer(seed as i64))?;
        on_rocev2_alone(&mut doc)?;
        if load != 1.0 {
            space::scale_load(&mut doc, load)?;
        }
        let text = toml::to_string(&doc).map_err(|e| e.to_string())?;
        Scenario::parse_with(&text, &self.stem, &self.dir, &self.catalog).map_err(|e| e.to_string())
    }
}

/// The scenario `doc` on RoCEv2 alone, as the tuner runs and writes it: `fabric.kind` set,
/// and `[compare]` left out (its candidates are compare's, and the adaptive one refuses
/// settings the tuner may choose, such as selective repeat).
fn on_rocev2_alone(doc: &mut toml::Table) -> Result<(), String> {
    doc.remove("compare");
    sweep::set_key(
        doc,
        "fabric.kind",
        toml::Value::String(FabricKind::Rocev2.name().into()),
    )
}

/// A trial's file.
fn trial_path(out: &Path, id: &str) -> PathBuf {
    out.join("trials").join(format!("{id}.json"))
}

/// Runs the trials not yet in DIR/trials (each keeps its file there), `threads` at a
/// time; returns them all with their figures.
fn run_trials(base: &Base, spec: &TuneSpec, mut trials: Vec<Trial>) -> Result<Vec<Trial>, String> {
    let done: Vec<Option<Trial>> = trials
        .iter()
        .map(|t| {
            let text = std::fs::read_to_string(trial_path(&spec.out, &t.id)).ok()?;
            let old: Trial = serde_json::from_str(&text).ok()?;
            (old.parameters == t.parameters && old.seed == t.seed && old.load == t.load)
                .then_some(old)
        })
        .collect();
    if let Some((t, _)) = trials
        .iter()
        .zip(&done)
        .find(|(t, d)| d.is_none() && trial_path(&spec.out, &t.id).exists())
    {
        return Err(format!(
            "--out {}: trials/{}.json holds another trial (another scenario or tune): give a new folder",
            spec.out.display(),
            t.id
        ));
    }
    let todo: Vec<usize> = (0..trials.len()).filter(|&i| done[i].is_none()).collect();
    match &spec.slurm {
        Some(slurm) if !todo.is_empty() => {
            let pending: Vec<&Trial> = todo.iter().map(|&i| &trials[i]).collect();
            run_on_slurm(spec, slurm, &pending)?;
            for &i in &todo {
                let path = trial_path(&spec.out, &trials[i].id);
                let text = std::fs::read_to_string(&path).map_err(|_| {
                    format!(
                        "--slurm: trial {} did not finish (its task's log is in {})",
                        trials[i].id,
                        spec.out.join("slurm").display()
                    )
                })?;
                trials[i] =
                    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        _ => {
            let ran = runner::parallel_map(&todo, spec.threads, |&i| {
                run_and_keep(base, &spec.out, trials[i].clone())
            });
            for (i, r) in todo.into_iter().zip(ran) {
                trials[i] = r?;
            }
        }
    }
    for (t, d) in trials.iter_mut().zip(done) {
        if let Some(d) = d {
            *t = d;
        }
    }
    Ok(trials)
}

/// Runs trial `t` and keeps it in DIR/trials (with its figures, or why it could not run).
fn run_and_keep(base: &Base, out: &Path, mut t: Trial) -> Result<Trial, String> {
    match base
        .scenario(&t.parameters, t.seed, t.load)
        .and_then(|s| run_one(&s))
    {
        Ok(f) => t.figures = Some(f),
        Err(e) => t.error = Some(e),
    }
    let json = serde_json::to_string_pretty(&t).expect("serialises") + "\n";
    output::write_file(&trial_path(out, &t.id), json.as_bytes())
        .map(|()| t)
        .map_err(|e| format!("--out {}: {e}", out.display()))
}

/// The batch file of trials a Slurm array runs: DIR/pending/ID.json, named by its first.
fn batch_path(out: &Path, batch: &str) -> PathBuf {
    out.join("pending").join(format!("{batch}.json"))
}

/// Runs `pending` as a Slurm job array, one task per trial, and waits for it.
fn run_on_slurm(spec: &TuneSpec, slurm: &SlurmRun, pending: &[&Trial]) -> Result<(), String> {
    use sweep::slurm::{script, submit};
    let batch = pending[0].id.clone();
    let at = |e: std::io::Error| format!("--out {}: {e}", spec.out.display());
    std::fs::create_dir_all(spec.out.join("pending")).map_err(at)?;
    std::fs::create_dir_all(spec.out.join("slurm")).map_err(at)?;
    let json = serde_json::to_string_pretty(pending).expect("serialises") + "\n";
    output::write_file(&batch_path(&spec.out, &batch), json.as_bytes()).map_err(at)?;
    let mut command = slurm.command.clone();
    command.extend(["--batch".to_string(), batch.clone()]);
    let out = sweep::slurm::absolute(&spec.out);
    let text = script("tune", &out, &command, pending.len(), &slurm.options);
    let path = spec.out.join("slurm").join(format!("{batch}.sbatch"));
    output::write_file(&path, text.as_bytes()).map_err(at)?;
    submit(&path, true)?;
    Ok(())
}

/// Runs task `task` of the Slurm batch `batch`: one trial, kept in DIR/trials.
pub fn run_task(
    spec: &TuneSpec,
    catalog: &Catalog,
    batch: &str,
    task: usize,
) -> Result<(), String> {
    let base = Base::load(&spec.file, catalog)?;
    let path = batch_path(&spec.out, batch);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut pending: Vec<Trial> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if task >= pending.len() {
        return Err(format!(
            "--task {task}: batch {batch} has {} trials",
            pending.len()
        ));
    }
    run_and_keep(&base, &spec.out, pending.swap_remove(task)).map(|_| ())
}

/// Runs a scenario and reads the figures a trial is judged by.
pub fn run_one(s: &Scenario) -> Result<Figures, String> {
    runner::require_traffic(s)?;
    // One run on one thread (trials run side by side), without a training job's
    // sensitivity run, which no objective reads.
    let outcome = runner::run_all(&[(s, None)], 1).pop().expect("one run")?;
    let summary = runner::summarize(s, &outcome, None);
    let mut slowdowns: Vec<f64> = outcome
        .report
        .flows
        .iter()
        .filter_map(|f| {
            let t = f.finish?;
            (f.ideal.ps() > 0).then(|| (t - f.start).ps() as f64 / f.ideal.ps() as f64)
        })
        .collect();
    slowdowns.sort_by(f64::total_cmp);
    let p99 = slowdowns
        .get(((slowdowns.len() as f64 * 0.99).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::INFINITY);
    let job_seconds =
        crate::decision::job_hours(&summary, &s.cost).map_or(f64::INFINITY, |h| h * 3600.0);
    Ok(Figures {
        job_seconds,
        p99_slowdown: p99,
        goodput_gbps: summary.goodput_gbps,
        fct_p99_ns: summary.fct_ns.p99,
        completed: summary.flows.completed == summary.flows.count,
        drops: summary.drops,
        pfc_pause_frames: summary.pfc_pause_frames,
        pfc_paused_ns: summary.pfc_paused_ns,
        deadlock: summary.deadlock.is_some(),
        watchdog_trips: summary.watchdog_trips,
        cnps: summary.cnps,
    })
}

/// The search's state: every trial so far, in order.
struct Search<'a> {
    base: &'a Base,
    spec: &'a TuneSpec,
    trials: Vec<Trial>,
}

impl Search<'_> {
    /// Runs trials of settings `xs` at `seed` (phase `phase`), in order; returns their
    /// indices in `self.trials`.
    fn run(&mut self, phase: &str, xs: &[Vec<f64>], seed: u64) -> Result<Vec<usize>, String> {
        let first = self.trials.len();
        let new: Vec<Trial> = xs
            .iter()
            .enumerate()
            .map(|(k, x)| Trial::new(first + k, phase, x, seed, 1.0))
            .collect();
        let ran = run_trials(self.base, self.spec, new)?;
        self.trials.extend(ran);
        Ok((first..self.trials.len()).collect())
    }

    /// The cost of trial `i`: its objective, or infinity if it is not feasible.
    fn cost(&self, i: usize) -> f64 {
        let t = &self.trials[i];
        match (&t.figures, t.infeasible(self.spec.max_paused_ns)) {
            (Some(f), None) => self.spec.objective.cost(f),
            _ => f64::INFINITY,
        }
    }

    /// The worst cost of settings `x` over the trials run with them.
    fn worst(&self, x: &[f64]) -> f64 {
        self.trials
            .iter()
            .enumerate()
            .filter(|(_, t)| t.x == x && t.phase != "baseline")
            .map(|(i, _)| self.cost(i))
            .fold(f64::NEG_INFINITY, f64::max)
    }

    fn left(&self) -> usize {
        // The baseline does not count against the budget.
        (self.spec.budget + 1).saturating_sub(self.trials.len())
    }
}

/// Runs the tuner: searches, re-runs the best for robustness, and writes DIR.
pub fn tune(spec: &TuneSpec, catalog: &Catalog) -> Result<Tuned, String> {
    let base = Base::load(&spec.file, catalog)?;
    if spec.budget < 8 {
        return Err(format!(
            "--budget {}: the search needs at least 8 trials",
            spec.budget
        ));
    }
    prepare(&spec.out, &manifest(&base.text, spec))?;
    let mut search = Search {
        base: &base,
        spec,
        trials: Vec::new(),
    };
    // The scenario as written, for the before-and-after.
    let baseline = Trial::new(0, "baseline", &[], base.seed, 1.0);
    // Start: a third of the budget, at least 8 points, on the scenario's seed; run in
    // one batch with the baseline.
    let n0 = (spec.budget / 3).max(8).min(spec.budget);
    let start: Vec<Vec<f64>> = space::halton(n0, base.seed)
        .into_iter()
        .map(|x| spec.fix(x))
        .collect();
    let mut alive: Vec<Vec<f64>> = start.clone();
    let first: Vec<Trial> = std::iter::once(baseline)
        .chain(
            start
                .iter()
                .enumerate()
                .map(|(k, x)| Trial::new(1 + k, "start", x, base.seed, 1.0)),
        )
        .collect();
    search.trials = run_trials(&base, spec, first)?;
    // Successive halving: keep a third, judge it on one more seed, by its worst.
    let mut rung = 1u64;
    while alive.len() > 2 && search.left() > 0 {
        alive.sort_by(|a, b| search.worst(a).total_cmp(&search.worst(b)));
        alive.truncate(alive.len().div_ceil(3).max(2).min(search.left()));
        let seed = base.seed + rung;
        search.run("halving", &alive.clone(), seed)?;
        rung += 1;
    }
    let best_of = |s: &Search, xs: &[Vec<f64>]| {
        xs.iter()
            .min_by(|a, b| s.worst(a).total_cmp(&s.worst(b)))
            .cloned()
            .expect("a start")
    };
    let mut best = best_of(&search, &alive);
    // Local refinement on the scenario's seed: each setting a step either way; the
    // step halves after a pass that finds nothing better.
    let mut step = 0.25;
    while search.left() > 0 && step > 1.0 / 64.0 {
        let mut improved = false;
        for k in 0..best.len() {
            let mut xs = Vec::new();
            for dir in [-1.0, 1.0] {
                let mut x = best.clone();
                x[k] = (x[k] + dir * step).clamp(0.0, 1.0);
                let x = spec.fix(x);
                if x != best && search.worst(&x) == f64::NEG_INFINITY {
                    xs.push(x);
                }
            }
            xs.truncate(search.left());
            if xs.is_empty() {
                continue;
            }
            search.run("refine", &xs, base.seed)?;
            let here = search.cost_at(&best, base.seed);
            if let Some(x) = xs
                .into_iter()
                .filter(|x| search.cost_at(x, base.seed) < here)
                .min_by(|a, b| {
                    search
                        .cost_at(a, base.seed)
                        .total_cmp(&search.cost_at(b, base.seed))
                })
            {
                best = x;
                improved = true;
            }
            if search.left() == 0 {
                break;
            }
        }
        if !improved {
            step /= 2.0;
        }
    }
    let best_index = search
        .trials
        .iter()
        .position(|t| t.x == best && t.seed == base.seed)
        .expect("the best ran on the scenario's seed");
    // Robustness: two other seeds, a heavier and a lighter load.
    let first = search.trials.len();
    let robust: Vec<Trial> = [
        (base.seed + 1000, 1.0),
        (base.seed + 2000, 1.0),
        (base.seed, 1.25),
        (base.seed, 0.8),
    ]
    .into_iter()
    .enumerate()
    .map(|(k, (seed, load))| Trial::new(first + k, "robust", &best, seed, load))
    .collect();
    let robust = run_trials(&base, spec, robust)?;
    search.trials.extend(robust.iter().cloned());
    let best_trial = search.trials[best_index].clone();
    let objective = spec.objective;
    let all = std::iter::once(&best_trial).chain(&robust);
    let robust_feasible = all
        .clone()
        .all(|t| t.infeasible(spec.max_paused_ns).is_none());
    let worst = |runs: &mut dyn Iterator<Item = &Trial>| {
        let figures = runs.filter_map(|t| t.figures.as_ref().map(|f| objective.figure(f)));
        match objective {
            Objective::Goodput => figures.fold(f64::INFINITY, f64::min),
            _ => figures.fold(f64::NEG_INFINITY, f64::max),
        }
    };
    let worst_figure = worst(&mut all.clone());
    let worst_figure_same_load = worst(&mut all.filter(|t| t.load == 1.0));
    let tuned = Tuned {
        objective,
        baseline: search.trials[0].clone(),
        best: best_trial,
        robust,
        worst_figure,
        worst_figure_same_load,
        robust_feasible,
        trials: search.trials.len(),
    };
    write_outputs(&base, spec, &search.trials, &tuned)?;
    // Before and after, with rates recorded, for the report.
    let outcome = |parameters: &[(String, String)]| -> Result<crate::outcome::Outcome, String> {
        let s = base.scenario(parameters, base.seed, 1.0)?;
        let request = RunRequest {
            rates: true,
            threads: spec.threads,
            ..RunRequest::default()
        };
        runner::execute(&s, &request).map(|(_, o)| o)
    };
    let (before, after) = (outcome(&[])?, outcome(&tuned.best.parameters)?);
    let html = report::html(&tuned, &search.trials, spec.max_paused_ns, &before, &after);
    output::write_file(&spec.out.join("report.html"), html.as_bytes())
        .map_err(|e| format!("--out {}: {e}", spec.out.display()))?;
    Ok(tuned)
}

impl Search<'_> {
    /// The cost of settings `x` on `seed` (infinity if not run or not feasible).
    fn cost_at(&self, x: &[f64], seed: u64) -> f64 {
        self.trials
            .iter()
            .position(|t| t.x == x && t.seed == seed && t.load == 1.0 && t.phase != "baseline")
            .map_or(f64::INFINITY, |i| self.cost(i))
    }
}

/// What makes a tune the same tune: the scenario text, the objective, the budget and
/// the bound (DIR/manifest.json). Resuming into DIR needs the same.
fn manifest(text: &str, spec: &TuneSpec) -> String {
    let v = serde_json::json!({
        "scenario_fnv1a": format!("{:016x}", sweep::fnv1a(text.as_bytes())),
        "objective": spec.objective.name(),
        "budget": spec.budget,
        "max_paused_ns": spec.max_paused_ns,
        "congestion_control": spec.congestion_control,
        "loss_recovery": spec.loss_recovery,
    });
    serde_json::to_string_pretty(&v).expect("serialises") + "\n"
}

/// Makes DIR and DIR/trials with the manifest, or checks the manifest there (another
/// scenario text, objective, budget or bound is another tune).
fn prepare(out: &Path, manifest: &str) -> Result<(), String> {
    output::claim_folder(out, "manifest.json", manifest, "trials", "tune")
}

/// DIR/trials.csv, DIR/tuned.toml, DIR/tune.json, and the settings for real equipment:
/// DIR/sonic-config_db.json, DIR/nvue.txt, DIR/mlnx_qos.sh.
fn write_outputs(
    base: &Base,
    spec: &TuneSpec,
    trials: &[Trial],
    tuned: &Tuned,
) -> Result<(), String> {
    let at = |e: std::io::Error| format!("--out {}: {e}", spec.out.display());
    output::write_file(
        &spec.out.join("trials.csv"),
        trials_csv(trials, spec).as_bytes(),
    )
    .map_err(at)?;
    let mut doc: toml::Table = toml::from_str(&base.text).map_err(|e| e.to_string())?;
    space::apply(&mut doc, &tuned.best.parameters)?;
    on_rocev2_alone(&mut doc)?;
    let header = format!(
        "# Tuned by `fabricsim tune` for {} ({} trials): the best settings' worst case over two other seeds and a 1.25x and 0.8x load is {} {}{}.\n",
        tuned.objective.name(),
        tuned.trials,
        crate::decision::tick(&tuned.worst_figure),
        unit(tuned.objective),
        if tuned.robust_feasible { "" } else { " (not feasible everywhere: see tune.json)" }
    );
    let toml_text = header + &toml::to_string(&doc).map_err(|e| e.to_string())?;
    output::write_file(&spec.out.join("tuned.toml"), toml_text.as_bytes()).map_err(at)?;
    // The same settings as the equipment takes them, from the tuned scenario itself.
    let tuned_scenario = Scenario::parse_with(&toml_text, &base.stem, &base.dir, &base.catalog)
        .map_err(|e| format!("tuned.toml: {e}"))?;
    let r = &tuned_scenario.roce;
    let topo = tuned_scenario.build_topology()?;
    let ports = (0..topo.nodes().len() as u32)
        .map(fabricsim_core::units::NodeId)
        .filter(|&n| {
            matches!(
                topo.nodes()[n.index()],
                fabricsim_core::topology::NodeKind::Switch { .. }
            )
        })
        .map(|n| topo.node_ports(n).len())
        .max()
        .unwrap_or(1);
    let headroom = r.headroom_for(tuned_scenario.link_rate);
    for (name, text) in [
        (
            "sonic-config_db.json",
            equipment::sonic_config_db(r, headroom, ports),
        ),
        ("nvue.txt", equipment::nvue(r)),
        ("mlnx_qos.sh", equipment::mlnx_qos(r)),
    ] {
        output::write_file(&spec.out.join(name), text.as_bytes()).map_err(at)?;
    }
    let json = serde_json::to_string_pretty(tuned).expect("serialises") + "\n";
    output::write_file(&spec.out.join("tune.json"), json.as_bytes()).map_err(at)
}

/// Tunes RoCEv2 for `compare --tune`: the scenario `file` (the built-in default cluster
/// without one) for its job's time, `budget` trials, in a temporary folder removed
/// afterwards; returns the scenario with the tuned settings and what the tuner found.
pub fn for_compare(
    file: Option<&Path>,
    catalog: &Catalog,
    budget: usize,
    threads: usize,
) -> Result<(Scenario, crate::decision::Tuning), String> {
    let text = match file {
        Some(f) => std::fs::read_to_string(f)
            .map_err(|e| format!("cannot read scenario file {}: {e}", f.display()))?,
        None => Scenario::builtin_cluster_text().to_string(),
    };
    let dir = std::env::temp_dir().join(format!(
        "fabricsim-compare-tune-{}-{:016x}",
        std::process::id(),
        sweep::fnv1a(text.as_bytes())
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // The scenario keeps its own name and the folder it reads files from.
    let (name, base_dir) = match file {
        Some(f) => (
            f.file_name()
                .map_or("scenario.toml".into(), |n| n.to_string_lossy().into_owned()),
            f.parent().unwrap_or(Path::new(".")).to_path_buf(),
        ),
        None => ("cluster-default.toml".to_string(), PathBuf::from(".")),
    };
    let spec = TuneSpec {
        file: base_dir.join(&name),
        out: dir.join("tune"),
        budget,
        objective: Objective::JobTime,
        max_paused_ns: None,
        threads,
        congestion_control: None,
        loss_recovery: None,
        slurm: None,
    };
    let result = (|| {
        let spec = if file.is_some() {
            spec
        } else {
            let copy = dir.join(&name);
            std::fs::write(&copy, &text).map_err(|e| format!("{}: {e}", copy.display()))?;
            TuneSpec { file: copy, ..spec }
        };
        let t = tune(&spec, catalog)?;
        // Read as the scenario was: its name, and files relative to its own folder.
        let text = std::fs::read_to_string(spec.out.join("tuned.toml"))
            .map_err(|e| format!("tuned.toml: {e}"))?;
        let stem = name.trim_end_matches(".toml");
        let tuned = Scenario::parse_with(&text, stem, &base_dir, catalog)
            .map_err(|e| format!("tuned.toml: {e}"))?;
        let hours =
            |f: &Option<Figures>| f.as_ref().map_or(f64::INFINITY, |f| f.job_seconds / 3600.0);
        Ok((
            tuned,
            crate::decision::Tuning {
                trials: t.trials,
                tuned_hours: hours(&t.best.figures),
                robust_hours: t.worst_figure_same_load / 3600.0,
                robust_feasible: t.robust_feasible,
            },
        ))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// `--max-paused TIME` in nanoseconds; errors name the option and value.
pub fn max_paused_ns(text: &str) -> Result<u64, String> {
    fabricsim_core::units::parse_quantity(text, fabricsim_core::units::Dimension::Time)
        .map(|ps| ps / 1000)
        .map_err(|e| format!("--max-paused {text}: {e}"))
}

/// The objective's unit.
pub fn unit(o: Objective) -> &'static str {
    match o {
        Objective::JobTime => "s",
        Objective::P99Fct => "x the ideal FCT (p99 slowdown)",
        Objective::Goodput => "Gb/s",
    }
}

/// Every trial: id, phase, seed, load, each setting, then its figures and feasibility.
fn trials_csv(trials: &[Trial], spec: &TuneSpec) -> String {
    let mut s = String::from("trial,phase,seed,load");
    for k in KNOBS {
        s.push(',');
        s.push_str(k.key);
    }
    s.push_str(",objective,feasible,why,job_seconds,p99_slowdown,goodput_gbps,fct_p99_ns,drops,pfc_pause_frames,pfc_paused_ns,cnps\n");
    for t in trials {
        s.push_str(&format!("{},{},{},{}", t.id, t.phase, t.seed, t.load));
        for k in KNOBS {
            let v = t
                .parameters
                .iter()
                .find(|(key, _)| key == k.key)
                .map_or("", |(_, v)| v.as_str());
            s.push(',');
            s.push_str(v);
        }
        let why = t.infeasible(spec.max_paused_ns);
        match &t.figures {
            Some(f) => s.push_str(&format!(
                ",{},{},{},{},{},{},{},{},{},{},{}\n",
                spec.objective.figure(f),
                why.is_none(),
                why.unwrap_or_default().replace(',', ";"),
                f.job_seconds,
                f.p99_slowdown,
                f.goodput_gbps,
                f.fct_p99_ns,
                f.drops,
                f.pfc_pause_frames,
                f.pfc_paused_ns,
                f.cnps
            )),
            None => s.push_str(&format!(
                ",,false,{},,,,,,,,\n",
                why.unwrap_or_default().replace(',', ";")
            )),
        }
    }
    s
}
