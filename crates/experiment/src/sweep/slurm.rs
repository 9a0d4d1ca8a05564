//! Sweeps on a Slurm cluster: an sbatch script for a job array whose task K runs
//! `fabricsim sweep ... --task K` (one batch of points each) into the same DIR layout,
//! submitted with the cluster's own `sbatch`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What the job array asks of Slurm.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    /// Per task, in Slurm's syntax ("30:00", "2:00:00").
    pub time: Option<String>,
    /// Per task, in Slurm's syntax ("4G").
    pub mem: Option<String>,
    /// Tasks running at once (`--array=0-N%M`).
    pub max_running: Option<usize>,
}

/// A word quoted for the shell.
fn sh(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The sbatch script of `job` ("sweep", "tune"): a job array of `tasks` tasks, each
/// running `command` (the job's own command line, absolute paths) with `--task
/// $SLURM_ARRAY_TASK_ID`; logs in DIR/slurm/task-JOB-TASK.log.
pub fn script(job: &str, dir: &Path, command: &[String], tasks: usize, o: &SlurmOptions) -> String {
    let mut s = format!(
        "#!/bin/bash\n# Written by fabricsim {job} --slurm: one array task per batch of work.\n"
    );
    let _ = writeln!(s, "#SBATCH --job-name=fabricsim-{job}");
    let throttle = o.max_running.map_or(String::new(), |m| format!("%{m}"));
    let _ = writeln!(s, "#SBATCH --array=0-{}{throttle}", tasks.saturating_sub(1));
    let _ = writeln!(s, "#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1");
    // One log per job and task: a later job (a tune's next batch) keeps the earlier logs.
    let _ = writeln!(s, "#SBATCH --output={}/slurm/task-%A-%a.log", dir.display());
    for (key, v) in [
        ("partition", &o.partition),
        ("time", &o.time),
        ("mem", &o.mem),
    ] {
        if let Some(v) = v {
            let _ = writeln!(s, "#SBATCH --{key}={v}");
        }
    }
    let words: Vec<String> = command.iter().map(|w| sh(w)).collect();
    let _ = writeln!(
        s,
        "exec {} --task \"$SLURM_ARRAY_TASK_ID\"",
        words.join(" ")
    );
    s
}

/// Submits `script` with sbatch (`--wait`: until every task has ended); returns the job id.
pub fn submit(script: &Path, wait: bool) -> Result<String, String> {
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable");
    if wait {
        cmd.arg("--wait");
    }
    let out = cmd
        .arg(script)
        .output()
        .map_err(|e| format!("--slurm: cannot run sbatch ({e}); is Slurm installed here? --slurm-script writes the script only"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout
        .trim()
        .split(';')
        .next()
        .unwrap_or_default()
        .to_string();
    // With --wait, sbatch also fails when a task did (a failed point): the job ran, and
    // its points say what failed.
    let ran = out.status.success() || (wait && !id.is_empty());
    if !ran {
        return Err(format!(
            "--slurm: sbatch failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(id)
}

/// Absolute form of `p` (the tasks may start in another directory).
pub fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}
