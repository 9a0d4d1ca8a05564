//! The runs made beside a scenario's main run (`fabricsim run`, and each candidate of
//! `compare`), and what they add to its summary.

use super::{has_training, plus_one_us_per_exchange, say_once, summarize, Outcome};
use crate::results::{self, Summary};
use crate::scenario::Scenario;

/// The runs made beside a scenario's main run (`fabricsim run` and each candidate of
/// `compare`), none depending on it, and what they add to its summary: a training job's
/// run with 1 us more per exchange (the sensitivity), each of two or more jobs alone
/// (what sharing the fabric cost it), and the run without its failures (what they cost).
pub struct Beside {
    plus: Option<Scenario>,
    alone: Vec<Scenario>,
    healthy: Option<Scenario>,
}

impl Beside {
    pub fn of(scenario: &Scenario) -> Beside {
        let jobs = scenario.jobs.len();
        let b = Beside {
            plus: has_training(scenario).then(|| plus_one_us_per_exchange(scenario)),
            alone: if jobs >= 2 {
                (0..jobs).map(|j| scenario.job_alone(j)).collect()
            } else {
                Vec::new()
            },
            healthy: (!scenario.failures.is_empty()).then(|| Scenario {
                failures: Vec::new(),
                ..scenario.clone()
            }),
        };
        // The budget counts them with `Scenario::runs_made`: the two must agree.
        debug_assert_eq!(1 + b.scenarios().len(), scenario.runs_made());
        b
    }

    /// The runs, in the order [`summarize`](Self::summarize) takes their outcomes.
    pub fn scenarios(&self) -> Vec<&Scenario> {
        self.plus
            .iter()
            .chain(&self.alone)
            .chain(&self.healthy)
            .collect()
    }

    /// Says on standard error (once per process) why the runs beyond the main one run.
    pub fn say(&self) {
        if !self.alone.is_empty() {
            say_once(&format!(
                "{} jobs: each also runs alone ({} more runs, beside the main one on spare threads) to measure what sharing the fabric costs it",
                self.alone.len(),
                self.alone.len()
            ));
        }
        if self.healthy.is_some() {
            say_once("failures: the scenario also runs without them (one more run) to measure what they cost");
        }
    }

    /// The summary of the main run `outcome` of `scenario`, with what the runs beside it
    /// measured (their outcomes taken from `outcomes`, in the order of `scenarios`).
    pub fn summarize(
        &self,
        scenario: &Scenario,
        outcome: &Outcome,
        outcomes: &mut impl Iterator<Item = Result<Outcome, String>>,
    ) -> Result<Summary, String> {
        let mut next = || {
            outcomes
                .next()
                .expect("an outcome per run beside the main one")
        };
        let sensitivity = match self.plus {
            Some(_) => Some(next()?),
            None => None,
        };
        let mut summary = summarize(scenario, outcome, sensitivity.as_ref());
        for (j, s) in self.alone.iter().enumerate() {
            let o = next()?;
            results::add_alone(&mut summary, j, &results::summary(s, &o));
        }
        if let Some(h) = &self.healthy {
            let o = next()?;
            let impact =
                results::FailureImpact::of(&summary, outcome, &results::summary(h, &o), &o);
            summary.failure_impact = Some(impact);
        }
        Ok(summary)
    }
}
