//! `fabricsim tune`: its arguments, the search, and its table on standard output; with
//! `--batch` and `--task`, one trial of a Slurm array.

use crate::{catalog, out, Completion, Failure};
use fabricsim_experiment::decision::tick;
use fabricsim_experiment::estimate;
use fabricsim_experiment::sweep::slurm::{absolute, SlurmOptions};
use fabricsim_experiment::tune::{self, Objective, SlurmRun, TuneSpec};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct TuneArgs {
    file: PathBuf,
    /// The tune's folder (trials kept there: a second run resumes).
    #[arg(long)]
    out: PathBuf,
    /// Trials the search may run (the baseline and the robustness runs come on top).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(8..=100_000))]
    budget: u32,
    /// What to optimise.
    #[arg(long, default_value = "job-time", value_parser = ["job-time", "p99-fct", "goodput"])]
    objective: String,
    /// The most PFC paused time over all ports a trial may have (e.g. 100us).
    #[arg(long)]
    max_paused: Option<String>,
    /// The congestion control searched: DCQCN's settings, none (PFC only), HPCC, Swift,
    /// TIMELY, or any of them.
    #[arg(long, default_value = "any", value_parser = ["any", "dcqcn", "none", "hpcc", "swift", "timely"])]
    congestion_control: String,
    /// The loss recovery searched: go-back-n (with PFC), selective-repeat (IRN, without
    /// PFC), or either.
    #[arg(long, default_value = "any", value_parser = ["any", "go-back-n", "selective-repeat"])]
    loss_recovery: String,
    /// Trials run at once (default: every idle core).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Price and power figures overriding the built-in catalog.
    #[arg(long)]
    catalog: Option<PathBuf>,
    /// Run each batch of trials as a Slurm job array (one task per trial), waiting for it.
    #[arg(long)]
    slurm: bool,
    /// Slurm partition, time and memory per task (Slurm's syntax).
    #[arg(long, requires = "slurm")]
    partition: Option<String>,
    #[arg(long, requires = "slurm")]
    time: Option<String>,
    #[arg(long, requires = "slurm")]
    mem: Option<String>,
    /// Array tasks running at once.
    #[arg(long, requires = "slurm")]
    max_running: Option<usize>,
    /// Run only trial TASK of the batch BATCH (what the Slurm array runs).
    #[arg(long, requires = "task")]
    batch: Option<String>,
    #[arg(long, requires = "batch")]
    task: Option<usize>,
}

/// `fabricsim tune`: the search, then a table of the baseline, the best trial and its
/// robust worst case.
pub(crate) fn run(a: TuneArgs) -> Result<Completion, Failure> {
    // The command an array task runs: this one, paths absolute, without --slurm.
    let mut command: Vec<String> = vec![
        std::env::current_exe()
            .map_err(|e| format!("--slurm: cannot find fabricsim's own path: {e}"))?
            .display()
            .to_string(),
        "tune".into(),
        absolute(&a.file).display().to_string(),
        "--out".into(),
        absolute(&a.out).display().to_string(),
        "--budget".into(),
        a.budget.to_string(),
        "--objective".into(),
        a.objective.clone(),
        "--congestion-control".into(),
        a.congestion_control.clone(),
        "--loss-recovery".into(),
        a.loss_recovery.clone(),
    ];
    if let Some(m) = &a.max_paused {
        command.extend(["--max-paused".into(), m.clone()]);
    }
    if let Some(c) = &a.catalog {
        command.extend(["--catalog".into(), absolute(c).display().to_string()]);
    }
    let slurm = a.slurm.then(|| SlurmRun {
        command,
        options: SlurmOptions {
            partition: a.partition.clone(),
            time: a.time.clone(),
            mem: a.mem.clone(),
            max_running: a.max_running,
        },
    });
    let max_paused_ns = a
        .max_paused
        .as_deref()
        .map(tune::max_paused_ns)
        .transpose()?;
    let threads = a
        .threads
        .map_or_else(estimate::idle_cores, |t| t as usize)
        .max(1);
    let spec = TuneSpec {
        file: a.file,
        out: a.out,
        budget: a.budget as usize,
        objective: Objective::parse(&a.objective).expect("clap checked it"),
        max_paused_ns,
        threads,
        congestion_control: (a.congestion_control != "any").then(|| a.congestion_control.clone()),
        loss_recovery: (a.loss_recovery != "any").then(|| a.loss_recovery.clone()),
        slurm,
    };
    let cat = catalog(a.catalog.as_ref())?;
    if let (Some(batch), Some(task)) = (&a.batch, a.task) {
        tune::run_task(&spec, &cat, batch, task)?;
        return Ok(Completion::Complete);
    }
    let t = tune::tune(&spec, &cat)?;
    let figure = |tr: &tune::Trial| {
        tr.figures
            .as_ref()
            .map_or("-".to_string(), |f| tick(&t.objective.figure(f)))
    };
    let why = |tr: &tune::Trial| {
        tr.infeasible(spec.max_paused_ns)
            .unwrap_or_else(|| "feasible".into())
    };
    let mut text = format!(
        "tuned for {} ({}), {} trials
  baseline (the scenario's settings): {} ({})
  best trial: {} ({})
",
        t.objective.name(),
        tune::unit(t.objective),
        t.trials,
        figure(&t.baseline),
        why(&t.baseline),
        figure(&t.best),
        why(&t.best)
    );
    for r in &t.robust {
        text += &format!(
            "  on seed {} at {}x load: {} ({})
",
            r.seed,
            r.load,
            figure(r),
            why(r)
        );
    }
    text += &format!(
        "  robust (the worst of these): {}{}
settings in {}
",
        tick(&t.worst_figure),
        if t.robust_feasible {
            ""
        } else {
            ", not feasible everywhere"
        },
        spec.out.join("tuned.toml").display()
    );
    out(&text)?;
    Ok(Completion::Complete)
}
